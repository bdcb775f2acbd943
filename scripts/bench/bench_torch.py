#!/usr/bin/env python3
"""PyTorch + transformers side of `just bench-vs-torch`: the same architecture (full-size,
random weights: `--model clip-vit-b32`, CLIP ViT-B/32; `siglip2-base-patch16-224`, SigLIP 2
B/16 at 224 px with its 256k Gemma vocabulary and 64-token texts; `siglip2-base-patch16-naflex`,
SigLIP 2 NaFlex B/16 on 256 × 256 images, a full budget of 256 patches each, its position grid
resized to 16 × 16 on both sides; `pe-core-b16-224`, open_clip's PE-Core-B-16 with timm's tower,
texts of its 32 tokens; `pe-core-l14-336`, its L/14 at 336 px; `eva02-clip-b16`, open_clip's EVA02-B-16
with timm's tower; `eva02-clip-l14`, its L/14; `siglip2-so400m-patch14-384`, SigLIP 2 So400m/14
at 384 px, given to benchctl as the same transformers config.json; `metaclip2-worldwide-l14`,
transformers' `MetaClip2Model` at the worldwide L/14's shape, XLM-V's 901,629 pieces, the same
config.json to benchctl; `dfn5b-h14-378`, open_clip's ViT-H-14-378-quickgelu, a transformers
CLIPConfig of its shape to benchctl), batch, threads and text
length as `benchctl bench`, timed the same way (one warm-up batch, then `--iters` timed
batches), then benchctl itself, and one table with both, their ratio, and each side's share of
the tier's measured fp32 FMA peak.

`--tier` restricts both sides to one instruction-set tier on this machine: benchctl through
`BENCHCTL_CPU` (its own kernels) and the binary's build (`gemm`'s AVX-512 kernels exist only
with the default `gemm-avx512` feature, so `--tier avx2` on an AVX-512 machine needs a binary
built with `--no-default-features`; `just bench-vs-torch avx2` builds one), PyTorch through
`ATEN_CPU_CAPABILITY`, `ONEDNN_MAX_CPU_ISA` and `MKL_ENABLE_INSTRUCTIONS`, set before torch
is imported. The script refuses to compare when benchctl reports another tier.

Usage: python scripts/bench/bench_torch.py [--benchctl target/release/benchctl] [--model clip-vit-b32|siglip2-base-patch16-224|siglip2-base-patch16-naflex|siglip2-so400m-patch14-384|pe-core-b16-224|pe-core-l14-336|eva02-clip-b16|eva02-clip-l14|metaclip2-worldwide-l14|dfn5b-h14-378]
                                     [--tier best|avx512|avx2]
                                     [--batch 32] [--threads 2] [--iters 5] [--text-tokens 16]
                                     [--retrieval]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

# What restricts PyTorch (ATen's own kernels, oneDNN, MKL) to one tier.
TORCH_TIER_ENV = {
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "generic": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}

# Each model's towers as the benchmark builds them: the image tower's patch grid, width, MLP
# and depth; the text tower's width, MLP, depth and vocabulary; whether texts have a fixed length.
SHAPES = {
    "clip-vit-b32": {"image": 224, "patch": 32, "width": 768, "mlp": 3072, "layers": 12, "class_token": True,
                     "text_width": 512, "text_mlp": 2048, "text_layers": 12, "vocab": 49408, "fixed_text": None},
    "siglip2-base-patch16-224": {"image": 224, "patch": 16, "width": 768, "mlp": 3072, "layers": 12,
                                 "class_token": False, "text_width": 768, "text_mlp": 3072, "text_layers": 12,
                                 "vocab": 256000, "fixed_text": 64},
    "siglip2-base-patch16-naflex": {"image": 256, "patch": 16, "width": 768, "mlp": 3072, "layers": 12,
                                    "class_token": False, "text_width": 768, "text_mlp": 3072, "text_layers": 12,
                                    "vocab": 256000, "fixed_text": 64, "naflex": True},
    "pe-core-b16-224": {"image": 224, "patch": 16, "width": 768, "mlp": 3072, "layers": 12, "class_token": True,
                        "text_width": 1024, "text_mlp": 4096, "text_layers": 24, "vocab": 49408, "fixed_text": 32,
                        "open_clip": "PE-Core-B-16"},
    "eva02-clip-b16": {"image": 224, "patch": 16, "width": 768, "mlp": 2048 * 3 // 2, "layers": 12, "class_token": True,
                       "text_width": 512, "text_mlp": 2048, "text_layers": 12, "vocab": 49408, "fixed_text": 77,
                       "open_clip": "EVA02-B-16"},
    "pe-core-l14-336": {"image": 336, "patch": 14, "width": 1024, "mlp": 4096, "layers": 24, "class_token": True,
                        "text_width": 1024, "text_mlp": 4096, "text_layers": 24, "vocab": 49408, "fixed_text": 32,
                        "open_clip": "PE-Core-L-14-336"},
    # SigLIP 2 So400m/14 at 384 px (google/siglip2-so400m-patch14-384's shape): 729 patches, 16
    # heads of 72; no zoo shape in `benchctl bench`, which gets the same transformers config.json
    # as `--config`.
    "siglip2-so400m-patch14-384": {"image": 384, "patch": 14, "width": 1152, "mlp": 4304, "layers": 27,
                                   "heads": 16, "class_token": False, "text_width": 1152, "text_mlp": 4304,
                                   "text_layers": 27, "text_heads": 16, "vocab": 256000, "fixed_text": 64,
                                   "config_json": True},
    # MetaCLIP 2 worldwide L/14 (facebook/metaclip-2-worldwide-l14's shape: MetaClip2Model, XLM-V's
    # 901,629 pieces, texts padded to 77 as the authors' get_tokenizer pads them); `benchctl bench`
    # gets the same transformers config.json as `--config`.
    "metaclip2-worldwide-l14": {"image": 224, "patch": 14, "width": 1024, "mlp": 4096, "layers": 24, "heads": 16,
                                "class_token": True, "text_width": 768, "text_mlp": 3072, "text_layers": 12,
                                "text_heads": 12, "vocab": 901629, "fixed_text": 77, "projection": 768,
                                "metaclip2": True, "config_json": True},
    # DFN-5B's ViT-H/14 at 378 px (apple/DFN5B-CLIP-ViT-H-14-378): open_clip's
    # ViT-H-14-378-quickgelu on the PyTorch side; benchctl reads the checkpoint's OpenAI naming
    # into its CLIP towers, benchmarked from a transformers CLIPConfig of the same shape. Texts of
    # 77 tokens: open_clip's CLIP adds all 77 position embeddings.
    "dfn5b-h14-378": {"image": 378, "patch": 14, "width": 1280, "mlp": 5120, "layers": 32, "heads": 16,
                      "class_token": True, "text_width": 1024, "text_mlp": 4096, "text_layers": 24, "text_heads": 16,
                      "vocab": 49408, "fixed_text": 77, "projection": 1024, "open_clip": "ViT-H-14-378-quickgelu",
                      "clip_config_json": True},
    # SwiGLU of 2,730 hidden units: three products, counted as a two-product MLP of 2730 · 3 / 2.
    "eva02-clip-l14": {"image": 224, "patch": 14, "width": 1024, "mlp": 2730 * 3 // 2, "layers": 24,
                       "class_token": True, "text_width": 768, "text_mlp": 3072, "text_layers": 12, "vocab": 49408,
                       "fixed_text": 77, "open_clip": "EVA02-L-14"},
}


def encoder_flops(tokens, width, mlp, layers):
    """Multiply-adds of a pre-norm transformer over `tokens`, ×2 for FLOPs."""
    per_token = 4 * width * width + 2 * width * mlp + 2 * tokens * width
    return 2 * layers * tokens * per_token


def image_flops(shape):
    patches = (shape["image"] // shape["patch"]) ** 2
    tokens = patches + (1 if shape["class_token"] else 0)
    embedding = 2 * patches * 3 * shape["patch"] ** 2 * shape["width"]
    return encoder_flops(tokens, shape["width"], shape["mlp"], shape["layers"]) + embedding


def text_flops(shape, tokens):
    return encoder_flops(tokens, shape["text_width"], shape["text_mlp"], shape["text_layers"])


def timed(iters, fn):
    fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def summary(batch, times):
    s = sorted(times)
    pct = lambda p: s[round((len(s) - 1) * p)] * 1e3
    return {"per_second": batch * len(times) / sum(times), "p50_ms": pct(0.5), "p90_ms": pct(0.9)}


def torch_model(name):
    """The model of `name`'s shape with transformers' random initialisation."""
    if name == "clip-vit-b32":
        from transformers import CLIPConfig, CLIPModel
        return CLIPModel(CLIPConfig())  # the defaults are openai/clip-vit-base-patch32's shape
    shape = SHAPES[name]
    if shape.get("open_clip"):
        import open_clip
        return open_clip.create_model(shape["open_clip"], pretrained=None)
    if shape.get("metaclip2"):
        from transformers import MetaClip2Model
        return MetaClip2Model(clip_config(shape))
    if shape.get("naflex"):
        from transformers import Siglip2Config, Siglip2Model
        return Siglip2Model(Siglip2Config(
            text_config=dict(vocab_size=shape["vocab"], max_position_embeddings=shape["fixed_text"]),
            vision_config=dict(num_patches=(shape["image"] // shape["patch"]) ** 2, patch_size=shape["patch"])))
    from transformers import SiglipModel
    return SiglipModel(siglip_config(shape))


def siglip_config(shape):
    """transformers' `SiglipConfig` of a SigLIP shape (heads of 64 unless the shape says)."""
    from transformers import SiglipConfig
    return SiglipConfig(
        text_config=dict(vocab_size=shape["vocab"], hidden_size=shape["text_width"],
                         intermediate_size=shape["text_mlp"], num_hidden_layers=shape["text_layers"],
                         num_attention_heads=shape.get("text_heads", 12), max_position_embeddings=shape["fixed_text"]),
        vision_config=dict(hidden_size=shape["width"], intermediate_size=shape["mlp"],
                           num_hidden_layers=shape["layers"], num_attention_heads=shape.get("heads", 12),
                           image_size=shape["image"], patch_size=shape["patch"]))


