#!/usr/bin/env bash
# BERT against ModernBERT from scratch at equal training time: the main job (every default:
# the plain-English corpus, its 8 192-token WordPiece, 64-token sequences, d_model 128, 2 layers)
# and `--architecture modernbert` at the same sizes, each trained for SECONDS of wall time
# (`--time-budget`, default 240) with seeds 1, 2, 3, then scored on Zorro
# (/work/shared/minimal-pairs/zorro, or ZORRO) beside its word-frequency baseline. Prints one
# row per run and the means: held-out loss on the same held-out documents (the corpus and
# tokenizer are the same for every run), steps done, Zorro accuracy.
# An experiment, not a test: CI does not run it. Builds target/debug/mlm-train (optimised).
# Usage: scripts/architecture-experiment.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-240}
zorro=${ZORRO:-/work/shared/minimal-pairs/zorro}
out=runs/architecture-experiment
mkdir -p "$out"
cargo build --workspace --features mpi --bin mlm-train
for seed in 1 2 3; do
    for architecture in bert modernbert; do
        run="$out/$architecture-seed$seed"
        rm -rf "$run"
        target/debug/mlm-train train --architecture "$architecture" --seed "$seed" \
            --time-budget "${seconds}s" --run "$run" --minimal-pairs "$zorro" > "$run.log" 2>&1
    done
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
print("| architecture | seed | steps | held-out loss | Zorro | Zorro's frequency baseline |")
print("|---|---:|---:|---:|---:|---:|")
means = {}
for architecture in ("bert", "modernbert"):
    for seed in (1, 2, 3):
        s = json.load(open(f"{out}/{architecture}-seed{seed}/summary.json"))
        pairs = s["minimal_pairs"]
        row = (s["final_valid_loss"], 100 * pairs["accuracy"])
        means.setdefault(architecture, []).append(row)
        print(f"| {architecture} | {seed} | {s['steps']} | {row[0]:.4f} | {row[1]:.1f} % | "
              f"{100 * pairs['unigram_accuracy']:.1f} % |")
for architecture, rows in means.items():
    loss = statistics.mean(r[0] for r in rows)
    zorro = statistics.mean(r[1] for r in rows)
    print(f"| **{architecture}, mean** | | | **{loss:.4f}** | **{zorro:.1f} %** | |")
PY
