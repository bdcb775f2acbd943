"""A micro FIBER written as FIBER's released checkpoints are: a PyTorch Lightning `.ckpt`
(`torch.save` of the dict Lightning 1.3.2's `CheckpointConnector.dump_checkpoint` builds:
`epoch`, `global_step`, `pytorch-lightning_version`, `state_dict`, `callbacks` keyed by the
callback class, `optimizer_states`, `lr_schedulers`, `hparams_name`, `hyper_parameters`).

The state dict uses FIBER's official naming (`FIBERTransformerSS.state_dict()`): the script
checks its key set against the official tiny fixture (`../shared/reference/fiber-tiny/
model.safetensors`, written by microsoft/FIBER's own code; read in place, nothing copied),
so only the widths differ: Swin dims 4/8/16/32 at 64 px (window 2), RoBERTa width 8, hidden
size 8. Like the released pretrain and ITC checkpoints it carries the ITC queue buffers
(`image_queue`, …, which a loader must ignore), and `rank_output` is a view of `itm_score.fc`
row 1, as `FIBERTransformerSS.__init__` ties them. Values are drawn from a seeded generator.

Beside it: `model.safetensors` (the same tensors, for a bit-for-bit comparison of the two
loaders), `config.json` (the micro shape, without `image_size`, which a loader reads from the
window tables), and a byte-level BPE (`vocab.json`, `merges.txt`, RoBERTa's specials) trained
on the demo suite's captions with the `tokenizers` library.

    pip install torch safetensors tokenizers
    python scripts/gen_fiber_ckpt_fixture.py
"""

import collections
import json
import pathlib
import sys
import types

import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "benchctl-models" / "tests" / "fixtures" / "fiber-micro"
OFFICIAL = ROOT.parent / "shared" / "reference" / "fiber-tiny" / "model.safetensors"

IMAGE, PATCH, EMBED = 64, 4, 4
DEPTHS, HEADS = [2, 2, 18, 2], [1, 1, 2, 2]
TEXT, TEXT_HEADS, TEXT_FFN, LAYERS, MAX_POS = 8, 2, 16, 12, 52
HIDDEN, FUSE, QUEUE = 8, 6, 4
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def tokenizer(captions):
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(captions, vocab_size=400, min_frequency=2, special_tokens=SPECIALS)
    bpe.save_model(str(OUT))
    vocab = json.loads((OUT / "vocab.json").read_text())
    assert [vocab[s] for s in SPECIALS[:4]] == [0, 1, 2, 3], "RoBERTa's special ids"
    return len(vocab)


