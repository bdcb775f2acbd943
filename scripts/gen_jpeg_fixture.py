"""Real-sized JPEGs with Pillow's decode of each and `transformers`' CLIP resize of that
decode, for benchctl's JPEG decoding and its bound (crates/benchctl-models/tests/jpeg.rs).

Pillow writes one photo-like image (smooth shading, textured and hard-edged regions, a little
sensor noise) in each layout a dataset's files come in: baseline 4:2:0 (Pillow's default),
4:4:4 at high quality, 4:2:2, progressive, with restart markers, greyscale, CMYK (Adobe,
inverted, as Pillow and Photoshop write it), and one whose EXIF orientation says "rotate 90°".
For each file the fixture holds:

  * `<name>.pillow.png`: `Image.open(f).convert("RGB")`, what the reference pipelines decode
    (Pillow's libjpeg-turbo, islow IDCT, fancy upsampling);
  * `<name>.clip224.png`: `CLIPImageProcessorPil` with openai/clip-vit-base-patch32's settings
    but no rescale or normalisation, i.e. the 224 x 224 uint8 crop its bicubic resize makes of
    that decode;
  * `manifest.json`: Pillow's and libjpeg-turbo's versions, each file's mode and size as
    `Image.open` gives them, and the size `transformers.image_utils.load_image` gives (which
    applies the EXIF orientation; `Image.open` does not).

    pip install pillow==13.0.0 numpy transformers
    python scripts/gen_jpeg_fixture.py
"""

import io
import json
import pathlib

import numpy as np
import PIL
from PIL import Image, features
from transformers.image_utils import load_image
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates" / "benchctl-models" / "tests" / "fixtures" / "preprocess-jpeg"

OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_STD = [0.26862954, 0.26130258, 0.27577711]


def photo_like(rng, w, h):
    """Shading, a few soft blobs (some striped), hard edges, mild noise."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    u, v = x / w, y / h
    img = np.stack([90 + 120 * (1 - v), 120 + 80 * (1 - v), 200 - 120 * v], axis=-1)
    for _ in range(6):
        cx, cy, r, striped = rng.random(), rng.random(), 0.08 + 0.25 * rng.random(), rng.random()
        colour = rng.random(3) * 255
        d = np.sqrt((u - cx) ** 2 + (v - cy) ** 2) / r
        weight = np.clip(1 - d * d, 0, 1)
        if striped > 0.5:
            weight = weight * (0.5 + 0.5 * np.sin((x + y) * (0.05 + 0.3 * striped)))
        img = img * (1 - weight[..., None]) + colour * weight[..., None]
    # Hard-edged rectangles: where JPEG's ringing and chroma upsampling show.
    for _ in range(4):
        x0, y0 = rng.integers(0, w - 40), rng.integers(0, h - 40)
        img[y0:y0 + rng.integers(20, h // 3), x0:x0 + rng.integers(20, w // 3)] = rng.random(3) * 255
    img += rng.normal(0, 2.0, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def files(rng):
    """(name, encoded bytes) in each layout."""
    photo = photo_like(rng, 640, 480)
    tall = photo_like(rng, 480, 720)

    def save(img, **kw):
        buf = io.BytesIO()
        img.save(buf, "JPEG", **kw)
        return buf.getvalue()

    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display.
    yield "baseline-420", save(photo, quality=90)
    yield "baseline-444", save(tall, quality=95, subsampling=0)
    yield "baseline-422", save(photo, quality=80, subsampling=1)
    yield "progressive-420", save(tall, quality=85, progressive=True)
    yield "restarts-420", save(photo, quality=90, restart_marker_rows=1)
    yield "grey", save(tall.convert("L"), quality=90)
    yield "cmyk", save(photo.convert("CMYK"), quality=90)
    yield "exif-rotated", save(photo, quality=90, exif=exif)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    clip = CLIPImageProcessorPil(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224},
                                 do_rescale=False, do_normalize=False, image_mean=OPENAI_MEAN, image_std=OPENAI_STD)
    manifest = {"pillow": PIL.__version__, "libjpeg_turbo": features.version("libjpeg_turbo"), "files": {}}
    decoded = {}
    for name, data in files(np.random.default_rng(31)):
        path = OUT / f"{name}.jpg"
        path.write_bytes(data)
        opened = Image.open(path)
        rgb = opened.convert("RGB")
        loaded = load_image(str(path))
        entry = {"mode": opened.mode, "size": list(opened.size), "load_image_size": list(loaded.size),
                 "progressive": bool(opened.info.get("progressive", 0))}
        # A file whose decode equals an earlier one's (the same scan with restart markers or
        # an EXIF block) points at that one's PNGs instead of repeating them.
        same = next((other for other, pixels in decoded.items() if np.array_equal(pixels, np.asarray(rgb))), None)
        if same is not None:
            entry["decode_as"] = same
        else:
            decoded[name] = np.asarray(rgb)
            rgb.save(OUT / f"{name}.pillow.png", optimize=True)
            crop = clip(images=rgb, return_tensors="np")["pixel_values"][0]  # (3, 224, 224), 0..255 floats
            assert np.all(crop == np.round(crop)), name
            Image.fromarray(crop.transpose(1, 2, 0).astype(np.uint8), "RGB").save(
                OUT / f"{name}.clip224.png", optimize=True)
        manifest["files"][name] = entry
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
