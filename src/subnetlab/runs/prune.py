"""Pruning jobs for ``subnetlab.executor``: one per (sparsity, seed), or one staircase per seed.

Layout of a pruning sweep's directory DIR (what ``subnetlab prune`` writes)::

    DIR/
      sweep.json                          the executor's record of the sweep
      summary.json                        Table 5 style: per sparsity (or level) and evaluation set,
                                          the full model's value and min / max / mean / std over seeds
      cache/means-<hash>.safetensors      mean activations, shared by every run on the same model + data
      full-model/{config,metrics}.json    the unpruned model's evaluation
      sparsity-0.50/seed-0/               linear schedule (the paper's): one run per (sparsity, seed)
        config.json                       everything to rerun it (written first)
        metrics.json                      results (written last: its presence marks the run finished)
        subnetwork.safetensors            the selected binary subnetwork (top-k by log-alpha by default)
        subnetwork-threshold.safetensors  the other selection (or subnetwork-topk.safetensors)
        history.json                      target, expected sparsity, KL, lambdas over training
        checkpoint.safetensors/.json      training state; a killed run resumes from it
      staircase/seed-0/                   staircase schedule: one run per seed, every level
        config.json, metrics.json, history.json, checkpoint.*
        levels/0.05/subnetwork.safetensors            that level's subnetwork
        levels/0.05/subnetwork-threshold.safetensors
        levels/0.05/metrics.json                      its sparsity, selections and evaluation
        levels/0.10/...                               (level directories are named f"{level:.2f}")

``metrics.json`` of a run (and of a level) holds ``target_sparsity``, ``seed``,
``sparsity`` and ``parameter_sparsity`` of the selected subnetwork,
``selections`` (both ``topk`` and ``threshold``: sparsity, parameter sparsity,
threshold, kept component names, and their Jaccard overlap), ``eval``
(``{split: task.score(...)}``: accuracy, per subcase, per heuristic) and
training figures. Every ``subnetwork.safetensors`` records ``seed`` and
``target_sparsity`` in its metadata, so ``experiments.pruned_runs`` finds
linear runs and staircase levels alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job
from subnetlab.intervene import apply_gates
from subnetlab.io import read_json, write_json
from subnetlab.methods.evaluate import evaluate
from subnetlab.methods.head_pruning.config import PruneConfig, preset_config
from subnetlab.methods.head_pruning.select import GateSelection
from subnetlab.methods.head_pruning.train import prune
from subnetlab.progress import stage
from subnetlab.run_directory import absolute_inputs, resolve_run_path, run_relative
from subnetlab.runs.health import Health, chance_level, judge
from subnetlab.runs.prune_setup import (
    FullModelJobConfig,
    ModelAndTask,
    PruneJobConfig,
    PruningSetup,
    load_pruning_model,
    task_tokenizer,
)
from subnetlab.runtime import dtype_name
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.spec import eval_splits

PRUNE_JOB = "subnetlab.runs.prune:prune_job"
FULL_MODEL_JOB = "subnetlab.runs.prune:full_model_job"
SUBNETWORK_FILE = "subnetwork.safetensors"


def level_name(level: float) -> str:
    return f"{level:.2f}"


def run_dir_name(sparsity: float, seed: int, schedule: str) -> str:
    """``sparsity-0.50/seed-3`` (linear) or ``staircase/seed-3``."""
    if schedule == "staircase":
        return f"staircase/seed-{seed}"
    return f"sparsity-{level_name(sparsity)}/seed-{seed}"


def _subnetwork(setup: PruningSetup, sel: GateSelection, cfg: PruneConfig, target: float, job: PruneJobConfig) -> Subnetwork:
    extra = {"selection": sel.method, "schedule": cfg.schedule, "task": str(job.task), "model": str(job.model)}
    if sel.threshold is not None:
        extra["threshold"] = repr(sel.threshold)
    return Subnetwork.structured(setup.loaded.adapter, sel.heads, sel.mlps, method="hard-concrete", seed=cfg.seed,
                                 target_sparsity=target, ablation=cfg.ablation, extra=extra)


def evaluate_gates(setup: PruningSetup, heads, mlps, cfg: PruneConfig) -> dict[str, Any]:
    """Scores of the model with ``heads``/``mlps`` gates (ablated with the evaluation values)."""
    model, adapter = setup.loaded.model, setup.loaded.adapter
    with apply_gates(model, adapter, heads=heads, mlps=mlps, ablation=setup.eval_ablation):
        return evaluate(model, setup.tokenizer, setup.task, setup.splits, batch_size=cfg.eval_batch_size,
                        max_length=cfg.max_length, limit=cfg.eval_limit)


def pruning_health(sel: GateSelection, cfg: PruneConfig, target: float, history: Sequence[Mapping[str, Any]] = ()) -> Health:
    """The health of a selection at ``target``: its kept prunable components, the gates still undecided,
    their expected sparsity against the target, and the KL to the full model over training (the objective the
    subnetwork fits; the Lagrangian term's own convergence is what "off target" measures)."""
    kept = int(sel.heads.sum()) + (int(sel.mlps.sum()) if cfg.prune_mlps else 0)
    return judge(kept=kept, maskable=sel.num_gates, undecided=sel.undecided, gates=sel.num_gates,
                 expected_sparsity=sel.expected_sparsity, target_sparsity=target,
                 objective=[h["kl"] for h in history if "kl" in h] if history else None,
                 undecided_advice=undecided_advice(cfg))


def undecided_advice(cfg: PruneConfig) -> str:
    """The settings that let gates travel to a decision, with this run's values: the steps the gates train at the
    target (the hold of a staircase level), the log-alpha learning rate and, on the expected L0 (which every gate
    half open meets as well as decided gates do), the sampled sparsity (``head_pruning.config``'s ``quick``)."""
    steps = (f"hold_steps (now {cfg.hold_steps})" if cfg.schedule == "staircase"
             else f"total_steps (now {cfg.total_steps})")
    advice = f"{steps} or lr (now {cfg.lr:g})"
    if cfg.sparsity_estimate == "expected":
        advice += ", or set sparsity_estimate=sample (now expected)"
    return advice


def write_selections(out: Path, setup: PruningSetup, selections: dict[str, GateSelection], cfg: PruneConfig,
                     target: float, job: PruneJobConfig, history: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Save the chosen subnetwork (and the other), evaluate the chosen one; return its metrics (its ``health``
    judged from the selection and, at the end of a run, the training ``history``)."""
    adapter = setup.loaded.adapter
    subs = {name: _subnetwork(setup, sel, cfg, target, job) for name, sel in selections.items()}
    chosen = subs[cfg.selection]
    for name, sub in subs.items():
        if name != cfg.selection:
            sub.save(out / f"subnetwork-{name}.safetensors")
    scores = evaluate_gates(setup, chosen.heads, chosen.mlps, cfg)
    chosen.save(out / SUBNETWORK_FILE)
    described = {
        name: {"sparsity": sub.sparsity, "parameter_sparsity": sub.parameter_sparsity(adapter),
               "threshold": selections[name].threshold, "kept": sub.kept_names()}
        for name, sub in subs.items()
    }
    described["jaccard"] = subs["topk"].jaccard(subs["threshold"])
    sel = selections[cfg.selection]
    if sel.undecided is not None:
        described["undecided_gates"] = sel.undecided
        described["gates"] = sel.num_gates
    return {"target_sparsity": target, "seed": cfg.seed, "selection": cfg.selection, "sparsity": chosen.sparsity,
            "parameter_sparsity": chosen.parameter_sparsity(adapter), "selections": described, "eval": scores,
            "eval_ablation": "mean" if cfg.ablation == "resample" else cfg.ablation,
            "health": pruning_health(sel, cfg, target, history).to_dict()}


def prune_job(config: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Executor job: prune one model to one target (or up a staircase) with one seed."""
    out_dir = Path(out_dir)
    job = PruneJobConfig.from_dict({**config, "cache_dir": resolve_run_path(config.get("cache_dir"), out_dir)})
    cfg = job.settings
    setup = PruningSetup.from_job(job)
    levels: dict[str, Any] = {}

    def on_level(level: float, selections: dict[str, GateSelection], step: int) -> None:
        where = out_dir / "levels" / level_name(level)
        if (where / "metrics.json").is_file():  # written before a kill; the replay is identical
            levels[level_name(level)] = _level_summary(read_json(where / "metrics.json"))
            return
        stage(f"seed {cfg.seed}: level {level:.2f} reached at step {step}; evaluating")
        metrics = {**write_selections(where, setup, selections, cfg, level, job), "step": step}
        write_json(where / "metrics.json", metrics)
        levels[level_name(level)] = _level_summary(metrics)

    stage(f"pruning seed {cfg.seed} to {cfg.sparsity:.2f} ({cfg.schedule}, {cfg.make_schedule().total_steps} steps)")
    result = prune(setup.loaded.model, setup.loaded.adapter, setup.data, cfg, ablation=setup.ablation,
                   run_dir=out_dir, on_level=on_level if cfg.schedule == "staircase" else None)
    write_json(out_dir / "history.json", result.history)
    final = result.history[-1] if result.history else {}
    training = {"schedule": cfg.schedule, "steps": cfg.make_schedule().total_steps, "resumed_from": result.resumed_from,
                "train_seconds": round(result.seconds, 3), "final": final,
                "weights_dtype": dtype_name(next(setup.loaded.model.parameters()).dtype)}  # as they were, not as asked
    if cfg.schedule == "staircase":
        for level in cfg.levels or (cfg.sparsity,):  # levels finished before a kill were skipped by the replay
            if level_name(level) not in levels:
                levels[level_name(level)] = _level_summary(read_json(out_dir / "levels" / level_name(level) / "metrics.json"))
        health = pruning_health(result.selection, cfg, max(cfg.levels or (cfg.sparsity,)), result.history)
        return {"target_sparsity": cfg.sparsity, "seed": cfg.seed, **training, "levels": levels,
                "health": health.to_dict()}  # the gates at the end of the climb (each level has its own)
    stage(f"seed {cfg.seed}: evaluating the {cfg.sparsity:.2f} subnetwork")
    metrics = write_selections(out_dir, setup, result.selections, cfg, cfg.sparsity, job, result.history)
    return {**metrics, **training, **({} if job.control is None else {"control": job.control})}


def _level_summary(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: metrics[k] for k in ("step", "sparsity", "parameter_sparsity", "eval", "health") if k in metrics}


def full_model_job(config: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Executor job: evaluate the unpruned model on the same splits (the summary's "model" column)."""
    job = FullModelJobConfig.from_dict(config)
    task = job.task_spec.build()
    splits = eval_splits(task, job.splits)
    loaded = job.place(load_pruning_model(job.model, task, job.placement, job.dtype or "float32"))
    tokenizer = task_tokenizer(loaded, task)
    settings = job.eval_settings  # the same batch size, length and limit as the runs'
    stage("evaluating the full model")
    scores = evaluate(loaded.model, tokenizer, task, splits, batch_size=settings.batch_size,
                      max_length=settings.max_length, limit=settings.limit)
    return {"eval": scores, "weights_dtype": dtype_name(next(loaded.model.parameters()).dtype),
            "health": judge(chance=chance_level(scores)).to_dict()}  # at chance: nothing to prune


Overrides = Mapping[str, Any] | Callable[[float], Mapping[str, Any]]


def prune_sweep(base: Mapping[str, Any], out: Path, *, targets: Sequence[float], seeds: Sequence[int], preset: str,
                schedule: str = "linear", levels: Sequence[float] = (), overrides: Overrides | None = None,
                name_prefix: str | None = None) -> list[Job]:
    """The jobs of one pruning sweep of one model: its full-model evaluation, then one run per (target, seed).

    ``base`` holds the model and task keys of a pruning job config (``model``,
    ``task``, ``task_options``, ``eval_data``, ``splits``); ``overrides`` change the
    preset's pruning settings (a mapping, or a function of the target). With the
    staircase schedule there is one run per seed, climbing ``levels`` to the last.
    Every run of the sweep shares ``out/cache`` (mean activations), stored relative to the run directory. ``name_prefix``
    names the jobs ``<prefix>seed-<s>`` and ``<prefix>full-model`` (default: their
    directories). Used by ``subnetlab prune``, the Heuristic Core study and the
    effective-size sweep alike.
    """
    if not seeds:
        raise SubnetlabError("seeds: at least one seed", setting="seeds")
    if schedule == "staircase":
        if not levels:
            raise SubnetlabError("levels: a staircase needs at least one level", setting="levels")
        plans = [(max(levels), seed) for seed in seeds]
    else:
        if not targets:
            raise SubnetlabError("sparsity: give at least one target", setting="sparsity")
        plans = [(target, seed) for target in targets for seed in seeds]
    common = ModelAndTask.from_dict(absolute_inputs(base))  # input files stored absolute, the cache run-relative
    jobs: list[Job] = []
    first: PruneConfig | None = None
    for target, seed in plans:
        extra = overrides(target) if callable(overrides) else (overrides or {})
        cfg = preset_config(preset, target, seed=seed, schedule=schedule, levels=tuple(levels), **extra)
        first = first or cfg
        run_dir = out / run_dir_name(target, seed, schedule)
        job = PruneJobConfig(**common.to_dict(), cache_dir=run_relative(out / "cache", run_dir), preset=preset,
                             prune=cfg.to_dict())
        name = f"{name_prefix}seed-{seed}" if name_prefix is not None and schedule == "staircase" else None
        jobs.append(Job(PRUNE_JOB, job.to_dict(), run_dir, name=name))
    assert first is not None
    full_name = f"{name_prefix}full-model" if name_prefix is not None else "full-model"
    return [full_model_eval_job(base, out / "full-model", first, name=full_name), *jobs]


def full_model_eval_job(base: Mapping[str, Any], out_dir: Path, settings: PruneConfig, name: str | None = None) -> Job:
    """The job evaluating ``base``'s unpruned model at ``settings``' evaluation batch, length and limit: the "model"
    column of every pruning sweep, and any other full-model number that must agree with it (the same rows, the same
    settings: the same accuracy)."""
    common = ModelAndTask.from_dict(absolute_inputs(base))
    full = FullModelJobConfig(**common.to_dict(), eval={"batch_size": settings.eval_batch_size,
                                                        "max_length": settings.max_length, "limit": settings.eval_limit},
                              dtype=None if settings.dtype == "float32" else settings.dtype)
    return Job(FULL_MODEL_JOB, full.to_dict(), out_dir, name=name)
