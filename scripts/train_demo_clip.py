"""The bundled demo: a synthetic compositional suite and a tiny CLIP trained on it.

Images of two coloured shapes side by side (64 × 64 PNG); captions that name both, in
order ("a red circle to the left of a blue square"). A Winoground-style item pairs two
images with two captions that use the same words in a different composition:

- Adjective-Color: the colours swapped between the shapes ("a blue circle to the left of
  a red square");
- Relation-Spatial: the shapes swapped between the positions ("a blue square to the left
  of a red circle").

Writes `datasets/demo/shapes/` (Winoground's layout: `examples.jsonl` + `images/`, 200
items) and two models in Hugging Face layout under `crates/benchctl-models/tests/fixtures/`:
`clip-shapes` (trained contrastively for a few CPU minutes on 4,000 drawn minimal pairs, none
of them a test item's) and `clip-shapes-untrained` (the same architecture, its initial weights).
Weights are stored in float16 (a few MB); CLIP's BPE tokenizer is the fixture one.
Deterministic: fixed seeds, one thread.

    pip install torch transformers pillow numpy
    python scripts/train_demo_clip.py [--steps 300]
"""

import argparse
import json
import pathlib
import random
import shutil

import numpy as np
import torch
from PIL import Image, ImageDraw
from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizerFast

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "crates" / "benchctl-models" / "tests" / "fixtures"
SUITE = ROOT / "datasets" / "demo" / "shapes"
TOKENIZER = FIXTURES / "tokenizer" / "tokenizer.json"

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (50, 70, 220), "yellow": (230, 200, 40),
           "purple": (140, 60, 180), "orange": (240, 130, 30)}
SHAPES = ["circle", "square", "triangle"]
SIZE = 64


def draw(scene, rng):
    """`scene`: ((colour, shape) on the left, (colour, shape) on the right); jittered."""
    img = Image.new("RGB", (SIZE, SIZE), tuple(int(v) for v in rng.integers(225, 256, 3)))
    d = ImageDraw.Draw(img)
    for slot, (colour, shape) in enumerate(scene):
        r = int(rng.integers(8, 12))
        cx = int(16 + 32 * slot + rng.integers(-3, 4))
        cy = int(32 + rng.integers(-8, 9))
        fill = tuple(int(np.clip(c + rng.integers(-20, 21), 0, 255)) for c in COLOURS[colour])
        box = [cx - r, cy - r, cx + r, cy + r]
        if shape == "circle":
            d.ellipse(box, fill=fill)
        elif shape == "square":
            d.rectangle(box, fill=fill)
        else:
            d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    return img


def caption(scene):
    (c0, s0), (c1, s1) = scene
    return f"a {c0} {s0} to the left of a {c1} {s1}"


def random_scene(rng):
    colours = rng.choice(list(COLOURS), 2, replace=False)
    shapes = rng.choice(SHAPES, 2, replace=True)
    return ((str(colours[0]), str(shapes[0])), (str(colours[1]), str(shapes[1])))


def twin(scene, kind):
    (c0, s0), (c1, s1) = scene
    if kind == "colour":
        return ((c1, s0), (c0, s1))
    return ((c1, s1), (c0, s0))  # relation: the two shapes trade places


def minimal_pair(rng):
    """A scene and its twin that differ in composition only (not in their bag of words)."""
    while True:
        scene = random_scene(rng)
        kind = "colour" if rng.random() < 0.5 else "relation"
        if kind == "colour" and scene[0][1] == scene[1][1]:
            continue  # swapping colours of two equal shapes would repeat the scene
        return scene, twin(scene, kind), kind


def write_suite(rng, items):
    if SUITE.exists():
        shutil.rmtree(SUITE)
    (SUITE / "images").mkdir(parents=True)
    lines, seen = [], set()
    while len(lines) < items:
        scene, other, kind = minimal_pair(rng)
        key = tuple(sorted([caption(scene), caption(other)]))
        if key in seen:
            continue
        seen.add(key)
        i = len(lines)
        draw(scene, rng).save(SUITE / "images" / f"ex_{i}_img_0.png")
        draw(other, rng).save(SUITE / "images" / f"ex_{i}_img_1.png")
        tag = "Adjective-Color" if kind == "colour" else "Relation-Spatial"
        lines.append({"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1", "caption_0": caption(scene),
                      "caption_1": caption(other), "tag": tag, "secondary_tag": "Symbolic", "num_main_preds": 1,
                      "collapsed_tag": "Object" if kind == "colour" else "Relation"})
    (SUITE / "examples.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return seen


def save(model, name, processor):
    out = FIXTURES / name
    if out.exists():
        shutil.rmtree(out)
    model.half().save_pretrained(str(out), safe_serialization=True)
    model.float()
    processor.save_pretrained(str(out))
    shutil.copy(TOKENIZER, out / "tokenizer.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--pool", type=int, default=4000, help="training pairs drawn")
    parser.add_argument("--items", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    rng = np.random.default_rng(0)
    test_pairs = write_suite(rng, args.items)

    tokenizer = CLIPTokenizerFast(tokenizer_file=str(TOKENIZER))
    processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    config = CLIPConfig(
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         max_position_embeddings=77, vocab_size=49408, hidden_act="quick_gelu"),
        vision_config=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=3,
                           image_size=32, patch_size=8, hidden_act="quick_gelu"),
        projection_dim=32)
    model = CLIPModel(config)
    save(model, "clip-shapes-untrained", processor)

    # A pool of training pairs drawn once (none of them a test item's pair of captions);
    # batches of 32 minimal pairs are sampled from it.
    pool = []
    while len(pool) < args.pool:
        scene, other, _ = minimal_pair(rng)
        if tuple(sorted([caption(scene), caption(other)])) not in test_pairs:
            pool.append((scene, other))
    scenes = [s for pair in pool for s in pair]
    all_pixels = processor([draw(s, rng) for s in scenes], return_tensors="pt")["pixel_values"]
    all_text = tokenizer([caption(s) for s in scenes], padding=True, return_tensors="pt")
    optimiser = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=2e-3, total_steps=args.steps, pct_start=0.1)
    model.train()
    for step in range(args.steps):
        pairs = torch.from_numpy(rng.choice(len(pool), 32, replace=False))
        rows = torch.stack([2 * pairs, 2 * pairs + 1], dim=1).flatten()
        out = model(input_ids=all_text["input_ids"][rows], attention_mask=all_text["attention_mask"][rows],
                    pixel_values=all_pixels[rows])
        labels = torch.arange(len(rows))
        loss = (torch.nn.functional.cross_entropy(out.logits_per_image, labels)
                + torch.nn.functional.cross_entropy(out.logits_per_text, labels)) / 2
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 250 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item():.3f}", flush=True)
    model.eval()
    save(model, "clip-shapes", processor)


if __name__ == "__main__":
    main()
