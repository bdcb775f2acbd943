"""The VQAScore fixtures, from transformers and llama.cpp (never from benchctl).

Makes a tiny random-weight Gemma 3 (SigLIP vision tower, 4 image tokens, a 400-piece
SentencePiece vocabulary trained here, "Yes" one piece), saves it as the hub's Gemma 3
checkpoints are laid out, converts it to GGUF with llama.cpp's own `convert_hf_to_gguf.py`
(text model and `--mmproj` projector), and writes each pair's log P("Yes") of the demo
Winoground items (images scaled to the tower's 56 px):

- `local`: t2v_metrics' Gemma 3 prompt, `processor.apply_chat_template` of one user message
  (the image, then `Does this figure show "{}"? Please answer Yes or No.`) with the
  generation prompt, the next token's log-softmax from `Gemma3ForConditionalGeneration`;
- `server`: the prompt llama-cpp-python's `llava-1-5` chat handler builds for benchctl's
  request (system message, `USER: `, the image, the question, `ASSISTANT: `: its template's
  newlines are trimmed away as it renders it), tokenised
  by llama.cpp, scored by transformers; and, when llama-cpp-python's server runs here, the
  same pairs asked through it (its top log-probabilities, as a check of this fixture).

Preprocessing is the PIL backend's (`Gemma3ImageProcessorPil`, Pillow's bilinear resize), as
benchctl reproduces it; `bilinear` holds its pixels for a demo image of another size.

A tiny random-weight PaliGemma with the same vocabulary is written beside it (`paligemma`).

Run: python3 scripts/gen_vqascore_fixture.py  (torch, transformers 5, sentencepiece,
gguf, mistral_common, llama-cpp-python[server]); writes
crates/benchctl-models/tests/fixtures/{gemma3-tiny,paligemma-tiny}/ and crates/benchctl/tests/fixtures/vqa-winoground/.
"""
import base64, io, json, os, shutil, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

import sentencepiece as spm
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import (Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessorPil, Gemma3Processor,
                          GemmaTokenizer, PaliGemmaConfig, PaliGemmaForConditionalGeneration, PaliGemmaProcessor,
                          SiglipImageProcessorPil)

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "crates/benchctl-models/tests/fixtures/gemma3-tiny"
PALIGEMMA = ROOT / "crates/benchctl-models/tests/fixtures/paligemma-tiny"
SUITE = ROOT / "crates/benchctl/tests/fixtures/vqa-winoground"
DEMO = ROOT / "datasets/demo/winoground"
QUESTION = 'Does this figure show "{}"? Please answer Yes or No.'
SYSTEM = ("A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
          "detailed, and polite answers to the human's questions.")
SIZE = 56
# Gemma 3's chat format: <bos>, turns as <start_of_turn>role\n … <end_of_turn>\n, an image item
# as <start_of_image> (the processor expands it), text items trimmed.
CHAT = ("{{ bos_token }}{%- for message in messages -%}"
        "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
        "{{ '<start_of_turn>' + role + '\n' }}"
        "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
        "{%- else -%}{%- for item in message['content'] -%}"
        "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
        "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
        "{%- endfor -%}{%- endif -%}{{ '<end_of_turn>\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}")


