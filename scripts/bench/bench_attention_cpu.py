#!/usr/bin/env python3
"""benchctl's fused self-attention beside PyTorch's scaled_dot_product_attention on the CPU,
f32, kernel against kernel, for each (sequence, heads, head width) of `benchctl bench --part
attention` at `--rows` rows and `--threads` threads, alternating the two sides `--rounds` times
(the machines are noisy: compare within a round).

- benchctl: `benchctl bench --part attention --json` (a `--features dev-bench` build); the best
  of `--iters` calls. Its input is the `(rows, seq, 3·width)` projection, its output the heads
  merged, as the towers use it.
- PyTorch: `F.scaled_dot_product_attention` on q, k, v taken as `(rows, heads, seq, width)` views
  of one `(rows, seq, 3, heads, width)` projection (as transformers' attention hands them over),
  then the heads merged back into `(rows, seq, heads·width)` as the towers do; the best of
  `--iters` calls.

Usage:
    python3 scripts/bench/bench_attention_cpu.py --benchctl target/release/benchctl [--rows 32] [--threads 2]
"""
import argparse
import json
import subprocess
import time

import torch


def benchctl_side(args):
    run = subprocess.run([args.benchctl, "bench", "--part", "attention", "--json", "--batch", str(args.rows),
                          "--iters", str(args.iters), "--threads", str(args.threads)],
                         capture_output=True, text=True, check=True)
    return {p["part"]: p["us_per_call"] for p in json.loads(run.stdout)["parts"]}


def torch_side(rows, seq, heads, width, iters):
    qkv = torch.randn(rows, seq, 3, heads, width)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def call():
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return attended.transpose(1, 2).reshape(rows, seq, heads * width)

    call()
    best = float("inf")
    for _ in range(iters):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best * 1e6


parser = argparse.ArgumentParser()
parser.add_argument("--benchctl", default="target/release/benchctl")
parser.add_argument("--rows", type=int, default=32)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--iters", type=int, default=5)
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--only", help="comma-separated shape names (e.g. attention-197x12x64)")
args = parser.parse_args()
torch.set_num_threads(args.threads)
print(f"torch {torch.__version__}; {args.rows} rows, {args.threads} threads, f32; microseconds per call")
print("| round | shape | benchctl µs | PyTorch µs | ratio (PyTorch / benchctl) |")
print("|---:|---|---:|---:|---:|")
for r in range(args.rounds):
    ours = benchctl_side(args)
    for name, us in ours.items():
        if args.only and name not in args.only.split(","):
            continue
        seq, heads, width = (int(x) for x in name.removeprefix("attention-").split("x"))
        theirs = torch_side(args.rows, seq, heads, width, args.iters)
        print(f"| {r} | {name} | {us:.0f} | {theirs:.0f} | {theirs / us:.2f}× |", flush=True)
