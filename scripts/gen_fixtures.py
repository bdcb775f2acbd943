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


def randomise(model, skip=("logit_scale", "logit_bias")):
    """Weights large enough that every layer moves the outputs (transformers' init is tiny)."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith(skip):
                continue
            if p.dim() >= 2:
                p.normal_(0.0, 0.5 / p.shape[-1] ** 0.5 if "embed" not in pname else 0.5)
            elif pname.endswith("weight") and ("norm" in pname or "ln_" in pname or "LayerNorm" in pname):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.1)


def fresh_dir(name):
    out_dir = FIX / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    return out_dir


def build_openclip(seed=200):
    """A tiny OpenCLIP model (GELU, open_clip's own naming) saved as open_clip saves it to the hub:
    open_clip_config.json + open_clip_model.safetensors, with open_clip's encode_* outputs."""
    import open_clip
    from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg

    torch.manual_seed(seed)
    model_cfg = dict(embed_dim=24,
                     vision_cfg=dict(layers=2, width=64, head_width=32, patch_size=16, image_size=64),
                     text_cfg=dict(context_length=77, vocab_size=49408, width=32, heads=2, layers=2))
    model = CLIP(embed_dim=24, vision_cfg=CLIPVisionCfg(**model_cfg["vision_cfg"]),
                 text_cfg=CLIPTextCfg(**model_cfg["text_cfg"]), quick_gelu=False).eval()
    randomise(model)
    out_dir = fresh_dir("openclip-tiny")
    config = {"model_cfg": model_cfg, "preprocess_cfg": {
        "mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711],
        "interpolation": "bicubic", "resize_mode": "shortest"}}
    (out_dir / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out_dir / "open_clip_model.safetensors"))
    shutil.copy(FIX / "tokenizer" / "tokenizer.json", out_dir / "tokenizer.json")
    g = torch.Generator().manual_seed(seed + 1)
    pixel_values = torch.randn(3, 3, 64, 64, generator=g)
    tokens = open_clip.get_tokenizer("ViT-B-32")(MODEL_TEXTS)
    with torch.no_grad():
        image_embeds = model.encode_image(pixel_values)
        text_embeds = model.encode_text(tokens)
    save_file({"pixel_values": pixel_values.contiguous(), "input_ids": tokens.to(torch.int64).contiguous(),
               "image_embeds": image_embeds.contiguous(), "text_embeds": text_embeds.contiguous(),
               "logit_scale": model.logit_scale.detach().exp().reshape(1).contiguous()},
              str(out_dir / "reference.safetensors"), metadata={"texts": json.dumps(MODEL_TEXTS)})
    print("openclip-tiny: text embeds", text_embeds[:, :4])


SIGLIP_TEXTS = ["A photo of a cat!", "two dogs, playing in the snow.", "Hello   World",
                " ".join(["a very long caption"] * 10)]


def build_siglip(seed=300):
    """A tiny SiglipModel with a sentencepiece vocabulary trained here, its tokenizer.json,
    and transformers' outputs (texts padded to max_length, as SigLIP was trained)."""
    import sentencepiece as spm
    from transformers import SiglipConfig, SiglipModel, SiglipTokenizer, PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import SpmConverter

    out_dir = fresh_dir("siglip-tiny")
    corpus = [f"a photo of a {c} {s} next to {n} {o}" for c in ["red", "blue", "green", "yellow", "black"]
              for s in ["cat", "dog", "car", "tree", "house", "bird"] for n in ["two", "three", "many"]
              for o in ["people", "snow", "boxes"]] + SIGLIP_TEXTS
    with tempfile.TemporaryDirectory() as tmp:
        corpus_file = pathlib.Path(tmp) / "corpus.txt"
        corpus_file.write_text("\n".join(t.lower() for t in corpus) + "\n")
        spm.SentencePieceTrainer.train(input=str(corpus_file), model_prefix=str(pathlib.Path(tmp) / "sp"),
                                       vocab_size=45, model_type="unigram", pad_id=0, eos_id=1, unk_id=2,
                                       bos_id=-1, add_dummy_prefix=True, character_coverage=1.0)
        slow = SiglipTokenizer(vocab_file=str(pathlib.Path(tmp) / "sp.model"), model_max_length=16)
        fast = PreTrainedTokenizerFast(tokenizer_object=SpmConverter(slow).converted())
        fast._tokenizer.save(str(out_dir / "tokenizer.json"))
    max_len = 16
    ids = slow(SIGLIP_TEXTS, padding="max_length", truncation=True, max_length=max_len, return_tensors="pt")["input_ids"]
    for text, row in zip(SIGLIP_TEXTS, ids.tolist()):
        body = fast._tokenizer.encode(slow.canonicalize_text(text), add_special_tokens=False).ids
        body = (body[: max_len - 1] + [slow.eos_token_id] + [slow.pad_token_id] * max_len)[:max_len]
        assert body == row, (text, body, row)
    torch.manual_seed(seed)
    config = SiglipConfig(
        text_config=dict(vocab_size=len(slow), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=max_len, projection_size=64,
                         pad_token_id=slow.pad_token_id, eos_token_id=slow.eos_token_id),
        vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           image_size=64, patch_size=16))
    model = SiglipModel(config).eval()
    randomise(model)
    with torch.no_grad():
        model.logit_scale.fill_(2.3)
        model.logit_bias.fill_(-1.5)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    g = torch.Generator().manual_seed(seed + 1)
    pixel_values = torch.randn(3, 3, 64, 64, generator=g)
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=pixel_values)
        image_embeds = model.vision_model(pixel_values=pixel_values).pooler_output
        text_embeds = model.text_model(input_ids=ids).pooler_output
    save_file({"pixel_values": pixel_values.contiguous(), "input_ids": ids.to(torch.int64).contiguous(),
               "image_embeds": image_embeds.contiguous(), "text_embeds": text_embeds.contiguous(),
               "logits_per_image": out.logits_per_image.contiguous()},
              str(out_dir / "reference.safetensors"), metadata={"texts": json.dumps(SIGLIP_TEXTS)})
    print("siglip-tiny: logits_per_image\n", out.logits_per_image)