def window_buffers(side, window, shifted):
    """Swin's derived buffers, as `SwinTransformerBlock.__init__` computes them."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
    index = rel[:, :, 0] * (2 * window - 1) + rel[:, :, 1]
    if not shifted:
        return index, None
    shift = window // 2
    img = torch.zeros(1, side, side, 1)
    cnt = 0
    for h in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
        for w in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
            img[:, h, w, :] = cnt
            cnt += 1
    win = img.view(1, side // window, window, side // window, window, 1).permute(0, 1, 3, 2, 4, 5)
    win = win.reshape(-1, window * window)
    mask = win.unsqueeze(1) - win.unsqueeze(2)
    return index, mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


def shapes(vocab):
    """Every state-dict entry: name -> (shape, kind)."""
    s = collections.OrderedDict()
    window = IMAGE // 32

    def linear(name, out_dim, in_dim, bias=True):
        s[name + ".weight"] = ((out_dim, in_dim), "weight")
        if bias:
            s[name + ".bias"] = ((out_dim,), "bias")

    def norm(name, dim):
        s[name + ".weight"] = ((dim,), "norm_weight")
        s[name + ".bias"] = ((dim,), "norm_bias")

    linear("cross_modal_text_transform", HIDDEN, TEXT)
    linear("cross_modal_image_transform", HIDDEN, EMBED * 8)
    linear("cross_modal_text_transform_itc", HIDDEN, TEXT)
    linear("cross_modal_image_transform_itc", HIDDEN, EMBED * 8)
    s["temp"] = ((), "temp")
    s["vit_model.patch_embed.proj.weight"] = ((EMBED, 3, PATCH, PATCH), "weight")
    s["vit_model.patch_embed.proj.bias"] = ((EMBED,), "bias")
    norm("vit_model.patch_embed.norm", EMBED)
    for st, (depth, heads) in enumerate(zip(DEPTHS, HEADS)):
        dim, side = EMBED << st, (IMAGE // PATCH) >> st
        win = min(window, side)
        for b in range(depth):
            p = f"vit_model.layers.{st}.blocks.{b}"
            norm(p + ".norm1", dim)
            s[p + ".attn.relative_position_bias_table"] = (((2 * win - 1) ** 2, heads), "table")
            s[p + ".attn.relative_position_index"] = ((win * win, win * win), ("index", win))
            linear(p + ".attn.qkv", 3 * dim, dim)
            linear(p + ".attn.proj", dim, dim)
            if (st == 2 and b >= 20 - FUSE) or st == 3:
                linear(p + ".attn.qkv_text_i2t", 2 * dim, TEXT)
                linear(p + ".attn.qkv_i2t", dim, dim)
                linear(p + ".attn.proj_i2t", dim, dim)
                s[p + ".attn.alpha_i2t"] = ((1,), "alpha")
                norm(p + ".attn.norm_i2t_i", dim)
            norm(p + ".norm2", dim)
            linear(p + ".mlp.fc1", 4 * dim, dim)
            linear(p + ".mlp.fc2", dim, 4 * dim)
            if b % 2 == 1 and side > window:
                nw = (side // win) ** 2
                s[p + ".attn_mask"] = ((nw, win * win, win * win), ("mask", side, win))
        if st < 3:
            norm(f"vit_model.layers.{st}.downsample.norm", 4 * dim)
            linear(f"vit_model.layers.{st}.downsample.reduction", 2 * dim, 4 * dim, bias=False)
    norm("vit_model.norm", EMBED * 8)
    e = "text_transformer.embeddings"
    s[e + ".position_ids"] = ((1, MAX_POS), "position_ids")
    s[e + ".word_embeddings.weight"] = ((vocab, TEXT), "weight")
    s[e + ".position_embeddings.weight"] = ((MAX_POS, TEXT), "weight")
    s[e + ".token_type_embeddings.weight"] = ((1, TEXT), "weight")
    norm(e + ".LayerNorm", TEXT)
    for i in range(LAYERS):
        p = f"text_transformer.encoder.layer.{i}"
        for part in ("query", "key", "value"):
            linear(f"{p}.attention.self.{part}", TEXT, TEXT)
        linear(p + ".attention.output.dense", TEXT, TEXT)
        norm(p + ".attention.output.LayerNorm", TEXT)
        if i >= 12 - FUSE:
            context = EMBED * 4 if i < 10 else EMBED * 8
            linear(p + ".crossattention_t2i.self.query", TEXT, TEXT)
            linear(p + ".crossattention_t2i.self.key", TEXT, context)
            linear(p + ".crossattention_t2i.self.value", TEXT, context)
            linear(p + ".crossattention_t2i.output.dense", TEXT, TEXT)
            norm(p + ".crossattention_t2i.output.LayerNorm", TEXT)
        linear(p + ".intermediate.dense", TEXT_FFN, TEXT)
        linear(p + ".output.dense", TEXT, TEXT_FFN)
        norm(p + ".output.LayerNorm", TEXT)
        s[p + ".alpha_t2i"] = ((1,), "alpha")
    linear("text_transformer.pooler.dense", TEXT, TEXT)
    for name in ("cross_modal_image_pooler", "cross_modal_text_pooler",
                 "cross_modal_image_pooler_itc", "cross_modal_text_pooler_itc"):
        linear(name + ".dense", HIDDEN, HIDDEN)
    linear("itm_score.fc", 2, 2 * HIDDEN)
    return s


def draw(spec, gen):
    out = collections.OrderedDict()
    for name, (shape, kind) in spec.items():
        if isinstance(kind, tuple) and kind[0] == "index":
            out[name] = window_buffers(1, kind[1], False)[0].to(torch.int64)
        elif isinstance(kind, tuple) and kind[0] == "mask":
            out[name] = window_buffers(kind[1], kind[2], True)[1]
        elif kind == "position_ids":
            out[name] = torch.arange(MAX_POS).expand(1, -1).clone()
        elif kind == "weight":
            fan_in = 1
            for d in shape[1:]:
                fan_in *= d
            out[name] = torch.randn(shape, generator=gen) * fan_in ** -0.5
        elif kind == "bias":
            out[name] = 0.1 * torch.randn(shape, generator=gen)
        elif kind == "norm_weight":
            out[name] = 1 + 0.1 * torch.randn(shape, generator=gen)
        elif kind == "norm_bias":
            out[name] = 0.1 * torch.randn(shape, generator=gen)
        elif kind == "table":
            out[name] = torch.randn(shape, generator=gen) * shape[1] ** -0.5
        elif kind == "alpha":
            out[name] = 0.5 + 0.5 * torch.rand(shape, generator=gen)
        elif kind == "temp":
            out[name] = torch.tensor(0.07)
        else:
            raise ValueError(kind)
    return out


def check_official_naming(names):
    """Same key set as the official fixture (same depths), queue buffers aside."""
    if not OFFICIAL.exists():
        sys.exit(f"{OFFICIAL} is needed to check the naming against the official code")
    official = set(load_numpy(str(OFFICIAL)))
    ours = set(names)
    assert ours == official, (sorted(ours - official)[:10], sorted(official - ours)[:10])


def lightning_classes():
    """Class references pickled by name, as Lightning's own objects are in a real checkpoint."""
    module = types.ModuleType("pytorch_lightning.callbacks.model_checkpoint")

    class ModelCheckpoint:
        pass

    ModelCheckpoint.__module__ = module.__name__
    ModelCheckpoint.__qualname__ = "ModelCheckpoint"
    module.ModelCheckpoint = ModelCheckpoint
    for name in ("pytorch_lightning", "pytorch_lightning.callbacks", module.__name__):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[module.__name__] = module
    return ModelCheckpoint


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in (ROOT / "datasets/demo/shapes/examples.jsonl").read_text().splitlines()]
    captions = [row[key] for row in rows for key in ("caption_0", "caption_1")]
    vocab = tokenizer(captions)
    spec = shapes(vocab)
    gen = torch.Generator().manual_seed(20260)
    state = draw(spec, gen)
    # `rank_output` shares row 1 of the ITM head (a view, as `FIBERTransformerSS.__init__` sets `.data`).
    state["rank_output.weight"] = state["itm_score.fc.weight"][1:, :]
    state["rank_output.bias"] = state["itm_score.fc.bias"][1:]
    check_official_naming(state.keys())
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(OUT / "model.safetensors"))
    with_queues = collections.OrderedDict(state)
    with_queues["image_queue"] = torch.randn(HIDDEN, QUEUE, generator=gen)
    with_queues["text_queue"] = torch.randn(HIDDEN, QUEUE, generator=gen)
    with_queues["image_input_queue"] = torch.randn(QUEUE, 3, IMAGE, IMAGE, generator=gen)
    with_queues["text_input_queue"] = torch.zeros(QUEUE, 50, dtype=torch.long)
    with_queues["text_input_mask_queue"] = torch.zeros(QUEUE, 50, dtype=torch.long)
    with_queues["queue_ptr"] = torch.zeros(1, dtype=torch.long)
    with_queues["queue_total"] = torch.zeros(1, dtype=torch.long)
    config = {
        "model_type": "fiber",
        "max_text_len": 50,
        "hidden_size": HIDDEN,
        "num_fuse_block": FUSE,
        "input_image_embed_size": EMBED * 8,
        "input_text_embed_size": TEXT,
        "swin": {"patch_size": PATCH, "embed_dim": EMBED, "depths": DEPTHS, "num_heads": HEADS},
        "roberta": {"vocab_size": vocab, "hidden_size": TEXT, "num_attention_heads": TEXT_HEADS,
                    "intermediate_size": TEXT_FFN, "max_position_embeddings": MAX_POS},
    }
    model_checkpoint = lightning_classes()
    first = state["itm_score.fc.weight"]
    checkpoint = {
        "epoch": 10,
        "global_step": 12345,
        "pytorch-lightning_version": "1.3.2",
        "state_dict": with_queues,
        "callbacks": {model_checkpoint: {"monitor": "val/the_metric", "best_model_score": torch.tensor(0.5),
                                         "best_model_path": "result/epoch=9.ckpt"}},
        "optimizer_states": [{"state": {0: {"step": 12345, "exp_avg": torch.zeros_like(first),
                                            "exp_avg_sq": torch.zeros_like(first)}},
                              "param_groups": [{"lr": 1e-5, "betas": (0.9, 0.98), "eps": 1e-8,
                                                "weight_decay": 0.01, "amsgrad": False, "params": [0]}]}],
        "lr_schedulers": [{"base_lrs": [1e-5], "last_epoch": 12345, "_step_count": 12346, "verbose": False,
                           "_get_lr_called_within_step": False, "_last_lr": [0.0], "lr_lambdas": [None]}],
        "hparams_name": "config",
        "hyper_parameters": {"config": {**config, "image_size": IMAGE, "loss_names": {"itm": 1, "itc": 1}}},
    }
    torch.save(checkpoint, str(OUT / "fiber_micro.ckpt"))
    (OUT / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {OUT}: {len(state)} tensors, vocab {vocab}")


if __name__ == "__main__":
    main()
