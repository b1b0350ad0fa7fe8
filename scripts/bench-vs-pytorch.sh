#!/usr/bin/env bash
# Ours against PyTorch eager (transformers, 2 threads) on this machine, in one invocation:
# 1. the main job's training step (BertForMaskedLM 64 × 64 tokens, d_model 128, 2 layers,
#    2 heads, feed-forward 512, vocab 8192, 15 % masked): forward+backward and the full
#    step (+ clip + AdamW) on each CPU backend of ours against PyTorch's dense (HF default)
#    and gathered (masked rows only) paths, as tokens/s, ratios and GFLOP/s against the
#    machine's peak (PEAK_GFLOPS; by default cores × 2 FMA pipes × 2 FLOP × f32 lanes × 2.6 GHz,
#    16 lanes on Zen 5, which runs AVX-512 at full width, 8 on Zen 4 and older: 333 or 166 on
#    2 cores);
# 2. the head + loss at BERT-base and tiny shapes (criterion), time and peak memory.
# A benchmark, not a test: CI does not run it. Usage: scripts/bench-vs-pytorch.sh [step|base|tiny]
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
shapes=$([ "$what" = all ] || [ "$what" = step ] && echo base,tiny || echo "$what")
venv=.venv-bench
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, transformers' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch transformers
fi
out=target/bench-vs-pytorch
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [ -z "${PEAK_GFLOPS:-}" ]; then
    family=$(awk -F: '/^cpu family/ { print $2 + 0; exit }' /proc/cpuinfo)
    lanes=$([ "${family:-0}" -ge 26 ] && echo 16 || echo 8)
    PEAK_GFLOPS=$(( $(nproc) * 2 * 2 * lanes * 26 / 10 ))
    echo "CPU family ${family:-?}, $(nproc) cores: peak ${PEAK_GFLOPS} GFLOP/s (f32, 2.6 GHz)"
fi
export PEAK_GFLOPS

if [ "$what" = all ] || [ "$what" = step ]; then
    cargo build --release -p mlm-train
    ./target/release/mlm-train bench backends --backends flex,ndarray --batch-size 64 \
        --seq-len 64 --json "$out/ours-step.json"
    "$venv/bin/python" scripts/peers/torch_bert_step.py --device cpu --batch 64 --seq 64 \
        --json "$out/theirs-step.json" > /dev/null
    "$venv/bin/python" scripts/peers/step_table.py "$out/ours-step.json" "$out/theirs-step.json"
    [ "$what" = step ] && exit 0
fi

# Ours: criterion, then the memory and GFLOP/s table (written as JSON).
# criterion takes one filter: a single shape's name, or none for both.
filter=$([ "$shapes" = base,tiny ] || echo "$shapes")
HEAD_LOSS_JSON="$PWD/$out/ours.json" cargo bench -p mlm-core --features flex --bench head_loss -- $filter
"$venv/bin/python" crates/mlm-core/benches/peers/torch_mlm_head.py --shapes "$shapes" \
    --json "$out/theirs.json"

"$venv/bin/python" - "$out/ours.json" "$out/theirs.json" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))
theirs = {(r["shape"], r["variant"]): r for r in json.load(open(sys.argv[2]))}
print("\n| shape | ours | backend | PyTorch | our time (ms) | theirs (ms) | time ours/theirs | our peak (MiB) | theirs (MiB) | memory ours/theirs |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
for r in ours:
    if r["variant"] != "sparse":
        continue
    for peer in ("dense", "gathered"):
        t = theirs.get((r["shape"], peer))
        if t is None:
            continue
        mem = r["peak_mib"] / t["peak_mib"] if r["peak_mib"] and t["peak_mib"] > 0 else float("nan")
        print(f"| {r['shape']} | sparse | {r['backend']} | {peer} | {r['median_ms']:.1f} | {t['median_ms']:.1f} | "
              f"{r['median_ms'] / t['median_ms']:.2f} | {r['peak_mib']:.0f} | {t['peak_mib']:.0f} | {mem:.2f} |")
PY
