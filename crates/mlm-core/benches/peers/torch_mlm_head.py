"""PyTorch peer of `head_loss.rs`: transformers' `BertOnlyMLMHead`, decoder tied to a token
embedding, cross-entropy with ignore_index=-100, forward + backward, on the CPU in f32.

Variants (same shapes, positions and targets as the Rust bench):
  dense     -- Hugging Face's default: every row through the head, labels -100 elsewhere;
  gathered  -- only the masked rows through the head (what our `forward_masked` does).

Prints one JSON object per (shape, variant): median step time over STEPS steps after one
warm-up, and the peak RSS above the baseline during the first step (Linux's VmHWM, reset
by writing 5 to /proc/self/clear_refs: the same method as the Rust bench).

    python torch_mlm_head.py [--shapes base,tiny] [--steps 3] [--json OUT]
"""

import argparse
import json
import time

import torch
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

SHAPES = {
    "base": dict(batch=32, seq=128, d_model=768, vocab=30522),
    "tiny": dict(batch=32, seq=128, d_model=128, vocab=8192),
}
MASKED_SHARE = 0.15


def rss_mib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024.0
    return None


def setup(shape):
    torch.manual_seed(7)
    b, s, d, v = shape["batch"], shape["seq"], shape["d_model"], shape["vocab"]
    rows = b * s
    n_masked = round(MASKED_SHARE * rows)
    positions = torch.tensor([i * rows // n_masked for i in range(n_masked)])
    targets = (positions * 7919) % v
    config = BertConfig(hidden_size=d, vocab_size=v, hidden_act="gelu", layer_norm_eps=1e-12)
    head = BertOnlyMLMHead(config)
    embedding = torch.nn.Parameter(torch.randn(v, d) * 0.02)
    head.predictions.decoder.weight = embedding  # tied, as BertForMaskedLM ties it
    hidden = torch.randn(b, s, d, requires_grad=True)
    labels = torch.full((rows,), -100, dtype=torch.long)
    labels[positions] = targets
    return head, hidden, positions, targets, labels


def step(variant, head, hidden, positions, targets, labels):
    head.zero_grad(set_to_none=True)
    hidden.grad = None
    d = hidden.shape[-1]
    if variant == "dense":
        logits = head(hidden)
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.shape[-1]), labels, ignore_index=-100
        )
    else:
        logits = head(hidden.view(-1, d)[positions])
        loss = torch.nn.functional.cross_entropy(logits, targets)
    loss.backward()
    return loss.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="base,tiny")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for name in args.shapes.split(","):
        inputs = setup(SHAPES[name])
        for variant in ("dense", "gathered"):
            baseline = rss_mib("VmRSS:")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            loss = step(variant, *inputs)
            peak = rss_mib("VmHWM:")
            times = []
            for _ in range(args.steps):
                started = time.perf_counter()
                step(variant, *inputs)
                times.append(time.perf_counter() - started)
            times.sort()
            row = dict(
                shape=name,
                variant=variant,
                median_ms=1e3 * times[len(times) // 2],
                peak_mib=peak - baseline,
                loss=loss,
                threads=torch.get_num_threads(),
                torch=torch.__version__,
            )
            print(json.dumps(row))
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
