"""The step of ``lottery-prune`` by importance: one batch of the importance criterion (``sensitivity``:
per-example gates on every head and MLP, held at 1, and the gradient of the loss to them) on the model in eval mode,
as ``importance`` runs it before every pruning step. Magnitude pruning takes no gradients (its peak is an evaluation
forward without them) and is not planned here.

Its steps are the importance batches of one pruning step; how many pruning steps run depends on the development
metric (they stop before it falls below the threshold).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from subnetlab.errors import SubnetlabError
from subnetlab.runs.plan.settings import PlanSettings

MNLI_DEV_MATCHED_ROWS = 9_815  # MNLI's matched development pairs (Williams et al. 2018): the paper preset's split


def lottery_sizes(preset: str) -> tuple[int, int]:
    """``(batch, length)`` of ``lottery-prune``'s preset: its ``batch_size`` and ``max_length``."""
    from dataclasses import fields

    from subnetlab.runs.lottery import LOTTERY_PRUNE_PRESETS, LotteryPruneJobConfig

    if preset not in LOTTERY_PRUNE_PRESETS:
        raise SubnetlabError(f"preset {preset!r}: lottery-prune's presets are {', '.join(LOTTERY_PRUNE_PRESETS)}",
                             setting="preset")
    defaults = {f.name: f.default for f in fields(LotteryPruneJobConfig)}
    values = {**defaults, **LOTTERY_PRUNE_PRESETS[preset]}
    return int(values["batch_size"]), int(values["max_length"])


def lottery_steps(settings: PlanSettings) -> tuple[int, str]:
    """Importance batches per pruning step: the development rows (``examples``, else the preset's ``eval_limit``,
    else MNLI's matched development set) in batches."""
    from subnetlab.runs.lottery import LOTTERY_PRUNE_PRESETS

    lottery_sizes(settings.preset)  # the preset is known
    limit = LOTTERY_PRUNE_PRESETS[settings.preset].get("eval_limit")
    if settings.examples:
        rows, source = settings.examples, "as given"
    elif limit is not None:
        rows, source = int(limit), f"the {settings.preset} preset's eval_limit"
    else:
        rows, source = MNLI_DEV_MATCHED_ROWS, "MNLI's matched development set"
    return math.ceil(rows / settings.batch), f"per pruning step: {rows:,} rows ({source})"


def lottery_step(model: Any, adapter: Any, settings: PlanSettings, live: Any = None) -> Callable[[int], None]:
    """``step(i)``: the ``sensitivity`` criterion on a batch of ``settings.batch`` rows of ``settings.length``
    tokens, every head and MLP kept, the per-example cross-entropy of the classifier."""
    import torch

    from subnetlab.methods.lottery.importance import classification_loss, get_criterion
    from subnetlab.runtime import autocast

    if adapter.spec.kind == "decoder":
        raise SubnetlabError("lottery-prune is planned on a classifier (an encoder such as BERT); this model is a "
                             "causal language model", setting="model")
    criterion = get_criterion("sensitivity")
    heads, mlps = torch.ones(adapter.num_layers, adapter.num_heads), torch.ones(adapter.num_layers)
    batch = {"input_ids": torch.zeros(settings.batch, settings.length, dtype=torch.long),
             "labels": torch.zeros(settings.batch, dtype=torch.long)}
    dtype = getattr(torch, settings.dtype)
    model.eval()

    def step(i: int) -> None:
        if i >= 0:
            with autocast(next(model.parameters()).device, dtype):
                criterion(model, adapter, batch, classification_loss, heads, mlps)

    return step


__all__ = ["MNLI_DEV_MATCHED_ROWS", "lottery_sizes", "lottery_step", "lottery_steps"]
