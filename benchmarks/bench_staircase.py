"""Staircase versus linear: optimisation steps for all 14 levels (5%..70%), and the effective size each gives.

Steps are counted from the schedules (both presets, no compute). With
``--model`` the script also prunes a demo model both ways through `subnetlab
prune` (one run per level for linear, one staircase run, per seed) and compares
the effective size on each ``--split`` (highest level whose seed-mean accuracy
is within 3 points of the full model's; ``subnetlab.analysis.effective_size``).
Goal: at least 5x fewer steps, effective sizes within one 5% level. On a slow
machine ``--linear-levels 0.6:0.7:0.05`` runs only the linear levels that decide
the comparison: from one level below the staircase's effective size up to 0.70.

    .venv/bin/python benchmarks/bench_staircase.py                       # step counts only
    .venv/bin/python benchmarks/bench_staircase.py --model runs/ft-minilm/model --out /tmp/bench-stairs \\
        [--seeds 0] [--split id --split hans-synthetic] [--task-option n_train=6000 ...] [--linear-levels 0.6:0.7:0.05]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from subnetlab.analysis.effective_size import effective_size
from subnetlab.cli import main as cli
from subnetlab.io import read_json
from subnetlab.methods.hard_concrete.config import preset_config
from subnetlab.methods.hard_concrete.schedule import parse_levels

LEVELS = "0.05:0.70:0.05"


def step_counts(preset: str) -> tuple[int, int]:
    levels = parse_levels(LEVELS)
    linear = sum(preset_config(preset, level).total_steps for level in levels)
    stairs = preset_config(preset, levels[-1], schedule="staircase", levels=levels).make_schedule().total_steps
    return linear, stairs


def run(argv: list[str]) -> float:
    started = time.perf_counter()
    try:
        cli(argv)
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    return time.perf_counter() - started


def level_accuracies(summary: dict, split: str) -> dict[float, list[float]]:
    return {float(level): [block["rows"][split]["mean"]] for level, block in summary.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--task", default="nli-synthetic")
    parser.add_argument("--task-option", action="append", default=[])
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--split", action="append", default=None, help="evaluation split(s) (default: id)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--linear-levels", default=LEVELS,
                        help="levels to run linearly (default: all 14)")
    args = parser.parse_args()

    for preset in ("paper", "demo"):
        linear, stairs = step_counts(preset)
        print(f"{preset:>5} preset: linear {linear:,} steps (14 runs), staircase {stairs:,} steps (1 run): "
              f"{linear / stairs:.2f}x fewer (per seed)")
    if not args.model:
        return
    splits = args.split or ["id"]
    common = ["prune", "--model", args.model, "--task", args.task, "--preset", "demo", "--seeds", args.seeds,
              "--splits", ",".join(splits)]
    for opt in args.task_option:
        common += ["--task-option", opt]
    for pair in args.set:
        common += ["--set", pair]
    levels = ",".join(f"{x:g}" for x in parse_levels(args.linear_levels))
    t_stairs = run(common + ["--schedule", "staircase", "--levels", LEVELS, "--sparsity", "0.7",
                             "--out", str(args.out / "staircase")])
    t_linear = run(common + ["--sparsity", levels, "--out", str(args.out / "linear")])
    for split in splits:
        sizes = {}
        for name in ("linear", "staircase"):
            summary = read_json(args.out / name / "summary.json")
            model_acc = read_json(args.out / name / "full-model" / "metrics.json")["eval"][split]["accuracy"]
            sizes[name] = effective_size(level_accuracies(summary, split), model_acc)
            print(f"[{split}] {name:>9}: full model {model_acc:.3f}; mean accuracy per level: "
                  + ", ".join(f"{lvl:.2f}:{acc:.3f}" for lvl, acc in sizes[name].mean_accuracy.items()))
            print(f"[{split}] {'':>9}  effective size {sizes[name].size:.2f} (highest faithful sparsity {sizes[name].sparsity:.2f})")
        gap = abs(sizes["linear"].sparsity - sizes["staircase"].sparsity)
        print(f"[{split}] effective sizes differ by {gap:.2f} ({'within' if gap <= 0.05 + 1e-9 else 'NOT within'} one 5% level)")
    print(f"wall: linear {t_linear:.0f} s, staircase {t_stairs:.0f} s ({t_linear / t_stairs:.2f}x)")


if __name__ == "__main__":
    main()
