"""Resample ablation: a component's output replaced by its output on another example of the batch.

The batch is rolled by a random non-zero shift (positions line up without
padding tricks; each example gets another example's values). ``rolled_values``
captures those values once for a given batch (the pruning step calls it per
micro-batch); ``resampling`` recomputes them before every forward of the model,
so any evaluation loop can run resample-ablated without knowing about it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.activations import ComponentValues, capture_activations
from subnetlab.intervene.gates import ComponentGates
from subnetlab.models.adapters import Adapter


@torch.no_grad()
def rolled_values(model: nn.Module, adapter: Adapter, gates: ComponentGates, inputs: dict[str, Tensor],
                  generator: torch.Generator) -> ComponentValues:
    """Every component's (ungated) output on the batch rolled by a random non-zero shift."""
    size = next(iter(inputs.values())).shape[0]
    if size < 2:
        raise SubnetlabError("resample ablation needs batches of at least 2 examples")
    shift = int(torch.randint(1, size, (1,), generator=generator).item())
    rolled = {k: v.roll(shift, dims=0) for k, v in inputs.items()}
    was = gates.enabled
    gates.enabled = False
    try:
        return capture_activations(model, adapter, rolled)
    finally:
        gates.enabled = was


@contextmanager
def resampling(model: nn.Module, adapter: Adapter, gates: ComponentGates, generator: torch.Generator,
               single: ComponentValues | None = None) -> Iterator[None]:
    """Within the block, each forward of ``model`` under ``gates`` replaces gated components by rolled values.

    ``single`` is what a batch of one example gets (it has no other example to
    take values from): the means, say; None refuses such a batch.
    """
    busy = False

    def before(module: nn.Module, args: tuple, kwargs: dict) -> None:
        nonlocal busy
        if busy or not gates.enabled:
            return
        inputs = {k: v for k, v in kwargs.items() if isinstance(v, Tensor)}
        if not inputs:
            raise SubnetlabError("resample ablation needs the model called with keyword tensors (input_ids=...)")
        size = next(iter(inputs.values())).shape[0]
        busy = True
        try:
            gates.ablation = single if size < 2 and single is not None else rolled_values(model, adapter, gates, inputs,
                                                                                         generator)
        finally:
            busy = False

    handle = model.register_forward_pre_hook(before, with_kwargs=True, prepend=True)
    saved = gates.ablation
    try:
        yield
    finally:
        handle.remove()
        gates.ablation = saved
