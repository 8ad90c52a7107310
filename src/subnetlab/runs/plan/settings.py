"""What a plan is of: the command's method and its per-step sizes (``PlanSettings``), the method's typed config
at those sizes (``method_config``) and the run's number of steps (``count_steps``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from subnetlab.errors import SubnetlabError

METHODS = ("head-pruning", "edge-pruning", "eap", "eap-ig")
DTYPES = ("float32", "bfloat16", "float16")
PAPER_SPARSITY = {"head-pruning": 0.5, "edge-pruning": 0.95}


@dataclass(frozen=True)
class PlanSettings:
    """What a run does per step: the method, examples per optimiser step (``batch``, of ``micro_batch`` per
    forward), tokens per example, the frozen weights' dtype. ``examples``: the pairs an attribution run scores
    (its steps are their batches)."""

    method: str
    batch: int
    length: int
    micro_batch: int | None = None
    dtype: str = "float32"
    preset: str = "paper"
    sparsity: float | None = None
    ig_steps: int = 5
    examples: int | None = None
    labels: int = 3  # classes of a classification task (MNLI: 3)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise SubnetlabError(f"method {self.method!r}: choose one of {', '.join(METHODS)}", setting="method")
        for name in ("batch", "length", "ig_steps", "labels"):
            if int(getattr(self, name)) < 1:
                raise SubnetlabError(f"{name} {getattr(self, name)} must be at least 1", setting=name)
        for name in ("micro_batch", "examples"):
            if getattr(self, name) is not None and int(getattr(self, name)) < 1:
                raise SubnetlabError(f"{name} {getattr(self, name)} must be at least 1", setting=name)
        if self.batch % self.micro:
            raise SubnetlabError(f"micro-batch {self.micro} does not divide the batch {self.batch}",
                                 setting="micro_batch")
        if self.method in ("eap", "eap-ig") and self.micro != self.batch:
            raise SubnetlabError("attribution has no optimiser step to accumulate micro-batches into: its batch "
                                 "is the micro-batch", setting="micro_batch")
        if self.dtype not in DTYPES:
            raise SubnetlabError(f"dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}", setting="dtype")
        if self.sparsity is not None and not 0.0 < self.sparsity < 1.0:
            raise SubnetlabError(f"sparsity {self.sparsity} is outside (0, 1)", setting="sparsity")

    @property
    def micro(self) -> int:
        return self.micro_batch or self.batch

    def with_micro(self, micro: int) -> "PlanSettings":
        """The same run at ``micro`` examples per forward (the batch a whole number of micro-batches)."""
        from dataclasses import replace

        batch = micro if self.method in ("eap", "eap-ig") else micro * (self.batch // self.micro)
        return replace(self, batch=batch, micro_batch=micro)


def method_config(settings: PlanSettings) -> Any:
    """The method's settings for the run: its preset at the sparsity, the micro-batch and the accumulation."""
    sizes = {"batch_size": settings.micro, "accumulation": settings.batch // settings.micro}
    sparsity = settings.sparsity or PAPER_SPARSITY.get(settings.method, 0.5)
    if settings.method == "head-pruning":
        from subnetlab.methods.head_pruning.config import preset_config

        return preset_config(settings.preset, sparsity, max_length=settings.length, **sizes)
    if settings.method == "edge-pruning":
        from subnetlab.methods.edge_pruning.config import preset_config as edge_preset

        return edge_preset(settings.preset, sparsity, **sizes)
    return None


def count_steps(settings: PlanSettings) -> int:
    """Optimiser steps (pruning), or batches of pairs (attribution: one batch when ``examples`` is not given)."""
    config = method_config(settings)
    if config is not None:
        return int(config.total_steps)
    return math.ceil((settings.examples or settings.batch) / settings.batch)


__all__ = ["DTYPES", "METHODS", "PAPER_SPARSITY", "PlanSettings", "count_steps", "method_config"]
