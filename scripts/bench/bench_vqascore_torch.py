"""benchctl's local VQAScore beside transformers on a random-weight model of published widths.

`--family gemma3` (the default): a Gemma 3 of google/gemma-3-4b-it's widths (text: 2560 wide,
8 query and 4 key-value heads of 256, MLP 10240, a 262,208-token vocabulary; vision: SigLIP
so400m, 1152 wide, MLP 4304, 16 heads, 896 px in 14 px patches, 256 image tokens), images of
896 px. `--family qwen3vl`: a Qwen3-VL of Qwen/Qwen3-VL-2B-Instruct's widths (text: 2048
wide, 16 query and 8 key-value heads of 128, MLP 6144, a 151,936-token vocabulary, tied
output layer; vision: 1024 wide, MLP 4096, 16 heads, 16 px patches merged 2 × 2 into 2048,
DeepStack after blocks 5, 11 and 17), images of 640 × 480 (300 image tokens each). `--family
qwen3vlmoe`: a Qwen3-VL mixture of experts of Qwen/Qwen3-VL-30B-A3B-Instruct's widths (text: 2048
wide, 32 query and 4 key-value heads of 128, 128 experts of MLP 768, 8 a token, a 151,936-token
vocabulary and its own output layer; vision: 1152 wide, MLP 4304, 16 heads, 16 px patches merged
2 × 2 into 2048, DeepStack after blocks 8, 16 and 24), the same images. `--family
qwen25vl`: a Qwen2.5-VL of Qwen/Qwen2.5-VL-3B-Instruct's widths (text: 2048 wide, 16 query and 2
key-value heads of 128, MLP 11008, tied 151,936-token output layer; vision: 1280 wide, MLP 3420,
16 heads, 14 px patches merged 2 × 2, windows of 112 px, full attention in blocks 7, 15, 23, 31
that the depth reaches), images of 644 × 476 (391 image tokens each; sides in multiples of 28, so
that neither side resizes: transformers 5's processor resizes with torchvision, not with
`qwen_vl_utils`' Pillow as t2v_metrics does). `--family internvl`: an InternVL3 of
OpenGVLab/InternVL3-2B-hf's widths (vision: InternViT-300M, 1024 wide, MLP 4096, 16 heads, 448 px
tiles of 14 px patches, pixel shuffle into 256 tokens a tile; text: Qwen2.5-1.5B, 1536 wide, 12
query and 2 key-value heads of 128, MLP 8960, tied 151,674-token output layer), images of
640 × 480 (12 tiles and a thumbnail: 3,328 image tokens each); its transformers side runs
t2v_metrics' own `load_image` and prompt (`--t2v-metrics` a checkout), its pairs left-padded
into batches. `--family internvl35`: the same tower and images over InternVL3.5-2B's Qwen3-1.7B
(2048 wide, 16 query and 8 key-value heads of 128 with query/key norms, MLP 6144, tied
151,936-token output layer); `--family internvl35moe` over InternVL3.5-30B-A3B's Qwen3-30B-A3B
(2048 wide, 32 query and 4 key-value heads of 128, 128 experts of MLP 768, 8 a token). Either with
`--text-layers` / `--vision-layers` layers (the full 34 / 27, 28 / 24, 48 / 27, 36 / 32 or 28 / 24 with `--full-depth`;
fewer on a CPU, where one full-depth pair takes seconds to tens of seconds). The tokenizer is
the family's test fixture's (ids below 420, the image tokens at the fixture's ids): the
vocabulary's size, not its pieces, is what costs. Then, on the same Winoground-layout suite of
`--items` items (2 images and 2 captions each, every pair distinct):

- `benchctl eval --model-path … --batch-size B` on a fresh cache: pairs per second over its
  scoring time (`total_s − load_model_s`: decoding, preprocessing, each image's prompt state
  once, its captions over it);
- transformers: `Gemma3ForConditionalGeneration` with `Gemma3Processor` (or
  `Qwen3VLForConditionalGeneration` with `Qwen3VLProcessor`), t2v_metrics' prompt (the image,
  then the question), B pairs per forward pass, left-padded, the next token's logits only
  (`logits_to_keep=1`), timed after one warm-up batch; pairs per second. Each pair runs its
  whole prompt, as t2v_metrics runs it (t2v_metrics itself runs one pair per `generate`).

Both score every pair; the largest difference of their log P("Yes") is printed as a check. With
`--device cuda` the random model is built on the GPU in `--dtype` (a full-depth model built in
f32 on the CPU takes minutes), and each side's peak GPU memory is printed: the device's used
memory (`nvidia-smi`, polled every 50 ms) over its use when the side starts — benchctl's
figure includes its process's CUDA context, transformers' does not (the script's context
exists before), so its `max_memory_reserved` is printed beside it.

Run: python3 scripts/bench/bench_vqascore_torch.py --benchctl target/release/benchctl [--family qwen3vl]
     [--device cuda --dtype bf16 --full-depth] [--threads N]
"""
import argparse, gc, importlib.util, json, os, random, shutil, subprocess, tempfile, threading, time
from pathlib import Path

