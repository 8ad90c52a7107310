"""Reading component activations: streaming means (for mean ablation) and captures (for resampling).

A head's activation is its slice of the attention output projection's input,
``[batch, pos, head, d_head]``; an MLP's is the output of the adapter's MLP
output module, ``[batch, pos, hidden]``. Means are taken over non-padding tokens
only, in one streaming pass whose memory is proportional to components x width.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.io import load_tensors, save_tensors
from subnetlab.models.adapters import Adapter


@dataclass
class ComponentValues:
    """Per-layer replacement values for heads and MLPs.

    ``heads[l]`` broadcasts against ``[batch, pos, heads, d_head]`` and ``mlps[l]``
    against ``[batch, pos, hidden]``: ``[H, d]`` for a mean, ``[P, H, d]`` for a
    per-position mean, ``[B, P, H, d]`` for activations captured on other inputs.
    """

    heads: list[Tensor]
    mlps: list[Tensor]
    per_position: bool = False
    architecture: str = ""  # the family of the model they were collected on, where the file records it

    def head_value(self, layer: int, like: Tensor) -> Tensor:
        return self._fit(self.heads[layer], like)

    def mlp_value(self, layer: int, like: Tensor) -> Tensor:
        return self._fit(self.mlps[layer], like)

    @staticmethod
    def _fit(value: Tensor, like: Tensor) -> Tensor:
        """Cut a per-position value to the input's length; check captured values match it."""
        if value.dim() == like.dim() - 1:  # per-position mean [P, ...]
            if value.shape[0] < like.shape[1]:
                raise SubnetlabError(f"per-position means cover {value.shape[0]} positions, the input has {like.shape[1]}")
            value = value[: like.shape[1]]
        elif value.dim() == like.dim() and value.shape[:2] != like.shape[:2]:
            raise SubnetlabError(
                f"resample values have batch x positions {tuple(value.shape[:2])}, the input {tuple(like.shape[:2])}"
            )
        return value.to(like.device)

    def save(self, path: str | Path, metadata: dict[str, str] | None = None) -> None:
        tensors = {f"heads.{l}": t for l, t in enumerate(self.heads)} | {f"mlps.{l}": t for l, t in enumerate(self.mlps)}
        recorded = {"architecture": self.architecture} if self.architecture else {}
        save_tensors(path, tensors, {"per_position": str(self.per_position), **recorded, **(metadata or {})})

    @classmethod
    def load(cls, path: str | Path) -> "ComponentValues":
        from safetensors import safe_open

        tensors = load_tensors(path)
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        layers = sum(1 for k in tensors if k.startswith("heads."))
        expected = {f"{kind}.{l}" for kind in ("heads", "mlps") for l in range(layers)}
        if not layers or set(tensors) != expected:
            raise SubnetlabError(f"{path}: not a file of mean activations (expected tensors heads.0, mlps.0, ... "
                                 f"per layer; it holds {', '.join(sorted(tensors)[:4]) or 'none'}"
                                 f"{', ...' if len(tensors) > 4 else ''})")
        for name, tensor in tensors.items():
            if not tensor.is_floating_point():
                raise SubnetlabError(f"{path}: {name} has dtype {str(tensor.dtype).removeprefix('torch.')}; mean "
                                     "activations are floating-point numbers (float32, float16 or bfloat16)")
            if not bool(torch.isfinite(tensor).all()):
                raise SubnetlabError(f"{path}: {name} holds values that are not finite numbers (NaN or infinity); "
                                     "the file is damaged")
        return cls(
            [tensors[f"heads.{l}"] for l in range(layers)],
            [tensors[f"mlps.{l}"] for l in range(layers)],
            meta.get("per_position") == "True",
            meta.get("architecture", ""),
        )

    def check_architecture(self, adapter: Adapter, source: str | Path = "mean activations") -> None:
        """Refuse values recorded on another family, even where its shapes happen to be this model's."""
        if self.architecture and self.architecture != adapter.family:
            raise SubnetlabError(f"{source}: mean activations of a {self.architecture} model, and this model is a "
                                 f"{adapter.family} model: they belong to another model")

    def check(self, adapter: Adapter, source: str | Path = "mean activations") -> "ComponentValues":
        """Refuse values of another model: the layers, heads, head width and hidden size must be the adapter's."""
        self.check_architecture(adapter, source)
        L, H, d, hidden = adapter.num_layers, adapter.num_heads, adapter.head_dim, adapter.hidden_size
        if len(self.heads) != L or len(self.mlps) != L:
            raise SubnetlabError(f"{source}: values for {len(self.heads)} layers, the model has {L}; "
                                 "they belong to another model")
        for layer, (head, mlp) in enumerate(zip(self.heads, self.mlps)):
            if head.dim() < 2 or tuple(head.shape[-2:]) != (H, d) or mlp.dim() < 1 or mlp.shape[-1] != hidden:
                raise SubnetlabError(
                    f"{source}: layer {layer} has head values {tuple(head.shape)} and MLP values {tuple(mlp.shape)}; "
                    f"the model needs [..., {H}, {d}] and [..., {hidden}]: they belong to another model")
        return self


