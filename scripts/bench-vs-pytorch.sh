#!/usr/bin/env bash
# Ours against PyTorch eager (transformers, 2 threads) on this machine, in one invocation:
# 1. the main job's training step (BertForMaskedLM 64 × 64 tokens, d_model 128, 2 layers,
#    2 heads, feed-forward 512, vocab 8192, 15 % masked): forward+backward and the full
#    step (+ clip + AdamW) on flex against PyTorch's dense (HF default), gathered (masked rows
#    only) and compiled (gathered under torch.compile) paths, ROUNDS (3) alternated sittings,
#    as tokens/s, ratios, the share of the machine's time outside the matrix products (perf,
#    ours and PyTorch's, where perf can record) and GFLOP/s against the
#    machine's peak (PEAK_GFLOPS; by default cores × 2 FMA pipes × 2 FLOP × f32 lanes × the
#    clock, with 16 lanes where the CPU has AVX-512 and runs it at full width, 8 with AVX2
#    and on Zen 4, which executes AVX-512 as two 256-bit halves; the clock is measured on
#    every core at once by a chain of dependent adds, one a cycle, since /proc/cpuinfo
#    reports the nominal clock under a hypervisor: 2596 MHz on a Zen 5 that runs at 4.44 GHz);
# 2. the head + loss at BERT-base and tiny shapes (criterion), time and peak memory; with
#    `xlmr` (or `xlmr4096`, or both: `xlmr,xlmr4096`) XLM-R-base's head (vocabulary 250 002) at
#    614 (4096) graded rows, our whole and chunked logits against PyTorch's gathered rows and
#    Liger-style chunks (one timed step each: seconds a step).
# A benchmark, not a test: CI does not run it.
# Usage: scripts/bench-vs-pytorch.sh [step|base|tiny|xlmr|xlmr4096|xlmr,xlmr4096]
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
    read -r vendor family mhz lanes < <(awk -F: '
        /^vendor_id/ && !v { gsub(/ /, "", $2); v = $2 }
        /^cpu family/ && !f { f = $2 + 0 }
        /^cpu MHz/ && !m { m = $2 + 0 }
        /^flags/ && !l { l = ($2 ~ / avx512f /) ? 16 : ($2 ~ / avx2 /) ? 8 : 4 }
        END { if (v == "AuthenticAMD" && f == 25 && l == 16) l = 8; print v, f, m, l }' /proc/cpuinfo)
    measured=$(bash scripts/clock-mhz.sh) && mhz=$measured
    PEAK_GFLOPS=$(awk -v n="$(nproc)" -v l="$lanes" -v m="$mhz" 'BEGIN { printf "%.0f", n * 2 * 2 * l * m / 1000 }')
    echo "$vendor family $family, $(nproc) cores, $lanes f32 lanes per FMA, ${mhz} MHz:" \
        "peak ${PEAK_GFLOPS} GFLOP/s (2 FMA pipes assumed; PEAK_GFLOPS overrides)"
fi
export PEAK_GFLOPS

if [ "$what" = all ] || [ "$what" = step ]; then
    cargo build --release -p mlm-train
    ours=(./target/release/mlm-train bench backends --backends flex --batch-size 64 --seq-len 64)
    theirs=("$venv/bin/python" scripts/peers/torch_bert_step.py --device cpu --batch 64 --seq 64)
    # ROUNDS alternated sittings (default 3): the table gives each time's median over them.
    ours_json=() theirs_json=()
    for round in $(seq "${ROUNDS:-3}"); do
        "${ours[@]}" --timed-steps 20 --json "$out/ours-step-$round.json" > /dev/null
        "${theirs[@]}" --steps 20 --variants gathered,compiled,dense \
            --json "$out/theirs-step-$round.json" > /dev/null 2>&1
        ours_json+=("$out/ours-step-$round.json") theirs_json+=("$out/theirs-step-$round.json")
    done
    # Where the time goes, ours and PyTorch's gathered step: perf over both cores (idle
    # included), after 3 s of set-up and warm-up. Skipped where perf cannot record. Its ring
    # buffers are 32 MiB a core (-m 8192 pages), so perf wakes to write a few dozen times, not
    # thousands: each wake-up interrupted a busy core (reschedule IPIs, up to 3 % of the
    # samples, counted as hand-offs of the profiled process).
    profiles=()
    if perf record -a -o /dev/null true 2>/dev/null; then
        for who in ours theirs; do
            run=("${ours[@]}" --timed-steps 60 --json "$out/profiled.json")
            [ $who = theirs ] && run=("${theirs[@]}" --steps 60 --variants gathered)
            perf record -a -m 8192 -D 3000 -F 499 --call-graph dwarf,32768 -o "$out/perf-$who.data" \
                "${run[@]}" > /dev/null 2>&1
            perf script -i "$out/perf-$who.data" -F pid,comm,ip,sym --no-inline 2>/dev/null |
                python3 scripts/peers/profile_by_kind.py --json "$out/profile-$who.json" \
                > "$out/profile-$who.md"
            profiles+=("$out/profile-$who.json")
        done
        echo "profiles by kind: $out/profile-ours.md, $out/profile-theirs.md"
    fi
    "$venv/bin/python" scripts/peers/step_table.py "$(IFS=,; echo "${ours_json[*]}")" \
        "$(IFS=,; echo "${theirs_json[*]}")" "${profiles[@]}"
    [ "$what" = step ] && exit 0
fi

# Ours: criterion, then the memory and GFLOP/s table (written as JSON).
# criterion takes one filter, so the shapes go by name in HEAD_LOSS_SHAPES.
HEAD_LOSS_SHAPES="$shapes" HEAD_LOSS_JSON="$PWD/$out/ours.json" \
    cargo bench -p mlm-core --features flex --bench head_loss
"$venv/bin/python" crates/mlm-core/benches/peers/torch_mlm_head.py --shapes "$shapes" \
    --json "$out/theirs.json"

"$venv/bin/python" - "$out/ours.json" "$out/theirs.json" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))
theirs = {(r["shape"], r["variant"]): r for r in json.load(open(sys.argv[2]))}
print("\n| shape | ours | backend | PyTorch | our time (ms) | theirs (ms) | time ours/theirs | our peak (MiB) | theirs (MiB) | memory ours/theirs |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
for r in ours:
    if r["variant"] not in ("sparse", "chunked"):
        continue
    for peer in ("dense", "gathered", "chunked"):
        t = theirs.get((r["shape"], peer))
        if t is None:
            continue
        mem = r["peak_mib"] / t["peak_mib"] if r["peak_mib"] and t["peak_mib"] > 0 else float("nan")
        print(f"| {r['shape']} | {r['variant']} | {r['backend']} | {peer} | {r['median_ms']:.1f} | {t['median_ms']:.1f} | "
              f"{r['median_ms'] / t['median_ms']:.2f} | {r['peak_mib']:.0f} | {t['peak_mib']:.0f} | {mem:.2f} |")
PY
