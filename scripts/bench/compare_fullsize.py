"""End-to-end parity of a full-size checkpoint on image files: a random-weight CLIP
ViT-B/32 in Hugging Face layout (`b32`), an OpenCLIP ViT-B-32 in open_clip's layout
(`openclip`) and a DFN-5B-shaped OpenCLIP ViT-H-14-378-quickgelu with `resize_mode: squash`
and its weights as `open_clip_pytorch_model.bin` (`dfn`, as Apple's repos hold it) scored by
`benchctl eval` and by its reference (`transformers` with its PIL image processor; open_clip
loading the same directory with `local-dir:`), and a SigLIP 2 NaFlex base/16 (`naflex`:
`Siglip2Model` at its hub shape, 256 patches, with the fixture's Gemma-style vocabulary; the
authors' captions as open_clip's `HFTokenizer(clean="canonicalize")` prepares them, each item's
two images in one padded batch as the processor makes it), a PE-Core B/16 (`pe`: open_clip's
`PE-Core-B-16`, timm's tower), an EVA02-CLIP B/16 (`eva02`: open_clip's `EVA02-B-16`) and a
MetaCLIP 2 at ViT-L/14's widths (`metaclip2`: `MetaClip2Model`, the authors' captions) and SigLIP /
SigLIP 2 B/16 in open_clip's files (`siglip-oc`, `siglip2-oc`: open_clip's `ViT-B-16-SigLIP` and
`ViT-B-16-SigLIP2`, timm's towers) and EVA02-E at full width, 4 blocks deep (`eva02e`) on the
same PNG files of many sizes and modes
(the fixture images, and a real photo from ../shared cut to six aspect ratios in six modes),
the largest difference of the stored scores printed. Not a CI test (the checkpoints are 600 MB
to 4 GB); run it after a change to preprocessing or the models, and note the numbers in
docs/models.md.

    pip install torch transformers open_clip_torch pillow safetensors
    cargo build --release -p benchctl
    python scripts/bench/compare_fullsize.py [--benchctl target/release/benchctl] [--models b32,openclip,dfn,naflex,pe,eva02,metaclip2,siglip-oc,siglip2-oc,eva02e]
"""

import argparse
import gc
import itertools
import json
import pathlib
import shutil
import subprocess
import tempfile

import torch
from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "crates" / "benchctl-models" / "tests" / "fixtures" / "tokenizer" / "tokenizer.json"
IMAGES = sorted(
    list((ROOT / "crates" / "benchctl-models" / "tests" / "fixtures" / "preprocess-hf").glob("*.png"))
    + list((ROOT / "crates" / "benchctl-models" / "tests" / "fixtures" / "preprocess-openclip").glob("*.png")))
PHOTO = ROOT.parent / "shared" / "reference" / "clip-preprocess" / "franz-kafka.jpg"


def photo_variants(dir):
    """A real photo (../shared, read in place, never committed) cut to many aspect ratios
    (odd and even crop margins, an upscale) and saved in the modes PIL resizes differently."""
    if not PHOTO.exists():
        print(f"note: {PHOTO} is absent; the generated fixture images only")
        return []
    photo = Image.open(PHOTO).convert("RGB")
    w, h = photo.size
    out = []
    for i, (fw, fh) in enumerate([(1.0, 1.0), (0.9, 0.55), (0.45, 0.95), (0.62, 0.61), (0.1, 0.08), (0.77, 0.3)]):
        crop = photo.crop((0, 0, max(int(w * fw), 8), max(int(h * fh), 8)))
        mode = ["RGB", "L", "RGBA", "P", "RGB", "LA"][i]
        img = crop.convert(mode) if mode in ("RGB", "L", "P") else crop.convert(mode)
        if mode in ("RGBA", "LA"):
            alpha = Image.linear_gradient("L").resize(img.size)
            img.putalpha(alpha)
        path = dir / f"photo_{i}_{mode.lower()}_{img.size[0]}x{img.size[1]}.png"
        img.save(path)
        out.append(path)
    return out


CAPTIONS = ["a photo of a dog on the grass", "two red cubes next to a green ball", "an empty street at night",
            "a bowl of soup with a spoon"]


