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

from subnetlab.cli.commands._controls import CONTROL_HELP
from subnetlab.cli.commands._executor_options import executor_options
from subnetlab.cli.commands._options import (
    PRUNE_PRESET_HELP,
    data_flag_options,
    device_map_option,
    max_memory_option,
    offload_folder_option,
    parse_key_values,
    parse_sparsities,
    with_data_options,
)
from subnetlab.errors import SubnetlabError
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
    device_map: Optional[str] = device_map_option(),
    max_memory: Optional[str] = max_memory_option(),
    offload_folder: Optional[Path] = offload_folder_option(),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="The frozen weights' dtype, float32 (default), bfloat16 "
                                        "or float16 (CUDA); the model loads in it; gates and the KL stay float32."),
    control: list[str] = typer.Option([], "--control", help=CONTROL_HELP),
    executor: ExecutorOptions = None,
) -> None:
    """Prune heads and MLPs with hard-concrete gates (Heuristic Core, Appendix B); summarise across seeds.

    Each run's health (off target, undecided gates, unconverged) is in its metrics.json and printed as
    warning lines; subnetlab --strict prune ... exits 2 instead."""
    from subnetlab.cli.commands._controls import parse_controls, report_sweep
    from subnetlab.cli.commands._health import report_health
    from subnetlab.cli.commands._options import parse_int_list
    from subnetlab.io import write_json
    from subnetlab.methods.l0.schedule import parse_levels
    from subnetlab.models.device_map import DeviceMap
    from subnetlab.progress import stage
    from subnetlab.runs.controls import subnetwork_measure
    from subnetlab.runs.prune_plan import plan_prune, sweep_healths, sweep_summary
    from subnetlab.runs.prune_summary import format_summary
    from subnetlab.runtime import describe_runtime, resolve_device

    runs_on = resolve_device(device)  # an unknown or absent device is refused before anything loads
    placement = DeviceMap.given(device_map, max_memory, offload_folder)
    if schedule not in ("linear", "staircase"):
        raise SubnetlabError(f"schedule {schedule!r}: expected linear or staircase", setting="schedule")
    given = [*sparsity, *(more or [])]
    targets = parse_sparsities(given) if schedule == "linear" or given else []
    seed_list = parse_int_list(seeds, "--seeds")
    controls = parse_controls(control)
    overrides = parse_key_values(set_, "--set")
    if ablation is not None:
        overrides["ablation"] = ablation
    if selection is not None:
        overrides["selection"] = selection
    if dtype is not None:
        overrides["dtype"] = dtype
    level_list = parse_levels(levels) if schedule == "staircase" else ()
    split_list = [s.strip() for s in splits.split(",") if s.strip()] if splits else None
    task_options = with_data_options(task, parse_key_values(task_option, "--task-option"), **data_flags)
    jobs = plan_prune(model, task, out, targets=targets, seeds=seed_list, preset=preset, schedule=schedule,
                      levels=level_list, overrides=overrides, task_options=task_options, eval_data=list(eval_data),
                      splits=split_list, device=device, controls=controls,
                      device_map=placement)  # every check the Python API runs too, before any job
    stage(describe_runtime(runs_on) if placement is None else f"device map {placement.describe()}")
    report = executor.run(jobs, sweep_dir=out)
    summary = sweep_summary(report)
    write_json(out / "summary.json", summary)
    if summary:
        typer.echo(format_summary(summary), nl=False)
    failed = [j for j in report.jobs if j.status == "failed"]
    if failed:
        raise SubnetlabError(f"{len(failed)} of {len(report.jobs)} runs failed; {failed[0].name}: {failed[0].error} "
                             f"(details in {out / 'sweep.json'}; rerun the same command to resume)")
    report_sweep(out, report.jobs, "prune", controls=controls, measure=subnetwork_measure, score_name="accuracy")
    report_health(sweep_healths(report))


def register(app: typer.Typer) -> None:
    app.command("prune")(executor_options(data_flag_options(prune)))
