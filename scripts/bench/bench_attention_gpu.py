#!/usr/bin/env python3
"""benchctl's fused self-attention beside PyTorch's scaled_dot_product_attention on one GPU,
kernel against kernel: for each (sequence, heads, head width) of `benchctl bench --part
attention` (the towers' 50 to 729 tokens with heads of 64, and heads of 128 up to 1,024 tokens),
at `--rows` rows, in bf16 and f16.

- benchctl: `benchctl bench --part attention --device cuda --json` (a `--features cuda,dev-bench`
  build), once per `--kernels` choice (BENCHCTL_CUDA_KERNELS; `fused`, the tensor-core kernel,
  by default); microseconds per call, the best of `--iters` timings of 20 calls each ended by a
  synchronisation. Its input is the `(rows, seq, 3·width)` projection, its output
  the heads merged, as the towers use it.
- PyTorch: `F.scaled_dot_product_attention` on q, k, v taken as `(rows, heads, seq, width)` views
  of one `(rows, seq, 3, heads, width)` projection (as transformers' attention hands them over),
  timed the same way, with its default choice of kernel and with each of flash attention and
  cuDNN's fused attention forced (`torch.nn.attention.sdpa_kernel`); "best" is the fastest. The
  transpose back to merged heads, which benchctl's kernel includes, is left out of PyTorch's time.

Usage (on the GPU machine):
    python3 scripts/bench/bench_attention_gpu.py --benchctl .gpu/benchctl [--rows 128] [--dtypes bf16,f16]
"""
import argparse
import json
import os
import subprocess
import sys
import time

CALLS = 20


def benchctl_side(args, dtype, kernels):
    env = dict(os.environ, BENCHCTL_CUDA_KERNELS=kernels)
    run = subprocess.run([args.benchctl, "bench", "--part", "attention", "--device", "cuda", "--json", "--dtype", dtype,
                          "--batch", str(args.rows), "--iters", str(args.iters)], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.exit(f"benchctl ({kernels}) failed: {run.stderr.strip()}")
    return {p["part"]: p["us_per_call"] for p in json.loads(run.stdout)["parts"]}


def torch_side(rows, seq, heads, width, dtype, iters):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qkv = torch.randn(rows, seq, 3, heads, width, device="cuda", dtype=dtype)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))

    def timed(backend):
        def call():
            return F.scaled_dot_product_attention(q, k, v)

        try:
            if backend is None:
                call()
            else:
                with sdpa_kernel(backend):
                    call()
        except RuntimeError:
            return None
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(iters):
            start = time.perf_counter()
            if backend is None:
                for _ in range(CALLS):
                    call()
            else:
                with sdpa_kernel(backend):
                    for _ in range(CALLS):
                        call()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / CALLS)
        return best * 1e6

    with torch.inference_mode():
        return {"default": timed(None), "flash": timed(SDPBackend.FLASH_ATTENTION),
                "cudnn": timed(SDPBackend.CUDNN_ATTENTION)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchctl", default=".gpu/benchctl")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--dtypes", default="bf16,f16")
    parser.add_argument("--kernels", default="fused")
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()

    import torch

    kernels = args.kernels.split(",")
    print(f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}; {args.rows} rows; microseconds per call "
          f"(best of {args.iters} × {CALLS} calls)")
    print("| shape (seq×heads×width) | dtype | " + " | ".join(f"benchctl {k}" for k in kernels)
          + " | PyTorch default | flash | cuDNN | " + " | ".join(f"{k} ÷ best PyTorch" for k in kernels)
          + " | TFLOP/s (fastest benchctl) |")
    print("|---|---|" + "---:|" * (2 * len(kernels) + 4))
    for dtype in args.dtypes.split(","):
        ours = {k: benchctl_side(args, dtype, k) for k in kernels}
        for name in ours[kernels[0]]:
            seq, heads, width = map(int, name.removeprefix("attention-").split("x"))
            theirs = torch_side(args.rows, seq, heads, width, {"bf16": torch.bfloat16, "f16": torch.float16}[dtype],
                                args.iters)
            best = min(v for v in theirs.values() if v is not None)
            show = lambda v: f"{v:,.1f}" if v is not None else "–"
            mine = [ours[k].get(name) for k in kernels]
            fastest = min(v for v in mine if v is not None)
            tflops = 4 * args.rows * heads * seq * seq * width / (fastest * 1e-6) / 1e12
            print(f"| {seq}×{heads}×{width} | {dtype} | " + " | ".join(map(show, mine))
                  + f" | {show(theirs['default'])} | {show(theirs['flash'])} | {show(theirs['cudnn'])} | "
                  + " | ".join(f"{v / best:.2f}×" if v is not None else "–" for v in mine) + f" | {tflops:.0f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
