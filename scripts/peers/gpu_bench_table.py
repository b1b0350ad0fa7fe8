"""The table and the targets of `scripts/gpu-bench.sh`, from the JSON it wrote into OUT.
DEVICES are the backends that stand for the GPU: `wgpu,cuda`, or `flex` in a dry run (whose
targets then miss by design: flex against itself).

    python gpu_bench_table.py OUT DEVICES
"""

import glob
import json
import os
import sys


def load(path, default=None):
    return json.load(open(path)) if os.path.exists(path) else default


def main(out, devices):
    print()
    if os.path.exists(f"{out}/gpu.txt"):
        print(f"GPU: {open(f'{out}/gpu.txt').read().strip()}\n")
    print("| size | backend | adapter (type) | step (ms) | tokens/s | idle share | device memory (MiB) "
          "| Δ loss vs flex | ours / PyTorch gathered |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    checks = []
    for size in ("main", "base"):
        ours = load(f"{out}/ours-{size}.json", [])
        torch = {r["variant"]: r for r in load(f"{out}/torch-{size}.json", [])}
        gathered = torch.get("gathered")
        for r in ours:
            # A ratio against PyTorch only for the backends on PyTorch's device.
            ratio = (f"{r['median_step_ms'] / gathered['median_step_ms']:.2f}"
                     if gathered and r["backend"] in devices else "–")
            memory = r.get("device_reserved_mib")
            diff = r.get("loss_diff_vs_flex")
            idle = max(0.0, 1 - r.get("unsynced_step_ms", 0) / r["median_step_ms"])
            print(f"| {size} | {r['backend']} | {r['adapter']['name']} ({r['adapter']['device_type']}) "
                  f"| {r['median_step_ms']:.1f} | {r['tokens_per_second']:.0f} | {100 * idle:.0f} % "
                  f"| {'–' if memory is None else f'{memory:.0f}'} "
                  f"| {'–' if diff is None else f'{diff:+.1e}'} | {ratio} |")
        for variant, t in torch.items():
            memory = t.get("peak_device_mib")
            print(f"| {size} | PyTorch, {variant} | {t['device']} | {t['median_step_ms']:.1f} "
                  f"| {t['tokens_per_second']:.0f} | – | {'–' if memory is None else f'{memory:.0f}'} "
                  f"| – | – |")
        checks += targets(size, {r["backend"]: r for r in ours}, gathered, devices)

    print("\n| main job | steps | held-out loss | Δ vs flex | tokens/s |")
    print("|---|---:|---:|---:|---:|")
    runs = {os.path.basename(d)[len("train-"):]: load(f"{d}/summary.json")
            for d in sorted(glob.glob(f"{out}/train-*")) if os.path.isdir(d)}
    cpu = runs.get("flex")
    for backend, s in runs.items():
        if s is None:
            print(f"| {backend} | failed: see {out}/train-{backend}.log | | | |")
            continue
        delta = s["final_valid_loss"] - cpu["final_valid_loss"] if cpu else float("nan")
        print(f"| {backend} | {s['steps']} | {s['final_valid_loss']:.4f} | {delta:+.4f} "
              f"| {s['tokens_per_second']:.0f} |")
        if backend != "flex" and cpu:
            checks.append((f"{backend}: held-out loss after the main job's steps within 0.02 of flex",
                           abs(delta) <= 0.02, f"{delta:+.4f}"))

    print("\nTargets (docs/PERFORMANCE.md, CPU vs GPU):")
    for what, ok, value in checks:
        print(f"- {'PASS' if ok else 'MISS'} {what}: {value}")


def targets(size, ours, gathered, devices):
    checks = []
    for gpu in devices:
        r = ours.get(gpu)
        if r is None:
            continue
        if size == "main" and gpu != "flex" and r.get("loss_diff_vs_flex") is not None:
            d = r["loss_diff_vs_flex"]
            checks.append((f"{gpu}: first-step loss within 1e-4 of flex", abs(d) <= 1e-4, f"{d:+.1e}"))
        if size == "base" and "flex" in ours:
            speedup = ours["flex"]["median_step_ms"] / r["median_step_ms"]
            checks.append((f"{gpu}: base-size step >= 20x flex", speedup >= 20, f"{speedup:.1f}x"))
        if size == "base" and gpu != "wgpu" and gathered:
            ratio = r["median_step_ms"] / gathered["median_step_ms"]
            checks.append((f"{gpu}: base-size step within 1.5x of PyTorch on {gathered['device']} "
                           "(gathered)", ratio <= 1.5, f"{ratio:.2f}x"))
    return checks


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
