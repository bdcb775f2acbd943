"""The Qwen3-VL VQAScore fixture, from transformers and t2v_metrics' own scoring (never from benchctl).

Makes a tiny random-weight Qwen3-VL (`Qwen3VLForConditionalGeneration`: 3 vision blocks with
DeepStack features after the first two, a 3-layer decoder with interleaved multimodal RoPE),
a byte-level BPE vocabulary trained here with Qwen's special tokens, and the Instruct models'
chat format, saved as the hub's checkpoints are laid out; then scores image-caption pairs as
`t2v_metrics`' `Qwen3VLModel.forward` does (its module run unchanged, the checkpoint and the
processor pointed at the fixture): `qwen_vl_utils.process_vision_info` resizes each image
(`smart_resize` to multiples of 32, Pillow's bicubic), the processor normalises and patches it
without resizing again, and the probability of "Yes" after one generated token is the score.

Written to crates/benchctl-models/tests/fixtures/qwen3vl-tiny/: the checkpoint, `images/`
(generated, of several sizes and aspect ratios), and `expected.json` with each image's
resized size, grid and first pixel values, each pair's prompt ids and log P("Yes") (t2v_metrics'
probability, and transformers' log-softmax of the same logits), and `qwen_vl_utils.smart_resize`
on sizes no image has (rounding halves, scaling down).

Run: python3 scripts/gen_qwen3vl_fixture.py  (torch, transformers 5, tokenizers, qwen-vl-utils,
and a checkout of linzhiqiu/t2v_metrics: --t2v-metrics PATH).
"""
import argparse, importlib.util, json, math, shutil, sys, tempfile, types
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (PreTrainedTokenizerFast, Qwen2VLImageProcessor, Qwen3VLConfig,
                          Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLVideoProcessor)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates/benchctl-models/tests/fixtures/qwen3vl-tiny"
QUESTION = 'Does this figure show "{}"? Please answer Yes or No.'
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]
# The Instruct checkpoints' format for one user turn of images and text, and the generation
# prompt (no default system turn, no thinking block).
CHAT = ("{%- for message in messages -%}{{ '<|im_start|>' + message['role'] + '\n' }}"
        "{%- if message['content'] is string -%}{{ message['content'] }}"
        "{%- else -%}{%- for item in message['content'] -%}"
        "{%- if item['type'] == 'image' -%}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
        "{%- elif item['type'] == 'text' -%}{{ item['text'] }}{%- endif -%}"
        "{%- endfor -%}{%- endif -%}{{ '<|im_end|>\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}")
CAPTIONS = ["a red square above a blue circle", "a blue circle above a red square", "two green triangles",
            "an empty white field", "a cat on a mat"]
# (width, height): upscaled to the minimum of 4 merged tokens, kept, and of extreme aspect.
SIZES = [(70, 50), (100, 64), (33, 90), (130, 97)]


def tokenizer(work: Path):
    corpus = [QUESTION.format(c) for c in CAPTIONS] + ["user assistant Yes No yes no"] * 5
    (work / "corpus.txt").write_text("\n".join(corpus * 20))
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train([str(work / "corpus.txt")], trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                                                        "vision_start_token": "<|vision_start|>",
                                                        "vision_end_token": "<|vision_end|>"})
    assert len(tok.encode("Yes", add_special_tokens=False)) == 1, "Yes is one token"
    return tok


def model(tok):
    torch.manual_seed(0)
    ids = tok.convert_tokens_to_ids
    config = Qwen3VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                         rms_norm_eps=1e-6, tie_word_embeddings=True,
                         rope_parameters=dict(rope_type="default", rope_theta=5_000_000.0, mrope_section=[4, 2, 2],
                                              mrope_interleaved=True)),
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                           temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64,
                           num_position_embeddings=16, deepstack_visual_indexes=[0, 1]),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=True)
    m = Qwen3VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            # Norm weights around 1 (their start), everything else random enough to matter.
            p.normal_(1.0, 0.2) if ("norm" in name and p.dim() == 1 and "bias" not in name) else p.normal_(0.0, 0.15)
    return m


def images(folder: Path):
    rng = np.random.default_rng(20261126)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, (w, h) in enumerate(SIZES):
        name = f"image{i}.png"
        Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).save(folder / name)
        names.append(name)
    return names


