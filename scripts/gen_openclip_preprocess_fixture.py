"""Expected pixel tensors of open_clip's eval transform (torchvision `Resize(BICUBIC)` →
`CenterCrop` → `convert("RGB")` → `ToTensor` → `Normalize`, on a PIL image as opened), for
the preprocessing of OpenAI / OpenCLIP checkpoints (crates/benchctl-models/tests/preprocess.rs).

Generated images of awkward sizes (odd and even crop margins, upscales) and of every PIL mode
whose resize differs: RGB, L, LA and RGBA with partial transparency (Pillow resizes them
premultiplied), P with and without transparency and 1-bit (nearest neighbour), I;16 (resized
in 16 bits, clipped to 255 by the conversion). Needs torch, torchvision, open_clip_torch,
Pillow, numpy and safetensors.

    pip install open_clip_torch torchvision pillow numpy safetensors
    python scripts/gen_openclip_preprocess_fixture.py
"""

import pathlib

import numpy as np
from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
from open_clip.transform import image_transform
from PIL import Image
from safetensors.numpy import save_file

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates" / "benchctl-models" / "tests" / "fixtures" / "preprocess-openclip"


def smooth_noise(rng, w, h):
    base = Image.fromarray(rng.integers(0, 256, (max(h // 6, 2), max(w // 6, 2), 3), dtype=np.uint8))
    smooth = np.asarray(base.resize((w, h), Image.BILINEAR)).astype(np.int16)
    return Image.fromarray(np.clip(smooth + rng.integers(-30, 31, (h, w, 3)), 0, 255).astype(np.uint8), "RGB")


def images():
    rng = np.random.default_rng(21)
    # (w, h, mode, the input size of the transform).
    specs = [(301, 224, "RGB", 40), (320, 227, "RGB", 224), (227, 451, "RGB", 33),
             (61, 47, "RGB", 32), (23, 17, "RGB", 32), (130, 71, "L", 32), (71, 130, "LA", 32),
             (97, 61, "RGBA", 32), (45, 80, "RGBA", 40), (90, 57, "P", 32), (57, 90, "PA", 32),
             (75, 49, "1", 32), (83, 54, "I;16", 32), (40, 40, "I;16", 40)]
    for w, h, mode, size in specs:
        img = smooth_noise(rng, w, h)
        alpha = Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
        if mode == "L":
            img = img.convert("L")
        elif mode == "LA":
            img = img.convert("LA")
            img.putalpha(alpha)
        elif mode == "RGBA":
            img = img.convert("RGBA")
            img.putalpha(alpha)
        elif mode == "P":
            img = img.convert("P", palette=Image.ADAPTIVE, colors=64)
        elif mode == "PA":
            # A palette with transparency (tRNS): entries 0-15 partly transparent.
            img = img.convert("P", palette=Image.ADAPTIVE, colors=64)
            img.info["transparency"] = bytes([i * 16 for i in range(16)] + [255] * 48)
        elif mode == "1":
            img = img.convert("L").point(lambda v: 255 if v > 128 else 0).convert("1")
        elif mode == "I;16":
            # Values around 255 (where the conversion clips) and a few far above it.
            ramp = np.asarray(img.convert("L"), dtype=np.uint16) * 2 + (np.arange(w) % 7) * 10
            ramp[::9, ::11] = 60_000
            img = Image.fromarray(ramp.astype(np.uint16))
        name = f"{mode.replace(';', '').lower()}_{w}x{h}"
        yield name, img, size


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, img, size in images():
        path = OUT / f"{name}.png"
        if "transparency" in img.info:
            img.save(path, transparency=img.info["transparency"])
        else:
            img.save(path)
        reopened = Image.open(path)
        transform = image_transform(size, is_train=False, mean=OPENAI_DATASET_MEAN, std=OPENAI_DATASET_STD)
        pixels = transform(reopened).numpy()
        tensors[f"{size}/{name}"] = np.ascontiguousarray(pixels.astype(np.float32))
        print(name, reopened.mode, size)
    save_file(tensors, str(OUT / "expected.safetensors"))
    print(f"{len(tensors)} tensors")


if __name__ == "__main__":
    main()
