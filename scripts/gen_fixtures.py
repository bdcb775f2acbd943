#!/usr/bin/env python3
"""Generates benchctl's reference fixtures with PyTorch + Hugging Face transformers.

Writes, under crates/benchctl-models/tests/fixtures/:
  tokenizer/tokenizer.json      CLIP tokenizer built from OpenAI's BPE vocabulary
                                (bpe_simple_vocab_16e6.txt.gz, shipped by open-clip-torch, MIT)
  tokenizer/reference_ids.json  ids from OpenAI's reference SimpleTokenizer (as vendored by
                                open_clip) for our own edge-case strings and, when
                                ../shared is present, for the 800 Winoground captions
                                (keyed by "<id>_c<k>"; the captions themselves are not copied)
  clip-tiny-a/, clip-tiny-b/    small random-weight CLIPModel checkpoints in HF layout
                                (config.json, model.safetensors, tokenizer.json) plus
                                reference.safetensors with inputs and transformers' outputs
  preprocess/                   generated PNGs and the tensors OpenAI CLIP's torchvision
                                pipeline makes of them

and datasets/demo/winoground/ (a tiny Winoground-layout suite of generated pictures).

Usage: python scripts/gen_fixtures.py   (run from the repository root; see scripts/requirements.txt)
"""
import csv
import gzip
import json
import os
import pathlib
import random
import shutil
import sys
import tempfile

import numpy as np
import torch
from PIL import Image, ImageDraw
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "crates" / "benchctl-models" / "tests" / "fixtures"
SHARED = ROOT.parent / "shared"

# Our own strings covering the tokenizer's corners: case, punctuation, digits, apostrophes,
# unicode, HTML entities, extra whitespace, and a text longer than the 77-token context.
EDGE_CASES = [
    "a photo of a cat",
    "A Photo Of A CAT!!",
    "the dog's ball isn't red; it's blue.",
    "3 apples and 12 oranges (15 fruit)",
    "café déjà vu — naïve résumé",
    "  lots   of\twhitespace \n here  ",
    "fish &amp; chips &lt;3",
    "emoji 🙂 and 日本語 text",
    "hello world",
    " ".join(["the quick brown fox jumps over the lazy dog"] * 12),
]


def build_tokenizer(out_dir: pathlib.Path):
    import open_clip
    from open_clip.tokenizer import SimpleTokenizer, bytes_to_unicode
    from transformers import CLIPTokenizer

    bpe_path = pathlib.Path(open_clip.__file__).parent / "bpe_simple_vocab_16e6.txt.gz"
    merges = gzip.open(bpe_path).read().decode("utf-8").split("\n")
    merges = merges[1 : 49152 - 256 - 2 + 1]
    merges = [tuple(m.split()) for m in merges]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    vocab += ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == 49408
    hf = CLIPTokenizer(vocab={t: i for i, t in enumerate(vocab)}, merges=merges)
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(pathlib.Path(tmp) / "tokenizer.json", out_dir / "tokenizer.json")
    reference = SimpleTokenizer(str(bpe_path))
    sot, eot = reference.sot_token_id, reference.eot_token_id

    def ref_ids(text):
        body = reference.encode(text)
        if len(body) > 75:  # open_clip/OpenAI truncation keeps the end token
            body = body[:75]
        return [sot] + body + [eot]

    def hf_ids(text):
        return hf(text, truncation=True, max_length=77)["input_ids"]

    texts = {f"edge_{i}": t for i, t in enumerate(EDGE_CASES)}
    tsv = SHARED / "datasets" / "winoground" / "winoground_annotations.tsv"
    if tsv.exists():
        with open(tsv, newline="") as f:
            for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                texts[f"{row['id']}_c0"] = row["caption_0"]
                texts[f"{row['id']}_c1"] = row["caption_1"]
    else:
        print(f"warning: {tsv} not found: Winoground reference ids not written", file=sys.stderr)
    ids = {}
    disagree = 0
    for key, text in texts.items():
        r = ref_ids(text)
        if r != hf_ids(text):
            disagree += 1
            print(f"note: transformers' CLIPTokenizer differs from OpenAI's on {key}", file=sys.stderr)
        ids[key] = r
    print(f"tokenizer: {len(ids)} reference sequences, {disagree} where transformers differs from OpenAI")
    out = {"edge_cases": {f"edge_{i}": t for i, t in enumerate(EDGE_CASES)}, "ids": ids}
    (out_dir / "reference_ids.json").write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n")
    return hf