def t2v_qwen3vl(repo: Path):
    """`t2v_metrics/models/vqascore_models/qwen3vl_model.py` as it is, imported without the
    package's own `__init__` (which loads every model family)."""
    base = repo / "t2v_metrics/models/vqascore_models"
    for pkg, path in [("t2v_metrics", repo / "t2v_metrics"), ("t2v_metrics.models", repo / "t2v_metrics/models"),
                      ("t2v_metrics.models.vqascore_models", base)]:
        module = types.ModuleType(pkg)
        module.__path__ = [str(path)]
        sys.modules[pkg] = module
    for name in ["vqa_model", "qwen3vl_model"]:
        spec = importlib.util.spec_from_file_location(f"t2v_metrics.models.vqascore_models.{name}", base / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["t2v_metrics.models.vqascore_models.qwen3vl_model"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--t2v-metrics", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tok = tokenizer(Path(tmp))
    m = model(tok)
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                                              image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5]),
        tokenizer=tok, video_processor=Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2),
        chat_template=CHAT)
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    m.save_pretrained(OUT)
    processor.save_pretrained(OUT)
    tok.save_pretrained(OUT)
    names = images(OUT / "images")

    # t2v_metrics' model, unchanged, on the fixture's checkpoint and processor.
    qwen = t2v_qwen3vl(args.t2v_metrics)
    qwen.QWEN3_VL_MODELS["qwen3-vl-2b"]["tokenizer"]["path"] = str(OUT)
    qwen.QWEN3_VL_MODELS["qwen3-vl-2b"]["model"]["torch_dtype"] = torch.float32
    qwen.QWEN3_VL_MODELS["qwen3-vl-2b"]["model"]["attn_implementation"] = "eager"
    scorer = qwen.Qwen3VLModel("qwen3-vl-2b", device="cpu", checkpoint=str(OUT))
    paths = [str(OUT / "images" / n) for n in names]
    pairs = [(i, c) for i in range(len(names)) for c in range(len(CAPTIONS))]
    t2v = scorer.forward([paths[i] for i, _ in pairs], [CAPTIONS[c] for _, c in pairs]).tolist()

    # The same inputs by hand, for what the fixture also records.
    from qwen_vl_utils import process_vision_info
    yes = tok.convert_tokens_to_ids("Yes")
    expected = {"captions": CAPTIONS, "images": [], "pairs": []}
    for i, path in enumerate(paths):
        messages = [{"role": "user", "content": [{"type": "image", "image": Image.open(path).convert("RGB")},
                                                 {"type": "text", "text": QUESTION.format(CAPTIONS[0])}]}]
        image_inputs, _ = process_vision_info(messages, image_patch_size=16)
        inputs = processor(text=[processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)],
                           images=image_inputs, return_tensors="pt", do_resize=False)
        resized = image_inputs[0].size
        expected["images"].append({
            "file": names[i], "resized": [resized[0], resized[1]],
            "grid_thw": inputs["image_grid_thw"][0].tolist(),
            # The first patch row (3 × 2 × 16 × 16 values) and the sum of all.
            "pixel_values_first_row": inputs["pixel_values"][0].tolist(),
            "pixel_values_sum": float(inputs["pixel_values"].double().sum()),
        })
    for (i, c), p in zip(pairs, t2v):
        messages = [{"role": "user", "content": [{"type": "image", "image": paths[i]},
                                                 {"type": "text", "text": QUESTION.format(CAPTIONS[c])}]}]
        inputs = scorer._build_inputs(messages)
        with torch.no_grad():
            logits = m(**inputs).logits[0, -1].double()
        log_p = float(torch.log_softmax(logits, -1)[yes])
        assert abs(math.exp(log_p) - p) < 1e-6, (log_p, p)
        expected["pairs"].append({"image": i, "caption": c, "input_ids": inputs["input_ids"][0].tolist(),
                                  "t2v_metrics_p_yes": p, "log_p_yes": log_p})
    # qwen_vl_utils' size rule itself on sizes no fixture image has: halves rounding to even,
    # scaled up to min_pixels and down to max_pixels, at factor 32.
    from qwen_vl_utils import smart_resize
    cases = [(48, 80, 4096, 16384 * 1024), (80, 48, 4096, 16384 * 1024), (600, 4, 4096, 16384 * 1024),
             (480, 640, 4096, 65536), (4000, 3000, 4096, 2_000_000), (30, 5000, 4096, 16384 * 1024),
             (33, 33, 4096, 16384 * 1024)]
    expected["smart_resize"] = [{"height": h, "width": w, "min_pixels": lo, "max_pixels": hi,
                                 "resized": list(smart_resize(h, w, factor=32, min_pixels=lo, max_pixels=hi))}
                                for h, w, lo, hi in cases]
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {OUT}: {len(pairs)} pairs, P(yes) {min(t2v):.4f} … {max(t2v):.4f}")


if __name__ == "__main__":
    main()