import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "crates/benchctl-models/tests/fixtures/gemma3-tiny"
QWEN_FIXTURE = ROOT / "crates/benchctl-models/tests/fixtures/qwen3vl-tiny"
QWEN25_FIXTURE = ROOT / "crates/benchctl-models/tests/fixtures/qwen25vl-tiny"
INTERNVL_FIXTURE = ROOT / "crates/benchctl-models/tests/fixtures/internvl-tiny"
# Each family's image size (width, height) and full depth (text, vision layers).
FAMILIES = {"gemma3": ((896, 896), (34, 27)), "qwen3vl": ((640, 480), (28, 24)), "qwen3vlmoe": ((640, 480), (48, 27)),
            "qwen25vl": ((644, 476), (36, 32)),
            "internvl": ((640, 480), (28, 24)), "internvl35": ((640, 480), (28, 24)),
            "internvl35moe": ((640, 480), (48, 24))}
QUESTION = 'Does this figure show "{}"? Please answer Yes or No.'
WORDS = "red blue green dog cat left right of a the on under tall small tree car house".split()
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


class GpuPeak:
    """The device's peak used memory in MiB while in the block, less its use on entry
    (`nvidia-smi`, polled every 50 ms); `mib` stays None when `enabled` is false."""

    def __init__(self, enabled: bool):
        self.enabled, self.mib = enabled, None

    @staticmethod
    def used() -> int:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True)
        return int(out.stdout.split()[0])

    def __enter__(self):
        if self.enabled:
            self.baseline = self.peak = self.used()
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self.poll, daemon=True)
            self.thread.start()
        return self

    def poll(self):
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, self.used())

    def __exit__(self, *exc):
        if self.enabled:
            self.stop.set()
            self.thread.join()
            self.peak = max(self.peak, self.used())
            self.mib = self.peak - self.baseline
        return False


def fixture_script():
    spec = importlib.util.spec_from_file_location("gen_vqascore_fixture", ROOT / "scripts/fixtures/gen_vqascore_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_model(out: Path, text_layers: int, vision_layers: int):
    from transformers import (AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessorPil,
                              Gemma3Processor)
    gen = fixture_script()
    torch.manual_seed(0)
    layer_types = [("full_attention" if (i + 1) % 6 == 0 else "sliding_attention") for i in range(text_layers)]
    if "full_attention" not in layer_types:
        layer_types[-1] = "full_attention"
    config = Gemma3Config(
        text_config=dict(vocab_size=262208, hidden_size=2560, intermediate_size=10240, num_hidden_layers=text_layers,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256,
                         max_position_embeddings=131072, sliding_window=1024, rms_norm_eps=1e-6,
                         layer_types=layer_types, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                         rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        vision_config=dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=vision_layers,
                           num_attention_heads=16, image_size=896, patch_size=14, layer_norm_eps=1e-6,
                           vision_use_head=False),
        mm_tokens_per_image=256, boi_token_index=6, eoi_token_index=7, image_token_index=8, tie_word_embeddings=True)
    model = Gemma3ForConditionalGeneration(config).eval()
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessorPil(size={"height": 896, "width": 896}, image_mean=[0.5] * 3,
                                                image_std=[0.5] * 3, do_pan_and_scan=False),
        tokenizer=AutoTokenizer.from_pretrained(FIXTURE), chat_template=gen.CHAT, image_seq_length=256)
    gen.save_in_hub_layout(model, processor, out)
    shutil.copy(FIXTURE / "tokenizer.model", out / "tokenizer.model")
    return processor


