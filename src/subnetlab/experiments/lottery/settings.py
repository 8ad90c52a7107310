"""The lottery-ticket study's typed settings (the keys of its presets, ``reproduce.PRESETS``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.settings import StudySettings, optional

METHODS = ("magnitude", "importance")
# the analysis's readings of the paper (``reproduce`` says which is whose)
ANALYSIS_CHOICES = {"pattern_counting": ("per-map", "per-head"), "pattern_seeds": ("all", "first"),
                    "super_survivor_maps": ("pruned", "full")}


@dataclass(frozen=True, kw_only=True)
class LotterySettings(StudySettings):
    """Per task of ``tasks``: fine-tuning per seed (``lr`` ... ``eval_limit``), m- and s-pruning
    (``threshold`` ... ``bad_fill``), good / random / bad re-fine-tuning for ``retrain_seeds``, then stability and
    the attention pattern types (``pattern_*``, ``super_survivor_maps``)."""

    reproduction = "lottery"

    model: str
    tasks: list[str]
    task_options: dict[str, Any]
    eval_data: dict[str, Any]
    split: str
    seeds: list[int]
    retrain_seeds: list[int]
    magnitude_seeds: list[int]
    lr: float
    batch_size: int
    epochs: float
    max_steps: int | None
    warmup_ratio: float
    weight_decay: float
    max_length: int
    eval_limit: int | None
    importance_limit: int | None
    threshold: float
    fraction: float
    criterion: str
    importance_batch_size: int | None
    refine: bool
    prune_max_steps: int | None
    stop_metric: str
    control_scope: str
    bad_fill: str
    pattern_counting: str
    pattern_seeds: str
    super_survivor_maps: str
    pattern_pairs: int
    pattern_source: str
    glue_dir: str | None
    backend: str
    jobs: int | None
    device: str
    # epochs of every re-fine-tuned subnetwork when they differ from the full models' ``epochs`` (None: the same)
    retrain_epochs: float | None = optional()

    def check(self) -> None:
        """The seeds and choices, then every job's configuration (fine-tuning and both prunings of each task)."""
        from subnetlab.runs.lottery import LotteryPruneJobConfig

        seeds = self.seeds
        if not seeds:
            raise SubnetlabError("seeds: at least one fine-tuning seed is needed")
        for key in ("retrain_seeds", "magnitude_seeds"):
            missing = set(getattr(self, key)) - set(seeds)
            if missing:
                raise SubnetlabError(f"{key}: seeds {sorted(missing)} are not among the fine-tuning seeds {seeds}")
        if set(self.retrain_seeds) - set(self.magnitude_seeds):
            raise SubnetlabError("retrain_seeds must be m-pruned too: make them a subset of magnitude_seeds")
        if not self.tasks:
            raise SubnetlabError("tasks: at least one task is needed")
        for key, allowed in ANALYSIS_CHOICES.items():
            if getattr(self, key) not in allowed:
                raise SubnetlabError(f"{key} {getattr(self, key)!r}: choose one of {', '.join(allowed)}", setting=key)
        for task in self.tasks:
            self.finetune_config(task, seeds[0])
            for method in METHODS:
                LotteryPruneJobConfig.from_dict(self.prune_job_config(task, method, seeds[0], self.model))

    def options_for(self, task: str) -> dict[str, Any]:
        """The task's options; with ``glue_dir`` set, every GLUE task reads that release (``data_dir``)."""
        options = dict(self.task_options.get(task, {}))
        if self.glue_dir and task.startswith("glue-"):
            options = {k: v for k, v in options.items() if k not in ("train", "eval")}
            options["data_dir"] = self.glue_dir
        return options

    def finetune_config(self, task: str, seed: int, model: str | None = None, retrain: bool = False):
        """The one training recipe (a checked ``FinetuneConfig``) for the full models and (``retrain``) every
        re-fine-tuned subnetwork, which trains ``retrain_epochs`` where set."""
        from subnetlab.methods.finetune.config import FinetuneConfig, validate

        cfg = FinetuneConfig(
            model=model or self.model, task=task, task_options=self.options_for(task),
            eval_data=list(self.eval_data.get(task, [])), lr=self.lr, batch_size=self.batch_size,
            epochs=self.retrain_epochs if retrain and self.retrain_epochs is not None else self.epochs,
            max_steps=self.max_steps, warmup_ratio=self.warmup_ratio,
            weight_decay=self.weight_decay, max_length=self.max_length, eval_limit=self.eval_limit,
            seed=seed, device=self.device, eval_at_start=False, eval_every=10**9, save_every=10**9,
        )
        validate(cfg)
        return cfg

    def prune_job_config(self, task: str, method: str, seed: int, model: str) -> dict[str, Any]:
        """The config of one pruning job (``runs.lottery.prune_job``): ``method`` on the model fine-tuned with
        ``seed``."""
        return {"model": model, "task": task, "method": method,
                "task_options": self.options_for(task),
                "eval_data": list(self.eval_data.get(task, [])), "split": self.split,
                "eval_limit": self.eval_limit, "importance_limit": self.importance_limit,
                "batch_size": self.batch_size, "max_length": self.max_length,
                "threshold": self.threshold, "fraction": self.fraction,
                "criterion": self.criterion, "refine": self.refine,
                "max_steps": self.prune_max_steps,
                "stop_metric": self.stop_metric,
                "control_scope": self.control_scope,
                "bad_fill": self.bad_fill,
                "importance_batch_size": self.importance_batch_size,
                "control_seed": seed, "device": self.device, "seed": seed}