def tokenizer(work: Path):
    rows = [json.loads(l) for l in (DEMO / "examples.jsonl").read_text().splitlines()]
    corpus = [r[k] for r in rows for k in ("caption_0", "caption_1")]
    corpus += [QUESTION.format("x"), SYSTEM, "USER: ASSISTANT: user model Yes No yes no"] * 5
    (work / "corpus.txt").write_text("\n".join(corpus * 20))
    specials = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>", "Yes", "No"]
    spm.SentencePieceTrainer.train(
        input=str(work / "corpus.txt"), model_prefix=str(work / "tokenizer"), vocab_size=400, model_type="bpe",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, bos_piece="<bos>", eos_piece="<eos>", user_defined_symbols=specials,
        add_dummy_prefix=False, byte_fallback=True, split_digits=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, minloglevel=2)
    sp_dir = work / "sp"
    sp_dir.mkdir()
    shutil.copy(work / "tokenizer.model", sp_dir / "tokenizer.model")
    return GemmaTokenizer.from_pretrained(sp_dir, extra_special_tokens={
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"})


def model():
    torch.manual_seed(0)
    config = Gemma3Config(
        # Six layers, the sixth global: llama.cpp fixes Gemma 3's pattern of five sliding-window
        # layers and one global one.
        text_config=dict(vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                         sliding_window=512, query_pre_attn_scalar=16, rms_norm_eps=1e-6,
                         layer_types=["sliding_attention"] * 5 + ["full_attention"], pad_token_id=0, bos_token_id=2,
                         eos_token_id=1),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=SIZE, patch_size=14, layer_norm_eps=1e-6, vision_use_head=False),
        mm_tokens_per_image=4, boi_token_index=6, eoi_token_index=7, image_token_index=8, tie_word_embeddings=True)
    m = Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            # Gemma's RMS norms scale by (1 + w): random, not the zero they start at.
            p.normal_(0.0, 0.3 if ("norm" in name and p.dim() == 1) else 0.15)
    return m


def favour_yes_and_no(m, processor, tok):
    """Makes "Yes" and "No" the two likeliest next tokens of every prompt, as a trained model's
    are (a random model spreads its probability over the whole vocabulary, so a server's top
    log-probabilities would hold neither): their (tied) embeddings get a large shared part
    along the prompts' mean final hidden state, and keep a random part that decides which of
    the two wins for each pair."""
    seen = []
    hook = m.lm_head.register_forward_hook(lambda _m, args, _o: seen.append(args[0][0, -1].detach().clone()))
    local_scores(m, processor, 0)
    hf = lambda text, bos: processor.tokenizer.encode(text, add_special_tokens=bos)
    server_scores(m, processor, 0, hf)
    hook.remove()
    mean = torch.stack(seen).mean(0)
    yes, no = tok.convert_tokens_to_ids(["Yes", "No"])
    emb = m.get_input_embeddings().weight
    with torch.no_grad():
        shared = 8.0 * mean / mean.norm() / mean.norm()
        emb[yes] = shared + 0.3 * torch.randn_like(shared) / mean.norm()
        emb[no] = shared + 0.3 * torch.randn_like(shared) / mean.norm()


def save_in_hub_layout(m, processor, out: Path, controls=()):
    """Saved by transformers, then renamed as google/gemma-3-*-it name their tensors
    (`vision_tower.vision_model.…`, the LM head tied and not stored), which is also what
    llama.cpp's converter reads; transformers loads it back to the same outputs (checked)."""
    m.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    # llama.cpp's converter reads the image token count from here (its default is 256).
    image_processor = processor.image_processor.to_dict()
    image_processor["image_seq_length"] = processor.image_seq_length
    (out / "preprocessor_config.json").write_text(json.dumps(image_processor, indent=2) + "\n")
    # The temporary path the tokenizer was read from is no part of the fixture.
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    tokenizer_config.pop("vocab_file", None)
    # The hub's configs (saved by transformers 4) list the control tokens in
    # `added_tokens_decoder`; transformers 5 no longer writes it, and llama.cpp's converter
    # types a token as a control token (one its tokenizer parses from text, as
    # `<start_of_turn>`) only from there.
    if controls:
        tokenizer_config["added_tokens_decoder"] = {
            str(processor.tokenizer.convert_tokens_to_ids(t)): {"content": t, "lstrip": False, "normalized": False,
                                                                "rstrip": False, "single_word": False, "special": True}
            for t in controls}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    tensors = load_file(out / "model.safetensors")
    renamed = {}
    for k, v in tensors.items():
        if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model."):
            k = "vision_tower.vision_model." + k[len("vision_tower."):]
        if k in ("lm_head.weight", "language_model.lm_head.weight"):
            continue
        renamed[k] = v.contiguous()
    save_file(renamed, out / "model.safetensors", metadata={"format": "pt"})


def pairs():
    rows = [json.loads(l) for l in (SUITE / "examples.jsonl").read_text().splitlines()]
    for r in rows:
        for i in (0, 1):
            for c in (0, 1):
                yield r[f"image_{i}"], r[f"caption_{c}"]


def suite():
    """The demo items, images scaled to 56 px (a size both preprocessors leave unscaled)."""
    if SUITE.exists():
        shutil.rmtree(SUITE)
    (SUITE / "images").mkdir(parents=True)
    shutil.copy(DEMO / "examples.jsonl", SUITE / "examples.jsonl")
    for f in sorted((DEMO / "images").glob("*.png")):
        Image.open(f).convert("RGB").resize((SIZE, SIZE), Image.Resampling.BICUBIC).save(SUITE / "images" / f.name)


def image(name):
    return Image.open(SUITE / "images" / f"{name}.png").convert("RGB")


def local_scores(m, processor, yes):
    out = {}
    for name, caption in pairs():
        messages = [{"role": "user", "content": [{"type": "image", "image": image(name)},
                                                  {"type": "text", "text": QUESTION.format(caption)}]}]
        inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               return_dict=True, return_tensors="pt")
        with torch.no_grad():
            logits = m(**inputs).logits[0, -1].double()
        out.setdefault(name, {})[caption] = torch.log_softmax(logits, -1)[yes].item()
    return out


