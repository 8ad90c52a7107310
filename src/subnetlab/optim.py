"""The optimiser factory and learning-rate schedule every training loop in subnetlab uses.

Fine-tuning, lottery re-fine-tuning, hard-concrete pruning, the shape-bias
classifiers and subtask-induction transfer all build their optimiser and their
learning-rate multiplier here, so one recipe means one piece of code:

* ``make_optimizer(params, "adamw" | "adam" | "sgd", ...)``; with
  ``no_decay_1d=True`` biases and LayerNorm weights (every parameter with fewer
  than two dimensions) are not decayed, the usual BERT recipe;
* ``lr_factor(step, total=..., warmup=..., decay=...)``: the multiplier of the
  base learning rate at ``step`` (``LambdaLR``): a linear warm-up, then
  ``linear`` decay to zero at ``total``, ``cosine`` decay, or ``constant``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from subnetlab.errors import SubnetlabError

OPTIMIZERS = ("adamw", "adam", "sgd")
DECAYS = ("linear", "cosine", "constant")


def make_optimizer(
    params: nn.Module | Iterable[Any],
    name: str = "adamw",
    *,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    momentum: float = 0.0,
    no_decay_1d: bool = False,
    fused: bool = True,
) -> torch.optim.Optimizer:
    """An optimiser over ``params`` (a module: its trainable parameters; or parameters / groups).

    ``no_decay_1d`` splits a module's trainable parameters into a decayed group
    (matrices) and an undecayed one (biases, LayerNorm weights), in parameter order.
    ``fused`` (the default): torch's fused Adam(W) kernel where every parameter is a float32 CPU or CUDA tensor
    (else torch's default): the same update in one pass over each tensor, equal to the unfused one up to float
    rounding (``benchmarks/bench_weight_masks.py`` prints both on the mask scores). It matters on a CPU: a MiniLM
    fine-tuning step at batch 32 x 17 takes 0.84x the time of torch's per-tensor loop
    (``benchmarks/bench_optimizer.py``). A gradient set by hand must be contiguous: torch 2.13's fused CPU kernel
    misreads a strided one (``.contiguous()`` it).
    """
    if name not in OPTIMIZERS:
        raise SubnetlabError(f"optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}")
    if isinstance(params, nn.Module):
        trainable = [p for p in params.parameters() if p.requires_grad]
    else:
        trainable = list(params)
    groups: list[Any] = trainable
    if no_decay_1d:
        groups = [{"params": [p for p in trainable if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in trainable if p.dim() < 2], "weight_decay": 0.0}]
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay)
    tensors = [p for item in trainable for p in (item["params"] if isinstance(item, dict) else [item])]
    kernel = {"fused": True} if fused and all(p.device.type in ("cpu", "cuda") and p.dtype == torch.float32
                                              for p in tensors) else {}
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, **kernel)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, **kernel)


def lr_factor(step: int, *, total: int, warmup: int = 0, decay: str = "linear", warmup_from_one: bool = False) -> float:
    """The multiplier of the base learning rate before optimiser step ``step`` (counted from 0).

    Warm-up: ``step / warmup`` (the BERT recipe: the first step has learning rate 0),
    or ``(step + 1) / warmup`` with ``warmup_from_one`` (the vision recipe). Then
    ``linear``: ``(total - step) / (total - warmup)``, reaching 0 at ``total``;
    ``cosine``: half a cosine from 1 to 0 over the same steps; ``constant``: 1.
    """
    if decay not in DECAYS:
        raise SubnetlabError(f"learning-rate decay {decay!r}: choose one of {', '.join(DECAYS)}")
    if warmup and step < warmup:
        return (step + 1) / warmup if warmup_from_one else step / warmup
    if decay == "constant":
        return 1.0
    if decay == "linear":
        return max(0.0, (total - step) / max(1, total - warmup))
    progress = (step - warmup) / max(total - warmup, 1)
    # float32 like the shape-bias recipe this replaced, so its runs stay bit-identical
    return 0.5 * (1.0 + torch.cos(torch.tensor(progress * math.pi)).item())


def lr_scheduler(optimizer: torch.optim.Optimizer, **schedule: Any) -> torch.optim.lr_scheduler.LambdaLR:
    """``LambdaLR`` with ``lr_factor(step, **schedule)``."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, **schedule))


PLATEAU_MODES = ("max", "min")  # Plateau.mode: a held-out accuracy (higher is better) or loss (lower is better)
CAP_REACHED = "cap reached"  # the stopping reason of a run that trained to its cap (or fixed epochs)


@dataclass(frozen=True)
class Plateau:
    """Plateau stopping: a run stops at the evaluation ``patience`` evaluations after its last *significant*
    improvement, one that beats the best value so far by more than ``min_delta`` (``mode`` ``"max"``: higher is
    better; ``"min"``: lower). The best value moves only on a significant improvement, so slow creeping gains
    still add up against it. The first evaluation sets the best value."""

    patience: int
    min_delta: float = 0.0
    mode: str = "max"

    def __post_init__(self) -> None:
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 1:
            raise SubnetlabError(f"patience {self.patience!r}: expected a whole number of evaluations, at least 1",
                                 setting="patience")
        if not isinstance(self.min_delta, (int, float)) or isinstance(self.min_delta, bool) or not self.min_delta >= 0:
            raise SubnetlabError(f"min_delta {self.min_delta!r}: expected a non-negative number", setting="min_delta")
        if self.mode not in PLATEAU_MODES:
            raise SubnetlabError(f"plateau mode {self.mode!r}: choose from {', '.join(PLATEAU_MODES)}", setting="mode")

    def tracker(self) -> PlateauTracker:
        return PlateauTracker(self)


class PlateauTracker:
    """One run's state under a ``Plateau`` rule: ``update(value)`` after each evaluation returns True when the run
    should stop there."""

    def __init__(self, rule: Plateau) -> None:
        self.rule = rule
        self.best: float | None = None
        self.since = 0  # evaluations since the last significant improvement
        self.stopped = False

    def update(self, value: float) -> bool:
        value = float(value)
        sign = 1.0 if self.rule.mode == "max" else -1.0
        if self.best is None or (math.isfinite(value) and sign * (value - self.best) > self.rule.min_delta):
            self.best, self.since = value, 0
        else:
            self.since += 1
        self.stopped = self.since >= self.rule.patience
        return self.stopped


def stopping_record(rule: Plateau | None, cap: int, epochs_run: int, monitor: str,
                    stopped_epoch: int | None = None) -> dict[str, Any]:
    """What a run writes about how it ended (its config's rule and its metrics' reason): ``rule`` ``"plateau"``
    (with ``monitor``, ``patience``, ``min_delta``, ``cap``) or ``"fixed"`` (the cap is the fixed epoch count);
    ``reason`` ``"plateau at epoch k"`` (0-based, the epoch of the evaluation that ended it) or ``"cap reached"``."""
    if rule is None:
        return {"rule": "fixed", "cap": int(cap), "epochs_run": int(epochs_run), "reason": CAP_REACHED}
    reason = CAP_REACHED if stopped_epoch is None else f"plateau at epoch {int(stopped_epoch)}"
    return {"rule": "plateau", "monitor": monitor, "patience": rule.patience, "min_delta": rule.min_delta,
            "mode": rule.mode, "cap": int(cap), "epochs_run": int(epochs_run), "reason": reason}


__all__ = ["CAP_REACHED", "DECAYS", "OPTIMIZERS", "PLATEAU_MODES", "Plateau", "PlateauTracker", "lr_factor",
           "lr_scheduler", "make_optimizer", "stopping_record"]