def clip_config(shape):
    """transformers' `MetaClip2Config` (a MetaCLIP 2 shape) or `CLIPConfig` with QuickGELU (an
    OpenAI-named OpenCLIP shape, as DFN's) of the shape."""
    from transformers import CLIPConfig, MetaClip2Config
    text = dict(vocab_size=shape["vocab"], hidden_size=shape["text_width"], intermediate_size=shape["text_mlp"],
                num_hidden_layers=shape["text_layers"], num_attention_heads=shape["text_heads"],
                max_position_embeddings=77)
    vision = dict(hidden_size=shape["width"], intermediate_size=shape["mlp"], num_hidden_layers=shape["layers"],
                  num_attention_heads=shape["heads"], image_size=shape["image"], patch_size=shape["patch"])
    if shape.get("metaclip2"):
        return MetaClip2Config(text_config=text, vision_config=vision, projection_dim=shape["projection"])
    return CLIPConfig(text_config=dict(text, hidden_act="quick_gelu"), vision_config=dict(vision, hidden_act="quick_gelu"),
                      projection_dim=shape["projection"])


def torch_side(args, tokens):
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torch_model(args.model).eval()
    shape = SHAPES[args.model]
    size = shape["image"]
    if shape.get("naflex"):
        # The processor's output for square images: every patch of the budget real.
        grid, patch = size // shape["patch"], shape["patch"]
        image_inputs = {"pixel_values": torch.randn(args.batch, grid * grid, 3 * patch * patch),
                        "pixel_attention_mask": torch.ones(args.batch, grid * grid, dtype=torch.long),
                        "spatial_shapes": torch.tensor([[grid, grid]] * args.batch)}
    else:
        image_inputs = {"pixel_values": torch.randn(args.batch, 3, size, size)}
    vocab = shape["vocab"]
    # The same ids as benchctl's benchmark: pseudo-random below the end token, which closes each text.
    ids = torch.tensor([[(b * 7919 + t * 104_729) % (vocab - 2) for t in range(tokens - 1)] + [vocab - 1]
                        for b in range(args.batch)])
    with torch.inference_mode():
        if shape.get("open_clip"):
            image = timed(args.iters, lambda: model.encode_image(image_inputs["pixel_values"]))
            text = timed(args.iters, lambda: model.encode_text(ids))
        else:
            image = timed(args.iters, lambda: model.get_image_features(**image_inputs))
            text = timed(args.iters, lambda: model.get_text_features(input_ids=ids))
    info = {"version": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability()}
    return {"image": summary(args.batch, image), "text": summary(args.batch, text)}, info


