"""Pseudo-log-likelihoods (Salazar et al. 2020) of a few sentences under the tiny
transformers BertForMaskedLM of crates/mlm-train/tests/fixtures/tiny_bert/, the reference
of mlm-core's scorer (crates/mlm-train/tests/minimal_pairs.rs).

Run: .venv-bench/bin/python scripts/peers/make_pll_reference.py   (torch, transformers)
Writes crates/mlm-train/tests/fixtures/tiny_bert/pll.json: for each sentence (token ids
without [CLS]/[SEP]) the PLL, sum over i of log p(w_i | the sentence with w_i masked), and
PLL-word-l2r (Kauf & Ivanova 2023, minicons' `within_word_l2r`), where the copy of w_i also
masks the continuation pieces after it within its word; each masked copy run alone (no
padding, no batching), in eval mode; the sums in float64. The word pieces are those of
tests/minimal_pairs.rs's `tiny_tokenizer`: ids from FIRST_CONTINUATION on are `##` pieces.
"""
import json, os
import torch
from transformers import BertForMaskedLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "crates/mlm-train/tests/fixtures/tiny_bert")
PAD, CLS, SEP, MASK = 0, 2, 3, 4  # the fixture's ids, in SPECIAL_TOKENS order
FIRST_CONTINUATION = 42  # 5 specials, 11 words, 26 letters, then ##a … ##v

SENTENCES = [
    [17],
    [40, 41],
    [17, 33, 9],
    [9, 33, 17],
    [12, 60, 7, 21, 55],
    [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19],  # 14 tokens: all 16 positions
    [63, 63, 62, 20, 30, 44, 8],
    [20, 50, 51, 52, 53, 54, 55, 56, 21, 60, 61],  # words of 8 and 3 pieces
    [6, 42, 43, 7, 44, 45, 46, 8, 47],
]


def pll(model, sentence, word_l2r=False):
    ids = [CLS] + sentence + [SEP]
    total = 0.0
    for i, token in enumerate(sentence):
        end = i + 1
        while word_l2r and end < len(sentence) and sentence[end] >= FIRST_CONTINUATION:
            end += 1
        masked = list(ids)
        masked[i + 1 : end + 1] = [MASK] * (end - i)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([masked])).logits[0, i + 1]
        total += float(torch.log_softmax(logits, dim=-1)[token])
    return total


if __name__ == "__main__":
    model = BertForMaskedLM.from_pretrained(TINY).eval()
    cases = [
        {"ids": s, "pll": pll(model, s), "pll_word_l2r": pll(model, s, word_l2r=True)}
        for s in SENTENCES
    ]
    out = {
        "special": {"pad_id": PAD, "cls_id": CLS, "sep_id": SEP, "mask_id": MASK},
        "sentences": cases,
        "note": "transformers BertForMaskedLM, eval mode, f32 logits, PLL summed in float64",
    }
    with open(os.path.join(TINY, "pll.json"), "w") as f:
        json.dump(out, f, indent=1)
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__)