def write_suite(dir):
    (dir / "images").mkdir(parents=True)
    (dir / "photos").mkdir()
    images = IMAGES + photo_variants(dir / "photos")
    lines = []
    for i, (a, b) in enumerate(zip(images[0::2], images[1::2])):
        shutil.copy(a, dir / "images" / f"ex_{i}_img_0.png")
        shutil.copy(b, dir / "images" / f"ex_{i}_img_1.png")
        c0, c1 = CAPTIONS[i % 4], CAPTIONS[(i + 1) % 4]
        lines.append({"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1", "caption_0": c0,
                      "caption_1": c1, "tag": "Object", "secondary_tag": "", "num_main_preds": 1,
                      "collapsed_tag": "Object"})
    (dir / "examples.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    return lines


def benchctl_scores(binary, model, suite, results):
    subprocess.run([binary, "eval", "--model-path", str(model), "--suite", "winoground", "--data-dir", str(suite),
                    "--results-dir", str(results), "--no-cache"], check=True, capture_output=True)
    run = json.loads(next((results / "runs").glob("*.json")).read_text())
    dump = (results / "runs" / run["scores_file"]).read_text().splitlines()
    return [json.loads(l)["scores"] for l in dump]


def compare(name, ours, theirs):
    worst = max(abs(a - b) for o, t in zip(ours, theirs) for ra, rb in zip(o, t) for a, b in zip(ra, rb))
    print(f"{name}: {len(ours)} items of 2 × 2 scores, max |benchctl − reference| = {worst:.2e}")
    return worst


def hf_clip(binary, tmp, lines):
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizerFast
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    torch.manual_seed(0)
    model = CLIPModel(CLIPConfig()).eval()
    out = tmp / "clip-vit-b32-random"
    model.save_pretrained(str(out), safe_serialization=True)
    processor = CLIPImageProcessorPil()  # openai/clip-vit-base-patch32's settings, on PIL
    processor.save_pretrained(str(out))
    shutil.copy(TOKENIZER, out / "tokenizer.json")
    tokenizer = CLIPTokenizerFast(tokenizer_file=str(TOKENIZER))
    suite = tmp / "suite"
    theirs = transformers_logits(model, processor, lambda texts: tokenizer(texts, padding=True, return_tensors="pt"),
                                 suite, lines)
    return compare("CLIP ViT-B/32, HF layout, vs transformers", benchctl_scores(binary, out, suite, tmp / "r1"), theirs)


def transformers_logits(model, processor, text_inputs, suite, lines):
    """A `transformers` dual encoder's 2 × 2 logits of each item: the processor on its two images,
    `text_inputs(captions)` for its two captions."""
    theirs = []
    with torch.no_grad():
        for line in lines:
            imgs = [Image.open(suite / "images" / f"{line[k]}.png") for k in ("image_0", "image_1")]
            pixels = processor(imgs, return_tensors="pt")["pixel_values"]
            text = text_inputs([line["caption_0"], line["caption_1"]])
            theirs.append(model(pixel_values=pixels, **text).logits_per_image.tolist())
    return theirs


def open_clip_scores(model, transform, tokenizer, suite, lines):
    """open_clip's 2 × 2 logits of each item: its eval transform, `encode_*`, cosines times the scale."""
    theirs = []
    with torch.no_grad():
        for line in lines:
            pixels = torch.stack([transform(Image.open(suite / "images" / f"{line[k]}.png")) for k in ("image_0", "image_1")])
            image = torch.nn.functional.normalize(model.encode_image(pixels), dim=-1)
            text = torch.nn.functional.normalize(model.encode_text(tokenizer([line["caption_0"], line["caption_1"]])), dim=-1)
            theirs.append((model.logit_scale.exp() * image @ text.T).tolist())
    return theirs


def open_clip_b32(binary, tmp, lines):
    import open_clip
    from safetensors.torch import save_file
    torch.manual_seed(0)
    model, _, transform = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None)
    model.eval()
    out = tmp / "openclip-vit-b32-random"
    out.mkdir()
    model_cfg = open_clip.get_model_config("ViT-B-32")
    config = {"model_cfg": model_cfg, "preprocess_cfg": {
        "mean": list(open_clip.OPENAI_DATASET_MEAN), "std": list(open_clip.OPENAI_DATASET_STD),
        "interpolation": "bicubic", "resize_mode": "shortest"}}
    (out / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "open_clip_model.safetensors"))
    shutil.copy(TOKENIZER, out / "tokenizer.json")
    tokenizer = open_clip.get_tokenizer("ViT-B-32")
    suite = tmp / "suite"
    theirs = open_clip_scores(model, transform, tokenizer, suite, lines)
    return compare("OpenCLIP ViT-B-32, open_clip layout, vs open_clip", benchctl_scores(binary, out, suite, tmp / "r2"), theirs)


