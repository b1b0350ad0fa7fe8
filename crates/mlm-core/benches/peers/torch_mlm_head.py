"""PyTorch peer of `head_loss.rs`: transformers' `BertOnlyMLMHead`, decoder tied to a token
embedding, cross-entropy with ignore_index=-100, forward + backward, on the CPU in f32.

Variants (same shapes, positions and targets as the Rust bench):
  dense     -- Hugging Face's default: every row through the head, labels -100 elsewhere;
  gathered  -- only the masked rows through the head (what our `forward_masked` does);
  chunked   -- the gathered rows through the transform, then the decoder and the loss a chunk
               of rows at a time with the gradients made in the forward: Liger-Kernel's fused
               linear cross-entropy (Hsu et al. 2024, §3.2) written in PyTorch, since
               liger-kernel needs Triton and a GPU. Large-vocabulary shapes (`xlmr`,
               `xlmr4096`) run `gathered` and `chunked` only, one timed step.

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
    "xlmr": dict(batch=8, seq=512, d_model=768, vocab=250002),
    "xlmr4096": dict(batch=8, seq=512, d_model=768, vocab=250002, masked_share=1.0),
}
MASKED_SHARE = 0.15
# Rows per chunk of `chunked`: the logits of a chunk at most 2**24 floats, as ours.
CHUNK_LOGITS = 1 << 24


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Σ_rows cross-entropy of `x W^T + b` against `targets`, a chunk of rows at a time; the
    forward makes the gradients (Liger's FLCE), the backward scales them."""

    @staticmethod
    def forward(ctx, x, weight, bias, targets, rows):
        grad_x, grad_w, grad_b = torch.empty_like(x), torch.zeros_like(weight), torch.zeros_like(bias)
        loss = torch.zeros((), dtype=torch.float32)
        for start in range(0, x.shape[0], rows):
            x_c, t_c = x[start : start + rows], targets[start : start + rows]
            logits = torch.addmm(bias, x_c, weight.t())
            lse = torch.logsumexp(logits, dim=1)
            loss += (lse - logits.gather(1, t_c[:, None])[:, 0]).sum()
            grad = torch.exp(logits.sub_(lse[:, None]))
            grad[torch.arange(len(t_c)), t_c] -= 1.0
            grad_x[start : start + rows] = grad @ weight
            grad_w.addmm_(grad.t(), x_c)
            grad_b += grad.sum(0)
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        return grad_x * grad_loss, grad_w * grad_loss, grad_b * grad_loss, None, None


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
    n_masked = round(shape.get("masked_share", MASKED_SHARE) * rows)
    positions = torch.tensor([i * rows // n_masked for i in range(n_masked)])
    targets = (positions * 7919) % v
    config = BertConfig(hidden_size=d, vocab_size=v, hidden_act="gelu", layer_norm_eps=1e-12)
    head = BertOnlyMLMHead(config)
    embedding = torch.nn.Parameter(torch.randn(v, d) * 0.02)
    head.predictions.decoder.weight = embedding  # tied, as BertForMaskedLM ties it
    head.predictions.decoder.bias = head.predictions.bias  # one output bias, as it ties it
    hidden = torch.randn(b, s, d, requires_grad=True)
    labels = torch.full((rows,), -100, dtype=torch.long)
    labels[positions] = targets
    return head, hidden, positions, targets, labels


def step(variant, head, hidden, positions, targets, labels):
    head.zero_grad(set_to_none=True)
    hidden.grad = None
    d = hidden.shape[-1]
    if variant == "chunked":
        predictions = head.predictions
        transformed = predictions.transform(hidden.view(-1, d)[positions])
        rows = max(1, CHUNK_LOGITS // predictions.decoder.weight.shape[0])
        loss = ChunkedLinearCrossEntropy.apply(
            transformed, predictions.decoder.weight, predictions.bias, targets, rows
        ) / len(targets)
    elif variant == "dense":
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
        shape = SHAPES[name]
        inputs = setup(shape)
        large = shape["vocab"] >= 100_000
        for variant in ("gathered", "chunked") if large else ("dense", "gathered", "chunked"):
            baseline = rss_mib("VmRSS:")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            loss = step(variant, *inputs)
            peak = rss_mib("VmHWM:")
            times = []
            for _ in range(1 if large else args.steps):
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
