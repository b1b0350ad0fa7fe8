"""Pseudo-log-likelihoods (Salazar et al. 2020) of a few sentences under the tiny
transformers BertForMaskedLM of crates/mlm-train/tests/fixtures/tiny_bert/, the reference
of mlm-core's scorer (crates/mlm-train/tests/minimal_pairs.rs).

Run: .venv-bench/bin/python scripts/peers/make_pll_reference.py   (torch, transformers)
Writes crates/mlm-train/tests/fixtures/tiny_bert/pll.json: for each sentence (token ids
without [CLS]/[SEP]) the PLL, sum over i of log p(w_i | the sentence with w_i masked), each
masked copy run alone (no padding, no batching), in eval mode; the sum in float64.
"""
import json, os
import torch
from transformers import BertForMaskedLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "crates/mlm-train/tests/fixtures/tiny_bert")
PAD, CLS, SEP, MASK = 0, 2, 3, 4  # the fixture's ids, in SPECIAL_TOKENS order

SENTENCES = [
    [17],
    [40, 41],
    [17, 33, 9],
    [9, 33, 17],
    [12, 60, 7, 21, 55],
    [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19],  # 14 tokens: all 16 positions
    [63, 63, 62, 20, 30, 44, 8],
]


def pll(model, sentence):
    ids = [CLS] + sentence + [SEP]
    total = 0.0
    for i, token in enumerate(sentence):
        masked = list(ids)
        masked[i + 1] = MASK
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([masked])).logits[0, i + 1]
        total += float(torch.log_softmax(logits, dim=-1)[token])
    return total


if __name__ == "__main__":
    model = BertForMaskedLM.from_pretrained(TINY).eval()
    cases = [{"ids": s, "pll": pll(model, s)} for s in SENTENCES]
    out = {
        "special": {"pad_id": PAD, "cls_id": CLS, "sep_id": SEP, "mask_id": MASK},
        "sentences": cases,
        "note": "transformers BertForMaskedLM, eval mode, f32 logits, PLL summed in float64",
    }
    with open(os.path.join(TINY, "pll.json"), "w") as f:
        json.dump(out, f, indent=1)
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__)
