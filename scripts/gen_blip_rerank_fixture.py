"""BLIP's retrieval re-ranking on the blip-tiny fixture, as BLIP's own evaluation computes it
(`evaluation()` in salesforce/BLIP `train_retrieval.py`, kept in RoCOCO's `eval_blip_*.py`):
each query's top-k candidates by the ITC similarity get `itm_head(CLS)[:, 1] + similarity`
(the raw class-1 logit of the ITM head plus the cosine), every other candidate −100.

Inputs are blip-tiny's own reference inputs (crates/benchctl-models/tests/fixtures/blip-tiny/
reference.safetensors: 3 images, 4 texts); the model runs in `transformers`
(`BlipForImageTextRetrieval`). Writes `rerank.safetensors` beside them: the ITM logits
(3 × 4 × 2), and the re-ranked matrices image → text and text → image for k = 2.

    pip install torch transformers safetensors
    python scripts/gen_blip_rerank_fixture.py
"""

import pathlib

import torch
from safetensors.torch import load_file, save_file
from transformers import BlipForImageTextRetrieval

DIR = pathlib.Path(__file__).resolve().parent.parent / "crates" / "benchctl-models" / "tests" / "fixtures" / "blip-tiny"
K = 2


def main():
    ref = load_file(str(DIR / "reference.safetensors"))
    model = BlipForImageTextRetrieval.from_pretrained(str(DIR)).eval()
    pixels, ids, mask = ref["pixel_values"], ref["input_ids"], ref["attention_mask"]
    n_img, n_txt = pixels.shape[0], ids.shape[0]
    logits = torch.zeros(n_img, n_txt, 2)
    sims = torch.zeros(n_img, n_txt)
    with torch.no_grad():
        for i in range(n_img):
            for j in range(n_txt):
                args = dict(input_ids=ids[j:j + 1], attention_mask=mask[j:j + 1], pixel_values=pixels[i:i + 1])
                logits[i, j] = model(**args, use_itm_head=True).itm_score[0]
                sims[i, j] = model(**args, use_itm_head=False).itm_score[0, 0]
    # BLIP's evaluation: a matrix of −100, the shortlist filled with ITM class-1 logit + ITC.
    i2t = torch.full((n_img, n_txt), -100.0)
    for i in range(n_img):
        top_sim, top_idx = sims[i].topk(k=K, dim=0)
        i2t[i, top_idx] = logits[i, top_idx, 1] + top_sim
    t2i = torch.full((n_txt, n_img), -100.0)
    for j in range(n_txt):
        top_sim, top_idx = sims[:, j].topk(k=K, dim=0)
        t2i[j, top_idx] = logits[top_idx, j, 1] + top_sim
    save_file({"itm_logits": logits.contiguous(), "itc_cosine": sims.contiguous(),
               "rerank_i2t": i2t.contiguous(), "rerank_t2i": t2i.contiguous()},
              str(DIR / "rerank.safetensors"), metadata={"k": str(K)})
    print("i2t\n", i2t, "\nt2i\n", t2i)


if __name__ == "__main__":
    main()
