"""Expected scores for `crates/benchctl/tests/eval_winoground.rs::
suites_longer_than_a_scoring_window_match_transformers`: a 5,000-item Winoground suite built
from the demo suite's images and captions (longer than benchctl's scoring window of 4,096
items), scored by `transformers` itself: CLIPModel on the `clip-tiny-a` fixture checkpoint,
its PIL image processor (CLIP's defaults at the model's image size, as benchctl applies them
to a checkpoint without `preprocessor_config.json`) and its tokenizer. Item n shows demo item
n mod 5's two images; its first caption is demo item n mod 8's first caption (shared by items
across every window), its second that item's second caption followed by ` number n` (its own).
Writes `window-scores.npy`: float32 (5000, 2, 2), rows = images, columns = captions, the
logits `logit_scale.exp() · cos`.

    pip install torch transformers pillow numpy
    python scripts/gen_window_reference.py
"""

import json
import pathlib

import numpy as np
import torch
from PIL import Image
from transformers import CLIPModel, CLIPTokenizerFast
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "crates" / "benchctl-models" / "tests" / "fixtures" / "clip-tiny-a"
DEMO = ROOT / "datasets" / "demo" / "winoground"
OUT = ROOT / "crates" / "benchctl" / "tests" / "fixtures" / "window-scores.npy"
ITEMS = 5000


def main():
    base = [json.loads(line) for line in open(DEMO / "examples.jsonl")]
    model = CLIPModel.from_pretrained(str(MODEL)).eval()
    size = model.config.vision_config.image_size
    processor = CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    tokenizer = CLIPTokenizerFast(tokenizer_file=str(MODEL / "tokenizer.json"))

    def items(n):
        a, b = base[n % 5], base[n % 8]
        return [a["image_0"], a["image_1"]], [b["caption_0"], f"{b['caption_1']} number {n}"]

    image_names = sorted({name for n in range(ITEMS) for name in items(n)[0]})
    texts = sorted({t for n in range(ITEMS) for t in items(n)[1]})
    with torch.no_grad():
        images = [Image.open(DEMO / "images" / f"{name}.png").convert("RGB") for name in image_names]
        pixels = processor(images=images, return_tensors="pt")["pixel_values"]
        image_embeds = model.visual_projection(model.vision_model(pixel_values=pixels).pooler_output)
        text_embeds = []
        for start in range(0, len(texts), 256):
            enc = tokenizer(texts[start:start + 256], padding=True, truncation=True, max_length=77, return_tensors="pt")
            pooled = model.text_model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).pooler_output
            text_embeds.append(model.text_projection(pooled))
        text_embeds = torch.cat(text_embeds)
        image_embeds = image_embeds / image_embeds.norm(dim=-1, keepdim=True)
        text_embeds = text_embeds / text_embeds.norm(dim=-1, keepdim=True)
        scale = model.logit_scale.exp()
    image_row = {name: i for i, name in enumerate(image_names)}
    text_row = {t: i for i, t in enumerate(texts)}
    scores = np.zeros((ITEMS, 2, 2), dtype=np.float32)
    for n in range(ITEMS):
        names, captions = items(n)
        for k, name in enumerate(names):
            for l, caption in enumerate(captions):
                scores[n, k, l] = (scale * image_embeds[image_row[name]] @ text_embeds[text_row[caption]]).item()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.save(OUT, scores)
    print(f"{OUT}: {scores.shape}, item 0 {scores[0].tolist()}")


if __name__ == "__main__":
    main()
