"""Zorro accuracy against training time and model size, from the summary.json of finished runs
trained with `mlm-train train --minimal-pairs PATH` (docs/EXPERIMENTS.md, "Grammar (Zorro)").

Run: .venv-bench/bin/python scripts/zorro_plot.py OUT.png RUN_DIR[:MS_PER_STEP[:SCORE_JSON]]...
(matplotlib)

Each run is a point: x its training time, y its overall minimal-pair accuracy, labelled with
its steps and held-out loss, one line per model size; the dotted line at 50 % is chance. The
time is steps × MS_PER_STEP where given (a step time measured alone on the machine, for runs
that shared it with other work), else the run's own wall time. SCORE_JSON, an `eval
--minimal-pairs … --json FILE` of the run, replaces the score in its summary.json (so that every
point is scored on the same pairs).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def point(arg):
    run, ms, score_file = (arg.split(":") + ["", ""])[:3]
    with open(os.path.join(run, "summary.json")) as f:
        summary = json.load(f)
    score = summary.get("minimal_pairs")
    if score_file:
        with open(score_file) as f:
            score = json.load(f)
    if score is None:
        sys.exit(f"{run}: summary.json has no minimal_pairs (train with --minimal-pairs)")
    seconds = summary["steps"] * float(ms) / 1e3 if ms else summary["wall_time_seconds"]
    return {
        "seconds": seconds,
        "accuracy": 100 * score["accuracy"],
        "parameters": summary["parameters"],
        "steps": summary["steps"],
        "loss": summary["final_valid_loss"],
    }


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, points = sys.argv[1], [point(arg) for arg in sys.argv[2:]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for size in sorted({p["parameters"] for p in points}):
        group = sorted((p for p in points if p["parameters"] == size), key=lambda p: p["seconds"])
        minutes = [p["seconds"] / 60 for p in group]
        ax.plot(minutes, [p["accuracy"] for p in group], marker="o",
                label=f"{size / 1e6:.2f} M parameters")
        for x, p in zip(minutes, group):
            ax.annotate(f"{p['steps']} steps, {p['loss']:.2f} nats", (x, p["accuracy"]),
                        textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.axhline(50, color="grey", linestyle=":", label="chance")
    ax.set_xlabel("training time on one 2-core Zen 3, alone (min)")
    ax.set_ylabel("Zorro, mean of 23 paradigms, 500 pairs each (%)")
    ax.set_title("The main job's grammar against training time and model size")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
