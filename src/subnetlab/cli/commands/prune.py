"""`subnetlab prune`: hard-concrete structured pruning over sparsities and seeds.

    subnetlab prune --model runs/ft/model --task nli-synthetic --sparsity 0.5 0.7 --seeds 0-11 \\
        --preset demo --jobs 2 --out runs/prune
    subnetlab prune ... --schedule staircase --levels 0.05:0.70:0.05 --seeds 0-2 --out runs/stairs

One run directory per (sparsity, seed) (or one staircase per seed), run through
``subnetlab.executor`` (finished runs are skipped, killed runs resume), then a
Table 5 style summary over seeds, printed and written to ``DIR/summary.json``.
The layout is documented in ``subnetlab.runs.prune``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.errors import SubnetlabError
from subnetlab.cli.commands._controls import CONTROL_HELP
from subnetlab.cli.commands._executor_options import executor_options
from subnetlab.cli.commands._options import (PRUNE_PRESET_HELP, data_flag_options, parse_key_values, parse_sparsities,
                                             with_data_options)
from subnetlab.executor import ExecutorOptions


def prune(
    model: str = typer.Option(..., "--model", help="Fine-tuned checkpoint: a local directory, hub id or alias."),
    task: str = typer.Option(..., "--task", help="Task name (nli-synthetic, mnli, hans, qqp, paws-qqp, arith:<op>, "
                      "file:PATH: your own data, hub:NAME[:CONFIG])."),
    sparsity: list[str] = typer.Option([], "--sparsity", help="Target(s) in (0, 1): --sparsity 0.5 0.7, or 0.5,0.7 "
                                       "(linear; a staircase climbs --levels)."),
    more: Optional[list[str]] = typer.Argument(None, metavar="SPARSITY", help="Further targets (--sparsity 0.5 0.7)."),
    seeds: str = typer.Option("0-11", "--seeds", help="Seeds: 0-11, 0,3,5 or 0-2,7."),
    out: Path = typer.Option(..., "--out", help="Sweep directory; a rerun skips finished runs and resumes killed ones."),
    preset: str = typer.Option("paper", "--preset", help=PRUNE_PRESET_HELP),
    schedule: str = typer.Option("linear", "--schedule", help="linear (the paper's, one run per target) or staircase."),
    levels: str = typer.Option("0.05:0.70:0.05", "--levels", help="Staircase levels: start:stop:step or a list."),
    ablation: Optional[str] = typer.Option(None, "--ablation", help="mean (default), zero or resample."),
    selection: Optional[str] = typer.Option(None, "--selection", help="topk (default) or threshold (the paper's)."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE, e.g. train=FILE (repeatable)."),
    data_flags: dict = None,
    eval_data: list[str] = typer.Option([], "--eval-data", help="Extra evaluation split [SPLIT:]FORMAT=FILE (repeatable)."),
    splits: Optional[str] = typer.Option(None, "--splits", help="Evaluation splits to score, comma-separated (default: all)."),
    set_: list[str] = typer.Option([], "--set", help="Override a pruning setting KEY=VALUE, e.g. total_steps=500 (repeatable)."),
    device: str = typer.Option("auto", "--device", help="auto (CUDA, else mps, else the CPU), cpu, cuda, cuda:N or mps; "
                               "with --gpus-per-job each job gets its own GPU."),
    control: list[str] = typer.Option([], "--control", help=CONTROL_HELP),
    executor: ExecutorOptions = None,
) -> None:
    """Prune heads and MLPs with hard-concrete gates (Heuristic Core, Appendix B); summarise across seeds.

    Each run's health (off target, undecided gates, unconverged) is in its metrics.json and printed as
    warning lines; subnetlab --strict prune ... exits 2 instead."""
    from subnetlab.cli.commands._controls import parse_controls, report_sweep
    from subnetlab.cli.commands._options import parse_int_list
    from subnetlab.methods.controls import SHUFFLED_LABELS, check_shufflable
    from subnetlab.runs.controls import control_jobs, subnetwork_measure
    from subnetlab.io import write_json
    from subnetlab.methods.l0.schedule import parse_levels
    from subnetlab.runs.prune import PRUNE_JOB, prune_sweep
    from subnetlab.runs.prune_setup import (PruneJobConfig, check_checkpoint, check_sweep_inputs, load_pruning_model,
                                            task_tokenizer)
    from subnetlab.runs.splits import check_held_out, earlier_runs, held_out_options
    from subnetlab.tasks.spec import eval_splits, task_from_config

    from subnetlab.runtime import describe_runtime, resolve_device

    runs_on = resolve_device(device)  # an unknown or absent device is refused before anything loads
    if schedule not in ("linear", "staircase"):
        raise SubnetlabError(f"--schedule {schedule!r}: expected linear or staircase")
    given = [*sparsity, *(more or [])]
    targets = parse_sparsities(given) if schedule == "linear" or given else []
    seed_list = parse_int_list(seeds, "--seeds")
    controls = parse_controls(control)
    overrides = parse_key_values(set_, "--set")
    if ablation is not None:
        overrides["ablation"] = ablation
    if selection is not None:
        overrides["selection"] = selection
    level_list = parse_levels(levels) if schedule == "staircase" else ()
    split_list = [s.strip() for s in splits.split(",") if s.strip()] if splits else None
    task_options = with_data_options(task, parse_key_values(task_option, "--task-option"), **data_flags)
    task_options = held_out_options(model, task, task_options)  # your own data: the split its fine-tuning used
    base = {"model": model, "task": task, "task_options": task_options,
            "eval_data": list(eval_data), "splits": split_list, "device": device}
    check_checkpoint(model)  # a bad checkpoint, task option or split fails before any job starts
    built = task_from_config(base)
    check_held_out(built, earlier_runs(model))  # no evaluation row was a training row of the model's fine-tuning
    eval_splits(built, split_list)

    jobs = prune_sweep(base, out, targets=targets, seeds=seed_list, preset=preset, schedule=schedule,
                       levels=level_list, overrides=overrides)  # builds (so checks) every job's typed config
    check_sweep_inputs(model, built, [PruneJobConfig.from_dict(j.config) for j in jobs if j.fn.endswith(":prune_job")])
    loaded = load_pruning_model(model, built)  # tokenizer, vocabulary, model kind and head fit the task: refused here
    if SHUFFLED_LABELS in controls:
        check_shufflable(built.bind(task_tokenizer(loaded, built)))
    jobs += control_jobs(jobs, out, controls, PRUNE_JOB)
    from subnetlab.progress import stage

    stage(describe_runtime(runs_on))
    report = executor.run(jobs, sweep_dir=out)
    summary = _summary(report)
    write_json(out / "summary.json", summary)
    from subnetlab.runs.prune_summary import format_summary

    if summary:
        typer.echo(format_summary(summary), nl=False)
    failed = [j for j in report.jobs if j.status == "failed"]
    if failed:
        raise SubnetlabError(f"{len(failed)} of {len(report.jobs)} runs failed; {failed[0].name}: {failed[0].error} "
                             f"(details in {out / 'sweep.json'}; rerun the same command to resume)")
    from subnetlab.cli.commands._health import report_health

    report_sweep(out, report.jobs, "prune", controls=controls, measure=subnetwork_measure, score_name="accuracy")
    report_health(_healths(report))


def _healths(report) -> list:
    """``(run, health)`` of every pruning run, and of every staircase level (``staircase/seed-0 level 0.05``)."""
    from subnetlab.runs.health import Health, read_health

    out = []
    for job in report.jobs:
        if not job.metrics or job.name == "full-model":
            continue
        for level, entry in (job.metrics.get("levels") or {}).items():
            if isinstance(entry.get("health"), dict):
                out.append((f"{job.name} level {level}", Health.from_dict(entry["health"])))
        out.append((job.name, read_health(job.metrics)))
    return out


def _summary(report) -> dict:
    from subnetlab.runs.prune import level_name
    from subnetlab.runs.prune_summary import summarize

    groups: dict[str, list[dict]] = {}
    healths: dict[str, list[dict | None]] = {}
    model_scores = None
    for job in report.jobs:
        if not job.metrics or job.metrics.get("control"):  # controls are compared in DIR/metrics.json
            continue
        if job.name == "full-model":
            model_scores = job.metrics.get("eval")
        elif "levels" in job.metrics:
            for level, entry in job.metrics["levels"].items():
                groups.setdefault(level, []).append(entry["eval"])
                healths.setdefault(level, []).append(entry.get("health"))
        elif "eval" in job.metrics:
            key = level_name(job.metrics["target_sparsity"])
            groups.setdefault(key, []).append(job.metrics["eval"])
            healths.setdefault(key, []).append(job.metrics.get("health"))
    return summarize(groups, model_scores, healths) if groups else {}


def register(app: typer.Typer) -> None:
    app.command("prune")(executor_options(data_flag_options(prune)))
