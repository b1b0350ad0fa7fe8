#!/usr/bin/env bash
# One process against two ranks under `mpirun -np 2` on this machine, at the main job's
# shapes and the same global batch (64 sequences × 64 tokens): tokens/s, the bytes each rank
# all-reduces per step and the all-reduce's time, and the held-out loss (the same run, so
# the same loss). docs/SCALE_OUT.md. Needs Open MPI (docs/SCALE_OUT.md).
#
#   scripts/data-parallel-bench.sh [STEPS=60]
#   MLM_TRAIN=path/to/mlm-train scripts/data-parallel-bench.sh   # a binary built with `mpi`
set -euo pipefail
steps=${1:-60}
cd "$(dirname "$0")/.."
bin=${MLM_TRAIN:-}
if [ -z "$bin" ]; then
    cargo build --release -p mlm-train --features mpi
    bin=target/release/mlm-train
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--max-steps "$steps" --warmup-steps 10 --eval-every "$steps" --checkpoint-every "$steps")
$bin fetch-corpus >/dev/null
$bin train "${common[@]}" --run "$out/one" --batch-size 64 >"$out/one.log" 2>&1
# As root, Open MPI asks for both variables; in a container, shared memory without CMA.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun -np 2 $bin train "${common[@]}" --run "$out/two" --batch-size 32 --parallel-shards 1 \
    >"$out/two.log" 2>&1
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