def dfn_h14_378(binary, tmp, lines):
    """open_clip's ViT-H-14-378-quickgelu (DFN-5B's architecture) with open_clip's DFN
    preprocessing (`squash`), saved as Apple's repos hold it (the PyTorch file); the reference
    is open_clip loading that directory itself."""
    import open_clip
    torch.manual_seed(0)
    model_cfg = open_clip.get_model_config("ViT-H-14-378-quickgelu")
    out = tmp / "dfn5b-h14-378-random"
    out.mkdir()
    config = {"model_cfg": model_cfg, "preprocess_cfg": {
        "mean": list(open_clip.OPENAI_DATASET_MEAN), "std": list(open_clip.OPENAI_DATASET_STD),
        "interpolation": "bicubic", "resize_mode": "squash"}}
    (out / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n")
    built, _, _ = open_clip.create_model_and_transforms("ViT-H-14-378-quickgelu", pretrained=None)
    torch.save(built.state_dict(), out / "open_clip_pytorch_model.bin")
    del built
    gc.collect()
    shutil.copy(TOKENIZER, out / "tokenizer.json")
    suite = tmp / "suite"
    # benchctl first, alone in memory: 4 GB of f32 weights each side would not fit 24 GB together.
    ours = benchctl_scores(binary, out, suite, tmp / "r3")
    model, _, transform = open_clip.create_model_and_transforms(f"local-dir:{out}")
    model.eval()
    tokenizer = open_clip.get_tokenizer(f"local-dir:{out}")
    theirs = open_clip_scores(model, transform, tokenizer, suite, lines)
    del model
    return compare("DFN-5B-shaped OpenCLIP ViT-H-14-378 (squash, .bin), vs open_clip", ours, theirs)


def siglip2_naflex(binary, tmp, lines):
    import open_clip
    from transformers import Siglip2Config, Siglip2Model
    from transformers.models.siglip2.image_processing_pil_siglip2 import Siglip2ImageProcessorPil
    fixture = ROOT / "crates" / "benchctl-models" / "tests" / "fixtures" / "siglip2-naflex-tiny"
    torch.manual_seed(0)
    vocab = len(json.loads((fixture / "tokenizer.json").read_text())["model"]["vocab"])
    config = Siglip2Config(text_config=dict(vocab_size=vocab, pad_token_id=0, eos_token_id=1, bos_token_id=2))
    model = Siglip2Model(config).eval()
    out = tmp / "siglip2-base-patch16-naflex-random"
    model.save_pretrained(str(out), safe_serialization=True)
    settings = {"image_processor_type": "Siglip2ImageProcessor", "max_num_patches": 256, "patch_size": 16,
                "resample": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "rescale_factor": 1 / 255}
    (out / "preprocessor_config.json").write_text(json.dumps(settings))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(fixture / name, out / name)
    processor = Siglip2ImageProcessorPil(**settings)
    tokenizer = open_clip.tokenizer.HFTokenizer(str(out), context_length=64, clean="canonicalize")
    suite = tmp / "suite"
    theirs = []
    with torch.no_grad():
        for line in lines:
            # transformers refuses other modes without do_convert_rgb; load_image converts them.
            imgs = [Image.open(suite / "images" / f"{line[k]}.png").convert("RGB") for k in ("image_0", "image_1")]
            inputs = processor(imgs, return_tensors="pt")
            ids = tokenizer([line["caption_0"], line["caption_1"]])
            theirs.append(model(input_ids=ids, **inputs).logits_per_image.tolist())
    return compare("SigLIP 2 NaFlex base/16, 256 patches, vs transformers", benchctl_scores(binary, out, suite, tmp / "r4"),
                   theirs)


def timm_tower_clip(binary, tmp, lines, name, preprocess, results, depth=None):
    """open_clip's `name` (a timm image tower beside open_clip's text tower) with random weights
    and the hub checkpoints' preprocess_cfg, saved as its `timm/…` repo holds it; the image tower
    `depth` blocks deep where given (full width)."""
    import open_clip
    import timm
    from safetensors.torch import save_file
    torch.manual_seed(0)
    create = timm.create_model
    if depth is not None:
        timm.create_model = lambda model_name, **kwargs: create(model_name, **{**kwargs, "depth": depth})
    try:
        model = open_clip.create_model(name, pretrained=None).eval()
    finally:
        timm.create_model = create
    out = tmp / f"{name}-random"
    out.mkdir()
    config = {"model_cfg": open_clip.get_model_config(name), "preprocess_cfg": preprocess}
    (out / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "open_clip_model.safetensors"))
    shutil.copy(TOKENIZER, out / "tokenizer.json")
    size = config["model_cfg"]["vision_cfg"]["image_size"]
    transform = open_clip.image_transform(size, is_train=False, **preprocess)
    theirs = open_clip_scores(model, transform, open_clip.get_tokenizer(name), tmp / "suite", lines)
    return compare(f"{name} (timm tower, open_clip text), vs open_clip", benchctl_scores(binary, out, tmp / "suite", results),
                   theirs)


