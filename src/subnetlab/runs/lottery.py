"""``subnetlab lottery-prune``: m-pruning or s-pruning of a fine-tuned checkpoint, plus its controls.

A job function for ``subnetlab.executor`` (``prune_job(config, out_dir)``): it
loads the fine-tuned model, measures the full model's development metric
on ``split`` (``stop_metric``: ``accuracy``, or ``task``: the task's own metric,
MCC for CoLA, Pearson/Spearman mean for STS-B ..., see ``tasks.glue``), prunes with ``magnitude_prune`` or
``importance_prune``, and writes into ``out_dir``:

* ``subnetwork.safetensors``: the "good" subnetwork (weight-level for
  magnitude, structured for importance);
* ``random.safetensors`` and ``bad.safetensors``: its controls (see
  ``methods.lottery.controls``), drawn with ``control_seed``, weight-level
  ones over ``control_scope`` (global or per-matrix), structured bad ones
  filled by ``bad_fill`` (random or least-important);
* ``importance.safetensors`` (s-pruning): the last importance scores;
* ``evaluations.json``: every development metric measured so far, in order (the resume point inside the
  pruning loop: a rerun after a kill replays these instead of measuring them again, see ``EvaluationJournal``).

It returns the metrics (pruning history, full and pruned metric, sparsity, and
the controls' metric when applied to the fine-tuned model without re-fine-tuning);
the executor writes ``config.json`` and ``metrics.json``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from subnetlab.errors import SubnetlabError, preset_values
from subnetlab.intervene import apply_gates, mask_weights
from subnetlab.io import atomic_directory, read_json, save_tensors, write_json
from subnetlab.methods.controls import apply_control, check_controls
from subnetlab.methods.evaluate import evaluate, label_permutation
from subnetlab.methods.finetune.config import FinetuneConfig
from subnetlab.methods.finetune.model import model_for_task
from subnetlab.methods.finetune.state import OPTIMIZER_FILE, checkpoint_dirs
from subnetlab.methods.lottery.controls import FILLS, SCOPES, controls
from subnetlab.methods.lottery.importance import get_criterion
from subnetlab.methods.lottery.importance_pruning import importance_prune
from subnetlab.methods.lottery.magnitude import magnitude_prune
from subnetlab.methods.lottery.retrain import refuse_unpinnable, train_masked
from subnetlab.models.loading import quiet_transformers, refuse_exported
from subnetlab.progress import stage
from subnetlab.run_directory import record_runtime
from subnetlab.runs.finetune import finetune, finetune_task
from subnetlab.runs.health import judge
from subnetlab.runs.job_config import JobConfig, optional
from subnetlab.runs.splits import save_splits
from subnetlab.runtime import DTYPE_NAMES, autocast, describe_runtime, resolve_device, resolve_dtype, runtime_record
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.base import Task
from subnetlab.tasks.glue.task import metric_value, task_metric
from subnetlab.tasks.spec import TaskSpec

METHODS = ("magnitude", "importance")
STOP_METRICS = ("accuracy", "task")

@dataclass(frozen=True)
class LotteryPruneJobConfig(JobConfig):
    """``prune_job``'s config: which checkpoint and task, m- or s-pruning, and its settings (paper defaults)."""

    what: ClassVar[str] = "pruning option"
    model: str
    task: str
    method: str
    task_options: dict[str, Any] = field(default_factory=dict)
    eval_data: list[str] = field(default_factory=list)
    split: str | None = None
    eval_limit: int | None = None
    importance_limit: int | None = None
    batch_size: int = 32
    max_length: int = 128
    threshold: float = 0.9
    fraction: float = 0.1
    max_steps: int | None = None
    criterion: str = "sensitivity"
    refine: bool = True
    control_seed: int = 0
    stop_metric: str = "accuracy"
    control_scope: str = "per-matrix"
    bad_fill: str = "least-important"
    importance_batch_size: int | None = None
    device: str = "cpu"
    seed: int | None = None
    dtype: str | None = optional()  # forward passes: None (float32), bfloat16 or float16 autocast
    control: str | None = optional()  # a search control (methods.controls), seeded by ``seed`` (0 if none)

    def __post_init__(self) -> None:
        if self.control is not None:
            check_controls([self.control])
        if self.dtype is not None and self.dtype not in DTYPE_NAMES:
            raise SubnetlabError(f"dtype {self.dtype!r}: expected {', '.join(DTYPE_NAMES)}", setting="dtype")
        if self.dtype == "float16" and self.method == "importance":
            raise SubnetlabError("dtype float16 has no loss scaling in importance pruning (its scores are gradients, "
                                 "which would underflow); use bfloat16 or float32", setting="dtype")
        for key in ("model", "task", "method"):
            if not getattr(self, key):
                raise SubnetlabError(f"{key} is required (a pruning config needs model, task and method)", setting=key)
        if self.method not in METHODS:
            raise SubnetlabError(f"method {self.method!r}: choose magnitude or importance", setting="method")
        get_criterion(self.criterion)  # unknown names fail before any model is loaded
        if not 0.0 < float(self.threshold) <= 1.0:
            raise SubnetlabError(f"threshold {self.threshold} is outside (0, 1]", setting="threshold")
        if not 0.0 < float(self.fraction) < 1.0:
            raise SubnetlabError(f"fraction {self.fraction} is outside (0, 1)", setting="fraction")
        for key, allowed in (("stop_metric", STOP_METRICS), ("control_scope", SCOPES), ("bad_fill", FILLS)):
            if getattr(self, key) not in allowed:
                raise SubnetlabError(f"{key} {getattr(self, key)!r}: choose one of {', '.join(allowed)}", setting=key)
        for key in ("eval_limit", "importance_limit", "max_steps", "importance_batch_size"):
            if getattr(self, key) is not None and int(getattr(self, key)) < 1:
                raise SubnetlabError(f"{key} {getattr(self, key)} must be at least 1", setting=key)
        TaskSpec(self.task, self.task_options, tuple(self.eval_data))

    @property
    def task_spec(self) -> TaskSpec:
        return TaskSpec(self.task, self.task_options, tuple(self.eval_data))


