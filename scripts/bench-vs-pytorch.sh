#!/usr/bin/env bash
# Head + loss, ours (burn-ndarray and burn-flex) against PyTorch eager with transformers' BertOnlyMLMHead,
# in one invocation on this machine: prints our time and peak memory over theirs.
# A benchmark, not a test: CI does not run it. Usage: scripts/bench-vs-pytorch.sh [base|tiny]
set -euo pipefail
cd "$(dirname "$0")/.."
shapes=${1:-base,tiny}
venv=.venv-bench
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, transformers' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch transformers
fi
out=target/bench-vs-pytorch
mkdir -p "$out"

# Ours: criterion, then the memory and GFLOP/s table (written as JSON).
# criterion takes one filter: a single shape's name, or none for both.
filter=$([ "$shapes" = base,tiny ] || echo "$shapes")
HEAD_LOSS_JSON="$PWD/$out/ours.json" cargo bench -p mlm-core --bench head_loss -- $filter
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