CONFIGS = {
    # Differ in width, depth, heads, patch and image size, activation and end-token convention.
    "clip-tiny-a": dict(
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         max_position_embeddings=77, hidden_act="quick_gelu", eos_token_id=49407),
        vision_config=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=3,
                           image_size=224, patch_size=32, hidden_act="quick_gelu"),
        projection_dim=24,
    ),
    "clip-tiny-b": dict(
        text_config=dict(hidden_size=16, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
                         max_position_embeddings=77, hidden_act="gelu", eos_token_id=2),
        vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                           image_size=96, patch_size=16, hidden_act="gelu", layer_norm_eps=1e-6),
        projection_dim=20,
    ),
}

MODEL_TEXTS = ["a photo of a cat", "two dogs playing in the snow", "hello world",
               " ".join(["a very long caption"] * 30)]


def build_model(name, spec, tokenizer, seed):
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(seed)
    config = CLIPConfig(text_config=spec["text_config"], vision_config=spec["vision_config"],
                        projection_dim=spec["projection_dim"], logit_scale_init_value=2.6592)
    model = CLIPModel(config).eval()
    # transformers' init is tiny (std 0.02); larger weights make the outputs, and so the
    # parity check, depend on every layer.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("logit_scale"):
                continue
            if p.dim() >= 2:
                p.normal_(0.0, 0.5 / p.shape[-1] ** 0.5 if "embedding" not in pname else 0.5)
            elif pname.endswith("weight") and "norm" in pname:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.1)
    out_dir = FIX / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    shutil.copy(FIX / "tokenizer" / "tokenizer.json", out_dir / "tokenizer.json")
    size = spec["vision_config"]["image_size"]
    g = torch.Generator().manual_seed(seed + 1)
    pixel_values = torch.randn(3, 3, size, size, generator=g)
    enc = tokenizer(MODEL_TEXTS, padding=True, truncation=True, max_length=77, return_tensors="pt")
    with torch.no_grad():
        vision = model.vision_model(pixel_values=pixel_values)
        image_embeds = model.visual_projection(vision.pooler_output)
        text = model.text_model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        text_embeds = model.text_projection(text.pooler_output)
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], pixel_values=pixel_values)
    save_file({
        "pixel_values": pixel_values.contiguous(),
        "input_ids": enc["input_ids"].to(torch.int64).contiguous(),
        "attention_mask": enc["attention_mask"].to(torch.int64).contiguous(),
        "image_embeds": image_embeds.contiguous(),
        "text_embeds": text_embeds.contiguous(),
        "logits_per_image": out.logits_per_image.contiguous(),
    }, str(out_dir / "reference.safetensors"), metadata={"texts": json.dumps(MODEL_TEXTS)})
    print(f"{name}: logits_per_image\n{out.logits_per_image}")


