"""PyTorch's `F.linear` on the shapes `benchctl bench --part dense` times (the image encoders'
MLP products on a batch of 32 images), best of --iters calls each, in GFLOP/s; alternated with
benchctl's when --benchctl is given, so both are measured side by side in one run.

    python scripts/bench/bench_dense_torch.py --benchctl target/release/benchctl --rounds 3
"""

import argparse
import re
import subprocess
import time

import torch

SHAPES = [("dense-b32-mlp-up", 1600, 768, 3072), ("dense-b16-mlp-up", 6304, 768, 3072),
          ("dense-b16-mlp-down", 6304, 3072, 768)]

parser = argparse.ArgumentParser()
parser.add_argument("--benchctl", help="a benchctl built with --features dev-bench")
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--iters", type=int, default=10)
parser.add_argument("--rounds", type=int, default=3)
args = parser.parse_args()
torch.set_num_threads(args.threads)


def torch_rates():
    rates = {}
    for name, m, k, n in SHAPES:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        torch.nn.functional.linear(x, w, b)
        best = float("inf")
        for _ in range(args.iters):
            started = time.perf_counter()
            torch.nn.functional.linear(x, w, b)
            best = min(best, time.perf_counter() - started)
        rates[name] = 2 * m * k * n / best / 1e9
    return rates


def benchctl_rates():
    out = subprocess.run([args.benchctl, "bench", "--part", "dense", "--threads", str(args.threads),
                          "--iters", str(args.iters)], capture_output=True, text=True, check=True).stdout
    return {m[1]: float(m[2]) for m in re.finditer(r"^(dense-\S+) gflops = ([0-9.]+)", out, re.M)}


for r in range(args.rounds):
    ours = benchctl_rates() if args.benchctl else {}
    theirs = torch_rates()
    for name, *_ in SHAPES:
        line = f"round {r} {name}: torch {theirs[name]:.1f} GFLOP/s"
        if name in ours:
            line += f", benchctl {ours[name]:.1f} GFLOP/s, ratio {ours[name] / theirs[name]:.2f}×"
        print(line, flush=True)
