"""The step of ``transfer``: ``transfer.train.train_step`` on the model ``build_transfer_model`` starts a run from, in
the paper's condition (``subnetwork``: ``m * W_kept + (1 - m) * W_new``, the kept weights frozen, everything else
re-initialised and trained), with the run's AdamW and the best-on-evaluation copy of the state it keeps.

The subnetwork covers every attention and MLP matrix (``discover``'s default ``include``); which entries it keeps
changes values, not memory. One run (a stack of 1, the default): a stacked job trains K runs at once.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

from subnetlab.errors import SubnetlabError
from subnetlab.runs.plan.settings import PlanSettings


def transfer_preset(name: str) -> dict[str, Any]:
    """``transfer``'s preset ``name`` (``TRANSFER_PRESETS``)."""
    from subnetlab.transfer.train import TRANSFER_PRESETS

    if name not in TRANSFER_PRESETS:
        raise SubnetlabError(f"preset {name!r}: transfer's presets are {', '.join(TRANSFER_PRESETS)}",
                             setting="preset")
    return TRANSFER_PRESETS[name]


def transfer_settings(settings: PlanSettings) -> Any:
    """The command's ``TrainSettings`` at ``settings.preset`` with the plan's batch."""
    from subnetlab.transfer.train import TrainSettings

    preset = transfer_preset(settings.preset)
    return TrainSettings(epochs=preset["epochs"], lr=preset["lr"], batch_size=settings.batch)


def transfer_steps(settings: PlanSettings) -> tuple[int, str]:
    """Optimiser steps of one run (one condition, size and seed): ``epochs`` passes over its training rows
    (``examples``, else an ambiguous arithmetic task's ``max_number`` rows ``a = b``, before any disambiguation
    rows)."""
    from subnetlab.tasks.arithmetic import make_arithmetic_task

    train = transfer_settings(settings)
    if settings.examples:
        rows, source = settings.examples, "as given"
    else:
        rows = int(inspect.signature(make_arithmetic_task).parameters["max_number"].default)
        source = "the ambiguous arithmetic rows a = b, no disambiguation rows"
    steps = train.epochs * math.ceil(rows / settings.batch)
    return steps, f"one run: {train.epochs} epochs of {rows:,} rows ({source})"


def transfer_step(model: Any, adapter: Any, settings: PlanSettings, live: Any = None) -> Callable[[int], None]:
    """Build the ``subnetwork`` condition's model from ``model`` (the trained one) and return ``step(i)``: one
    ``train_step`` on ``settings.batch`` prompts of ``settings.length`` tokens; ``step(-1)`` removes the masks."""
    import torch

    from subnetlab.methods.continuous_sparsification import ContinuousSparsification
    from subnetlab.runtime import autocast
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.transfer.build import build_transfer_model
    from subnetlab.transfer.train import snapshot, train_step, transfer_optimizer

    train = transfer_settings(settings)
    masks = {n: torch.ones(adapter.parameter(n).shape, dtype=torch.uint8)
             for n in ContinuousSparsification().targets(adapter)}
    subnetwork = Subnetwork.from_weight_masks(adapter, masks, method="continuous-sparsification", seed=0,
                                              ablation="zero")
    del masks
    built = build_transfer_model(model, "subnetwork", seed=0, subnetwork=subnetwork, adapter=adapter)
    opt = transfer_optimizer(built.model, train)
    best = snapshot(built.model)  # the best epoch's state, held from the first evaluation on
    built.model.train()
    ids = torch.zeros(settings.batch, settings.length, dtype=torch.long)
    targets = torch.zeros(settings.batch, dtype=torch.long)
    dtype = getattr(torch, settings.dtype)

    def step(i: int) -> None:
        nonlocal best, subnetwork
        if i < 0:
            if built.handle is not None:
                built.handle.remove()
            best = subnetwork = None
            return
        with autocast(next(model.parameters()).device, dtype):
            train_step(built.model, opt, ids, targets, train.loss)

    return step


__all__ = ["transfer_preset", "transfer_settings", "transfer_step", "transfer_steps"]