# ``subnetlab lottery-prune``'s presets (``errors.preset_values``: the preset, then what the user gave). ``paper``:
# the config's defaults (Prasanna et al.: batch 32, length 128, every development example). ``quick``: your own small
# model on a CPU: batches of 16 of 64 tokens, scored on at most 300 development examples, at most 10 pruning steps.
LOTTERY_PRUNE_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "quick": dict(batch_size=16, max_length=64, eval_limit=300, max_steps=10),
}


def prune_config(preset: str = "paper", **given: Any) -> dict[str, Any]:
    """A complete, validated pruning config as ``config.json`` holds it: the preset's settings, then ``given``
    (None means: the preset's, else the default).

    An exported (sliced) model is refused here, before the run directory is written.
    """
    config = LotteryPruneJobConfig.from_dict(preset_values(LOTTERY_PRUNE_PRESETS, preset, given)).to_dict()
    refuse_exported(config["model"], "lottery pruning")
    return config


@dataclass(frozen=True)
class RetrainJobConfig(JobConfig):
    """``retrain_job``'s config: the fine-tuning settings (model = the *pre-trained* model) and the fixed mask."""

    finetune: dict[str, Any]
    subnetwork: str
    save_model: bool = True

    def __post_init__(self) -> None:
        self.settings  # checks the fine-tuning settings

    @cached_property
    def settings(self) -> FinetuneConfig:
        return FinetuneConfig.from_json(self.finetune)


def check_retrain_subnetwork(model: str, path: str | os.PathLike) -> Subnetwork:
    """The mask file of a re-fine-tuning run, checked before its run directory is written.

    It must be a readable subnetwork file of 0/1 masks, found on the model's architecture
    (compared with an adapter built from the model's config alone, without its weights).
    """
    from subnetlab.models.loading import config_adapter

    refuse_exported(model, "re-fine-tuning with a subnetwork's masks")
    if not Path(path).is_file():
        raise SubnetlabError(f"{path}: no such subnetwork file", setting="subnetwork")
    try:
        sub = Subnetwork.load(path)
        refuse_unpinnable(sub, str(path))
        adapter = config_adapter(model)
        if adapter is not None:
            sub.check(adapter)
    except SubnetlabError as e:
        raise SubnetlabError(f"subnetwork: {e}", setting="subnetwork") from None
    return sub


@dataclass(frozen=True)
class FinetuneJobConfig(JobConfig):
    """``finetune_job``'s config: the fine-tuning settings."""

    finetune: dict[str, Any]

    def __post_init__(self) -> None:
        self.settings

    @cached_property
    def settings(self) -> FinetuneConfig:
        return FinetuneConfig.from_json(self.finetune)


