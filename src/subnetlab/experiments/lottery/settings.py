"""The lottery-ticket study's typed settings (the keys of its presets, ``reproduce.PRESETS``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.settings import StudySettings

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

    def check(self) -> None:
        """The seeds and choices, then every job's configuration (fine-tuning and both prunings of each task)."""
        from subnetlab.experiments.lottery.reproduce import METHODS, finetune_config, prune_job_config
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
            finetune_config(self, task, seeds[0])
            for method in METHODS:
                LotteryPruneJobConfig.from_dict(prune_job_config(self, task, method, seeds[0], self.model))