def build_preprocess_fixtures():
    """Random-noise PNGs of awkward sizes through OpenAI CLIP's own torchvision transform."""
    from torchvision.transforms import CenterCrop, Compose, InterpolationMode, Normalize, Resize, ToTensor

    out_dir = FIX / "preprocess"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    transform = Compose([
        Resize(224, interpolation=InterpolationMode.BICUBIC),
        CenterCrop(224),
        ToTensor(),
        Normalize((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    ])
    rng = np.random.default_rng(7)
    tensors = {}
    # Downscales in both orientations, an odd crop offset, an upscale, and a square.
    for w, h in [(320, 227), (227, 451), (301, 224), (40, 31), (224, 224)]:
        # Smooth noise: a small random image upscaled, plus fine noise, so every filter tap matters.
        base = Image.fromarray(rng.integers(0, 256, (max(h // 8, 2), max(w // 8, 2), 3), dtype=np.uint8))
        smooth = np.asarray(base.resize((w, h), Image.BILINEAR)).astype(np.int16)
        noisy = np.clip(smooth + rng.integers(-40, 41, (h, w, 3)), 0, 255).astype(np.uint8)
        img = Image.fromarray(noisy, "RGB")
        name = f"noise_{w}x{h}"
        img.save(out_dir / f"{name}.png")
        tensors[name] = transform(img).contiguous()
    save_file(tensors, str(out_dir / "expected.safetensors"))


SHAPES = ["square", "circle", "triangle"]
COLOURS = {"red": (220, 40, 40), "blue": (40, 80, 220), "green": (40, 170, 70), "yellow": (230, 200, 40)}


def draw(path, left, right):
    img = Image.new("RGB", (96, 64), (245, 245, 240))
    d = ImageDraw.Draw(img)
    for (colour, shape), x0 in [(left, 8), (right, 56)]:
        box = [x0, 20, x0 + 30, 50]
        fill = COLOURS[colour]
        if shape == "square":
            d.rectangle(box, fill=fill)
        elif shape == "circle":
            d.ellipse(box, fill=fill)
        else:
            d.polygon([(x0, 50), (x0 + 15, 20), (x0 + 30, 50)], fill=fill)
    img.save(path)


def build_demo_suite():
    """Eight Winoground-style items of coloured shapes, swapped left/right or colour/shape."""
    out = ROOT / "datasets" / "demo" / "winoground"
    if out.exists():
        shutil.rmtree(out)
    (out / "images").mkdir(parents=True)
    rnd = random.Random(3)
    lines = []
    for i in range(8):
        c1, c2 = rnd.sample(list(COLOURS), 2)
        s1, s2 = rnd.sample(SHAPES, 2)
        if i % 2 == 0:  # relation: the same objects, swapped places
            a, b = (c1, s1), (c2, s2)
            cap0 = f"a {c1} {s1} to the left of a {c2} {s2}"
            cap1 = f"a {c2} {s2} to the left of a {c1} {s1}"
            draw(out / "images" / f"ex_{i}_img_0.png", a, b)
            draw(out / "images" / f"ex_{i}_img_1.png", b, a)
            tag, collapsed, preds = "Relation-Spatial", "Relation", 1
        else:  # object: colours swapped between the shapes
            cap0 = f"a {c1} {s1} and a {c2} {s2}"
            cap1 = f"a {c2} {s1} and a {c1} {s2}"
            draw(out / "images" / f"ex_{i}_img_0.png", (c1, s1), (c2, s2))
            draw(out / "images" / f"ex_{i}_img_1.png", (c2, s1), (c1, s2))
            tag, collapsed, preds = "Adjective-Color", "Object", 2
        lines.append(json.dumps({
            "id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1",
            "caption_0": cap0, "caption_1": cap1, "tag": tag,
            "secondary_tag": "Symbolic" if i % 3 == 0 else "", "num_main_preds": preds,
            "collapsed_tag": collapsed,
        }))
    (out / "examples.jsonl").write_text("\n".join(lines) + "\n")


def main():
    os.chdir(ROOT)
    tokenizer = build_tokenizer(FIX / "tokenizer")
    for seed, (name, spec) in enumerate(CONFIGS.items()):
        build_model(name, spec, tokenizer, seed=100 + seed)
    build_preprocess_fixtures()
    build_demo_suite()


if __name__ == "__main__":
    main()
