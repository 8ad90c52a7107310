"""Effective size three ways: independent runs, one whole staircase, and the early-stopping search.

Steps are counted from the schedules (both presets, no compute). With
``--model`` (or ``--checkpoints``, whose ``model/`` is then used) the script
prunes that demo model for the 14 levels 5%..70% three ways, per seed:

* independent runs: one linear run per level (`subnetlab prune`), the reference;
* the whole staircase: one run climbing every level (`subnetlab prune --schedule staircase`);
* the search: the seeds climb one staircase together and stop once ID and OOD
  have each had two unfaithful levels in a row (``runs.prune_search``);

and prints the optimisation steps, wall time and effective size on ID and OOD
data of each (highest level whose seed-mean accuracy is within 3 points of the
full model's; OOD accuracy is the mean over every subcase of the OOD split).
It also checks the early stop's assumption on every curve measured at all 14
levels: after two unfaithful levels in a row, does accuracy come back within
the threshold? With ``--checkpoints`` it then runs `subnetlab effective-size`
over the fine-tuning run's checkpoints (``--every``) three times, the whole
staircase, ``--early-stop --warm-start`` and the same with ``--warm-gates``, and
compares steps and effective sizes per checkpoint. Goal: at least 10x fewer steps than independent runs, effective
sizes within one 5% level.

On a slow machine ``--linear-levels 0.4:0.7:0.05`` runs only the independent
levels that decide the comparison (the steps of all 14 are still counted from
the schedule; the wall time is then scaled up by steps and marked as such).

    .venv/bin/python benchmarks/bench_staircase.py                       # step counts only
    .venv/bin/python benchmarks/bench_staircase.py --checkpoints runs/ft-minilm --out /tmp/bench-stairs \
        [--seeds 0] [--split id --split hans-synthetic] [--task-option n_train=6000 ...] [--set train_limit=800 ...] \
        [--linear-levels 0.4:0.7:0.05] [--every 2] [--parts final,training]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from subnetlab.analysis.effective_size import comes_back, data_accuracy, effective_size, id_ood_accuracy
from subnetlab.cli import main as cli
from subnetlab.cli.commands._options import parse_int_list, parse_key_values
from subnetlab.executor import run_jobs
from subnetlab.experiments.heuristic_core.effective_size import SearchSettings, search_steps, search_sweep
from subnetlab.io import read_json
from subnetlab.methods.head_pruning.config import preset_config
from subnetlab.methods.l0.schedule import parse_levels
from subnetlab.runs.prune import level_name

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


Curve = dict[float, tuple[float, float]]  # level -> seed-mean (ID, OOD) accuracy
ON = ("id", "ood")


def linear_steps(preset: str, levels) -> int:
    return sum(preset_config(preset, level).total_steps for level in levels)


def mean_pairs(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs)


def linear_curve(root: Path, levels, seeds, id_splits) -> Curve:
    return {lvl: mean_pairs([id_ood_accuracy(read_json(root / f"sparsity-{level_name(lvl)}" / f"seed-{s}" / "metrics.json")
                                             ["eval"], id_splits) for s in seeds]) for lvl in levels}


def staircase_curve(root: Path, levels, seeds, id_splits) -> Curve:
    return {lvl: mean_pairs([id_ood_accuracy(read_json(root / "staircase" / f"seed-{s}" / "levels" / level_name(lvl)
                                                       / "metrics.json")["eval"], id_splits) for s in seeds])
            for lvl in levels}


def search_curve(stage_dirs) -> Curve:
    return {float(e["level"]): (e["id"], e["ood"]) for d in stage_dirs
            for e in read_json(d / "metrics.json")["levels"].values()}


def sizes(curve: Curve, model: tuple[float, float]) -> dict[str, float]:
    """Effective sparsity (highest faithful level, 0 = none) on each data."""
    return {on: effective_size({lvl: [data_accuracy(*acc, on)] for lvl, acc in curve.items()},
                               data_accuracy(*model, on)).sparsity for on in ON}


def show_curve(name: str, curve: Curve, model: tuple[float, float]) -> None:
    for i, on in enumerate(ON):
        print(f"  {name:>16} {on:>3}: " + ", ".join(f"{lvl:.2f}:{curve[lvl][i]:.3f}" for lvl in sorted(curve))
              + f"  (model {model[i]:.3f})")


def final_model(args, model: str, seeds: list[int], splits: list[str]) -> None:
    """Independent runs, the whole staircase and the search on one model: steps, wall time, effective sizes."""
    levels = parse_levels(LEVELS)
    id_splits = ["id"]
    common = ["prune", "--model", model, "--task", args.task, "--preset", "demo", "--seeds", ",".join(map(str, seeds)),
              "--splits", ",".join(splits)]
    for opt in args.task_option:
        common += ["--task-option", opt]
    for pair in args.set:
        common += ["--set", pair]
    overrides = parse_key_values(args.set, "--set")
    base = {"task": args.task, "task_options": parse_key_values(args.task_option, "--task-option"), "eval_data": [],
            "splits": splits}

    started = time.perf_counter()
    stage_dirs = search_sweep([(0, Path(model))], base, seeds, levels, "demo", overrides, args.out / "search",
                              search=SearchSettings(early_stop=True, warm_start=False), on=ON, id_splits=id_splits,
                              run=lambda jobs, where: run_jobs(jobs, sweep_dir=where))[0]
    t_search = time.perf_counter() - started
    t_stairs = run(common + ["--schedule", "staircase", "--levels", LEVELS, "--sparsity", "0.7",
                             "--out", str(args.out / "staircase")])
    run_levels = parse_levels(args.linear_levels)
    t_linear = run(common + ["--sparsity", ",".join(f"{x:g}" for x in run_levels), "--out", str(args.out / "linear")])

    model_acc = id_ood_accuracy(read_json(args.out / "staircase" / "full-model" / "metrics.json")["eval"], id_splits)
    curves = {"independent": linear_curve(args.out / "linear", run_levels, seeds, id_splits),
              "whole staircase": staircase_curve(args.out / "staircase", levels, seeds, id_splits),
              "search": search_curve(stage_dirs)}
    n_lin = linear_steps("demo", levels)
    n_stairs = preset_config("demo", 0.7, schedule="staircase", levels=levels).make_schedule().total_steps
    n_search = search_steps(stage_dirs)
    full = len(run_levels) == len(levels)
    wall_lin = t_linear if full else t_linear * n_lin / linear_steps("demo", run_levels)
    rows = [("independent runs", n_lin, wall_lin, "" if full else f" (est. from {len(run_levels)} levels: {t_linear:.0f} s)"),
            ("whole staircase", n_stairs, t_stairs, ""), ("search, early stop", n_search, t_search, "")]
    found = {name: sizes(curve, model_acc) for name, curve in curves.items()}
    print(f"\nfinal model {model}: seeds {seeds}, splits {', '.join(splits)} (ID = id, OOD = the rest), 14 levels "
          f"{LEVELS}, demo preset" + (f", overrides {overrides}" if overrides else ""))
    print(f"  full model: ID {model_acc[0]:.3f}, OOD {model_acc[1]:.3f}")
    print(f"  {'':>20} {'steps/seed':>10} {'fewer':>7} {'wall s':>8} {'fewer':>7}   effective sparsity (ID, OOD)")
    for (name, steps, wall, note), key in zip(rows, curves):
        es = found[key]
        partial = "" if key != "independent" or full else " (levels run only)"
        print(f"  {name:>20} {steps:>10,} {n_lin / steps:>6.2f}x {wall:>8.0f} {wall_lin / wall:>6.2f}x   "
              f"{es['id']:.2f}, {es['ood']:.2f}{partial}{note}")
    for key in ("whole staircase", "search"):
        gaps = {on: abs(found[key][on] - found["independent"][on]) for on in ON}
        print(f"  {key} vs independent: " + ", ".join(
            f"{on} {gaps[on]:.2f} ({'within' if gaps[on] <= 0.05 + 1e-9 else 'NOT within'} one level)" for on in ON))
    print("  seed-mean accuracy per level:")
    for name, curve in curves.items():
        show_curve(name, curve, model_acc)
    print("  does accuracy come back within 3 points after two unfaithful levels in a row (the early stop's assumption)?")
    for name, curve in curves.items():
        if len(curve) < len(levels):
            continue
        for i, on in enumerate(ON):
            check = comes_back({lvl: data_accuracy(*acc, on) for lvl, acc in curve.items()}, data_accuracy(*model_acc, on))
            again = check["faithful_again"]
            print(f"  {name:>16} {on:>3}: " + (
                "never two unfaithful levels in a row" if check["stops_after"] is None else
                f"stop fires after {check['stops_after']:.2f}; faithful again above it: "
                + (", ".join(f"{x:.2f}" for x in again) if again else "none")
                + f"; effective sparsity with the stop {check['sparsity_with_stop']:.2f}, "
                  f"without {check['sparsity_without_stop']:.2f}"))


def over_training(args, seeds: list[int]) -> None:
    """`subnetlab effective-size` over the checkpoints: the whole staircase against --early-stop --warm-start."""
    if seeds != list(range(len(seeds))):
        raise SystemExit("--checkpoints needs seeds 0..N-1 (effective-size takes a seed count)")
    common = ["effective-size", "--checkpoints", str(args.checkpoints), "--task", args.task, "--preset", "demo",
              "--seeds", str(len(seeds)), "--on", "id,ood", "--subcases", "all", "--every", str(args.every)]
    for opt in args.task_option:
        common += ["--task-option", opt]
    for pair in args.set:
        common += ["--set", pair]
    searches = {"search": ["--early-stop", "--warm-start"],
                "search, warm gates": ["--early-stop", "--warm-start", "--warm-gates"]}
    walls = {"whole staircase": run(common + ["--out", str(args.out / "curve-staircase")])}
    for name, flags in searches.items():
        walls[name] = run(common + flags + ["--out", str(args.out / curve_dir(name))])
    old = read_json(args.out / "curve-staircase" / "metrics.json")["checkpoints"]
    levels = parse_levels(LEVELS)
    per_ckpt = linear_steps("demo", levels)
    n_stairs = preset_config("demo", 0.7, schedule="staircase", levels=levels).make_schedule().total_steps
    per_paper, stairs_paper = step_counts("paper")
    k = len(old)
    print(f"\nover training ({args.checkpoints}, every {args.every}-th checkpoint, seeds {seeds}): whole staircase "
          f"{k * n_stairs:,} steps per seed, {walls['whole staircase']:.0f} s; independent runs {k * per_ckpt:,} "
          "(schedule)")
    for name in searches:
        new = read_json(args.out / curve_dir(name) / "metrics.json")["checkpoints"]
        print(f"  {name} (early stop, warm start{', warm gates' if 'gates' in name else ''}) against the whole staircase:")
        print(f"  {'step':>6} {'ES id old/new':>14} {'ES ood old/new':>15} {'levels searched':>32} {'steps/seed':>10}")
        total = 0
        for a, b in zip(old, new):
            es_a, es_b = a["effective_size"], b["effective_size"]
            measured = b["search"]["levels_measured"]
            total += b["search"]["steps_per_seed"]
            ok = all(abs(es_a[on]["sparsity"] - es_b[on]["sparsity"]) <= 0.05 + 1e-9 for on in ON)
            print(f"  {a['step']:>6} {es_a['id']['sparsity']:>6.2f}/{es_b['id']['sparsity']:<7.2f} "
                  f"{es_a['ood']['sparsity']:>6.2f}/{es_b['ood']['sparsity']:<8.2f} "
                  f"{', '.join(f'{x:.2f}' for x in measured):>32} {b['search']['steps_per_seed']:>10,}"
                  f"{'' if ok else '   NOT within one level'}")
        print(f"  steps per seed over {k} checkpoints: {total:,}: {k * per_ckpt / total:.2f}x fewer than independent "
              f"runs, {k * n_stairs / total:.2f}x fewer than the whole staircase; wall {walls[name]:.0f} s "
              f"({walls['whole staircase'] / walls[name]:.2f}x faster than the whole staircase)")
        paper = sum(paper_stage_steps(args.out / curve_dir(name) / f"step-{row['step']}" / stage)
                    for row in new for stage in row["search"]["stages"])
        print(f"  the same stages on the paper preset's schedule: {paper:,} steps per seed against {k * per_paper:,} "
              f"independent ({k * per_paper / paper:.2f}x fewer) and {k * stairs_paper:,} whole staircase "
              f"({k * stairs_paper / paper:.2f}x fewer)")


def curve_dir(name: str) -> str:
    return "curve-" + name.replace(", ", "-").replace(" ", "-")


def paper_stage_steps(stage_dir: Path) -> int:
    """Steps one seed would run in this stage (its start level up to where it stopped) with the paper preset
    (a warm-gated stage has no first ramp there either)."""
    measured = sorted(float(e["level"]) for e in read_json(stage_dir / "metrics.json")["levels"].values())
    config = read_json(stage_dir / "config.json")
    planned = [float(x) for x in config["prune"]["levels"]]
    warm = {"first_ramp_steps": 0} if config.get("init_gates") else {}
    ends = preset_config("paper", max(planned), schedule="staircase", levels=planned, **warm).make_schedule().level_ends()
    return max(step for step, level in ends.items() if level <= measured[-1] + 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a fine-tuned demo model (default: CHECKPOINTS/model)")
    parser.add_argument("--checkpoints", type=Path, help="a `subnetlab finetune` run directory: its model and checkpoints")
    parser.add_argument("--every", type=int, default=2, help="every N-th checkpoint for the over-training comparison")
    parser.add_argument("--task", default="nli-synthetic")
    parser.add_argument("--task-option", action="append", default=[])
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--split", action="append", default=None,
                        help="evaluation splits: the first is in-domain (default: id, hans-synthetic)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--linear-levels", default=LEVELS,
                        help="levels to run independently (default: all 14)")
    parser.add_argument("--parts", default="final,training",
                        help="final (the three ways on one model), training (over the checkpoints), or both")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"final", "training"}:
        raise SystemExit(f"--parts {args.parts!r}: expected final, training or final,training")

    for preset in ("paper", "demo"):
        linear, stairs = step_counts(preset)
        print(f"{preset:>5} preset: linear {linear:,} steps (14 runs), staircase {stairs:,} steps (1 run): "
              f"{linear / stairs:.2f}x fewer (per seed)")
    model = args.model or (str(args.checkpoints / "model") if args.checkpoints else None)
    if not model:
        return
    if args.out is None:
        raise SystemExit("--out is needed to prune")
    seeds = parse_int_list(args.seeds)
    splits = args.split or ["id", "hans-synthetic"]
    if splits[0] != "id":
        raise SystemExit("the first --split must be id (the in-domain split)")
    if "final" in parts:
        final_model(args, model, seeds, splits)
    if args.checkpoints and "training" in parts:
        over_training(args, seeds)


if __name__ == "__main__":
    main()
