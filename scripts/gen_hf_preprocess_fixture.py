"""Expected pixel tensors of `transformers`' PIL image processors, for the preprocessing of
checkpoints in Hugging Face layout (crates/benchctl-models/tests/preprocess.rs).

Generated images of awkward sizes (odd crop margins, upscales, squares) and modes (RGB,
greyscale, RGBA, palette) go through `CLIPImageProcessorPil`, `SiglipImageProcessorPil` and
`BlipImageProcessorPil` configured by `preprocessor_config.json` files written here: the
real CLIP default (shortest edge and crop 224) and small custom ones, so the fixture stays
small. Needs only numpy, Pillow and transformers (no torch).

    pip install transformers pillow numpy safetensors
    python scripts/gen_hf_preprocess_fixture.py
"""

import json
import pathlib

import numpy as np
from PIL import Image
from safetensors.numpy import save_file
from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates" / "benchctl-models" / "tests" / "fixtures" / "preprocess-hf"

CONFIGS = {
    # transformers' CLIP defaults, as openai/clip-vit-base-patch32 ships them.
    "clip224": {"image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": 224},
                "resample": 3, "do_center_crop": True, "crop_size": {"height": 224, "width": 224}, "do_rescale": True,
                "rescale_factor": 0.00392156862745098, "do_normalize": True,
                "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                "do_convert_rgb": True},
    # A shortest edge larger than the crop, an integer size, another rescale factor.
    "clip40c33": {"image_processor_type": "CLIPImageProcessor", "size": 40, "crop_size": 33,
                  "rescale_factor": 0.004, "image_mean": [0.5, 0.4, 0.3], "image_std": [0.2, 0.25, 0.3]},
    "siglip32": {"image_processor_type": "SiglipImageProcessor", "size": {"height": 32, "width": 32}, "resample": 3,
                 "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]},
    "blip36": {"image_processor_type": "BlipImageProcessor", "size": {"height": 36, "width": 36}, "resample": 3,
               "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]},
}

PROCESSORS = {"CLIPImageProcessor": CLIPImageProcessorPil, "SiglipImageProcessor": SiglipImageProcessorPil,
              "BlipImageProcessor": BlipImageProcessorPil}


def smooth_noise(rng, w, h):
    base = Image.fromarray(rng.integers(0, 256, (max(h // 6, 2), max(w // 6, 2), 3), dtype=np.uint8))
    smooth = np.asarray(base.resize((w, h), Image.BILINEAR)).astype(np.int16)
    return Image.fromarray(np.clip(smooth + rng.integers(-30, 31, (h, w, 3)), 0, 255).astype(np.uint8), "RGB")


def images():
    rng = np.random.default_rng(12)
    # (w, h, mode): margins odd and even after the shortest-edge resize (320x227: 91 px, where
    # floor and round-half-even differ), portrait and landscape,
    # upscales, and the PNG modes PIL converts to RGB.
    specs = [(301, 224, "RGB"), (225, 300, "RGB"), (320, 227, "RGB"), (227, 451, "RGB"), (61, 47, "RGB"),
             (23, 17, "RGB"), (96, 96, "RGB"), (130, 71, "L"), (71, 130, "RGBA"), (90, 57, "P")]
    for w, h, mode in specs:
        img = smooth_noise(rng, w, h)
        if mode == "L":
            img = img.convert("L")
        elif mode == "RGBA":
            alpha = Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
            img = img.convert("RGBA")
            img.putalpha(alpha)
        elif mode == "P":
            img = img.convert("P", palette=Image.ADAPTIVE, colors=64)
        yield f"{mode.lower()}_{w}x{h}", img


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    written = [(name, img) for name, img in images()]
    for name, img in written:
        img.save(OUT / f"{name}.png")
    tensors = {}
    for config_name, config in CONFIGS.items():
        (OUT / f"{config_name}.json").write_text(json.dumps(config, indent=1) + "\n")
        kwargs = {k: v for k, v in config.items() if k != "image_processor_type"}
        processor = PROCESSORS[config["image_processor_type"]](**kwargs)
        # The 224-px default on the RGB photos only (their tensors are the largest).
        chosen = [(n, i) for n, i in written if config_name != "clip224" or n in ("rgb_301x224", "rgb_225x300", "rgb_320x227")]
        for name, _ in chosen:
            reopened = Image.open(OUT / f"{name}.png")
            pixels = processor(reopened, return_tensors="np")["pixel_values"][0]
            tensors[f"{config_name}/{name}"] = np.ascontiguousarray(pixels.astype(np.float32))
    save_file(tensors, str(OUT / "expected.safetensors"))
    print(f"{len(tensors)} tensors")


if __name__ == "__main__":
    main()
