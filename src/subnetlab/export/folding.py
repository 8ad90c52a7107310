"""Folding ablation values into biases, so the small model computes what the gated model computes.

A closed head's gate replaces its slice of the output projection's input by a
fixed vector ``a_h`` (``[d]``), so the projection adds ``W_o[:, h] @ a_h`` on
every position of every input: a constant, which is added to the projection's
bias once and for all (``b' = b + sum over closed heads``). A closed MLP's gate
replaces its output by ``a`` (``[hidden]``), which becomes a constant module
(``slicing.Constant``). Zero ablation folds to nothing.

Only values that are the same at every position and for every input fold:
means over all tokens (``ComponentValues`` with ``[H, d]`` per layer). A
per-position mean (``[P, H, d]``) differs from one position to the next and a
resampled value (``[B, P, H, d]``) from one input to the next, so no bias can
stand for them; they are refused.

Sums are float64, over the ablation value cast to the model's dtype first (the
gate hands the projection exactly that), and the result is cast back once.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.activations import ComponentValues
from subnetlab.models.adapters import Adapter


def check_values(values: ComponentValues | None, adapter: Adapter) -> None:
    """Refuse ablation values that cannot be folded, or that were collected on another shape of model."""
    if values is None:
        return
    values.check_architecture(adapter, "ablation")
    if any(t.dim() == 4 for t in values.heads) or any(t.dim() == 3 for t in values.mlps):
        raise SubnetlabError(
            "ablation: resampled activations cannot be folded into a bias: they change with every input, a bias "
            "adds the same vector to all of them; use mean or zero ablation", setting="ablation")
    if values.per_position or any(t.dim() != 2 for t in values.heads) or any(t.dim() != 1 for t in values.mlps):
        raise SubnetlabError(
            "ablation: per-position means cannot be folded into a bias: they differ from one position to the next, "
            "a bias adds the same vector at every position; collect means over all positions (not per position)",
            setting="ablation")
    L, H, d, hidden = adapter.num_layers, adapter.num_heads, adapter.head_dim, adapter.hidden_size
    if len(values.heads) != L or len(values.mlps) != L:
        raise SubnetlabError(f"ablation: the values cover {len(values.heads)} layers, the model has {L}",
                             setting="ablation")
    for layer, (h, m) in enumerate(zip(values.heads, values.mlps)):
        if tuple(h.shape) != (H, d) or tuple(m.shape) != (hidden,):
            raise SubnetlabError(
                f"ablation: layer {layer} values have shapes {tuple(h.shape)} (heads) and {tuple(m.shape)} (MLP); "
                f"the model needs ({H}, {d}) and ({hidden},): they were collected on another model", setting="ablation")


def _weight_of(module: nn.Module) -> tuple[Tensor, bool]:
    """The weight and whether it is stored ``[in, out]`` (GPT-2's Conv1D) rather than ``[out, in]``."""
    return module.weight, not isinstance(module, nn.Linear)


@torch.no_grad()
def head_biases(adapter: Adapter, heads: Tensor, values: ComponentValues | None) -> list[Tensor | None]:
    """Per layer, the output projection's new bias (own bias + folded closed heads), or None if unchanged.

    ``heads`` is the ``[layers, heads]`` 0/1 mask (1 = kept).
    """
    d = adapter.head_dim
    biases: list[Tensor | None] = []
    for layer in range(adapter.num_layers):
        closed = [h for h in range(adapter.num_heads) if heads[layer, h] < 0.5]
        if values is None or not closed:
            biases.append(None)
            continue
        out = adapter.head_output_module(layer)
        weight, transposed = _weight_of(out)
        index = torch.cat([torch.arange(h * d, (h + 1) * d) for h in closed]).to(weight.device)
        a = values.heads[layer].to(device=weight.device, dtype=weight.dtype).double().reshape(-1)[index]
        w = weight.detach().double()
        delta = a @ w.index_select(0, index) if transposed else w.index_select(1, index) @ a  # [hidden]
        own = out.bias.detach().double() if out.bias is not None else torch.zeros_like(delta)
        biases.append((own + delta).to(weight.dtype))
    return biases


@torch.no_grad()
def mlp_constants(adapter: Adapter, mlps: Tensor, values: ComponentValues | None) -> list[Tensor | None]:
    """Per layer, a removed MLP's constant output (its mean, in the model's dtype), or None (zero / kept)."""
    dtype = next(adapter.model.parameters()).dtype
    return [values.mlps[layer].to(dtype) if values is not None and mlps[layer] < 0.5 else None
            for layer in range(adapter.num_layers)]
