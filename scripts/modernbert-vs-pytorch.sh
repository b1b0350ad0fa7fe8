#!/usr/bin/env bash
# ModernBERT-base's training step, ours against transformers' ModernBertForMaskedLM in PyTorch
# eager (sdpa attention, sparse_prediction=True, 2 threads), in one invocation, alternated
# ROUNDS times (default 2): batch 4 × 512 tokens, d_model 768, 22 layers, 12 heads, GeGLU
# 1 152, vocabulary 50 368, a global layer every third and the others over a window of 128,
# 15 % of the tokens graded. Prints each run's full step (forward, backward, clip, AdamW) and
# peak RSS, and the ratio PyTorch's time / ours (> 1: ours faster).
# Then the sliding window's cost: ours at 2, 3 and 4 layers (global, local, local, global),
# whose differences are one local and one global layer at 512 tokens.
# A benchmark, not a test: CI does not run it. Builds target/debug/mlm-train (the dev
# profile is optimised).
# Usage: scripts/modernbert-vs-pytorch.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
venv=.venv-bench
out=target/modernbert-vs-pytorch
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
cargo build --workspace --features mpi --bin mlm-train
shape=(--batch-size 4 --seq-len 512 --hidden-size 768 --heads 12 --intermediate-size 1152
       --vocab-size 50368)
ours() { # LAYERS JSON
    /usr/bin/time -f %M -o "$2.rss" target/debug/mlm-train bench backends --backends flex \
        --architecture modernbert "${shape[@]}" --layers "$1" --warmup-steps 1 \
        --timed-steps 2 --json "$2" > /dev/null
}
theirs() { # JSON
    /usr/bin/time -f %M -o "$1.rss" "$venv/bin/python" scripts/peers/torch_bert_step.py \
        --device cpu --architecture modernbert --batch 4 --seq 512 --hidden 768 --layers 22 \
        --heads 12 --intermediate 1152 --vocab 50368 --warmup 1 --steps 2 --json "$1" > /dev/null
}
for round in $(seq "$rounds"); do
    ours 22 "$out/ours-$round.json"
    theirs "$out/theirs-$round.json"
done
for layers in 2 3 4; do
    ours "$layers" "$out/layers-$layers.json"
done
"$venv/bin/python" - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
read = lambda name: json.load(open(f"{out}/{name}"))[0]
rss = lambda name: int(open(f"{out}/{name}.rss").read().split()[-1]) / 1024
print("| round | ours: step | ours: peak RSS | PyTorch: step | PyTorch: peak RSS | PyTorch / ours |")
print("|---:|---:|---:|---:|---:|---:|")
for r in range(1, rounds + 1):
    o, t = read(f"ours-{r}.json"), read(f"theirs-{r}.json")
    print(f"| {r} | {o['train_step_ms'] / 1e3:.2f} s | {rss(f'ours-{r}.json'):.0f} MiB | "
          f"{t['train_step_ms'] / 1e3:.2f} s | {rss(f'theirs-{r}.json'):.0f} MiB | "
          f"{t['train_step_ms'] / o['train_step_ms']:.2f}× |")
ms = {n: read(f"layers-{n}.json")["median_step_ms"] for n in (2, 3, 4)}
print(f"\nForward + backward at 4 × 512 tokens: 2 layers {ms[2]:.0f} ms, 3 layers {ms[3]:.0f} ms, "
      f"4 layers {ms[4]:.0f} ms: a local layer (3 − 2) {ms[3] - ms[2]:.0f} ms, "
      f"a global layer (4 − 3) {ms[4] - ms[3]:.0f} ms")
PY
