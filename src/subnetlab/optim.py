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


__all__ = ["DECAYS", "OPTIMIZERS", "lr_factor", "lr_scheduler", "make_optimizer"]
