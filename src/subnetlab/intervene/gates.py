"""Gating heads and MLPs with hooks: ``x' = z * x + (1 - z) * a``.

A head's output is its slice of the attention output projection's input, so a
forward pre-hook there gates every head of a layer at once, under any attention
implementation (transformers 5 dropped ``head_mask``). An MLP's output is gated
by a forward hook on the adapter's MLP output module. ``a`` is zero, a mean, or
activations captured on other inputs (``ComponentValues``).

Gates are fixed tensors (``[layers, heads]`` / ``[layers]``, or with a leading
batch axis), or come from a ``source`` module called once per model forward
(a hard-concrete sampler, say), so gradients reach its parameters. Gate
arithmetic is float32 whatever the model's dtype, on the device of the activation
it changes: a model spread over devices by a device map gets each layer's gates
on that layer's device (gradients flow back to the gates where they live).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.activations import ComponentValues
from subnetlab.models.adapters import Adapter

GateSource = Callable[[], tuple[Tensor | None, Tensor | None]]


class ComponentGates:
    """Context manager that gates heads and MLPs; removes every hook it added on exit.

    ``with ComponentGates(model, adapter, heads=z_heads, ablation=means) as gates:``
    then ``model(...)`` runs gated; ``gates.set(heads=...)`` changes the gates,
    ``gates.enabled = False`` runs the same weights ungated (the full model).
    """

    def __init__(
        self,
        model: nn.Module,
        adapter: Adapter,
        heads: Tensor | None = None,
        mlps: Tensor | None = None,
        ablation: ComponentValues | None = None,
        source: GateSource | None = None,
    ) -> None:
        self.model, self.adapter, self.ablation, self.source = model, adapter, ablation, source
        self.enabled = True
        self.heads: Tensor | None = None
        self.mlps: Tensor | None = None
        self._handles: list[Any] = []
        self.set(heads, mlps)

    def set(self, heads: Tensor | None = None, mlps: Tensor | None = None) -> None:
        L, H = self.adapter.num_layers, self.adapter.num_heads
        if heads is not None and tuple(heads.shape[-2:]) != (L, H):
            raise SubnetlabError(f"head gates have shape {tuple(heads.shape)}, the model needs [..., {L}, {H}]")
        if mlps is not None and mlps.shape[-1] != L:
            raise SubnetlabError(f"MLP gates have shape {tuple(mlps.shape)}, the model needs [..., {L}]")
        self.heads, self.mlps = heads, mlps

    # -- hooks ------------------------------------------------------------------
    def _gate_heads(self, layer: int, args: tuple) -> tuple | None:
        if not self.enabled or self.heads is None:
            return None
        x = args[0]  # [batch, pos, heads * d_head]
        xh = x.view(*x.shape[:-1], self.adapter.num_heads, self.adapter.head_dim).float()
        z = self.heads[..., layer, :].reshape(-1, 1, self.adapter.num_heads, 1).to(x.device)  # [batch or 1, 1, heads, 1]
        out = self._mix(xh, z, None if self.ablation is None else self.ablation.head_value(layer, xh))
        return (out.reshape(x.shape).to(x.dtype), *args[1:])

    def _gate_mlp(self, layer: int, output: Tensor) -> Tensor | None:
        if not self.enabled or self.mlps is None:
            return None
        x = output.float()  # [batch, pos, hidden]
        z = self.mlps[..., layer].reshape(-1, 1, 1).to(x.device)  # [batch or 1, 1, 1]
        out = self._mix(x, z, None if self.ablation is None else self.ablation.mlp_value(layer, x))
        return out.to(output.dtype)

    @staticmethod
    def _mix(x: Tensor, z: Tensor, a: Tensor | None) -> Tensor:
        return x * z if a is None else a + z * (x - a)

    def _sample(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if self.enabled and self.source is not None:
            heads, mlps = self.source()
            self.set(heads, mlps)

    def __enter__(self) -> "ComponentGates":
        try:
            if self.source is not None:
                self._handles.append(self.model.register_forward_pre_hook(self._sample, with_kwargs=True))
            for layer in range(self.adapter.num_layers):
                self._handles.append(
                    self.adapter.head_output_module(layer).register_forward_pre_hook(
                        lambda m, args, layer=layer: self._gate_heads(layer, args)
                    )
                )
                self._handles.append(
                    self.adapter.mlp_output_module(layer).register_forward_hook(
                        lambda m, args, out, layer=layer: self._gate_mlp(layer, out)
                    )
                )
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def apply_gates(
    model: nn.Module,
    adapter: Adapter,
    heads: Tensor | None = None,
    mlps: Tensor | None = None,
    ablation: ComponentValues | None = None,
    source: GateSource | None = None,
) -> ComponentGates:
    """``with apply_gates(model, adapter, heads, mlps, ablation):`` (see ``ComponentGates``)."""
    return ComponentGates(model, adapter, heads, mlps, ablation, source)


def count_hooks(model: nn.Module) -> int:
    """Forward hooks and pre-hooks on every module (tests check none is left behind)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())

