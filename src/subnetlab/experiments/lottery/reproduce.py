"""`subnetlab reproduce lottery`: When BERT Plays the Lottery, All Tickets Are Winning (Prasanna et al., 2020).

For every task: fine-tune the pre-trained model with several seeds; prune every
seed's model by importance (s-pruning) and the chosen seeds' by magnitude
(m-pruning); re-fine-tune the good, random and bad subnetworks from the
*pre-trained* weights with the mask fixed; measure the stability of the
s-pruned heads across seeds (Jaccard, super-survivors); classify every head's
attention pattern, raw and normed, and compare the super-survivors with all
heads. Everything runs as executor jobs (``backend`` / ``jobs`` settings), so
a rerun skips finished work. The run directory::

    DIR/config.json  DIR/metrics.json  DIR/report.md  DIR/figures/*.png
    DIR/<task>/finetune/seed<S>/       (run/model: the fine-tuned model)
    DIR/<task>/prune/{magnitude,importance}-seed<S>/   subnetwork / random / bad .safetensors
    DIR/<task>/retrain/{magnitude,importance}-{good,random,bad}-seed<S>/
    DIR/<task>/patterns-{finetuned,pretrained}.json

Presets: ``demo`` is MiniLM on the synthetic NLI corpus, sized for a 2-core
CPU (attention maps on the real MNLI rows in ``../shared/data/mnli`` when
present); ``paper`` is bert-base-uncased on GLUE MNLI and QQP from the hub
(GPU), 5 seeds, the full development sets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job, run_jobs
from subnetlab.io import read_json, write_json
from subnetlab.methods.finetune.config import FinetuneConfig, validate
from subnetlab.progress import stage
from subnetlab.runs.directory import claim

NAME = "lottery"
CONTROLS = ("good", "random", "bad")
METHODS = ("magnitude", "importance")

_GLUE = "hub:nyu-mll/glue"
PRESETS: dict[str, dict[str, Any]] = {
    "demo": {
        "model": "minilm",
        "tasks": ["nli-synthetic"],
        "task_options": {"nli-synthetic": {"n_train": 2000, "n_eval": 300, "hans_per_subcase": 10}},
        "eval_data": {},
        "split": "id",
        "seeds": [0, 1, 2],
        "retrain_seeds": [0],
        "magnitude_seeds": [0],
        "lr": 1e-4, "batch_size": 32, "epochs": 1.0, "max_steps": None, "warmup_ratio": 0.1,
        "weight_decay": 0.01, "max_length": 64,
        "eval_limit": 300, "importance_limit": 96,
        "threshold": 0.9, "fraction": 0.1, "criterion": "sensitivity", "refine": True, "prune_max_steps": None,
        "pattern_pairs": 40, "pattern_source": "mnli-shared",
        "backend": "local", "jobs": None, "device": "cpu",
    },
    "paper": {
        "model": "bert-base-uncased",
        "tasks": ["mnli", "qqp"],
        "task_options": {
            "mnli": {"train": f"{_GLUE}:mnli@train", "eval": f"{_GLUE}:mnli@validation_matched"},
            "qqp": {"train": f"{_GLUE}:qqp@train", "eval": f"{_GLUE}:qqp@validation"},
        },
        "eval_data": {},
        "split": "id",
        "seeds": [0, 1, 2, 3, 4],
        "retrain_seeds": [0, 1, 2, 3, 4],
        "magnitude_seeds": [0, 1, 2, 3, 4],
        "lr": 2e-5, "batch_size": 32, "epochs": 3.0, "max_steps": None, "warmup_ratio": 0.1,
        "weight_decay": 0.01, "max_length": 128,
        "eval_limit": None, "importance_limit": None,
        "threshold": 0.9, "fraction": 0.1, "criterion": "sensitivity", "refine": True, "prune_max_steps": None,
        "pattern_pairs": 100, "pattern_source": "task",
        "backend": "local", "jobs": None, "device": "auto",
    },
}


def _check(settings: dict[str, Any]) -> None:
    seeds = list(settings["seeds"])
    if not seeds:
        raise SubnetlabError("seeds: at least one fine-tuning seed is needed")
    for key in ("retrain_seeds", "magnitude_seeds"):
        missing = set(settings[key]) - set(seeds)
        if missing:
            raise SubnetlabError(f"{key}: seeds {sorted(missing)} are not among the fine-tuning seeds {seeds}")
    if set(settings["retrain_seeds"]) - set(settings["magnitude_seeds"]):
        raise SubnetlabError("retrain_seeds must be m-pruned too: make them a subset of magnitude_seeds")
    if not settings["tasks"]:
        raise SubnetlabError("tasks: at least one task is needed")


def finetune_config(settings: dict[str, Any], task: str, seed: int, model: str | None = None) -> FinetuneConfig:
    """The one training recipe for the full models and every re-fine-tuned subnetwork."""
    cfg = FinetuneConfig(
        model=model or settings["model"], task=task, task_options=dict(settings["task_options"].get(task, {})),
        eval_data=list(settings["eval_data"].get(task, [])), lr=settings["lr"], batch_size=settings["batch_size"],
        epochs=settings["epochs"], max_steps=settings["max_steps"], warmup_ratio=settings["warmup_ratio"],
        weight_decay=settings["weight_decay"], max_length=settings["max_length"], eval_limit=settings["eval_limit"],
        seed=seed, device=settings["device"], eval_at_start=False, eval_every=10**9, save_every=10**9,
    )
    validate(cfg)
    return cfg


def _run(jobs: list[Job], settings: dict[str, Any], sweep_dir: Path, what: str) -> None:
    report = run_jobs(jobs, backend=settings["backend"], n_jobs=settings["jobs"], sweep_dir=sweep_dir)
    failed = [j for j in report.jobs if j.status != "done" and j.status != "skipped"]
    if failed:
        raise SubnetlabError(f"{what}: {len(failed)} job(s) failed, first {failed[0].name}: {failed[0].error} "
                             f"(see {sweep_dir / 'sweep.json'}; rerun to retry)")


def _task_stage(settings: dict[str, Any], task: str, tdir: Path) -> dict[str, Any]:
    """Fine-tune, prune and re-fine-tune for one task; return the measured numbers."""
    seeds = list(settings["seeds"])
    ft = {s: tdir / "finetune" / f"seed{s}" for s in seeds}
    stage(f"{task}: fine-tuning {len(seeds)} seeds")
    _run([Job("subnetlab.runs.lottery:finetune_job", {"finetune": finetune_config(settings, task, s).to_json()},
              ft[s]) for s in seeds], settings, tdir / "finetune", "fine-tuning")

    prune_dirs: dict[tuple[str, int], Path] = {}
    jobs = []
    for method, method_seeds in (("importance", seeds), ("magnitude", list(settings["magnitude_seeds"]))):
        for s in method_seeds:
            prune_dirs[(method, s)] = d = tdir / "prune" / f"{method}-seed{s}"
            config = {"model": str(ft[s] / "run" / "model"), "task": task, "method": method,
                      "task_options": dict(settings["task_options"].get(task, {})),
                      "eval_data": list(settings["eval_data"].get(task, [])), "split": settings["split"],
                      "eval_limit": settings["eval_limit"], "importance_limit": settings["importance_limit"],
                      "batch_size": settings["batch_size"], "max_length": settings["max_length"],
                      "threshold": settings["threshold"], "fraction": settings["fraction"],
                      "criterion": settings["criterion"], "refine": settings["refine"],
                      "max_steps": settings["prune_max_steps"],
                      "control_seed": s, "device": settings["device"], "seed": s}
            jobs.append(Job("subnetlab.runs.lottery:prune_job", config, d))
    stage(f"{task}: pruning ({len(jobs)} jobs)")
    _run(jobs, settings, tdir / "prune", "pruning")

    retrain_dirs: dict[tuple[str, str, int], Path] = {}
    jobs = []
    for s in settings["retrain_seeds"]:
        cfg = finetune_config(settings, task, s).to_json()
        for method in METHODS:
            for control in CONTROLS:
                name = "subnetwork" if control == "good" else control
                retrain_dirs[(method, control, s)] = d = tdir / "retrain" / f"{method}-{control}-seed{s}"
                jobs.append(Job("subnetlab.runs.lottery:retrain_job",
                                {"finetune": cfg, "subnetwork": str(prune_dirs[(method, s)] / f"{name}.safetensors"),
                                 "save_model": False}, d))
    stage(f"{task}: re-fine-tuning good / random / bad subnetworks ({len(jobs)} jobs)")
    _run(jobs, settings, tdir / "retrain", "re-fine-tuning")

    return {
        "finetune": {str(s): read_json(ft[s] / "metrics.json") for s in seeds},
        "prune": {f"{m}-seed{s}": read_json(d / "metrics.json") for (m, s), d in prune_dirs.items()},
        "retrain": {f"{m}-{c}-seed{s}": read_json(d / "metrics.json") for (m, c, s), d in retrain_dirs.items()},
        "dirs": {"finetune": {str(s): str(p) for s, p in ft.items()},
                 "importance": {str(s): str(prune_dirs[("importance", s)]) for s in seeds}},
    }


def _analysis_stage(settings: dict[str, Any], task: str, tdir: Path, measured: dict[str, Any]) -> dict[str, Any]:
    """Stability of the s-pruned heads over seeds and the attention pattern types (cached as JSON)."""
    from subnetlab.analysis.stability import stability_summary
    from subnetlab.experiments.lottery.jobs import pattern_types, sentence_pairs
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.tasks.registry import shared_data_dir
    from subnetlab.tasks.spec import TaskSpec

    subs = [Subnetwork.load(Path(d) / "subnetwork.safetensors") for d in measured["dirs"]["importance"].values()]
    stability = stability_summary(subs)
    patterns: dict[str, Any] = {}
    first = min(settings["seeds"])
    task_obj = TaskSpec(task, settings["task_options"].get(task, {})).build()
    pairs, source = sentence_pairs(task_obj, settings["split"], int(settings["pattern_pairs"]),
                                   settings["pattern_source"], shared_data_dir())
    for which, path in (("finetuned", str(Path(measured["dirs"]["finetune"][str(first)]) / "run" / "model")), ("pretrained", settings["model"])):
        cache = tdir / f"patterns-{which}.json"
        if not cache.is_file():
            stage(f"{task}: attention pattern types of the {which} model on {len(pairs)} pairs")
            write_json(cache, {"source": source, "model": path, **pattern_types(path, pairs, settings["max_length"], settings["device"])})
        patterns[which] = read_json(cache)
    return {"stability": stability, "patterns": patterns, "pattern_seed": first}


def run(settings: dict[str, Any], out: Path) -> Path:
    """Run (or resume) the whole study into ``out``; returns the report's path."""
    from subnetlab.experiments.lottery.report import write_report

    _check(settings)
    out = Path(out)
    claim(out, settings, what="study configuration")
    started = time.time()
    results: dict[str, Any] = {}
    for task in settings["tasks"]:
        tdir = out / task.replace(":", "_")
        measured = _task_stage(settings, task, tdir)
        measured.update(_analysis_stage(settings, task, tdir, measured))
        results[task] = measured
    elapsed = time.time() - started
    write_json(out / "metrics.json", {"tasks": results, "wall_seconds_this_run": elapsed})
    return write_report(settings, results, out, elapsed)