def _loss_fn(task: Task, model: torch.nn.Module):
    perm = label_permutation(model, task)

    def loss(m: torch.nn.Module, batch: dict) -> torch.Tensor:  # per-example losses [B]
        logits = task.task_logits(m(**task.model_inputs(batch)), batch).float()
        if hasattr(task, "example_losses"):  # regression (STS-B): squared errors
            return task.example_losses(logits, batch)
        if perm is not None:
            logits = logits[:, perm]
        return F.cross_entropy(logits, batch["labels"].to(logits.device), reduction="none")

    return loss


def applied(model: torch.nn.Module, adapter, subnetwork: Subnetwork):
    """Context manager evaluating ``model`` as ``subnetwork``: gates at zero, or weight masks."""
    if subnetwork.kind == "structured":
        heads, mlps = subnetwork.gates()
        device = next(model.parameters()).device
        return apply_gates(model, adapter, heads.to(device), mlps.to(device))
    return mask_weights(model, {n: m.to(adapter.parameter(n).device) for n, m in subnetwork.weights.items()})


EVALUATIONS_FILE = "evaluations.json"


class EvaluationJournal:
    """The development metrics a pruning run has measured, in the order it asked for them (``evaluations.json``).

    Pruning is deterministic: a rerun asks for the same evaluations in the same order. Each call returns the
    recorded value of that call when there is one (a run resumed after a kill skips the evaluations it already
    paid for), else measures it and records it before returning it (written atomically after every evaluation,
    so a kill loses at most the evaluation under way). ``replayed`` counts the calls answered from the record.
    """

    def __init__(self, path: Path, measure: Any) -> None:
        self.path, self.measure = path, measure
        self.values: list[float] = list(read_json(path)["values"]) if path.is_file() else []
        self.calls = self.replayed = 0

    def __call__(self) -> float:
        if self.calls < len(self.values):
            value = float(self.values[self.calls])
            self.replayed += 1
        else:
            value = float(self.measure())
            self.values.append(value)
            write_json(self.path, {"values": self.values})
        self.calls += 1
        return value


def prune_job(config: dict[str, Any], out_dir: str | os.PathLike) -> dict[str, Any]:
    """Prune ``config['model']`` on ``config['task']`` (see the module doc)."""
    job = LotteryPruneJobConfig.from_dict(config)
    started = time.time()
    out = Path(out_dir)
    task = job.task_spec.build()
    split = job.split or next(iter(task.eval_splits), None)
    if split is None:
        raise SubnetlabError(f"task {task.name} has no development split to prune on")
    task.examples(split)  # unknown split -> error naming it
    loaded = model_for_task(job.model, task, seed=0)
    loaded = apply_control(job.control, loaded, task, int(job.seed or 0))  # the same search, nothing to find
    device = resolve_device(job.device)
    dtype = resolve_dtype(job.dtype, device)
    stage(describe_runtime(device, dtype))
    record_runtime(out, runtime_record(device, dtype))  # where it ran: not compared when the run resumes
    model, tokenizer, adapter = loaded.model.to(device), loaded.tokenizer, loaded.adapter
    model.eval()
    bs, max_len, limit = int(job.batch_size), int(job.max_length), job.eval_limit

    metric_name = task_metric(task) if job.stop_metric == "task" else "accuracy"

    def dev_metric() -> float:
        with autocast(device, dtype):
            score = evaluate(model, tokenizer, task, [split], batch_size=2 * bs, max_length=max_len, limit=limit)[split]
        return metric_value(task, score) if job.stop_metric == "task" else float(score["accuracy"])

    journal = EvaluationJournal(out / EVALUATIONS_FILE, dev_metric)  # the same metric, replayed on a rerun
    if journal.values:
        stage(f"resuming: {len(journal.values)} development evaluation(s) recorded by an earlier attempt")
    full = journal()
    stage(f"full model: {split} {metric_name} {full:.4f}; pruning by {job.method}")
    if job.method == "magnitude":
        result = magnitude_prune(adapter, journal, fraction=float(job.fraction),
                                 max_steps=int(job.max_steps or 10), threshold=float(job.threshold),
                                 full_metric=full, seed=job.seed)
    else:
        batches = [{k: v.to(device) for k, v in b.items()} for b in
                   task.batches(tokenizer, split, int(job.importance_batch_size or bs), max_length=max_len,
                                limit=job.importance_limit or limit)]
        with autocast(device, dtype):  # the importance scores' forward passes too
            result = importance_prune(model, adapter, batches, journal, loss_fn=_loss_fn(task, model),
                                      criterion=job.criterion, head_fraction=float(job.fraction),
                                      threshold=float(job.threshold), refine=bool(job.refine),
                                      max_steps=job.max_steps, full_metric=full, seed=job.seed)
        h, m = result.importance
        save_tensors(out / "importance.safetensors", {"heads": h, "mlps": m}, {"criterion": str(job.criterion)})
    pruned_metric = {}
    made = controls(result.subnetwork, adapter, int(job.control_seed), result.importance, scope=job.control_scope,
                    fill=job.bad_fill)
    for name, sub in made.items():
        sub.save(out / ("subnetwork.safetensors" if name == "good" else f"{name}.safetensors"))
        if name != "good":  # the controls applied to the fine-tuned model, before any re-fine-tuning
            with applied(model, adapter, sub):
                pruned_metric[name] = journal()
    good = result.subnetwork
    metrics = {**result.summary(), "method": job.method, "split": split, "kind": good.kind, "metric_name": metric_name,
               "parameter_sparsity": good.parameter_sparsity(adapter), "kept": good.count(),
               "controls_metric": pruned_metric, "wall_seconds": time.time() - started,
               "resumed_from": journal.replayed, "seed": job.seed}
    if job.control is not None:
        metrics["control"] = job.control
    if good.kind == "structured":
        metrics["kept_components"] = good.kept_names()
        metrics["heads_kept"], metrics["mlps_kept"] = int(good.heads.sum()), int(good.mlps.sum())
    metrics["health"] = judge(kept=good.count(), maskable=good.maskable()).to_dict()  # no gates, no target: size alone
    return metrics