def benchctl_json(args, env, *extra):
    out = subprocess.run([args.benchctl, "bench", "--threads", str(args.threads), "--json", *extra],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchctl", default="target/release/benchctl")
    parser.add_argument("--model", choices=sorted(SHAPES), default="clip-vit-b32")
    parser.add_argument("--tier", choices=["best", "avx512", "avx2", "generic"], default="best")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--text-tokens", type=int, default=16)
    parser.add_argument("--retrieval", action="store_true", help="also time RoCOCO-scale retrieval (benchctl only)")
    args = parser.parse_args()

    env = dict(os.environ)
    if args.tier != "best":
        env["BENCHCTL_CPU"] = args.tier
        # Before torch is imported: ATen, oneDNN and MKL read these once.
        os.environ.update(TORCH_TIER_ENV[args.tier])
    else:
        env.pop("BENCHCTL_CPU", None)

    peak = benchctl_json(args, env, "--part", "peak", "--iters", "5")
    tier, gemm = peak["cpu_tier"], peak["gemm_isa"]
    if args.tier == "generic" and tier == "generic" and gemm != "generic":
        # The gemm crate picks its kernels at run time and cannot be lowered below AVX2 on a
        # CPU that has it: benchctl's own kernels are generic, its matrix products are not.
        print(f"note: benchctl's kernels run generic, its matrix products on {gemm} (not forcible lower)")
    elif args.tier != "best" and (tier != args.tier or gemm != args.tier):
        sys.exit(f"benchctl runs its kernels on {tier} and its matrix products on {gemm}, not {args.tier}: "
                 f"for --tier avx2 on an AVX-512 machine build it with `cargo build --release -p benchctl "
                 f"--no-default-features --target-dir target/tier-avx2` and pass --benchctl target/tier-avx2/release/benchctl")
    peak_gflops = peak["parts"][0]["gflops"]
    shape = SHAPES[args.model]
    # SigLIP's texts are always padded to its trained length.
    tokens = shape["fixed_text"] or args.text_tokens
    if shape.get("config_json") or shape.get("clip_config_json"):
        # The very config the PyTorch side builds (for DFN, open_clip's shape as a CLIPConfig),
        # as a checkpoint's config.json.
        config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        made = siglip_config(shape) if shape["vocab"] == 256000 else clip_config(shape)
        config.write(made.to_json_string())
        config.close()
        architecture = ["--config", config.name]
    else:
        architecture = ["--model", args.model]
    ours = {p["part"]: p for p in benchctl_json(args, env, *architecture, "--part", "both", "--batch",
                                                 str(args.batch), "--iters", str(args.iters), "--text-tokens",
                                                 str(tokens))["parts"]}
    theirs, info = torch_side(args, tokens)

    print(f"{args.model}, random weights, fp32, batch {args.batch}, {args.threads} threads, texts of "
          f"{tokens} tokens; {platform.processor() or platform.machine()}; benchctl tier {tier} "
          f"(matrix products {gemm}); torch {info['version']} (ATen capability {info['capability']}"
          + (f", {', '.join(f'{k}={v}' for k, v in TORCH_TIER_ENV[args.tier].items())}" if args.tier != "best" else "")
          + f"); measured fp32 FMA peak of the tier: {peak_gflops:.0f} GFLOP/s")
    print("| part | benchctl /s | PyTorch /s | ratio | benchctl % of peak | PyTorch % of peak | benchctl p50 ms | PyTorch p50 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    flops = {"image": image_flops(shape), "text": text_flops(shape, tokens)}
    for part in ("image", "text"):
        b, t = ours[part], theirs[part]
        share = lambda rate: 100 * rate * flops[part] / 1e9 / peak_gflops
        print(f"| {part} | {b['per_second']:.2f} | {t['per_second']:.2f} | {b['per_second'] / t['per_second']:.2f}× | "
              f"{share(b['per_second']):.0f} % | {share(t['per_second']):.0f} % | {b['p50_ms']:.1f} | {t['p50_ms']:.1f} |")
    if args.retrieval:
        r = benchctl_json(args, env, "--part", "retrieval", "--iters", "3")["parts"][0]
        print(f"RoCOCO-scale retrieval (benchctl, {tier}): {r['seconds_per_pass']:.2f} s per pass")


if __name__ == "__main__":
    main()
