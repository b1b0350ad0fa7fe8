#!/usr/bin/env bash
# One process against two ranks of `train --world-size 2` on this machine, at the main job's
# shapes and the same global batch (64 sequences × 64 tokens): tokens/s, the bytes each rank
# all-reduces per step and the all-reduce's time, and the held-out loss (the same run, so
# the same loss). README "Scale out".
#
#   scripts/data-parallel-bench.sh [STEPS=60] [PORT=29500]
set -euo pipefail
steps=${1:-60}
port=${2:-29500}
cd "$(dirname "$0")/.."
cargo build --release -p mlm-train
bin=target/release/mlm-train
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--max-steps "$steps" --warmup-steps 10 --eval-every "$steps" --checkpoint-every "$steps")
$bin fetch-corpus >/dev/null
$bin train "${common[@]}" --run "$out/one" --batch-size 64 >"$out/one.log" 2>&1
ranks=(--world-size 2 --batch-size 32 --parallel-shards 1 --coordinator "127.0.0.1:$port")
$bin train "${common[@]}" --run "$out/two" "${ranks[@]}" --rank 1 >"$out/rank1.log" 2>&1 &
rank1=$!
$bin train "${common[@]}" --run "$out/two" "${ranks[@]}" --rank 0 >"$out/rank0.log" 2>&1
wait "$rank1"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| processes | batch per process × shards | tokens/s | all-reduce per step | all-reduce time per step | held-out loss |")
print("|---|---|---:|---:|---:|---:|")
for run, shape in (("one", "64 × 2 shards"), ("two", "32 × 1 shard")):
    s = json.load(open(f"{out}/{run}/summary.json"))
    traffic = s.get("all_reduce")
    bytes_ = f"{traffic['bytes_per_step'] / 2**20:.2f} MiB" if traffic else "–"
    time_ = f"{1e3 * traffic['seconds_per_step']:.1f} ms" if traffic else "–"
    print(f"| {s['world_size']} | {shape} | {s['tokens_per_second']:.0f} | {bytes_} | {time_} | {s['final_valid_loss']:.6f} |")
PY
