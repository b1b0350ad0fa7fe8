"""Prints the main job's training step, ours against PyTorch, as a Markdown table.

    python step_table.py OURS.json[,...] THEIRS.json[,...] [OURS_PROFILE.json THEIRS_PROFILE.json]

OURS.json: rows of `mlm-train bench backends`; THEIRS.json: rows of torch_bert_step.py; several
(alternated rounds) give the median of each time over the rounds. Both at
the main job's shapes. GFLOP/s count the useful work of the gathered step (the encoder at every
token, the head at the masked rows only; backward = 2 × forward) for every row, so a dense
step that does more work is not credited for it; PEAK_GFLOPS (bench-vs-pytorch.sh sets it from
the CPU; default 166) is the machine's peak. The profiles (profile_by_kind.py --json) add the
share of the machine's time in and outside the matrix products.
"""

import json
import os
import statistics
import sys

BATCH, SEQ, D, LAYERS, FF, VOCAB, MASKED = 64, 64, 128, 2, 512, 8192, 0.15


def step_gflop():
    tokens = BATCH * SEQ
    layer = 2 * tokens * (4 * D * D + 2 * D * FF) + 2 * 2 * BATCH * SEQ * SEQ * D
    head = 2 * round(MASKED * tokens) * (D * D + D * VOCAB)
    return 3 * (LAYERS * layer + head) / 1e9


PEERS = ("gathered", "compiled", "dense")
TIMES = ("median_step_ms", "tokens_per_second", "train_step_ms", "train_tokens_per_second")


def merged(files, key):
    """The rows of the comma-separated JSON `files` (alternated rounds of one bench), each
    time the median over the rounds; prints each round's times."""
    rounds = [json.load(open(f)) for f in files.split(",")]
    rows = []
    for row in rounds[0]:
        same = [r for rs in rounds for r in rs if r[key] == row[key]]
        rows.append(dict(row, **{t: statistics.median(r[t] for r in same) for t in TIMES}))
        if len(same) > 1:
            print(f"{row[key]}: training step (ms) per round " +
                  ", ".join(f"{r['train_step_ms']:.1f}" for r in same))
    return rows


def main():
    ours = merged(sys.argv[1], "backend")
    theirs = {r["variant"]: r for r in merged(sys.argv[2], "variant")}
    peers = [v for v in PEERS if v in theirs]
    peak = float(os.environ.get("PEAK_GFLOPS", 166))
    gflop = step_gflop()
    print(f"\nMain job's step, {BATCH} × {SEQ} tokens; {gflop:.1f} GFLOP of useful work per "
          f"forward+backward; peak {peak:.0f} GFLOP/s\n")
    print("| work | who | tokens/s | ms | GFLOP/s | % of peak | "
          + " | ".join(f"ours / PyTorch {v}" for v in peers) + " |")
    print("|---|---|---:|---:|---:|---:|" + "---:|" * len(peers))
    for work, ms_key, tps_key in (("forward+backward", "median_step_ms", "tokens_per_second"),
                                  ("training step", "train_step_ms", "train_tokens_per_second")):
        rows = [(f"ours, {r['backend']}", r) for r in ours]
        rows += [(f"PyTorch, {v}", theirs[v]) for v in peers]
        for who, r in rows:
            ms, tps = r[ms_key], r[tps_key]
            ratios = ["–"] * len(peers)
            if who.startswith("ours"):
                ratios = [f"{tps / theirs[v][tps_key]:.2f}×" for v in peers]
            rate = gflop / (ms / 1e3)
            print(f"| {work} | {who} | {tps:.0f} | {ms:.1f} | {rate:.0f} | "
                  f"{100 * rate / peak:.0f} % | " + " | ".join(ratios) + " |")
    profiles = [(who, json.load(open(f))) for who, f in zip(("ours", "PyTorch gathered"),
                                                            sys.argv[3:5])]
    if profiles:
        print("\nWhere the machine's time goes in the training step (perf, both cores, idle "
              "included; scripts/peers/profile_by_kind.py):\n")
        groups = list(profiles[0][1]["groups"])
        print("| who | " + " | ".join(groups) + " | outside the products |")
        print("|---|" + "---:|" * (len(groups) + 1))
        for who, p in profiles:
            shares = [p["groups"][g] for g in groups]
            outside = 100 - p["groups"]["products"]
            print(f"| {who} | " + " | ".join(f"{x:.1f} %" for x in shares)
                  + f" | **{outside:.1f} %** |")


if __name__ == "__main__":
    main()
