"""PyTorch peer of `mlm-train bench backends`: transformers' `BertForMaskedLM` (decoder tied to
the word embeddings), one forward + backward of a batch of random tokens with 15 % of the
positions graded, in eager mode, f32, on CUDA or the CPU.

Variants (same shapes as our bench; `--variants` picks, default dense,gathered):
  dense     -- Hugging Face's default: every position through the head, labels -100 elsewhere;
  gathered  -- only the graded rows through the head (what our `forward_masked` does);
  compiled  -- `gathered` under `torch.compile` (Inductor; the warm-up steps compile it).
With `--architecture modernbert`, transformers' `ModernBertForMaskedLM` instead (sdpa
attention, a global layer every third, the others over `--local-attention` tokens), whose
`sparse_prediction=True` is its own gathered path (variant `gathered`).

Prints one JSON list of rows: variant, median forward+backward (ms) over STEPS steps after
WARMUP and its tokens/s, the same for a full training step (+ clip by the global norm 1.0 and
AdamW, lr 1e-4, weight decay 0.01, eps 1e-6), peak device memory (MiB, CUDA only), the device's
name.

    python torch_bert_step.py --device cuda --batch 32 --seq 128 --hidden 768 --layers 12 \
        --heads 12 --intermediate 3072 --vocab 30522 [--warmup 3] [--steps 10] [--json OUT]
"""

import argparse
import json
import statistics
import time

import torch
import resource

from transformers import BertConfig, BertForMaskedLM, ModernBertConfig, ModernBertForMaskedLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    for name, default in [("batch", 32), ("seq", 128), ("hidden", 128), ("layers", 2),
                          ("heads", 2), ("intermediate", 512), ("vocab", 8192),
                          ("warmup", 3), ("steps", 10)]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--label", default="")
    p.add_argument("--architecture", default="bert", choices=["bert", "modernbert"])
    p.add_argument("--local-attention", type=int, default=128)
    p.add_argument("--variants", default="dense,gathered")
    p.add_argument("--json")
    a = p.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(42)
    config = BertConfig(vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                        num_attention_heads=a.heads, intermediate_size=a.intermediate,
                        max_position_embeddings=max(a.seq, 512), hidden_act="gelu",
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if a.architecture == "modernbert":
        config = ModernBertConfig(vocab_size=a.vocab, hidden_size=a.hidden,
                                  num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                  intermediate_size=a.intermediate,
                                  max_position_embeddings=max(a.seq, 512),
                                  local_attention=a.local_attention, sparse_prediction=True,
                                  pad_token_id=0, bos_token_id=2, eos_token_id=3,
                                  cls_token_id=2, sep_token_id=3, attn_implementation="sdpa")
        model = ModernBertForMaskedLM(config).to(device).train()
    else:
        model = BertForMaskedLM(config).to(device).train()
    rows = a.batch * a.seq
    input_ids = torch.randint(5, a.vocab, (a.batch, a.seq), device=device)
    attention_mask = torch.ones_like(input_ids)
    n_masked = round(0.15 * rows)
    positions = torch.randperm(rows, device=device)[:n_masked]
    targets = input_ids.view(-1)[positions].clone()
    labels = torch.full((rows,), -100, dtype=torch.long, device=device)
    labels[positions] = targets
    labels = labels.view(a.batch, a.seq)

    def dense():
        return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    def gathered():
        hidden = model.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = model.cls(hidden.reshape(rows, a.hidden)[positions])
        return torch.nn.functional.cross_entropy(logits, targets)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)

    def fwd_bwd(loss_fn):
        model.zero_grad(set_to_none=True)
        loss_fn().backward()

    def train_step(loss_fn):
        fwd_bwd(loss_fn)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    def median_ms(step, loss_fn):
        times = []
        for i in range(a.warmup + a.steps):
            sync()
            started = time.perf_counter()
            step(loss_fn)
            sync()
            if i >= a.warmup:
                times.append(time.perf_counter() - started)
        return 1e3 * statistics.median(times)

    def sparse():
        return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    variants = {"dense": dense, "gathered": gathered, "compiled": torch.compile(gathered)}
    variants = [(v, variants[v]) for v in a.variants.split(",")]
    if a.architecture == "modernbert":
        variants = (("gathered", sparse),)
    out = []
    for variant, loss_fn in variants:
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        median = median_ms(fwd_bwd, loss_fn)
        train = median_ms(train_step, loss_fn)
        out.append({
            "label": a.label,
            "variant": variant,
            "median_step_ms": median,
            "tokens_per_second": 1e3 * rows / median,
            "train_step_ms": train,
            "train_tokens_per_second": 1e3 * rows / train,
            "peak_device_mib": torch.cuda.max_memory_allocated() / 2**20
            if device.type == "cuda" else None,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        })
    text = json.dumps(out, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