def pe_core_b16(binary, tmp, lines):
    """PE-Core-B-16 (timm's `vit_pe_core_base_patch16_224`) under open_clip's `_pecfg`."""
    preprocess = {"mean": [0.5] * 3, "std": [0.5] * 3, "interpolation": "bilinear", "resize_mode": "squash"}
    return timm_tower_clip(binary, tmp, lines, "PE-Core-B-16", preprocess, tmp / "r5")


def eva02_b16(binary, tmp, lines):
    """EVA02-B-16 (timm's `eva02_base_patch16_clip_224`) under open_clip's `_pcfg`."""
    import open_clip
    preprocess = {"mean": list(open_clip.OPENAI_DATASET_MEAN), "std": list(open_clip.OPENAI_DATASET_STD),
                  "interpolation": "bicubic", "resize_mode": "shortest"}
    return timm_tower_clip(binary, tmp, lines, "EVA02-B-16", preprocess, tmp / "r6")


def eva02_e14(binary, tmp, lines):
    """EVA02-E-14 (timm's `eva02_enormous_patch14_clip_224`: post-norm blocks, q/k/v fused with q
    and v biases, heads of 112, no rotary embedding) at full width, 4 of its 64 blocks (the whole
    tower would take 18 GB in f32), under open_clip's `_pcfg`."""
    import open_clip
    preprocess = {"mean": list(open_clip.OPENAI_DATASET_MEAN), "std": list(open_clip.OPENAI_DATASET_STD),
                  "interpolation": "bicubic", "resize_mode": "shortest"}
    return timm_tower_clip(binary, tmp, lines, "EVA02-E-14", preprocess, tmp / "r10", depth=4)


def siglip_open_clip(binary, tmp, lines, name, fixture, results):
    """open_clip's `name` (SigLIP in open_clip's files: timm's `vit_*_siglip_*` tower, open_clip's
    text tower) at full size with random weights, under open_clip's `_slpcfg`, with the tokenizer
    of `fixture` (a small vocabulary made as open_clip's `SigLipTokenizer` makes the hub's: its ids
    index the first rows of the full-size embedding), scored `exp(s) · cos + b` as SigLIP's logits."""
    import open_clip
    from safetensors.torch import save_file
    torch.manual_seed(0)
    model = open_clip.create_model(name, pretrained=None).eval()
    with torch.no_grad():
        model.logit_bias.fill_(-2.0)
    out = tmp / f"{name}-random"
    out.mkdir()
    preprocess = {"mean": [0.5] * 3, "std": [0.5] * 3, "interpolation": "bicubic", "resize_mode": "squash"}
    config = {"model_cfg": open_clip.get_model_config(name), "preprocess_cfg": preprocess}
    (out / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "open_clip_model.safetensors"))
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "crates" / "benchctl-models" / "tests" / "fixtures" / fixture / file, out / file)
    size = config["model_cfg"]["vision_cfg"]["image_size"]
    transform = open_clip.image_transform(size, is_train=False, **preprocess)
    tokenizer = open_clip.get_tokenizer(f"local-dir:{out}")
    scaled = open_clip_scores(model, transform, tokenizer, tmp / "suite", lines)
    bias = model.logit_bias.item()
    theirs = [[[c + bias for c in row] for row in item] for item in scaled]
    return compare(f"{name} (SigLIP in open_clip's files), vs open_clip",
                   benchctl_scores(binary, out, tmp / "suite", results), theirs)


