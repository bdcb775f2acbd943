#!/usr/bin/env python3
"""Reference outputs of a linear layer from PyTorch, for the packed dense layers' test
(`benchctl-models`, `models::transformer::tests`): `torch.nn.functional.linear(x, w, b)`
computed in float64 on float32 inputs, for shapes with edge tiles in every direction of both
CPU tiles (6 × 16 on AVX2, 6 × 64 on AVX-512) and more than one depth block (512), with and
without a bias; and what the towers do right after a dense layer: the MLP's activation
(`quick_gelu` as OpenAI's CLIP defines it, `torch.nn.functional.gelu` exact and tanh) and a
residual sum.

Writes crates/benchctl-models/tests/fixtures/dense/case{i}-{x,w,b,y}.npy: x (batch, seq, in)
f32, w (out, in) f32, b (out) f32 (only where the case has a bias), y (batch, seq, out) f64;
and case{i}-{quick_gelu,gelu,gelu_tanh}.npy (the activation of y, f64), case{i}-r.npy (a
residual, f32) and case{i}-y_plus_r.npy (f64).

Usage: python scripts/gen_dense_reference.py
"""
import os

import numpy as np
import torch

# (batch, seq, in, out, bias)
CASES = [(2, 7, 300, 37, False), (3, 5, 64, 150, True), (1, 1, 1, 1, True), (2, 9, 700, 70, True)]
OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "benchctl-models", "tests", "fixtures", "dense")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(2026)
    for i, (batch, seq, k, n, with_bias) in enumerate(CASES):
        x = rng.uniform(-0.5, 0.5, (batch, seq, k)).astype(np.float32)
        w = rng.uniform(-0.5, 0.5, (n, k)).astype(np.float32)
        b = rng.uniform(-0.5, 0.5, (n,)).astype(np.float32) if with_bias else None
        as64 = lambda a: torch.from_numpy(a).to(torch.float64)
        y = torch.nn.functional.linear(as64(x), as64(w), None if b is None else as64(b)).numpy()
        np.save(os.path.join(OUT, f"case{i}-x.npy"), x)
        np.save(os.path.join(OUT, f"case{i}-w.npy"), w)
        if b is not None:
            np.save(os.path.join(OUT, f"case{i}-b.npy"), b)
        np.save(os.path.join(OUT, f"case{i}-y.npy"), y)
    # Drawn after every case's layer, so that the layers' arrays stay those of earlier versions.
    for i, (batch, seq, k, n, with_bias) in enumerate(CASES):
        y = torch.from_numpy(np.load(os.path.join(OUT, f"case{i}-y.npy")))
        activations = {
            "quick_gelu": y * torch.sigmoid(1.702 * y),
            "gelu": torch.nn.functional.gelu(y),
            "gelu_tanh": torch.nn.functional.gelu(y, approximate="tanh"),
        }
        for name, value in activations.items():
            np.save(os.path.join(OUT, f"case{i}-{name}.npy"), value.numpy())
        r = rng.uniform(-0.5, 0.5, (batch, seq, n)).astype(np.float32)
        np.save(os.path.join(OUT, f"case{i}-r.npy"), r)
        np.save(os.path.join(OUT, f"case{i}-y_plus_r.npy"), (y + torch.from_numpy(r).to(torch.float64)).numpy())


if __name__ == "__main__":
    main()
