"""Norm-based attention (Kobayashi et al., 2020): ``||alpha_ij f_h(x_j)||`` for every head.

A head's contribution to the attention output at position ``i`` is
``sum_j alpha_ij f_h(x_j)`` with ``f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h``: the
value vector of token ``j`` mapped through the head's slice of the output
projection. Attention weights alone ignore how large ``f_h(x_j)`` is; the normed
map ``alpha_ij * ||f_h(x_j)||`` measures how much each input actually moves the
output. The value vectors are read with a forward hook on the value projection;
the attention weights need ``attn_implementation="eager"``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from subnetlab.analysis.attention_stats import attention_maps
from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import Adapter


def _value_module(adapter: Adapter, layer: int) -> nn.Module:
    spec = adapter.spec
    return adapter.layers()[layer].get_submodule(spec.value if spec.value is not None else spec.query)


def _head_values(adapter: Adapter, out: Tensor) -> Tensor:
    """The value projection's output ``[B, T, *]`` as ``[B, T, H, d]`` (K/V groups expanded)."""
    H, kv, d = adapter.num_heads, adapter.num_kv_heads, adapter.head_dim
    if adapter.spec.value is None:  # fused [q | k | v] (GPT-2)
        out = out[..., 2 * H * d : 3 * H * d]
    v = out.reshape(*out.shape[:2], kv, d)
    return v.repeat_interleave(H // kv, dim=2) if kv != H else v


def _output_slices(adapter: Adapter, layer: int) -> Tensor:
    """``[H, d, hidden]``: each head's block of the output projection, mapping its value to the residual."""
    module = adapter.head_output_module(layer)
    w = module.weight.detach()
    w = w if adapter.spec.transposed else w.T  # -> [H * d, hidden]
    return w.reshape(adapter.num_heads, adapter.head_dim, -1)


@torch.no_grad()
def transformed_inputs(model: nn.Module, adapter: Adapter, inputs: dict[str, Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """Per layer the attention weights ``[B, H, T, T]`` and ``f_h(x_j)`` as ``[B, H, T, hidden]``."""
    values: list[Tensor | None] = [None] * adapter.num_layers
    handles = [
        _value_module(adapter, l).register_forward_hook(lambda m, a, o, l=l: values.__setitem__(l, o.detach()))
        for l in range(adapter.num_layers)
    ]
    try:
        maps = attention_maps(model, inputs)
    finally:
        for h in handles:
            h.remove()
    if any(v is None for v in values):
        raise SubnetlabError("the value projection was not called: cannot compute normed attention for this model")
    fx = []
    for l, out in enumerate(values):
        v = _head_values(adapter, out).float()  # [B, T, H, d]
        wo = _output_slices(adapter, l).float()  # [H, d, hidden]
        fx.append(torch.einsum("bthd,hdk->bhtk", v, wo))  # [B, H, T, hidden]
    return [m.float() for m in maps], fx


@torch.no_grad()
def normed_attention(model: nn.Module, adapter: Adapter, inputs: dict[str, Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """Per layer ``(alpha [B, H, T, T], alpha_ij * ||f_h(x_j)|| [B, H, T, T])``."""
    maps, fx = transformed_inputs(model, adapter, inputs)
    normed = [a * f.norm(dim=-1).unsqueeze(-2) for a, f in zip(maps, fx)]  # norm over hidden, broadcast over queries
    return maps, normed