def llama_tokenizer(gguf: Path):
    from llama_cpp import Llama
    llm = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    return lambda text, bos: llm.tokenize(text.encode(), add_bos=bos, special=True)


def server_scores(m, processor, yes, tokenize):
    out = {}
    for name, caption in pairs():
        # The handler's template renders with trim_blocks, which drops its newlines.
        before = f"{SYSTEM}USER: <start_of_image>"
        after = f"<end_of_image>{QUESTION.format(caption)}ASSISTANT: "
        ids = tokenize(before, True) + [8] * 4 + tokenize(after, False)
        input_ids = torch.tensor([ids])
        pixel_values = processor.image_processor(image(name), return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            logits = m(input_ids=input_ids, pixel_values=pixel_values, token_type_ids=(input_ids == 8).long(),
                       attention_mask=torch.ones_like(input_ids)).logits[0, -1].double()
        out.setdefault(name, {})[caption] = torch.log_softmax(logits, -1)[yes].item()
    return out


def ask_llama_server(gguf: Path, mmproj: Path):
    """The real server's answers, to check the fixture (not stored)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--clip_model_path",
                             str(mmproj), "--chat_format", "llava-1-5", "--logits_all", "true", "--n_ctx", "512",
                             "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        out = {}
        for name, caption in pairs():
            data = base64.b64encode((SUITE / "images" / f"{name}.png").read_bytes()).decode()
            body = {"model": "gemma3-tiny", "max_tokens": 1, "logprobs": True, "top_logprobs": 2,
                    "messages": [{"role": "user", "content": [
                        {"type": "text", "text": QUESTION.format(caption)},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]}]}
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            answer = json.load(urllib.request.urlopen(req, timeout=60))
            top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            out.setdefault(name, {})[caption] = next(t["logprob"] for t in top if t["token"].strip() == "Yes")
        return out
    finally:
        proc.terminate()
        proc.wait()


def paligemma(sp_dir: Path):
    """A tiny random-weight PaliGemma (SigLIP tower, 16 image tokens, a Gemma decoder with one
    key-value head) with the same SentencePiece vocabulary plus what PaliGemmaProcessor adds
    (`<image>`, the location and segmentation tokens), and each pair's log P("Yes") as
    t2v_metrics' PaliGemma model prompts it: `processor(text=question, images=image)`, the
    next token's log-softmax; and the token t2v_metrics reads, `tokenizer.encode("Yes")[0]`
    (the processor turns the tokenizer's BOS off, so it is "Yes")."""
    tok = GemmaTokenizer.from_pretrained(sp_dir)
    improc = SiglipImageProcessorPil(size={"height": SIZE, "width": SIZE}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    improc.image_seq_length = 16
    processor = PaliGemmaProcessor(image_processor=improc, tokenizer=tok)
    tok = processor.tokenizer
    torch.manual_seed(1)
    config = PaliGemmaConfig(
        text_config=dict(model_type="gemma", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                         max_position_embeddings=512, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                         pad_token_id=0, bos_token_id=2, eos_token_id=1),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=SIZE, patch_size=14, projection_dim=64, vision_use_head=False),
        projection_dim=64, hidden_size=64, image_token_index=processor.image_token_id)
    m = PaliGemmaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.normal_(0.0, 0.3 if ("norm" in name and p.dim() == 1) else 0.15)
    yes = tok.convert_tokens_to_ids("Yes")
    t2v_token = tok.encode("Yes")[0]

    def scores(model):
        out, first_ids = {}, None
        for name, caption in pairs():
            inputs = processor(text=QUESTION.format(caption), images=image(name), return_tensors="pt")
            first_ids = first_ids or inputs["input_ids"][0].tolist()
            with torch.no_grad():
                log_p = torch.log_softmax(model(**inputs).logits[0, -1].double(), -1)
            out.setdefault(name, {})[caption] = log_p[yes].item()
        return out, first_ids

    if PALIGEMMA.exists():
        shutil.rmtree(PALIGEMMA)
    PALIGEMMA.mkdir(parents=True)
    save_in_hub_layout(m, processor, PALIGEMMA)
    local, ids = scores(m)
    assert local == scores(PaliGemmaForConditionalGeneration.from_pretrained(PALIGEMMA).eval())[0]
    name, caption = next(pairs())
    demo_image = DEMO / "images" / "ex_0_img_0.png"
    pixels = processor.image_processor(Image.open(demo_image).convert("RGB"), return_tensors="pt")["pixel_values"]
    (PALIGEMMA / "expected.json").write_text(json.dumps({
        "question_template": QUESTION, "answer": "Yes", "yes_token": yes,
        "t2v_metrics_answer_token": {"id": t2v_token, "token": tok.convert_ids_to_tokens(t2v_token)},
        "prompt": {"caption": caption, "input_ids": ids},
        "bicubic": {"image": str(demo_image.relative_to(ROOT)), "pixels": [round(float(x), 7) for x in pixels.flatten()]},
        "local": local,
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
    }, indent=1, sort_keys=True) + "\n")


def main():
    suite()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tok = tokenizer(work)
        processor = Gemma3Processor(
            image_processor=Gemma3ImageProcessorPil(size={"height": SIZE, "width": SIZE}, image_mean=[0.5] * 3,
                                                 image_std=[0.5] * 3, do_pan_and_scan=False),
            tokenizer=tok, chat_template=CHAT, image_seq_length=4)
        m = model()
        favour_yes_and_no(m, processor, tok)
        if MODEL.exists():
            shutil.rmtree(MODEL)
        MODEL.mkdir(parents=True)
        # Gemma 3's control tokens; "Yes" and "No" stay ordinary pieces, as in Gemma 3.
        save_in_hub_layout(m, processor, MODEL, controls=["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                                                          "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                                                          "<image_soft_token>"])
        shutil.copy(work / "tokenizer.model", MODEL / "tokenizer.model")
        reloaded = Gemma3ForConditionalGeneration.from_pretrained(MODEL).eval()
        yes = tok.convert_tokens_to_ids("Yes")
        assert tok.encode("Yes", add_special_tokens=False) == [yes]
        local = local_scores(m, processor, yes)
        assert local == local_scores(reloaded, processor, yes), "the hub layout loads back to the same model"
        convert = Path(shutil.which("convert_hf_to_gguf.py") or
                       Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
                       / "site-packages" / "bin" / "convert_hf_to_gguf.py")
        gguf, mmproj = MODEL / "gemma3-tiny-f32.gguf", MODEL / "mmproj-gemma3-tiny-f32.gguf"
        subprocess.run([sys.executable, str(convert), str(MODEL), "--outfile", str(gguf), "--outtype", "f32"],
                       check=True, capture_output=True)
        subprocess.run([sys.executable, str(convert), str(MODEL), "--mmproj", "--outfile", str(mmproj),
                        "--outtype", "f32"], check=True, capture_output=True)
        server = server_scores(m, processor, yes, llama_tokenizer(gguf))
        paligemma(work / "sp")
    asked = ask_llama_server(gguf, mmproj)
    worst = max(abs(asked[n][c] - server[n][c]) for n in server for c in server[n])
    print(f"llama.cpp server vs transformers on the server's prompt: max |Δ log p| = {worst:.2e}")
    name, caption = next(pairs())
    messages = [{"role": "user", "content": [{"type": "image", "image": image(name)},
                                              {"type": "text", "text": QUESTION.format(caption)}]}]
    prompt_ids = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]
    demo_image = DEMO / "images" / "ex_0_img_0.png"
    bilinear = processor.image_processor(Image.open(demo_image).convert("RGB"), return_tensors="pt")["pixel_values"]
    (MODEL / "expected.json").write_text(json.dumps({
        "prompt": {"caption": caption, "input_ids": list(map(int, prompt_ids[0] if isinstance(prompt_ids[0], list) else prompt_ids))},
        "bilinear": {"image": str(demo_image.relative_to(ROOT)), "pixels": [round(float(x), 7) for x in bilinear.flatten()]},
        "question_template": QUESTION, "answer": "Yes", "yes_token": yes,
        "local": local, "server": server, "server_vs_transformers_max_abs": worst,
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "llama_cpp_python": __import__("llama_cpp").__version__},
    }, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
