#!/usr/bin/env python3
"""Decode + preprocess side by side: benchctl against Pillow and the model's reference processor.

Runs, on the same files and the same number of threads (one process per thread for Python):
  * `benchctl bench --part preprocess --images DIR --threads T --json`;
  * Pillow (`Image.open` + `load`, then `convert("RGB")` where the mode is not RGB) and the
    checkpoint's `transformers` image processor in its PIL backend (`CLIPImageProcessorPil`,
    `SiglipImageProcessorPil`, `BlipImageProcessorPil`), which is what benchctl's
    preprocessing reproduces bit for bit;
  * the same processor's torchvision backend (`transformers`' default in version 5), for
    reference (it resizes with torch's antialiased bicubic, not Pillow's);
  * for OpenCLIP models, `open_clip`'s eval transform.
and prints images per second per core and in total, the time per stage, and benchctl's ratio
to each.

    python3 scripts/bench/bench_preprocess.py [--images DIR] [--model clip-vit-b32] [--threads 1]

Without --images it asks benchctl to write its generated set to target/preprocess-images.
Needs the packages in scripts/requirements.txt.
"""

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# OpenAI CLIP's constants, as the checkpoints' preprocessor_config.json give them.
OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_STD = [0.26862954, 0.26130258, 0.27577711]


def processor(model: str, backend: str):
    """The model's image processor with its checkpoint's settings, or None."""
    size = 336 if model.endswith("336") else 224
    if model.startswith("clip-"):
        from transformers.models.clip import image_processing_clip as tv
        from transformers.models.clip import image_processing_pil_clip as pil

        cls = pil.CLIPImageProcessorPil if backend == "pil" else tv.CLIPImageProcessor
        return cls(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                   image_mean=OPENAI_MEAN, image_std=OPENAI_STD)
    if model.startswith("siglip"):
        from transformers.models.siglip import image_processing_pil_siglip as pil
        from transformers.models.siglip import image_processing_siglip as tv

        cls = pil.SiglipImageProcessorPil if backend == "pil" else tv.SiglipImageProcessor
        return cls(size={"height": 224, "width": 224})
    if model.startswith("blip"):
        from transformers.models.blip import image_processing_blip as tv
        from transformers.models.blip import image_processing_pil_blip as pil

        cls = pil.BlipImageProcessorPil if backend == "pil" else tv.BlipImageProcessor
        return cls(size={"height": 384, "width": 384})
    return None


def open_clip_transform(model: str):
    if not model.startswith("openclip"):
        return None
    import open_clip

    return open_clip.image_transform(224, is_train=False, mean=OPENAI_MEAN, std=OPENAI_STD)


_STATE = {}


def one_file(job):
    """One file through Pillow and the reference: seconds in decode, conversion, processor."""
    path, model, kind = job
    from PIL import Image

    if (model, kind) not in _STATE:
        import torch

        torch.set_num_threads(1)
        _STATE[(model, kind)] = open_clip_transform(model) if kind == "open_clip" else processor(model, kind)
    run = _STATE[(model, kind)]
    t0 = time.perf_counter()
    img = Image.open(path)
    img.load()
    t1 = time.perf_counter()
    if img.mode != "RGB":
        img = img.convert("RGB")
    t2 = time.perf_counter()
    if kind == "open_clip":
        run(img)
    else:
        run(images=img, return_tensors="np")
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def run_python(files, model, kind, threads, iters):
    """Every file once per process to warm it, then every file `iters` times, one task each
    (so no process idles at the end while another works through a large file)."""
    with mp.get_context("spawn").Pool(threads) as pool:
        pool.map(one_file, [(f, model, kind) for f in files for _ in range(threads)], chunksize=1)
        timed = [(f, model, kind) for _ in range(iters) for f in files]
        t = time.perf_counter()
        results = list(pool.imap_unordered(one_file, timed, chunksize=1))
        wall = time.perf_counter() - t
    images = len(timed)
    stages = [sum(r[i] for r in results) / images * 1e3 for i in range(3)]
    return {"per_second": images / wall, "per_core": images / wall / threads, "decode_ms": stages[0],
            "convert_ms": stages[1], "process_ms": stages[2]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path)
    ap.add_argument("--model", default="clip-vit-b32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--benchctl", type=Path, default=ROOT / "target/release/benchctl")
    args = ap.parse_args()

    images = args.images
    bench = [str(args.benchctl), "bench", "--part", "preprocess", "--model", args.model, "--threads", str(args.threads)]
    if images is None:
        images = ROOT / "target/preprocess-images"
        if not images.is_dir():
            subprocess.run(bench + ["--keep-images", str(images), "--iters", "1"], check=True, stdout=subprocess.DEVNULL)
    files = sorted(str(p) for p in images.rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    out = subprocess.run(bench + ["--iters", str(args.iters), "--json", "--images", str(images)], check=True,
                         capture_output=True, text=True).stdout
    ours = json.loads(out)
    part = ours["parts"][0]
    import PIL
    import transformers

    print(f"{len(files)} files under {images}, {args.threads} thread(s), model {args.model}, "
          f"CPU tier {ours['cpu_tier']}; Pillow {PIL.__version__}, transformers {transformers.__version__}")
    rows = [("benchctl", part["per_second"], part["per_core_per_second"],
             f"decode {part['decode_ms']:.2f} + convert {part['convert_ms']:.2f} + resize {part['resize_ms']:.2f}"
             f" + crop/normalise {part['normalise_ms']:.2f} ms")]
    kinds = [("pil", "Pillow + transformers (PIL backend)"),
             ("torchvision", "Pillow + transformers (torchvision backend)")]
    if args.model.startswith("openclip"):
        kinds = [("open_clip", "Pillow + open_clip transform")] + kinds
    reference = None
    for kind, label in kinds:
        if kind != "open_clip" and processor(args.model, kind) is None:
            continue
        r = run_python(files, args.model, kind, args.threads, args.iters)
        reference = reference or r
        rows.append((label, r["per_second"], r["per_core"],
                     f"decode {r['decode_ms']:.2f} + convert {r['convert_ms']:.2f} + processor {r['process_ms']:.2f} ms"))
    print(f"{'':46} {'img/s':>8} {'img/s/core':>10} {'ratio':>6}  per image")
    for label, total, core, stages in rows:
        print(f"{label:46} {total:8.1f} {core:10.1f} {part['per_core_per_second'] / core:6.2f}  {stages}")
    if reference is None:
        sys.exit(f"no reference processor for {args.model}")


if __name__ == "__main__":
    main()
