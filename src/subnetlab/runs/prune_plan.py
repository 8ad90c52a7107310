"""A pruning sweep from its settings to its results, checked once for ``subnetlab prune`` and ``sl.prune`` alike.

``plan_prune`` refuses every bad setting and file before any job starts, in the order the command always
has: the device, the schedule, the targets, the model directory (a missing one named here, not after every
job has failed), the task and its splits, no evaluation row that was a training row of the run that
fine-tuned the model (``runs.splits``), every job's typed config, the inputs a job would only meet after
loading the model, and the model against the task. ``sweep_summary`` and ``sweep_healths`` read a finished
sweep back: the Table 5 summary with each level's health counts, and every run's ``Health`` for the
caller to warn about or refuse (``runs.health.report_health``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job, SweepReport
from subnetlab.methods.controls import RANDOM_WEIGHTS, SHUFFLED_LABELS, check_shufflable
from subnetlab.models.device_map import DeviceMap
from subnetlab.run_directory import check_distinct_outputs
from subnetlab.runs.controls import control_jobs
from subnetlab.runs.health import Health, read_health
from subnetlab.runs.job_config import check_seeds, check_targets
from subnetlab.runs.prune import PRUNE_JOB, level_name, prune_sweep
from subnetlab.runs.prune_setup import (
    PruneJobConfig,
    check_checkpoint,
    check_sweep_inputs,
    load_pruning_model,
    task_tokenizer,
)
from subnetlab.runs.prune_summary import summarize
from subnetlab.runs.splits import check_held_out, earlier_runs, held_out_options
from subnetlab.tasks.spec import eval_splits, task_from_config

SCHEDULES = ("linear", "staircase")


def plan_prune(model: str, task: str, out: Path, *, targets: Sequence[float], seeds: Sequence[int], preset: str,
               schedule: str = "linear", levels: Sequence[float] = (), overrides: Mapping[str, Any] | None = None,
               task_options: Mapping[str, Any] | None = None, eval_data: Sequence[str] = (),
               splits: Sequence[str] | None = None, device: str = "auto", controls: Sequence[str] = (),
               device_map: DeviceMap | None = None) -> list[Job]:
    """The checked jobs of one pruning sweep (module doc), with a copy of each search under every control
    (``runs.controls``); nothing is written. ``device_map`` spreads the model over devices (``models.device_map``)."""
    from subnetlab.runtime import resolve_device

    if schedule != "staircase" or len(targets):  # a staircase climbs its levels; a target is optional there
        targets = check_targets(targets)  # types, ranges and bounds: before anything else
    seeds = check_seeds(seeds)
    resolve_device(device)  # an unknown or absent device is refused before anything loads
    if schedule not in SCHEDULES:
        raise SubnetlabError(f"schedule {schedule!r}: expected linear or staircase", setting="schedule")
    options = held_out_options(model, task, dict(task_options or {}))  # your own data: the fine-tuning's split
    base = {"model": model, "task": task, "task_options": options, "eval_data": list(eval_data),
            "splits": None if splits is None else list(splits), "device": device}
    if device_map is not None:
        base["device_map"] = device_map.to_dict()
        check_distinct_outputs({"out": out, "offload_folder": device_map.offload_folder})
        if RANDOM_WEIGHTS in controls:
            raise SubnetlabError("the random-weights control builds a fresh copy of the whole model on one device, "
                                 "which a device map exists to avoid", setting="control")
    check_checkpoint(model)
    built = task_from_config(base)
    check_held_out(built, earlier_runs(model))  # no evaluation row was a training row of the model's fine-tuning
    eval_splits(built, base["splits"])
    jobs = prune_sweep(base, out, targets=list(targets), seeds=list(seeds), preset=preset, schedule=schedule,
                       levels=tuple(levels), overrides=dict(overrides or {}))  # builds (so checks) every job's config
    runs = [PruneJobConfig.from_dict(j.config) for j in jobs if j.fn.endswith(":prune_job")]
    check_sweep_inputs(model, built, runs)
    if runs:
        from subnetlab.runtime import resolve_dtype

        resolve_dtype(runs[0].settings.dtype, resolve_device(device))  # float16 on the CPU: refused before the load
    loaded = load_pruning_model(model, built, device_map)  # tokenizer, vocabulary, model kind, head and map fit
    if SHUFFLED_LABELS in controls:
        check_shufflable(built.bind(task_tokenizer(loaded, built)))
    return jobs + control_jobs(jobs, out, controls, PRUNE_JOB)


def sweep_healths(report: SweepReport) -> list[tuple[str, Health | None]]:
    """``(run, health)`` of every pruning run, of every staircase level (``staircase/seed-0 level 0.05``), and of
    the full model (at chance or not)."""
    out: list[tuple[str, Health | None]] = []
    for job in report.jobs:
        if not job.metrics:
            continue
        if job.name == "full-model":
            out.append((job.name, read_health(job.metrics)))
            continue
        for level, entry in (job.metrics.get("levels") or {}).items():
            if isinstance(entry.get("health"), dict):
                out.append((f"{job.name} level {level}", Health.from_dict(entry["health"])))
        out.append((job.name, read_health(job.metrics)))
    return out


def sweep_summary(report: SweepReport) -> dict[str, Any]:
    """The across-seed summary (``runs.prune_summary``) of a finished sweep, with each level's health counts."""
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


__all__ = ["SCHEDULES", "plan_prune", "sweep_healths", "sweep_summary"]
