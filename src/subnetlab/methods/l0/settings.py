"""The settings every mask trainer reads, checked without loading torch (the command line's help reads configs)."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar, Protocol, TypeVar

from subnetlab.errors import SubnetlabError

OPTIMIZERS = ("adam", "adamw")
S = TypeVar("S", bound="DictSettings")


class DictSettings:
    """``to_dict`` / ``from_dict`` of a frozen settings dataclass (tuples as JSON lists; unknown keys refused)."""

    what: ClassVar[str] = "setting"

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[S], data: dict[str, Any]) -> S:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise SubnetlabError(f"unknown {cls.what}(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


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
