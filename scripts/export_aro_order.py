"""Exports ARO's COCO-Order or Flickr30k-Order test cases, built by the official loader.

The official `COCO_Order` / `Flickr30k_Order` classes (mertyg/vision-language-models-are-bows,
dataset_zoo/aro_datasets.py) perturb each caption at load time with spaCy and numpy's global
generator; there is no file of test cases to download. This runs those classes, seeded as
`main_aro.py` seeds (`seed_all(1)`: Python's, numpy's and torch's generators), and writes
their `test_cases` (`[{"image": ..., "caption_options": [true, p1, p2, p3, p4]}, ...]`) for the
bundled manifests `aro-coco-order` / `aro-flickr30k-order` to read.

Needs the repository, its requirements, spaCy and `en_core_web_sm`, and the dataset's root
(COCO 2014 with the Karpathy split json, which the loader downloads; or Flickr30k):

    python scripts/export_aro_order.py --aro-repo PATH --dataset coco --root /data/coco2014 \
        --out /data/coco2014/coco_order_test.json
"""

import argparse
import importlib
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--aro-repo", type=Path, required=True)
parser.add_argument("--dataset", choices=["coco", "flickr30k"], required=True)
parser.add_argument("--root", type=Path, required=True, help="the loader's root_dir")
parser.add_argument("--split", default="test")
parser.add_argument("--seed", type=int, default=1, help="main_aro.py's default")
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()

sys.path.insert(0, str(args.aro_repo))
aro = importlib.import_module("dataset_zoo.aro_datasets")
random.seed(args.seed)
np.random.seed(args.seed)
torch.manual_seed(args.seed)
if args.dataset == "coco":
    dataset = aro.COCO_Order(image_preprocess=None, root_dir=str(args.root), split=args.split)
else:
    dataset = aro.Flickr30k_Order(image_preprocess=None, split=args.split, root_dir=str(args.root))
args.out.write_text(json.dumps(dataset.test_cases) + "\n")
print(f"wrote {len(dataset.test_cases)} test cases to {args.out}")
