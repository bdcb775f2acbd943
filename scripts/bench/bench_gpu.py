#!/usr/bin/env python3
"""benchctl and PyTorch + transformers side by side on one GPU: full-size CLIP ViT-B/32,
ViT-B/16 and ViT-L/14 with random weights, at each batch and dtype, timed the same way (one
warm-up batch, then `--iters` timed batches, each ended by a synchronisation: benchctl reads
the result back to the host, PyTorch calls `torch.cuda.synchronize()`), then FIBER-base
(benchctl only: there is no pip-installable FIBER). One markdown table per run.

GPU memory: benchctl's device-wide use after each timed batch less its use before the model
was built; PyTorch's `max_memory_reserved` (both count what the allocator keeps).

PyTorch runs as transformers configures it by default (`sdpa` attention, fp32 matrix products
without TF32, as candle's); benchctl through `benchctl bench --device cuda --json`, with its fused
CUDA kernels and, for the batches `--before` names, a second time with candle's own operations
(`BENCHCTL_CUDA_KERNELS=candle`, the path before those kernels) in a "before" column.

Usage (on the GPU machine, with the binary from `just cuda-build`):
    python3 scripts/bench/bench_gpu.py --benchctl target/cuda-build/release/benchctl \
        [--models b32,b16,l14,fiber] [--batches 32,128,512] [--dtypes f32,bf16,f16] [--iters 5] \
        [--before 128]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# openai/clip-vit-{base-patch32,base-patch16,large-patch14}: (vision width, layers, heads, MLP,
# patch), (text width, heads, MLP), projection; 224 px and 12 text layers for all three.
SHAPES = {
    "b32": ((768, 12, 12, 3072, 32), (512, 8, 2048), 512),
    "b16": ((768, 12, 12, 3072, 16), (512, 8, 2048), 512),
    "l14": ((1024, 24, 16, 4096, 14), (768, 12, 3072), 768),
}


def clip_config(shape):
    from transformers import CLIPConfig

    (vw, vl, vh, vm, patch), (tw, th, tm), proj = shape
    return CLIPConfig(
        vision_config=dict(hidden_size=vw, num_hidden_layers=vl, num_attention_heads=vh, intermediate_size=vm,
                           patch_size=patch, image_size=224, projection_dim=proj),
        text_config=dict(hidden_size=tw, num_hidden_layers=12, num_attention_heads=th, intermediate_size=tm,
                         projection_dim=proj),
        projection_dim=proj,
    )


def torch_side(config, batch, dtype, iters, text_tokens):
    import torch
    from transformers import CLIPModel

    torch.manual_seed(0)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    model = CLIPModel(config).to("cuda", torch_dtype).eval()
    pixels = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch_dtype)
    vocab = config.text_config.vocab_size
    # benchctl's benchmark ids: pseudo-random below the end token, which closes each text.
    ids = torch.tensor([[(b * 7919 + t * 104_729) % (vocab - 2) for t in range(text_tokens - 1)] + [vocab - 1]
                        for b in range(batch)], device="cuda")

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return batch * len(times) / sum(times)

    mib = 1 << 20
    with torch.inference_mode():
        image = timed(lambda: model.get_image_features(pixel_values=pixels))
        image_mib = torch.cuda.max_memory_reserved() / mib
        torch.cuda.reset_peak_memory_stats()
        text = timed(lambda: model.get_text_features(input_ids=ids))
        text_mib = torch.cuda.max_memory_reserved() / mib
    attention = getattr(model.config, "_attn_implementation", "?")
    del model
    torch.cuda.empty_cache()
    return {"image": image, "text": text}, {"image": image_mib, "text": text_mib}, attention


def benchctl_side(args, extra, kernels="fused"):
    env = dict(os.environ, BENCHCTL_CUDA_KERNELS=kernels)
    run = subprocess.run([args.benchctl, "bench", "--device", "cuda", "--json", "--iters", str(args.iters), *extra],
                         capture_output=True, text=True, env=env)
    if run.returncode != 0:
        return None, run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"
    parts = json.loads(run.stdout)["parts"]
    return {p["part"]: (p["per_second"], p.get("gpu_peak_mib")) for p in parts}, None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchctl", default="target/cuda-build/release/benchctl")
    parser.add_argument("--models", default="b32,b16,l14,fiber")
    parser.add_argument("--batches", default="32,128,512")
    parser.add_argument("--dtypes", default="f32,bf16,f16")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--text-tokens", type=int, default=16)
    parser.add_argument("--kernels", default="fused",
                        help="benchctl's CUDA kernels for the main column (BENCHCTL_CUDA_KERNELS)")
    parser.add_argument("--before", default="",
                        help="batches also run with candle's own operations (BENCHCTL_CUDA_KERNELS=candle)")
    args = parser.parse_args()

    import torch

    print(f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}; texts of {args.text_tokens} tokens; "
          f"per second, mean over {args.iters} timed batches after one warm-up")
    before_batches = {int(b) for b in args.before.split(",") if b}
    print("| model | batch | dtype | part | benchctl /s | before /s | PyTorch /s | ratio | benchctl MiB | PyTorch MiB |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
    sys.stdout.flush()
    configs = tempfile.mkdtemp()
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            for dtype in args.dtypes.split(","):
                common = ["--batch", str(batch), "--dtype", dtype, "--part", "both"]
                if name == "fiber":
                    flags = ["--model", "fiber-base", *common]
                    theirs, their_mib = {}, {}
                else:
                    config = clip_config(SHAPES[name])
                    path = os.path.join(configs, f"{name}.json")
                    config.to_json_file(path, use_diff=False)
                    flags = ["--config", path, "--text-tokens", str(args.text_tokens), *common]
                ours, error = benchctl_side(args, flags, args.kernels)
                before = benchctl_side(args, flags, "candle")[0] if batch in before_batches else None
                if name != "fiber":
                    try:
                        theirs, their_mib, _ = torch_side(config, batch, dtype, args.iters, args.text_tokens)
                    except torch.OutOfMemoryError:
                        theirs, their_mib = {}, {}
                        torch.cuda.empty_cache()
                if ours is None:
                    print(f"| {name} | {batch} | {dtype} | – | failed: {error} | | | | | |")
                    continue
                show = lambda v, digits=1: f"{v:,.{digits}f}" if v else "–"
                for part, (rate, our_mib) in ours.items():
                    other = theirs.get(part)
                    old = (before or {}).get(part, (None,))[0]
                    ratio = f"{rate / other:.2f}×" if other else "–"
                    print(f"| {name} | {batch} | {dtype} | {part} | {show(rate)} | {show(old)} | {show(other)} | {ratio} | "
                          f"{show(our_mib, 0)} | {show(their_mib.get(part), 0)} |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