def build_qwen3vl(out: Path, text_layers: int, vision_layers: int, moe: bool = False):
    from transformers import (AutoTokenizer, Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration, Qwen3VLProcessor,
                              Qwen3VLVideoProcessor)
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(QWEN_FIXTURE)
    fixture = json.loads((QWEN_FIXTURE / "config.json").read_text())
    deepstack = [i for i in ((8, 16, 24) if moe else (5, 11, 17)) if i < vision_layers] or [0]
    # Qwen3-VL-2B's widths, or Qwen3-VL-30B-A3B's (its decoder a mixture, its vision tower wider).
    text = (dict(num_attention_heads=32, num_key_value_heads=4, num_experts=128, num_experts_per_tok=8,
                 moe_intermediate_size=768, decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)
            if moe else dict(num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True))
    vision = dict(hidden_size=1152, intermediate_size=4304) if moe else dict(hidden_size=1024, intermediate_size=4096)
    config = (Qwen3VLMoeConfig if moe else Qwen3VLConfig)(
        text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=text_layers,
                         head_dim=128, max_position_embeddings=262144, rms_norm_eps=1e-6,
                         rope_parameters=dict(rope_type="default", rope_theta=5_000_000.0, mrope_section=[24, 20, 20],
                                              mrope_interleaved=True), **text),
        vision_config=dict(depth=vision_layers, num_heads=16, patch_size=16, temporal_patch_size=2,
                           spatial_merge_size=2, out_hidden_size=2048, num_position_embeddings=2304,
                           deepstack_visual_indexes=deepstack[:text_layers], **vision),
        image_token_id=fixture["image_token_id"], video_token_id=fixture["video_token_id"],
        vision_start_token_id=fixture["vision_start_token_id"], vision_end_token_id=fixture["vision_end_token_id"],
        tie_word_embeddings=text["tie_word_embeddings"])
    model = (Qwen3VLMoeForConditionalGeneration if moe else Qwen3VLForConditionalGeneration)(config).eval()
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                                              image_mean=[0.5] * 3, image_std=[0.5] * 3),
        tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2),
        chat_template=(QWEN_FIXTURE / "chat_template.jinja").read_text())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return processor


def build_qwen3vlmoe(out: Path, text_layers: int, vision_layers: int):
    return build_qwen3vl(out, text_layers, vision_layers, moe=True)


def build_qwen25vl(out: Path, text_layers: int, vision_layers: int):
    from transformers import (AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
                              Qwen2VLImageProcessor, Qwen2VLVideoProcessor)
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(QWEN_FIXTURE)
    fixture = json.loads((QWEN_FIXTURE / "config.json").read_text())
    # Qwen2.5-VL-3B's full-attention blocks (7, 15, 23, 31) that the depth reaches, else the last.
    full = [i for i in (7, 15, 23, 31) if i < vision_layers] or [vision_layers - 1]
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=text_layers,
                         num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=128000,
                         rms_norm_eps=1e-6, tie_word_embeddings=True,
                         rope_parameters=dict(rope_type="default", rope_theta=1_000_000.0, mrope_section=[16, 24, 24])),
        vision_config=dict(depth=vision_layers, hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14,
                           temporal_patch_size=2, spatial_merge_size=2, window_size=112, out_hidden_size=2048,
                           fullatt_block_indexes=full, hidden_act="silu"),
        image_token_id=fixture["image_token_id"], video_token_id=fixture["video_token_id"],
        vision_start_token_id=fixture["vision_start_token_id"], vision_end_token_id=fixture["vision_end_token_id"],
        tie_word_embeddings=True)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=14, temporal_patch_size=2, merge_size=2, image_mean=mean,
                                              image_std=std),
        tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(patch_size=14, temporal_patch_size=2, merge_size=2),
        # Qwen2.5-VL's chat format: a default system turn.
        chat_template=(QWEN25_FIXTURE / "chat_template.jinja").read_text())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    processor.image_processor.save_pretrained(out)
    return processor


