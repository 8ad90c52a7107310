"""The step of ``discover``: ``ContinuousSparsification.step`` (Subtask Induction's continuous sparsification) on the
model masked by its ``ContinuousMask`` modules, with the AdamW over the mask scores the command trains.

The set-up is ``ContinuousSparsification.fit``'s: a mask score per masked weight, the frozen weights without
gradients, the model in eval mode and the masks in training mode (soft masks). Under the fake mode the masks and the
optimiser's state are fake too: one float32 score per masked weight, its gradient and AdamW's two moments.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from subnetlab.errors import SubnetlabError
from subnetlab.runs.plan.settings import PlanSettings

ARITHMETIC_PROMPT = 3  # ``<a> <b> <sep>``: the prompt of an arithmetic subtask (the paper's), in tokens


def discover_config(settings: PlanSettings) -> Any:
    """The command's ``ContinuousSparsification`` at ``settings.preset`` (its epochs and learning rate), with the
    plan's batch."""
    from subnetlab.methods.continuous_sparsification import ContinuousSparsification

    preset = preset_of(settings.preset)
    return ContinuousSparsification(epochs=preset["epochs"], lr=preset["lr"], batch_size=settings.batch,
                                    l0_lambda=float(preset["lambdas"][0]))


def preset_of(name: str) -> dict[str, Any]:
    """``discover``'s preset ``name`` (``DISCOVERY_PRESETS``)."""
    from subnetlab.methods.continuous_sparsification import DISCOVERY_PRESETS

    if name not in DISCOVERY_PRESETS:
        raise SubnetlabError(f"preset {name!r}: discover's presets are {', '.join(DISCOVERY_PRESETS)}",
                             setting="preset")
    return DISCOVERY_PRESETS[name]


def discover_steps(settings: PlanSettings) -> tuple[int, str]:
    """Optimiser steps of the whole command: one run per lambda of the preset, each ``epochs`` passes over the
    training rows (``examples``, else the preset's subtask rows) in batches."""
    preset = preset_of(settings.preset)
    rows = settings.examples or int(preset["samples"])
    source = "as given" if settings.examples else f"the {settings.preset} preset's subtask"
    lambdas = len(preset["lambdas"])
    steps = lambdas * int(preset["epochs"]) * math.ceil(rows / settings.batch)
    return steps, f"{lambdas} lambdas x {preset['epochs']} epochs of {rows:,} rows ({source})"


def discover_step(model: Any, adapter: Any, settings: PlanSettings, live: Any = None) -> Callable[[int], None]:
    """Mask ``model`` as ``fit`` does and return ``step(i)``: one ``ContinuousSparsification.step`` on a batch of
    ``settings.batch`` prompts of ``settings.length`` tokens (the last-token loss); ``step(-1)`` unmasks."""
    import torch

    from subnetlab.intervene import mask_weights
    from subnetlab.runtime import autocast
    from subnetlab.transfer.train import task_loss

    strategy = discover_config(settings)
    masks = strategy.create_masks(adapter)
    frozen = {n: p.requires_grad for n, p in model.named_parameters()}
    for p in model.parameters():
        p.requires_grad_(False)
    opt = strategy.optimizer(masks)
    handle = mask_weights(model, dict(masks)).apply()
    model.eval()
    for m in masks.values():
        m.beta.fill_(strategy.beta(0))
        m.train()
    batch = (torch.zeros(settings.batch, settings.length, dtype=torch.long),
             torch.zeros(settings.batch, dtype=torch.long))
    dtype = getattr(torch, settings.dtype)

    def step(i: int) -> None:
        if i < 0:
            handle.remove()
            for n, p in model.named_parameters():
                p.requires_grad_(frozen.get(n, True))
            return
        with autocast(next(model.parameters()).device, dtype):
            strategy.step(model, masks, opt, lambda m, b: task_loss(m, b[0], b[1], "last-token"), batch)

    return step


__all__ = ["ARITHMETIC_PROMPT", "discover_config", "discover_step", "discover_steps"]
