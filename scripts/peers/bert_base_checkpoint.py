"""A `bert-base-uncased`-shaped checkpoint to continue from, without a download: transformers'
`BertConfig()` (d_model 768, 12 layers, vocab 30 522) with random weights, `save_pretrained`,
and a `vocab.txt` of 30 522 tokens: BERT's five specials, a run's WordPiece vocabulary, then
`[unusedN]` fillers (the masker never selects bracketed tokens).

    python3 scripts/peers/bert_base_checkpoint.py OUT RUN/tokenizer.json
    mlm-train train --init-from OUT --corpus data/bbe.jsonl --max-seq-len 128 --batch-size 8 ...
"""

import json
import sys

import torch
from transformers import BertConfig, BertForMaskedLM

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def main(out, tokenizer_json):
    torch.manual_seed(0)
    config = BertConfig()
    BertForMaskedLM(config).save_pretrained(out)
    words = json.load(open(tokenizer_json))["model"]["vocab"]
    vocab = SPECIALS + [w for w in words if w not in SPECIALS]
    vocab += [f"[unused{i}]" for i in range(config.vocab_size - len(vocab))]
    with open(f"{out}/vocab.txt", "w") as f:
        f.write("\n".join(vocab) + "\n")
    print(f"{out}: BertForMaskedLM, {config.vocab_size} tokens")


if __name__ == "__main__":
    main(*sys.argv[1:])
