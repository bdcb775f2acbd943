"""benchctl's CLIP-FlanT5 beside t2v_metrics' own scorer on a random-weight model of CLIP-FlanT5-XL's widths.

The model: zhiqiulin/clip-flant5-xl's shape (FlanT5-XL: 2048 wide, 32 heads of 64, gated-GELU
MLP of 5120, 32 relative-position buckets to 128, a 32,128-row embedding and an untied head;
CLIP ViT-L/14 at 336 px: 1024 wide, 16 heads, MLP 4096, 576 patches, read at its penultimate
layer; an `mlp2x_gelu` projector), with `--t5-layers` encoder and decoder layers and
`--vision-layers` vision layers (the published 24 / 24 / 24 with `--full-depth`; a few on a
CPU). The tokenizer is the `clip-flant5-tiny` fixture's (217 tokens): the head is cut to the
tokenizer as `load_pretrained_model` cuts it, so the softmax runs over 217 entries instead of
32,100 (two decoder positions per pair: a small share of the encoder's work over ~650 tokens).

On one Winoground-layout suite of `--items` items (2 images and 2 captions each, 640 × 480):
- `benchctl eval --model-path … --batch-size B` on a fresh cache: pairs per second over its
  scoring time (`total_s − load_model_s`: decoding, preprocessing, each image's features once,
  each pair's encoder and decoder);
- t2v_metrics v3.0's `CLIPT5Model.forward`, run unchanged (B pairs per call; it encodes each
  pair's image again, as it does), on the model loaded as `load_pretrained_model` loads it but
  without its cast to bfloat16 (for `--dtype f32`), timed after one warm-up call.

Both score every pair; the largest difference of their log P("Yes") is printed as a check.

Run (transformers 4.46, as gen_clip_flant5_fixture.py):
    python scripts/bench/bench_clip_flant5_torch.py --t2v-metrics PATH --benchctl target/release/benchctl
"""
import argparse, importlib.util, math, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vqascore_torch import benchctl_side, write_suite  # the same suite and `eval` run as the other VQAScore benches

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "crates/benchctl-models/tests/fixtures/clip-flant5-tiny"


def generator():
    sys.path.insert(0, str(ROOT / "scripts/fixtures"))  # its own import of t2v_metrics_import
    spec = importlib.util.spec_from_file_location("gen_clip_flant5_fixture",
                                                  ROOT / "scripts/fixtures/gen_clip_flant5_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(gen, clip_t5, out: Path, t5_layers: int, vision_layers: int):
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel, T5Tokenizer
    out.mkdir(parents=True)
    for name in ["spiece.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "added_tokens.json"]:
        shutil.copy(FIXTURE / name, out / name)
    torch.manual_seed(0)
    vision = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=vision_layers,
                              num_attention_heads=16, image_size=336, patch_size=14, hidden_act="quick_gelu")
    CLIPVisionModel(vision).save_pretrained(out / "vision_tower")
    CLIPImageProcessor(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}).save_pretrained(
        out / "vision_tower")
    config = clip_t5.CLIPT5Config(
        vocab_size=32128, d_model=2048, d_kv=64, d_ff=5120, num_layers=t5_layers, num_decoder_layers=t5_layers,
        num_heads=32, relative_attention_num_buckets=32, relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0, pad_token_id=0,
        eos_token_id=1, dropout_rate=0.0)
    gen.llava_settings(config, vision_width=1024)
    os.chdir(out)  # `mm_vision_tower` is resolved from the working directory
    model = clip_t5.CLIPT5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("vision_tower."):
                p.normal_(1.0, 0.05) if "layer_norm" in name else p.normal_(0.0, 0.02)
    model.save_pretrained(out, safe_serialization=False)
    return len(T5Tokenizer.from_pretrained(out))


def torch_side(args, module, clip_t5, model_dir: Path, suite: Path, pairs):
    entry = module.CLIP_T5_MODELS["clip-flant5-xl"]
    entry["model"]["path"] = entry["tokenizer"]["path"] = str(model_dir)
    with tempfile.TemporaryDirectory() as cache:
        scorer = module.CLIPT5Model("clip-flant5-xl", device="cpu", cache_dir=cache)
    if args.dtype == "f32":
        model = clip_t5.CLIPT5ForConditionalGeneration.from_pretrained(model_dir)
        model.resize_token_embeddings(len(scorer.tokenizer))
        scorer.model = model.eval()
    paths = {name: str(suite / "images" / f"{name}.png") for name, _ in pairs}
    batches = [pairs[i:i + args.batch] for i in range(0, len(pairs), args.batch)]

    def run(batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            return scorer.forward([paths[n] for n, _ in batch], [c for _, c in batch]).float().tolist()

    run(batches[0])  # warm-up
    started = time.perf_counter()
    scores = {}
    for batch in batches:
        for pair, p in zip(batch, run(batch)):
            scores[pair] = math.log(p)
    return len(pairs) / (time.perf_counter() - started), scores


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchctl", default="target/release/benchctl")
    parser.add_argument("--t2v-metrics", type=Path, required=True, help="a git checkout of linzhiqiu/t2v_metrics")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--t5-layers", type=int, default=2)
    parser.add_argument("--vision-layers", type=int, default=2)
    parser.add_argument("--full-depth", action="store_true", help="the published 24 encoder, 24 decoder, 24 vision layers")
    parser.add_argument("--keep", type=Path, help="build the model and suite in this new directory and keep them")
    args = parser.parse_args()
    args.device = "cpu"
    if args.full_depth:
        args.t5_layers = args.vision_layers = 24
    args.benchctl = str(Path(args.benchctl).resolve())
    torch.set_num_threads(args.threads)
    gen = generator()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep.resolve() if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        v3_0 = work / "t2v_metrics"
        archive = subprocess.run(["git", "-C", str(args.t2v_metrics), "archive", gen.V3_0, *gen.V3_0_FILES],
                                 check=True, capture_output=True).stdout
        v3_0.mkdir()
        subprocess.run(["tar", "-x", "-C", str(v3_0)], input=archive, check=True)
        module = gen.t2v_clip_t5(v3_0)
        clip_t5 = sys.modules["t2v_metrics.models.vqascore_models.clip_t5.model.language_model.clip_t5"]
        model_dir, suite = work / "model", work / "suite"
        build(gen, clip_t5, model_dir, args.t5_layers, args.vision_layers)
        pairs = write_suite(suite, args.items, (640, 480))
        ours, our_scores = benchctl_side(args, model_dir, suite, work)
        theirs, their_scores = torch_side(args, module, clip_t5, model_dir, suite, pairs)
        os.chdir(ROOT)
    worst = max(abs(our_scores[p] - their_scores[p]) for p in pairs)
    print(f"CLIP-FlanT5-XL widths, {args.t5_layers} + {args.t5_layers} T5 / {args.vision_layers} vision layers, cpu "
          f"{args.dtype}, batch {args.batch}, {len(pairs)} pairs, {args.threads} threads")
    print(f"benchctl eval      {ours:8.3f} pairs/s")
    print(f"t2v_metrics        {theirs:8.3f} pairs/s")
    print(f"ratio              {ours / theirs:8.2f}x")
    print(f"max |Δ log P(Yes)| {worst:.2e}")


if __name__ == "__main__":
    main()
