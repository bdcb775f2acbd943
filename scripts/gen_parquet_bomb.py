"""Hostile parquet files for benchctl's tests (crates/benchctl-suites/tests/hostile.rs):

  * bomb.parquet: one 100,000-byte caption in the dictionary, a million rows that all point at
    it. pyarrow writes the dictionary column as given (RLE indices, snappy pages), so the file
    is a few kilobytes and its rows decode to 100 GB;
  * claims-rows.parquet: 37 real rows, whose footer (FileMetaData.num_rows, thrift compact
    field 3) is rewritten to claim 10^12.

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


def zigzag_varint(n):
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


CLAIMS = OUT.parent / "claims-rows.parquet"
pq.write_table(pa.table({"image": ["a.png"] * 37, "caption": [f"caption {i}" for i in range(37)]}), CLAIMS)
data = CLAIMS.read_bytes()
length = int.from_bytes(data[-8:-4], "little")
footer = data[-8 - length:-8]
# FileMetaData: field 1 version (i32), field 2 schema (list), field 3 num_rows (i64): after the
# list, a short field header of delta 1 and type i64 (0x16), then the zigzag varint of 37. The
# row group's and columns' counts come after it, so the first occurrence is the file's.
field = b"\x16" + zigzag_varint(37)
footer = footer.replace(field, b"\x16" + zigzag_varint(10**12), 1)
CLAIMS.write_bytes(data[:-8 - length] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
meta = pq.ParquetFile(CLAIMS).metadata
assert meta.num_rows == 10**12 and meta.row_group(0).num_rows == 37, meta
print(f"{CLAIMS}: footer claims {meta.num_rows} rows, its row group {meta.row_group(0).num_rows}")