@contextmanager
def _recording(adapter: Adapter, on_head, on_mlp) -> Iterator[None]:
    """Hooks that pass each layer's head and MLP activations to callbacks; always removed."""
    handles = []
    try:
        for layer in range(adapter.num_layers):
            def pre(module, args, layer=layer):
                x = args[0]
                on_head(layer, x.view(*x.shape[:-1], adapter.num_heads, adapter.head_dim))

            def post(module, args, output, layer=layer):
                on_mlp(layer, output)

            handles.append(adapter.head_output_module(layer).register_forward_pre_hook(pre))
            handles.append(adapter.mlp_output_module(layer).register_forward_hook(post))
        yield
    finally:
        for h in handles:
            h.remove()


def add_padded(total: Tensor | None, part: Tensor) -> Tensor:
    """``total + part``, padding along dim 0 when per-position sums differ in length."""
    if total is None:
        return part
    if total.dim() and total.shape[0] != part.shape[0]:  # a count over all positions is a scalar
        longer, shorter = (total, part) if total.shape[0] > part.shape[0] else (part, total)
        total = longer.clone()
        total[: shorter.shape[0]] += shorter
        return total
    return total + part


@torch.no_grad()
def collect_means(
    model: torch.nn.Module,
    adapter: Adapter,
    batches: Iterable[dict[str, Tensor]],
    per_position: bool = False,
) -> ComponentValues:
    """Mean activation of every head and MLP over the non-padding tokens of ``batches``.

    Each batch is a dict of model inputs; ``attention_mask`` (1 = real token) marks
    padding, and a batch without one (images) counts every position. Sums are
    float64; memory is components x width (x positions when ``per_position``).
    """
    L = adapter.num_layers
    sums_h: list[Tensor | None] = [None] * L
    sums_m: list[Tensor | None] = [None] * L
    count: Tensor | None = None
    mask: Tensor | None = None  # [batch, pos] of the current batch

    def weighted_sum(x: Tensor) -> Tensor:  # x: [B, P, *features]
        w = (mask if mask is not None else torch.ones(x.shape[:2])).to(torch.float64)
        xw = x.double() * w.view(*w.shape, *([1] * (x.dim() - 2)))
        return xw.sum(0) if per_position else xw.sum((0, 1))

    def on_head(layer: int, x: Tensor) -> None:
        nonlocal count
        sums_h[layer] = add_padded(sums_h[layer], weighted_sum(x))
        if layer == 0:
            count = add_padded(count, weighted_sum(torch.ones(x.shape[:2], dtype=torch.float64)))

    def on_mlp(layer: int, x: Tensor) -> None:
        sums_m[layer] = add_padded(sums_m[layer], weighted_sum(x))

    was_training = model.training
    model.eval()
    try:
        with _recording(adapter, on_head, on_mlp):
            for batch in batches:
                mask = batch.get("attention_mask")
                model(**batch)
    finally:
        model.train(was_training)
    if count is None:
        raise SubnetlabError("collect_means got no batches")

    def mean(total: Tensor, feature_dims: int) -> Tensor:
        c = count.clamp(min=1).view(*count.shape, *([1] * feature_dims))
        return (total / c).float()

    return ComponentValues([mean(t, 2) for t in sums_h], [mean(t, 1) for t in sums_m], per_position)


@torch.no_grad()
def capture_activations(model: torch.nn.Module, adapter: Adapter, inputs: dict[str, Tensor]) -> ComponentValues:
    """Every head's and MLP's activation on ``inputs`` (for resample ablation from other inputs)."""
    heads: list[Tensor | None] = [None] * adapter.num_layers
    mlps: list[Tensor | None] = [None] * adapter.num_layers

    def on_head(l: int, x: Tensor) -> None:
        heads[l] = x.detach().clone()

    def on_mlp(l: int, x: Tensor) -> None:
        mlps[l] = x.detach().clone()

    with _recording(adapter, on_head, on_mlp):
        model(**inputs)
    return ComponentValues(heads, mlps, per_position=True)
