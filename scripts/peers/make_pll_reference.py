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

Run: .venv-bench/bin/python scripts/peers/make_pll_reference.py modernbert   (+ tokenizers)
Writes crates/mlm-train/tests/fixtures/continued/modernbert_pll.json, the same for the tiny
ModernBertForMaskedLM of crates/mlm-train/tests/fixtures/continued/modernbert/ (as
make_reference.py saved it: perturbed, untrained; eager attention): MODERNBERT_SENTENCES
encoded by its byte-level BPE tokenizer.json without [CLS]/[SEP], a continuation piece any
token that does not start with `Ġ` (a sentence's first token always starts a word).
"""
import json, os, sys
import torch
from transformers import BertForMaskedLM, ModernBertForMaskedLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "crates/mlm-train/tests/fixtures/tiny_bert")
CONTINUED = os.path.join(ROOT, "crates/mlm-train/tests/fixtures/continued")
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

# Moby-Dick-like, as paragraphs.txt; the fixture's 39 merges leave words of many pieces.
MODERNBERT_SENTENCES = [
    "I",  # one token
    "the ship",
    "ship the",  # the words of the one before, swapped
    "I went to sea.",
    "the sea the sea",
    "Call me Ishmael.",
    "It is a way I have.",  # ` is` is the pieces `Ġ` + `is`
    "I quietly take to the ship.",
    "There is nothing surprising in this.",  # 22 tokens: all 24 positions
]


def pll(model, sentence, word_l2r=False, special=None, continues=None):
    """The sentence's PLL (or PLL-word-l2r) in float64; `special` the ids of
    [CLS]/[SEP]/[MASK] and `continues(id)` whether a piece continues a word, tiny_bert's
    unless given."""
    special = special or {"cls_id": CLS, "sep_id": SEP, "mask_id": MASK}
    continues = continues or (lambda token: token >= FIRST_CONTINUATION)
    ids = [special["cls_id"]] + sentence + [special["sep_id"]]
    total = 0.0
    for i, token in enumerate(sentence):
        end = i + 1
        while word_l2r and end < len(sentence) and continues(sentence[end]):
            end += 1
        masked = list(ids)
        masked[i + 1 : end + 1] = [special["mask_id"]] * (end - i)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([masked])).logits[0, i + 1]
        total += float(torch.log_softmax(logits, dim=-1)[token])
    return total


def tiny_bert():
    """tiny_bert's model, special ids, sentences, continuation rule, output and note."""
    model = BertForMaskedLM.from_pretrained(TINY).eval()
    special = {"pad_id": PAD, "cls_id": CLS, "sep_id": SEP, "mask_id": MASK}
    note = "transformers BertForMaskedLM, eval mode, f32 logits, PLL summed in float64"
    return model, special, SENTENCES, None, os.path.join(TINY, "pll.json"), note


def modernbert():
    """The continued/modernbert fixture's, its sentences encoded by its tokenizer.json."""
    from tokenizers import Tokenizer

    folder = os.path.join(CONTINUED, "modernbert")
    tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    model = ModernBertForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    names = {"pad_id": "[PAD]", "cls_id": "[CLS]", "sep_id": "[SEP]", "mask_id": "[MASK]"}
    special = {key: tokenizer.token_to_id(token) for key, token in names.items()}
    sentences = [tokenizer.encode(s, add_special_tokens=False).ids for s in MODERNBERT_SENTENCES]
    continues = lambda token: not tokenizer.id_to_token(token).startswith("Ġ")
    note = (
        "transformers ModernBertForMaskedLM (eager attention), eval mode, f32 logits, PLL "
        "summed in float64; word continuations: byte-level BPE tokens without a leading Ġ"
    )
    return model, special, sentences, continues, os.path.join(CONTINUED, "modernbert_pll.json"), note


FIXTURES = {"tiny_bert": tiny_bert, "modernbert": modernbert}


if __name__ == "__main__":
    for name in sys.argv[1:] or ["tiny_bert"]:
        model, special, sentences, continues, path, note = FIXTURES[name]()
        cases = [
            {
                "ids": s,
                "pll": pll(model, s, special=special, continues=continues),
                "pll_word_l2r": pll(model, s, True, special, continues),
            }
            for s in sentences
        ]
        out = {"special": special, "sentences": cases, "note": note}
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__)