def build_internvl35(out: Path, text_layers: int, vision_layers: int):
    """InternVL3.5-2B's widths: InternVL3's tower over Qwen3-1.7B (2048 wide, 16 query and 8
    key-value heads of 128, MLP 6144, tied 151,936-token output layer)."""
    return build_internvl(out, text_layers, vision_layers, text=dict(
        model_type="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, attention_bias=False, max_position_embeddings=40960))


def build_internvl35moe(out: Path, text_layers: int, vision_layers: int):
    """InternVL3.5-30B-A3B's widths: InternVL3's tower over Qwen3-30B-A3B (2048 wide, 32 query
    and 4 key-value heads of 128, 128 experts of MLP 768, 8 a token renormalised, 151,936
    tokens)."""
    return build_internvl(out, text_layers, vision_layers, text=dict(
        model_type="qwen3_moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, attention_bias=False, max_position_embeddings=40960, num_experts=128,
        num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[]))


def build_internvl(out: Path, text_layers: int, vision_layers: int, text=None):
    from transformers import AutoTokenizer, InternVLConfig, InternVLForConditionalGeneration
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(INTERNVL_FIXTURE)
    fixture = json.loads((INTERNVL_FIXTURE / "config.json").read_text())
    config = InternVLConfig(
        vision_config=dict(hidden_size=1024, num_hidden_layers=vision_layers, num_attention_heads=16,
                           intermediate_size=4096, image_size=448, patch_size=14, attention_bias=True,
                           use_qk_norm=False, norm_type="layer_norm", layer_norm_eps=1e-6, use_mean_pooling=True),
        text_config=dict(**(text or dict(model_type="qwen2", vocab_size=151674, hidden_size=1536,
                                         intermediate_size=8960, num_attention_heads=12, num_key_value_heads=2,
                                         max_position_embeddings=32768)),
                         num_hidden_layers=text_layers, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
                         tie_word_embeddings=True, use_sliding_window=False),
        image_token_id=fixture["image_token_id"], downsample_ratio=0.5, projector_hidden_act="gelu",
        tie_word_embeddings=True)
    model = InternVLForConditionalGeneration(config).eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return tokenizer


def t2v_internvl(repo: Path, model):
    """t2v_metrics' `InternVLModel`, its tiling and prompt unchanged, over `model` (as
    scripts/fixtures/gen_internvl_fixture.py runs it)."""
    import sys, types
    sys.path.insert(0, str(ROOT / "scripts/fixtures"))
    sys.modules.setdefault("decord", types.SimpleNamespace(VideoReader=None, cpu=None))
    from t2v_metrics_import import t2v_model
    spec = importlib.util.spec_from_file_location("gen_internvl_fixture", ROOT / "scripts/fixtures/gen_internvl_fixture.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    internvl = t2v_model(repo, "internvl_model")
    conv = sys.modules["t2v_metrics.models.vqascore_models.fastchat_utils"]
    scorer = internvl.InternVLModel.__new__(internvl.InternVLModel)
    scorer.model = gen.RemoteModelAdapter(model, conv.get_conv_template)
    return scorer


def write_suite(dir: Path, items: int, size=(896, 896)):
    (dir / "images").mkdir(parents=True)
    rng = random.Random(0)
    rows, pairs = [], []
    for i in range(items):
        caps = [" ".join(rng.choice(WORDS) for _ in range(8)) + f" {i} {c}" for c in range(2)]
        imgs = [f"ex_{i}_img_{k}" for k in range(2)]
        for k, name in enumerate(imgs):
            seed = torch.Generator().manual_seed(2 * i + k)
            pixels = torch.randint(0, 256, (size[1], size[0], 3), dtype=torch.uint8, generator=seed)
            Image.fromarray(pixels.numpy()).save(dir / "images" / f"{name}.png")
        rows.append({"id": i, "image_0": imgs[0], "image_1": imgs[1], "caption_0": caps[0], "caption_1": caps[1],
                     "tag": "Object", "secondary_tag": "", "num_main_preds": 1, "collapsed_tag": "Object"})
        pairs += [(im, c) for im in imgs for c in caps]
    (dir / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return pairs


def benchctl_side(args, model_dir: Path, suite: Path, work: Path):
    env = dict(os.environ, BENCHCTL_CACHE=str(work / "cache"), RAYON_NUM_THREADS=str(args.threads))
    with GpuPeak(args.device == "cuda") as peak:
        out = subprocess.run([args.benchctl, "eval", "--model-path", str(model_dir), "--suite", "winoground",
                              "--data-dir", str(suite), "--results-dir", str(work / "results"), "--batch-size",
                              str(args.batch), "--dtype", args.dtype, "--device", args.device],
                             env=env, capture_output=True, text=True)
    args.benchctl_gpu_mib = peak.mib
    if out.returncode != 0:
        raise SystemExit(f"benchctl eval failed:\n{out.stderr}")
    run_path = next(p for p in (work / "results" / "runs").glob("*.json"))
    run = json.loads(run_path.read_text())
    seconds = run["timings"]["total_s"] - run["timings"]["load_model_s"]
    scores = {}
    rows = [json.loads(l) for l in (suite / "examples.jsonl").read_text().splitlines()]
    dump = [json.loads(l) for l in Path(str(run_path)[: -len(".json")] + ".scores.jsonl").read_text().splitlines()]
    for row, line in zip(rows, dump):
        for k in range(2):
            for c in range(2):
                scores[(row[f"image_{k}"], row[f"caption_{c}"])] = line["scores"][k][c]
    return run["counts"]["pairs_scored"] / seconds, scores


def torch_side(args, model_dir: Path, processor, suite: Path, pairs):
    from transformers import (Gemma3ForConditionalGeneration, InternVLForConditionalGeneration,
                              Qwen2_5_VLForConditionalGeneration, Qwen3VLForConditionalGeneration,
                              Qwen3VLMoeForConditionalGeneration)
    device = "cuda" if args.device == "cuda" else "cpu"
    family = {"qwen3vl": Qwen3VLForConditionalGeneration, "qwen3vlmoe": Qwen3VLMoeForConditionalGeneration,
              "qwen25vl": Qwen2_5_VLForConditionalGeneration,
              "gemma3": Gemma3ForConditionalGeneration, "internvl": InternVLForConditionalGeneration,
              "internvl35": InternVLForConditionalGeneration, "internvl35moe": InternVLForConditionalGeneration}[args.family]
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model = family.from_pretrained(model_dir, dtype=DTYPES[args.dtype]).to(device).eval()
    if args.family.startswith("internvl"):
        return timed(args, pairs, internvl_batches(args, model, processor, suite, device))
    processor.tokenizer.padding_side = "left"
    yes = processor.tokenizer.convert_tokens_to_ids("Yes")
    images = {name: Image.open(suite / "images" / f"{name}.png").convert("RGB") for name, _ in pairs}

    def batch_scores(batch):
        texts = [processor.apply_chat_template([{"role": "user", "content": [
            {"type": "image"}, {"type": "text", "text": QUESTION.format(c)}]}], add_generation_prompt=True)
            for _, c in batch]
        inputs = processor(text=texts, images=[[images[n]] for n, _ in batch], return_tensors="pt", padding=True)
        inputs = inputs.to(device)
        inputs["pixel_values"] = inputs["pixel_values"].to(DTYPES[args.dtype])
        with torch.inference_mode():
            logits = model(**inputs, logits_to_keep=1).logits[:, -1].float()
        return torch.log_softmax(logits, -1)[:, yes].tolist()

    return timed(args, pairs, batch_scores)


def internvl_batches(args, model, tokenizer, suite: Path, device: str):
    """InternVL's batches as t2v_metrics builds each pair: `load_image`'s tiles, `_build_inputs`'
    prompt; the prompts left-padded, the tiles of the batch's images in order."""
    scorer = t2v_internvl(args.t2v_metrics, model)
    scorer.tokenizer, scorer.device = tokenizer, torch.device(device)
    yes = tokenizer.convert_tokens_to_ids("Yes")
    tiles = {}

    def batch_scores(batch):
        rows, pixels = [], []
        for name, caption in batch:
            if name not in tiles:
                tiles[name] = scorer.load_image(str(suite / "images" / f"{name}.png"))
            pv = tiles[name]
            ids, _, _ = scorer._build_inputs(pv, pv.shape[0], "<image>\n" + QUESTION.format(caption))
            rows.append(ids[0].tolist())
            pixels.append(pv)
        width = max(map(len, rows))
        input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows], device=device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
        pixel_values = torch.cat(pixels).to(device, DTYPES[args.dtype])
        with torch.inference_mode():
            logits = model(input_ids=input_ids, attention_mask=mask, pixel_values=pixel_values,
                           logits_to_keep=1).logits[:, -1].float()
        return torch.log_softmax(logits, -1)[:, yes].tolist()

    return batch_scores


def timed(args, pairs, batch_scores):
    """Pairs per second of `batch_scores` over `pairs` in batches, after one warm-up batch."""
    device = "cuda" if args.device == "cuda" else "cpu"
    batches = [pairs[i:i + args.batch] for i in range(0, len(pairs), args.batch)]
    batch_scores(batches[0])  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    scores = {}
    for batch in batches:
        for pair, score in zip(batch, batch_scores(batch)):
            scores[pair] = score
    if device == "cuda":
        torch.cuda.synchronize()
    return len(pairs) / (time.perf_counter() - started), scores


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchctl", default="target/release/benchctl")
    parser.add_argument("--family", choices=list(FAMILIES), default="gemma3")
    parser.add_argument("--t2v-metrics", type=Path, help="a checkout of linzhiqiu/t2v_metrics (--family internvl, internvl35)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=list(DTYPES), default="f32")
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--text-layers", type=int, default=2)
    parser.add_argument("--vision-layers", type=int, default=2)
    parser.add_argument("--full-depth", action="store_true",
                        help="the published depth: gemma-3-4b-it's 34 text and 27 vision layers, Qwen3-VL-2B's 28 and 24, Qwen3-VL-30B-A3B's 48 and 27, Qwen2.5-VL-3B's 36 and 32, InternVL3-2B's and InternVL3.5-2B's 28 and 24, InternVL3.5-30B-A3B's 48 and 24")
    args = parser.parse_args()
    if args.family.startswith("internvl") and args.t2v_metrics is None:
        parser.error("--family internvl needs --t2v-metrics (t2v_metrics' tiling and prompt are its reference)")
    size, depth = FAMILIES[args.family]
    if args.full_depth:
        args.text_layers, args.vision_layers = depth
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir, suite = work / "model", work / "suite"
        build = {"qwen3vl": build_qwen3vl, "qwen3vlmoe": build_qwen3vlmoe, "qwen25vl": build_qwen25vl, "gemma3": build_model,
                 "internvl": build_internvl, "internvl35": build_internvl35,
                 "internvl35moe": build_internvl35moe}[args.family]
        # On a GPU the random model is drawn there, in the run's dtype (minutes on a CPU at full depth).
        if args.device == "cuda":
            torch.set_default_dtype(DTYPES[args.dtype])
            with torch.device("cuda"):
                processor = build(model_dir, args.text_layers, args.vision_layers)
            torch.set_default_dtype(torch.float32)
            gc.collect()
            torch.cuda.empty_cache()
        else:
            processor = build(model_dir, args.text_layers, args.vision_layers)
        pairs = write_suite(suite, args.items, size)
        ours, our_scores = benchctl_side(args, model_dir, suite, work)
        with GpuPeak(args.device == "cuda") as their_peak:
            theirs, their_scores = torch_side(args, model_dir, processor, suite, pairs)
    worst = max(abs(our_scores[p] - their_scores[p]) for p in pairs)
    widths = {"gemma3": "gemma-3-4b-it", "qwen3vl": "Qwen3-VL-2B-Instruct", "qwen3vlmoe": "Qwen3-VL-30B-A3B-Instruct",
              "qwen25vl": "Qwen2.5-VL-3B-Instruct",
              "internvl": "InternVL3-2B-hf", "internvl35": "InternVL3_5-2B-HF",
              "internvl35moe": "InternVL3_5-30B-A3B-HF"}[args.family]
    print(f"{widths} widths, {args.text_layers} text / {args.vision_layers} vision layers, {args.device} "
          f"{args.dtype}, batch {args.batch}, {len(pairs)} pairs, {args.threads} threads")
    print(f"benchctl eval      {ours:8.3f} pairs/s")
    print(f"transformers       {theirs:8.3f} pairs/s")
    print(f"ratio              {ours / theirs:8.2f}x")
    print(f"max |Δ log P(Yes)| {worst:.2e}")
    if args.device == "cuda":
        reserved = torch.cuda.max_memory_reserved() / 2**20
        print(f"GPU MiB over idle  benchctl {args.benchctl_gpu_mib} (its CUDA context included), transformers "
              f"{their_peak.mib} (max_memory_reserved {reserved:.0f})")


if __name__ == "__main__":
    main()
