"""Winoground in both of its hub forms, written by the Hugging Face `datasets` library itself.

The `facebook/winoground` repo's main branch declares a parquet config (`data/test-*`, each
image a struct {bytes, path} with the PNG embedded); earlier revisions ship
`data/examples.jsonl` + `data/images.zip`. This script writes a few synthetic examples (our
own captions and generated images: no Winoground data is copied) in both forms, with the
dataset's features (`id` int32, `image_0`/`image_1` Image, captions and tags as strings,
`num_main_preds` int32), so the Rust loader is tested against parquet written by the same
library that produced the hub's files.

    pip install datasets pillow
    python scripts/gen_winoground_parquet.py
"""

import io
import json
import os

from datasets import Dataset, Features, Image, Value
from PIL import Image as PILImage

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "benchctl-suites", "tests", "fixtures", "winoground-hub")

EXAMPLES = [
    ("a red cube left of a blue ball", "a blue cube left of a red ball", "Adjective-Color", "", 1, "Object"),
    ("the dog chases the cat", "the cat chases the dog", "Noun, Verb-Transitive", "Symbolic, Series", 1, "Relation"),
    ("there is no moon above the hill", "there is a moon above no hill", "Negation, Scope", "Pragmatics", 2, "Both"),
    ("two circles inside one square", "one circle inside two squares", "Determiner-Numeral", "", 1, "Object"),
]


def image(seed, w, h, mode):
    """A deterministic small picture; modes cover RGB, RGBA and greyscale PNGs."""
    pixels = bytes(((x * 7 + y * 13 + seed * 31 + c * 5) % 256) for y in range(h) for x in range(w) for c in range(3))
    img = PILImage.frombytes("RGB", (w, h), pixels).convert(mode)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def main():
    rows = {k: [] for k in ["id", "image_0", "image_1", "caption_0", "caption_1", "tag", "secondary_tag", "num_main_preds", "collapsed_tag"]}
    jsonl = []
    os.makedirs(os.path.join(OUT, "jsonl", "images"), exist_ok=True)
    modes = ["RGB", "RGBA", "L", "RGB"]
    for i, (c0, c1, tag, secondary, preds, collapsed) in enumerate(EXAMPLES):
        pngs = [image(2 * i + k, 20 + 3 * i, 14 + k, modes[i]) for k in range(2)]
        for k, png in enumerate(pngs):
            with open(os.path.join(OUT, "jsonl", "images", f"ex_{i}_img_{k}.png"), "wb") as f:
                f.write(png)
        rows["id"].append(i)
        rows["image_0"].append({"bytes": pngs[0], "path": None})
        rows["image_1"].append({"bytes": pngs[1], "path": None})
        for key, value in [("caption_0", c0), ("caption_1", c1), ("tag", tag), ("secondary_tag", secondary), ("num_main_preds", preds), ("collapsed_tag", collapsed)]:
            rows[key].append(value)
        jsonl.append({"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1", "caption_0": c0, "caption_1": c1,
                      "tag": tag, "secondary_tag": secondary, "num_main_preds": preds, "collapsed_tag": collapsed})
    features = Features({
        "id": Value("int32"), "image_0": Image(), "image_1": Image(), "caption_0": Value("string"), "caption_1": Value("string"),
        "tag": Value("string"), "secondary_tag": Value("string"), "num_main_preds": Value("int32"), "collapsed_tag": Value("string"),
    })
    os.makedirs(os.path.join(OUT, "parquet", "data"), exist_ok=True)
    Dataset.from_dict(rows, features=features).to_parquet(os.path.join(OUT, "parquet", "data", "test-00000-of-00001.parquet"))
    # The same table snappy-compressed in row groups of two, as pyarrow writes hub uploads.
    import pyarrow.parquet as pq
    table = pq.read_table(os.path.join(OUT, "parquet", "data", "test-00000-of-00001.parquet"))
    os.makedirs(os.path.join(OUT, "snappy", "data"), exist_ok=True)
    pq.write_table(table, os.path.join(OUT, "snappy", "data", "test-00000-of-00001.parquet"), compression="snappy", row_group_size=2)
    with open(os.path.join(OUT, "jsonl", "examples.jsonl"), "w") as f:
        for line in jsonl:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
