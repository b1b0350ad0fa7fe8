"""Prints the main job's training step, ours against PyTorch, as a Markdown table.

    python step_table.py OURS.json THEIRS.json

OURS.json: rows of `mlm-train bench backends`; THEIRS.json: rows of torch_bert_step.py. Both at
the main job's shapes. GFLOP/s count the useful work of the gathered step (the encoder at every
token, the head at the masked rows only; backward = 2 × forward) for every row, so a dense
step that does more work is not credited for it; PEAK_GFLOPS (bench-vs-pytorch.sh sets it from
the CPU; default 166) is the machine's peak.
"""

import json
import os
import sys

BATCH, SEQ, D, LAYERS, FF, VOCAB, MASKED = 64, 64, 128, 2, 512, 8192, 0.15


def step_gflop():
    tokens = BATCH * SEQ
    layer = 2 * tokens * (4 * D * D + 2 * D * FF) + 2 * 2 * BATCH * SEQ * SEQ * D
    head = 2 * round(MASKED * tokens) * (D * D + D * VOCAB)
    return 3 * (LAYERS * layer + head) / 1e9


def main():
    ours = json.load(open(sys.argv[1]))
    theirs = {r["variant"]: r for r in json.load(open(sys.argv[2]))}
    peak = float(os.environ.get("PEAK_GFLOPS", 166))
    gflop = step_gflop()
    print(f"\nMain job's step, {BATCH} × {SEQ} tokens; {gflop:.1f} GFLOP of useful work per "
          f"forward+backward; peak {peak:.0f} GFLOP/s\n")
    print("| work | who | tokens/s | ms | GFLOP/s | % of peak | ours / PyTorch gathered | "
          "ours / PyTorch dense |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for work, ms_key, tps_key in (("forward+backward", "median_step_ms", "tokens_per_second"),
                                  ("training step", "train_step_ms", "train_tokens_per_second")):
        rows = [(f"ours, {r['backend']}", r) for r in ours]
        rows += [(f"PyTorch, {v}", theirs[v]) for v in ("gathered", "dense") if v in theirs]
        for who, r in rows:
            ms, tps = r[ms_key], r[tps_key]
            ratios = ["–", "–"]
            if who.startswith("ours"):
                ratios = [f"{tps / theirs[v][tps_key]:.2f}×" if v in theirs else "–"
                          for v in ("gathered", "dense")]
            rate = gflop / (ms / 1e3)
            print(f"| {work} | {who} | {tps:.0f} | {ms:.1f} | {rate:.0f} | "
                  f"{100 * rate / peak:.0f} % | {ratios[0]} | {ratios[1]} |")


if __name__ == "__main__":
    main()
