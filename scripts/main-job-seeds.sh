#!/usr/bin/env bash
# The main job (every default but the seed and, if given, the steps) with seeds 1, 2, 3, each
# scored on Zorro (/work/shared/minimal-pairs/zorro, or ZORRO) beside its word-frequency
# baseline: steps, training seconds, held-out loss and Zorro per run, then the means. Runs one
# at a time; compare the training seconds of two builds only from one sitting.
# An experiment, not a test: CI does not run it.
# Usage: scripts/main-job-seeds.sh OUT [STEPS] [MLM_TRAIN]   (MLM_TRAIN: a built binary;
#        default target/release/mlm-train, built here)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1 steps=${2:-} bin=${3:-target/release/mlm-train}
zorro=${ZORRO:-/work/shared/minimal-pairs/zorro}
[ -n "${3:-}" ] || cargo build --release -p mlm-train
mkdir -p "$out"
for seed in 1 2 3; do
    run="$out/seed$seed"
    rm -rf "$run"
    "$bin" train --seed "$seed" ${steps:+--max-steps "$steps"} --run "$run" \
        --minimal-pairs "$zorro" > "$run.log" 2>&1
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
print("| seed | steps | training s | held-out loss | Zorro | Zorro's frequency baseline |")
print("|---:|---:|---:|---:|---:|---:|")
rows = []
for seed in (1, 2, 3):
    s = json.load(open(f"{out}/seed{seed}/summary.json"))
    pairs = s["minimal_pairs"]
    rows.append((s["wall_time_seconds"], s["final_valid_loss"], 100 * pairs["accuracy"]))
    print(f"| {seed} | {s['steps']} | {rows[-1][0]:.0f} | {rows[-1][1]:.4f} | {rows[-1][2]:.1f} % | "
          f"{100 * pairs['unigram_accuracy']:.1f} % |")
mean = [statistics.mean(r[i] for r in rows) for i in range(3)]
print(f"| **mean** | | **{mean[0]:.0f}** | **{mean[1]:.4f}** | **{mean[2]:.1f} %** | |")
PY
