"""What the attribution methods share: hooks on every node's output, frozen parameters, the scores' precision and
the node outputs of mean ablation (``scores`` scores edges, ``nodes`` nodes with them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.edges import WriterValues
from subnetlab.models.adapters import Adapter

NodeKey = tuple[str, int]  # ("embedding", i), ("heads", layer), ("mlp", layer)
NodeHook = Callable[[NodeKey, Tensor], "Tensor | None"]


@contextmanager
def frozen_parameters(model: nn.Module) -> Iterator[None]:
    """No parameter gradients during attribution (only activations' gradients are needed)."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


@contextmanager
def node_hooks(adapter: Adapter, hook: NodeHook | None) -> Iterator[None]:
    """``hook(key, output)`` on every node's output, ahead of any other hook; a returned tensor replaces it.

    Keys: ``("embedding", i)`` per embedding module, ``("heads", l)`` the input of layer ``l``'s attention output
    projection (every head's output ``[batch, pos, heads * head_dim]``), ``("mlp", l)`` the MLP's output."""
    if hook is None:
        yield
        return

    def pre(key: NodeKey, args: tuple) -> tuple | None:
        new = hook(key, args[0])
        return None if new is None else (new, *args[1:])

    handles = [m.register_forward_hook(lambda mod, a, out, i=i: hook(("embedding", i), out), prepend=True)
               for i, m in enumerate(adapter.embedding_modules())]
    for layer in range(adapter.num_layers):
        handles += [
            adapter.head_output_module(layer).register_forward_pre_hook(
                lambda mod, args, layer=layer: pre(("heads", layer), args), prepend=True),
            adapter.mlp_output_module(layer).register_forward_hook(
                lambda mod, a, out, layer=layer: hook(("mlp", layer), out), prepend=True)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def score_dtype(model: nn.Module) -> torch.dtype:
    """The precision of scores: the model's, at least float32 (a float64 model gives float64 scores)."""
    return torch.promote_types(next(model.parameters()).dtype, torch.float32)


def mean_node_outputs(means: WriterValues, clean: dict[NodeKey, Tensor]) -> dict[NodeKey, Tensor]:
    """The node outputs of mean ablation, shaped as the clean run's ``clean`` (``node_hooks``' keys): each
    embedding's, heads' and MLP's mean output (``writer_means``, not per position) broadcast over its tokens."""
    out: dict[NodeKey, Tensor] = {}
    for key, x in clean.items():
        kind, index = key
        if kind == "embedding":
            value = means.embeddings[index]
        elif kind == "heads":
            value = means.components.heads[index].reshape(-1)  # [H, d] -> the projection input's [H * d]
        else:
            value = means.components.mlps[index]
        if value.dim() != 1 or value.shape[-1] != x.shape[-1]:
            raise SubnetlabError(f"mean activations of {kind} {index} have shape {tuple(value.shape)}; the model's "
                                 f"output there has width {x.shape[-1]} (means of one vector per writer, not per "
                                 "position)", setting="ablation")
        out[key] = value.to(x.device, x.dtype).expand_as(x)
    return out


__all__ = ["NodeHook", "NodeKey", "frozen_parameters", "mean_node_outputs", "node_hooks", "score_dtype"]
