"""A random `XLMRobertaForMaskedLM` of xlm-roberta-base's shape, as `save_pretrained` writes it,
with a SentencePiece Unigram `tokenizer.json` of XLM-R's 250 002 tokens: the checkpoint
`docs/PERFORMANCE.md` ("Large vocabularies") continues on this machine.

XLM-R's own tokenizer cannot be fetched here (no network but the package registries), so the
vocabulary is a Unigram that `tokenizers` trains on the given text (`--pieces` pieces, `▁` word
starts), padded with never-used pieces to 250 001, then `<mask>` last, as in XLM-R. The model is
xlm-roberta-base's configuration (d_model 768, 12 layers, 12 heads, feed-forward 3 072, 514
positions, one segment, LayerNorm ε 1e-5): 278 M parameters, 192 M of them the embedding.

    python3 scripts/xlmr-base-checkpoint.py OUT_DIR TEXT_FILE... [--pieces 8000]
"""

import argparse
import json
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers.processors import TemplateProcessing
from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

VOCAB_SIZE = 250_002


def tokenizer(texts, pieces):
    """A Unigram over `texts` with `pieces` learned pieces, padded to XLM-R's size."""
    unigram = Tokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    unigram.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=pieces, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    unigram.train_from_iterator(texts, trainer)
    spec = json.loads(unigram.to_str())
    vocab = spec["model"]["vocab"]
    lowest = min(score for _, score in vocab)
    vocab += [[f"\u2581unused{i}", lowest - 10.0] for i in range(VOCAB_SIZE - 1 - len(vocab))]
    padded = Tokenizer.from_str(json.dumps(spec))
    padded.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    padded.post_processor = TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    assert padded.get_vocab_size() == VOCAB_SIZE, padded.get_vocab_size()
    return padded


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("texts", type=Path, nargs="+")
    parser.add_argument("--pieces", type=int, default=8000)
    args = parser.parse_args()
    texts = [line for path in args.texts for line in path.read_text().splitlines() if line]
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer(texts, args.pieces).save(str(args.out / "tokenizer.json"))
    torch.manual_seed(0)
    config = XLMRobertaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=514,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    model = XLMRobertaForMaskedLM(config)
    model.save_pretrained(args.out)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{args.out}: {parameters / 1e6:.0f} M parameters, vocabulary {VOCAB_SIZE}")


if __name__ == "__main__":
    main()
