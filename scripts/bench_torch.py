#!/usr/bin/env python3
"""PyTorch + transformers side of `just bench-vs-torch`: the same architecture (full-size
CLIP ViT-B/32, random weights), batch, threads and text length as `benchctl bench`, timed the
same way (one warm-up batch, then `--iters` timed batches), then benchctl itself, and one
table with both and their ratio.

Usage: python scripts/bench_torch.py [--benchctl target/release/benchctl] [--batch 32]
                                     [--threads 2] [--iters 5] [--text-tokens 16]
"""
import argparse
import json
import platform
import subprocess
import time

import torch
from transformers import CLIPConfig, CLIPModel


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


def torch_side(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = CLIPModel(CLIPConfig()).eval()  # the defaults are openai/clip-vit-base-patch32's shape
    pixels = torch.randn(args.batch, 3, 224, 224)
    vocab = model.config.text_config.vocab_size
    # The same ids as benchctl's benchmark: pseudo-random below the end token, which closes each text.
    ids = torch.tensor([[(b * 7919 + t * 104_729) % (vocab - 2) for t in range(args.text_tokens - 1)] + [vocab - 1]
                        for b in range(args.batch)])
    with torch.inference_mode():
        image = timed(args.iters, lambda: model.get_image_features(pixel_values=pixels))
        text = timed(args.iters, lambda: model.get_text_features(input_ids=ids))
    return {"image": summary(args.batch, image), "text": summary(args.batch, text)}


def benchctl_side(args):
    out = subprocess.run([args.benchctl, "bench", "--part", "both", "--batch", str(args.batch), "--threads", str(args.threads),
                          "--iters", str(args.iters), "--text-tokens", str(args.text_tokens), "--json"],
                         check=True, capture_output=True, text=True).stdout
    parts = json.loads(out)["parts"]
    return {p["part"]: p for p in parts}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchctl", default="target/release/benchctl")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--text-tokens", type=int, default=16)
    args = parser.parse_args()
    ours = benchctl_side(args)
    theirs = torch_side(args)
    print(f"CLIP ViT-B/32, random weights, fp32, batch {args.batch}, {args.threads} threads, "
          f"texts of {args.text_tokens} tokens; {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}")
    print(f"{'part':<6} {'benchctl/s':>11} {'torch/s':>9} {'ratio':>7} {'benchctl p50 ms':>16} {'torch p50 ms':>13}")
    for part in ("image", "text"):
        b, t = ours[part], theirs[part]
        print(f"{part:<6} {b['per_second']:>11.2f} {t['per_second']:>9.2f} {b['per_second'] / t['per_second']:>6.2f}x "
              f"{b['p50_ms']:>16.1f} {t['p50_ms']:>13.1f}")


if __name__ == "__main__":
    main()
