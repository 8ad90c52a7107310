"""The settings every mask trainer reads, checked without loading torch (the command line's help reads configs)."""

from __future__ import annotations

from typing import Any, Protocol

from subnetlab.errors import SubnetlabError

OPTIMIZERS = ("adam", "adamw")


def check_grad_norm(value: float | None) -> None:
    """``max_grad_norm``: None (no clipping) or a positive norm."""
    if value is not None and not value > 0:
        raise SubnetlabError(f"max_grad_norm {value} must be positive (or unset: no clipping)", setting="max_grad_norm")


class MaskSettings(Protocol):
    """The settings every mask trainer reads (``PruneConfig`` and ``EdgePruneConfig`` have them)."""

    seed: int
    batch_size: int
    accumulation: int
    lr: float
    lambda_lr: float
    lr_warmup_steps: int
    lr_decay: str
    optimizer: str
    weight_decay: float
    max_grad_norm: float | None
    checkpoint_every: int
    eval_batch_size: int

    def to_dict(self) -> dict[str, Any]: ...
