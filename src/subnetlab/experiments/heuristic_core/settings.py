"""The Heuristic Core study's typed settings (the keys of its presets, ``reproduce.PRESETS``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.settings import StudySettings


@dataclass(frozen=True, kw_only=True)
class HeuristicCoreSettings(StudySettings):
    """One run of the study: a model fine-tuned and pruned per task of ``studies`` (each a mapping: ``name``,
    ``task``, ``ood``, ``sparsities`` ...). ``prune_steps_scale`` / ``prune_hold_steps`` change the pruning preset's
    step rule (``study.step_overrides``); ``effective_size`` None skips that stage."""

    reproduction = "heuristic-core"

    model: str
    finetune_preset: str | None
    finetune: dict[str, Any]
    studies: list[dict[str, Any]]
    n_ood_subcases: int
    seeds: list[int]
    prune_preset: str
    prune_steps_scale: float | None
    prune_hold_steps: int | None
    prune: dict[str, Any]
    effective_size: dict[str, Any] | None
    ablation: dict[str, Any]
    attention: dict[str, Any]
    backend: str
    jobs: int | None

    def check(self) -> None:
        """What can be checked without data or training; each step's resolved configuration is checked by
        ``reproduce.plan`` before the study writes anything."""
        from subnetlab.experiments.heuristic_core.effective_size import SearchSettings
        from subnetlab.methods.head_pruning.config import PRESETS as PRUNE_PRESETS

        if not self.studies:
            raise SubnetlabError("studies: at least one study is needed", setting="studies")
        if self.prune_preset not in PRUNE_PRESETS:
            raise SubnetlabError(f"prune_preset {self.prune_preset!r}: expected one of {', '.join(PRUNE_PRESETS)}",
                                 setting="prune_preset")
        if not self.seeds:
            raise SubnetlabError("seeds: at least one pruning seed is needed", setting="seeds")
        es = self.effective_size
        if es is not None and not list(es.get("seeds") or []):
            raise SubnetlabError("effective_size: at least one seed is needed (or none, to skip the stage)",
                                 setting="effective_size")
        if es is not None and SearchSettings.from_dict(es.get("search")) is not None and es.get("sides", "two") != "two":
            raise SubnetlabError("effective_size: the level search stops on two-sided faithfulness; with sides=one "
                                 "run every level (drop 'search')", setting="effective_size")
        for study in self.studies:
            bad = [s for s in study.get("sparsities") or [] if not 0.0 < float(s) < 1.0]
            if bad or not study.get("sparsities"):
                raise SubnetlabError(f"study {study.get('name')!r}: sparsities {study.get('sparsities')} must be one "
                                     "or more targets in (0, 1)", setting="studies")