BLIP_TEXTS = ["a photo of a cat", "Two dogs playing in the snow.", "hello world",
              " ".join(["a very long caption"] * 12)]


def build_blip(seed=400):
    """A tiny BlipForImageTextRetrieval with a WordPiece vocabulary, and transformers' ITM
    probabilities and ITC cosines for every image × text pair."""
    from transformers import BertTokenizerFast, BlipConfig, BlipForImageTextRetrieval

    out_dir = fresh_dir("blip-tiny")
    words = sorted({w for t in BLIP_TEXTS + ["a red square to the left of a blue circle"]
                    for w in t.lower().replace(".", " . ").split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!"] + words + ["##s", "##ing", "##ed"]
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "vocab.txt").write_text("\n".join(vocab) + "\n")
        tok = BertTokenizerFast(vocab_file=str(pathlib.Path(tmp) / "vocab.txt"), do_lower_case=True)
        tok._tokenizer.save(str(out_dir / "tokenizer.json"))
    torch.manual_seed(seed)
    config = BlipConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=40, pad_token_id=0),
        vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           image_size=64, patch_size=16),
        image_text_hidden_size=24)
    model = BlipForImageTextRetrieval(config).eval()
    randomise(model)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    enc = tok(BLIP_TEXTS, padding=True, truncation=True, max_length=35, return_tensors="pt")
    g = torch.Generator().manual_seed(seed + 1)
    pixel_values = torch.randn(3, 3, 64, 64, generator=g)
    n_img, n_txt = pixel_values.shape[0], enc["input_ids"].shape[0]
    itm = torch.zeros(n_img, n_txt)
    itc = torch.zeros(n_img, n_txt)
    with torch.no_grad():
        for i in range(n_img):
            for j in range(n_txt):
                args = dict(input_ids=enc["input_ids"][j:j + 1], attention_mask=enc["attention_mask"][j:j + 1],
                            pixel_values=pixel_values[i:i + 1])
                itm[i, j] = model(**args, use_itm_head=True).itm_score.softmax(dim=-1)[0, 1]
                itc[i, j] = model(**args, use_itm_head=False).itm_score[0, 0]
    save_file({"pixel_values": pixel_values.contiguous(), "input_ids": enc["input_ids"].to(torch.int64).contiguous(),
               "attention_mask": enc["attention_mask"].to(torch.int64).contiguous(),
               "itm_probability": itm.contiguous(), "itc_cosine": itc.contiguous()},
              str(out_dir / "reference.safetensors"), metadata={"texts": json.dumps(BLIP_TEXTS)})
    print("blip-tiny: itm\n", itm, "\nitc\n", itc)


def build_processor_fixtures():
    """SigLIP's and BLIP's PIL image processors (resize to a square, no crop) on the noise PNGs."""
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    out_dir = FIX / "preprocess"
    tensors = {}
    # Three sizes each (a downscale both ways and an upscale) keep the file small; BLIP's
    # stretch is the same code at 384 px, so 224 px is enough to check it.
    square = {"height": 224, "width": 224}
    for name, processor in [("siglip", SiglipImageProcessorPil()), ("blip", BlipImageProcessorPil(size=square))]:
        for png in [out_dir / f"noise_{s}.png" for s in ("320x227", "227x451", "40x31")]:
            pixels = processor(Image.open(png).convert("RGB"), return_tensors="pt")["pixel_values"][0]
            tensors[f"{name}/{png.stem}"] = pixels.contiguous()
    save_file(tensors, str(out_dir / "square_resize.safetensors"))


PARTS = {
    "clip": lambda: [build_model(name, spec, build_tokenizer(FIX / "tokenizer"), seed=100 + seed)
                     for seed, (name, spec) in enumerate(CONFIGS.items())],
    "preprocess": lambda: (build_preprocess_fixtures(), build_processor_fixtures()),
    "demo": lambda: build_demo_suite(),
    "openclip": lambda: build_openclip(),
    "siglip": lambda: build_siglip(),
    "blip": lambda: build_blip(),
}


def main():
    """Builds every part, or only those named: python scripts/gen_fixtures.py siglip blip"""
    os.chdir(ROOT)
    chosen = sys.argv[1:] or list(PARTS)
    unknown = [p for p in chosen if p not in PARTS]
    if unknown:
        sys.exit(f"unknown part(s) {unknown}; choose from {list(PARTS)}")
    for part in chosen:
        PARTS[part]()


if __name__ == "__main__":
    main()
