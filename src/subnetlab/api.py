"""What ``subnetlab prune``, ``discover`` and ``transfer`` do, as one Python call each: ``sl.prune``,
``sl.discover`` and ``sl.transfer_subnetwork`` (``sl.transfer`` is the package of transfer's parts).

A notebook user gets the command's runs without the command line: each function builds the same typed
job configs as the command, runs them through the executor (in this process by default; ``jobs=N``
for N worker processes) into ``out`` (a rerun skips finished runs and resumes killed ones, as the
command's does) and returns what the command prints, as values, with the paths of what it wrote::

    import subnetlab as sl
    result = sl.prune("runs/ft/model", "nli-synthetic", "runs/prune", sparsity=0.5, seeds=[0], preset="demo")
    sub = sl.Subnetwork.load(result["subnetworks"][0])

Settings are the commands' options under their library names; a failed run raises ``SubnetlabError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job, SweepReport, run_jobs
from subnetlab.run_directory import lock


def _run(jobs: Sequence[Job], out: Path, n_jobs: int | None, what: str) -> SweepReport:
    """Run ``jobs`` into ``out`` holding its writer lock, as the command does; raise on a failed run."""
    with lock(out):  # a second writer (this call twice, or the command at once) is refused, naming the holder
        report = run_jobs(jobs, backend="processes" if n_jobs and n_jobs > 1 else "local", n_jobs=n_jobs,
                          sweep_dir=out)
    failed = [j for j in report.jobs if j.status == "failed"]
    if failed:
        raise SubnetlabError(f"{len(failed)} of {len(report.jobs)} {what} runs failed; {failed[0].name}: "
                             f"{failed[0].error} (details in {out / 'sweep.json'})")
    return report


def _seeds(seeds: int | Sequence[int]) -> list[int]:
    return [seeds] if isinstance(seeds, int) else list(seeds)


def prune(model: str, task: str, out: str | Path, *, sparsity: float | Sequence[float] = 0.5,
          seeds: int | Sequence[int] = 0, preset: str = "paper", task_options: Mapping[str, Any] | None = None,
          device: str = "auto", jobs: int | None = None, **settings: Any) -> dict[str, Any]:
    """Prune ``model``'s heads and MLPs on ``task`` to each ``sparsity`` with each seed (``subnetlab prune``).

    ``settings`` override the preset's pruning settings (``total_steps=500``, ``ablation="zero"``, ...).
    Returns ``{"out", "summary", "runs": {run: metrics}, "subnetworks": [paths]}``: the summary across
    seeds that the command prints, each run's metrics, and the chosen subnetwork of each run.
    """
    from subnetlab.runs.prune import SUBNETWORK_FILE, level_name, prune_sweep
    from subnetlab.runs.prune_summary import summarize

    out = Path(out)
    targets = [sparsity] if isinstance(sparsity, (int, float)) else list(sparsity)
    base = {"model": model, "task": task, "task_options": dict(task_options or {}), "eval_data": [], "splits": None,
            "device": device}
    sweep = prune_sweep(base, out, targets=targets, seeds=_seeds(seeds), preset=preset, overrides=settings)
    report = _run(sweep, out, jobs, "pruning")
    runs = {job.name: job.metrics for job in report.jobs}
    groups: dict[str, list[dict]] = {}
    for name, metrics in runs.items():
        if name != "full-model":
            groups.setdefault(level_name(metrics["target_sparsity"]), []).append(metrics["eval"])
    full = runs.get("full-model", {}).get("eval")
    return {"out": out, "summary": summarize(groups, full), "runs": runs,
            "subnetworks": [job.out_dir / SUBNETWORK_FILE for job in sweep if job.name != "full-model"]}


def discover(model: str, task: str, out: str | Path, *, lambdas: Sequence[float] = (1e-7, 5e-7, 1e-8), seed: int = 0,
             task_options: Mapping[str, Any] | None = None, selection: Any = None, device: str = "auto",
             jobs: int | None = None, **cs: Any) -> dict[str, Any]:
    """Find a weight mask for ``task`` in a causal LM with continuous sparsification, one run per lambda
    (``subnetlab discover``).

    ``cs`` are ``ContinuousSparsification`` settings (``epochs``, ``lr``, ``batch_size``, ``include``, ...);
    ``selection`` a ``methods.continuous_sparsification.LambdaChoice`` (default: the sparsest subnetwork within
    a point of the best evaluation accuracy). Returns the chosen run's metrics with ``"subnetwork"`` (its
    file) and ``"sweep"`` (every lambda's metrics).
    """
    from subnetlab.run_directory import absolute_input
    from subnetlab.runs.transfer import DiscoverJobConfig, lm_task_options, select_best

    out = Path(out)
    options = lm_task_options(str(model), task, dict(task_options or {}))  # your own data: the fine-tuning's split
    configs = [DiscoverJobConfig.from_dict({"model": str(absolute_input(model)), "task": task, "task_options": options,
                                            "seed": seed, "device": device, "cs": {**cs, "l0_lambda": lam}}).to_dict()
               for lam in lambdas]
    sweep = [Job("subnetlab.runs.transfer:discover_job", config, out / f"lambda_{lam:g}")
             for config, lam in zip(configs, lambdas)]
    report = _run(sweep, out, jobs, "discovery")
    metrics = [job.metrics for job in report.jobs]
    return {**select_best(metrics, selection), "sweep": metrics}


def transfer_subnetwork(model: str, task: str, out: str | Path, *, subnetwork: str | Path | None = None,
             conditions: Sequence[str] = ("subnetwork",), sizes: Sequence[int] | None = None,
             seeds: int | Sequence[int] = 0, task_options: Mapping[str, Any] | None = None, reinit: str = "all",
             freeze: bool = True, device: str = "auto", jobs: int | None = None, **train: Any) -> dict[str, Any]:
    """Transfer ``subnetwork`` from ``model`` into fresh models and train them on ``task``, for every condition,
    number of disambiguation rows (``sizes``: arithmetic tasks only, default 0, 100 and 1000) and seed
    (``subnetlab transfer``).

    ``train`` are ``transfer.TrainSettings`` fields (``epochs``, ``lr``, ``batch_size``, ...). Returns
    ``{"out", "summary", "runs"}``: per condition and size the mean test accuracy over seeds (at each run's
    best evaluation epoch), and every run's record.
    """
    from subnetlab.experiments.subtask_induction.report import summarise
    from subnetlab.run_directory import absolute_input
    from subnetlab.runs.transfer import TransferJobConfig, lm_task_options, own_data
    from subnetlab.transfer import TrainSettings, check_conditions

    out = Path(out)
    check_conditions(list(conditions), has_subnetwork=subnetwork is not None)
    if subnetwork is not None:  # an empty subnetwork is refused before any training, as the command does
        from subnetlab.runs.transfer import check_transfer_input, subnetwork_health
        from subnetlab.subnetwork import Subnetwork

        check_transfer_input(subnetwork_health(Subnetwork.load(subnetwork), subnetwork), list(conditions))
    if sizes is None:
        sizes = (0,) if own_data(task) else (0, 100, 1000)
    options = lm_task_options(str(model), task, dict(task_options or {}),  # your own data: the earlier runs' split
                              None if subnetwork is None else str(subnetwork))
    settings = TrainSettings(**train).config()
    sweep = []
    for condition in conditions:
        for size in sizes:
            for seed in _seeds(seeds):
                config = TransferJobConfig.from_dict({
                    "model": str(absolute_input(model)), "task": task, "task_options": options,
                    "subnetwork": str(absolute_input(subnetwork)) if subnetwork is not None else None,
                    "runs": [{"condition": condition, "size": size, "seed": seed}], "train": settings,
                    "reinit": reinit, "freeze": freeze, "device": device}).to_dict()
                sweep.append(Job("subnetlab.runs.transfer:transfer_job", config, out / condition / f"n{size}_s{seed}"))
    report = _run(sweep, out, jobs, "transfer")
    runs = [run for job in report.jobs for run in job.metrics["runs"]]
    return {"out": out, "summary": summarise(runs), "runs": runs}


__all__ = ["discover", "prune", "transfer_subnetwork"]