def siglip_b16(binary, tmp, lines):
    """ViT-B-16-SigLIP (`timm/ViT-B-16-SigLIP`: exact GELU, T5's vocabulary)."""
    return siglip_open_clip(binary, tmp, lines, "ViT-B-16-SigLIP", "siglip-openclip-tiny", tmp / "r8")


def siglip2_b16(binary, tmp, lines):
    """ViT-B-16-SigLIP2 (`timm/ViT-B-16-SigLIP2`: exact GELU in timm's tower, tanh in the text
    tower, Gemma's vocabulary)."""
    return siglip_open_clip(binary, tmp, lines, "ViT-B-16-SigLIP2", "siglip2-openclip-tiny", tmp / "r9")


def metaclip2_l14(binary, tmp, lines):
    """A MetaCLIP 2 at ViT-L/14's widths (`MetaClip2Model`: a 24-layer 1024-wide image tower at
    224 px, a 12-layer 768-wide text tower pooled at the first `</s>`) on the metaclip2-tiny
    fixture's sentencepiece vocabulary, its captions as facebookresearch/MetaCLIP's
    `get_tokenizer` tokenises them (padded to 77, no cleaning)."""
    from transformers import AutoTokenizer, MetaClip2Config, MetaClip2Model
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    fixture = ROOT / "crates" / "benchctl-models" / "tests" / "fixtures" / "metaclip2-tiny"
    torch.manual_seed(0)
    fixture_config = json.loads((fixture / "config.json").read_text())["text_config"]
    text = {k: fixture_config[k] for k in ("vocab_size", "eos_token_id", "bos_token_id", "pad_token_id")}
    config = MetaClip2Config(
        text_config=dict(text, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                         max_position_embeddings=77),
        vision_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                           patch_size=14, image_size=224),
        projection_dim=768)
    model = MetaClip2Model(config).eval()
    out = tmp / "metaclip2-l14-random"
    model.save_pretrained(str(out), safe_serialization=True)
    processor = CLIPImageProcessorPil()
    processor.save_pretrained(str(out))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(fixture / name, out / name)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    suite = tmp / "suite"
    # facebookresearch/MetaCLIP's get_tokenizer: padded to 77, no attention mask.
    ids = lambda texts: {"input_ids": tokenizer(texts, padding="max_length", truncation=True, max_length=77,
                                                return_tensors="pt")["input_ids"]}
    theirs = transformers_logits(model, processor, ids, suite, lines)
    return compare("MetaCLIP 2 at ViT-L/14's widths, vs transformers", benchctl_scores(binary, out, suite, tmp / "r7"),
                   theirs)


MODELS = {"b32": hf_clip, "openclip": open_clip_b32, "dfn": dfn_h14_378, "naflex": siglip2_naflex, "pe": pe_core_b16,
          "eva02": eva02_b16, "metaclip2": metaclip2_l14, "siglip-oc": siglip_b16, "siglip2-oc": siglip2_b16,
          "eva02e": eva02_e14}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchctl", default=str(ROOT / "target" / "release" / "benchctl"))
    parser.add_argument("--models", default="b32,openclip", help=f"any of {','.join(MODELS)}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        lines = write_suite(tmp / "suite")
        for name in args.models.split(","):
            MODELS[name](args.benchctl, tmp, lines)


if __name__ == "__main__":
    main()