def retrain_job(config: dict[str, Any], out_dir: str | os.PathLike) -> dict[str, Any]:
    """Job function (``subnetlab.executor``): pre-trained model + fixed mask, fine-tuned and evaluated.

    ``config``: ``finetune`` (a ``FinetuneConfig`` as JSON: model = the *pre-trained*
    model, task, hyperparameters, seed), ``subnetwork`` (the mask file) and
    ``save_model`` (default true). Writes ``subnetwork.safetensors`` (the mask
    used) and ``model/`` (trained weights: weight-level subnetworks are zero in
    place, structured ones must be evaluated with the mask's gates); returns the
    metrics (the executor writes ``config.json`` and ``metrics.json``).
    """
    out = Path(out_dir)
    job = RetrainJobConfig.from_dict(config)
    cfg = job.settings
    task = finetune_task(cfg)
    loaded = model_for_task(cfg.model, task, seed=cfg.seed, new_weights=cfg.new_weights)
    sub = Subnetwork.load(job.subnetwork, adapter=loaded.adapter)
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    stage(describe_runtime(device, dtype))
    record_runtime(out, runtime_record(device, dtype))  # where it ran: not compared when the run resumes
    model = loaded.model.to(device)
    sub.save(out / "subnetwork.safetensors")
    save_splits(out, task)  # your own data: the rows it trains on, which later commands never evaluate on
    control = sub.extra.get("control", "good")
    stage(f"re-fine-tuning {cfg.model} with the {control} {sub.method} subnetwork ({sub.kind}, sparsity {sub.sparsity:.1%})")
    with autocast(device, dtype):  # as fine-tuning: forward passes in the run's precision, weights float32
        metrics = train_masked(model, loaded.adapter, loaded.tokenizer, task, sub, cfg)
    if job.save_model:
        with atomic_directory(out / "model") as tmp:  # a failed write leaves no half-written model
            with quiet_transformers():
                model.save_pretrained(str(tmp))
            if loaded.tokenizer is not None and hasattr(loaded.tokenizer, "save_pretrained"):
                loaded.tokenizer.save_pretrained(str(tmp))
    metrics["subnetwork"] = {"method": sub.method, "kind": sub.kind, "control": control, "sparsity": sub.sparsity,
                             "parameter_sparsity": sub.parameter_sparsity(loaded.adapter)}
    return metrics


def finetune_job(config: dict[str, Any], out_dir: str | os.PathLike) -> dict[str, Any]:
    """Fine-tune ``config['finetune']`` into ``out_dir/run``; the model ends up in ``out_dir/run/model``."""
    run = Path(out_dir) / "run"
    metrics = finetune(FinetuneJobConfig.from_dict(config).settings, run)
    for _, checkpoint in checkpoint_dirs(run):  # finished: resuming needs no optimizer state (2/3 of the disk)
        (checkpoint / OPTIMIZER_FILE).unlink(missing_ok=True)
    return {"final": metrics["final"], "train_loss": metrics["train_loss"], "steps": metrics["steps"],
            "train_examples": metrics["train_examples"], "wall_seconds": metrics["wall_seconds"],
            "model": str(run / "model")}
