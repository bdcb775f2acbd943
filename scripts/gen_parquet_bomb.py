"""A parquet dictionary bomb for benchctl's hostile-input tests
(crates/benchctl-suites/tests/hostile.rs): one 100,000-byte caption in the dictionary, a
million rows that all point at it. pyarrow writes the dictionary column as given (RLE indices,
snappy pages), so the file is a few kilobytes and its rows decode to 100 GB.

    pip install pyarrow==26.0.1
    python scripts/gen_parquet_bomb.py
"""

import pathlib

import pyarrow as pa
import pyarrow.parquet as pq

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/benchctl-suites/tests/fixtures/parquet-bomb/bomb.parquet"

ROWS = 1_000_000
caption = pa.DictionaryArray.from_arrays(pa.array([0] * ROWS, type=pa.int32()), pa.array(["x" * 100_000]))
image = pa.DictionaryArray.from_arrays(pa.array([0] * ROWS, type=pa.int32()), pa.array(["a.png"]))
OUT.parent.mkdir(parents=True, exist_ok=True)
pq.write_table(pa.table({"image": image, "caption": caption}), OUT, compression="snappy")
meta = pq.ParquetFile(OUT).metadata
print(f"{OUT}: {OUT.stat().st_size} bytes, {meta.num_rows} rows")
