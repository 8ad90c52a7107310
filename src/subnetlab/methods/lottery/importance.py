"""Importance of heads and MLPs: small interchangeable criteria (the Torch-Pruning idea).

A criterion is a callable ``criterion(model, adapter, batch, loss_fn, heads,
mlps) -> BatchScores``: given one batch, the current keep-masks ``heads
[L, H]`` / ``mlps [L]`` (pruned components are gated at 0 while it runs) and a
per-example loss, it returns the *sum over the batch's examples* of each
component's score and how many examples that sum covers. ``importance()``
averages over batches and normalises. Three criteria are provided:

* ``gate_sensitivity`` (Michel et al., 2019; the one Prasanna et al. use): a
  multiplicative gate ``xi`` on every head's output and every MLP's output,
  held at 1, and the score is ``E_x |dL(x)/dxi|``. Gates carry a batch axis,
  so the absolute value is taken per example, as the definition says.
* ``gate_sensitivity_per_batch`` (criterion ``sensitivity-per-batch``): the
  released code of Michel et al. and of Prasanna et al.
  (``compute_heads_mlps_importance``): one gate per component shared by the
  batch, and the score is ``|dL_batch/dxi|`` of the *batch-mean* loss, averaged
  over batches (the authors use batches of 64). Since
  ``|mean_x g_x| <= mean_x |g_x|``, it never exceeds the per-example score and
  is smaller exactly where examples of a batch pull a gate in opposite
  directions. (The released loop also never zeroes the gate's ``.grad``
  between batches, so batch ``k`` adds ``|g_1 + ... + g_k|``; subnetlab takes
  each batch's own gradient, the evident intent.)
* ``taylor_weights`` (Molchanov et al., 2019): ``(sum_w w * dL/dw)^2`` over
  the parameters that belong to the component (its Q/K/V/output slices, or the
  whole MLP), per batch: the squared first-order change of the loss when the
  component's weights are zeroed.
* ``grad_x_activation`` (Molchanov et al., 2017): per example and per channel
  ``|sum_pos a * dL/da|`` over the component's output channels, summed over
  the channels: like the gate criterion, but the absolute value is taken per
  channel, so channels that pull in opposite directions do not cancel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates
from subnetlab.models.adapters import Adapter
from subnetlab.runtime import model_device

LossFn = Callable[[nn.Module, dict], Tensor]  # per-example losses [B]


@dataclass
class BatchScores:
    heads: Tensor  # [L, H] summed over the batch's examples
    mlps: Tensor  # [L]
    count: float  # examples (or example-weight) the sums cover


class Criterion(Protocol):
    def __call__(self, model: nn.Module, adapter: Adapter, batch: dict, loss_fn: LossFn,
                 heads: Tensor, mlps: Tensor) -> BatchScores: ...


def classification_loss(model: nn.Module, batch: dict) -> Tensor:
    """Per-example cross-entropy of a classification head's ``logits`` against ``batch['labels']``."""
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids", "pixel_values")}
    logits = model(**inputs).logits
    return F.cross_entropy(logits.float(), batch["labels"].to(logits.device), reduction="none")


def _batch_size(batch: dict) -> int:
    for value in batch.values():
        if isinstance(value, Tensor) and value.dim() > 0:
            return int(value.shape[0])
    raise SubnetlabError("a batch holds no tensors")


# -- the criteria -------------------------------------------------------------------------
def gate_sensitivity(model: nn.Module, adapter: Adapter, batch: dict, loss_fn: LossFn,
                     heads: Tensor, mlps: Tensor) -> BatchScores:
    """``sum_x |dL(x)/dxi|`` per head and MLP, gates at the current masks (1 = kept)."""
    B, dev = _batch_size(batch), model_device(model)
    gh = heads.to(dev, torch.float32).expand(B, *heads.shape).clone().requires_grad_(True)  # [B, L, H]
    gm = mlps.to(dev, torch.float32).expand(B, *mlps.shape).clone().requires_grad_(True)  # [B, L]
    with apply_gates(model, adapter, heads=gh, mlps=gm):
        losses = loss_fn(model, batch)  # [B]
    dh, dm = torch.autograd.grad(losses.sum(), [gh, gm])  # example b's gates reach only its own loss
    return BatchScores(dh.abs().sum(0).cpu().double(), dm.abs().sum(0).cpu().double(), B)


def gate_sensitivity_per_batch(model: nn.Module, adapter: Adapter, batch: dict, loss_fn: LossFn,
                               heads: Tensor, mlps: Tensor) -> BatchScores:
    """``|dL_batch/dxi|`` of the batch-mean loss, one shared gate per head and MLP; counts as one unit."""
    dev = model_device(model)
    gh = heads.to(dev, torch.float32).clone().requires_grad_(True)  # [L, H]
    gm = mlps.to(dev, torch.float32).clone().requires_grad_(True)  # [L]
    with apply_gates(model, adapter, heads=gh, mlps=gm):
        loss = loss_fn(model, batch).mean()
    dh, dm = torch.autograd.grad(loss, [gh, gm])
    return BatchScores(dh.abs().cpu().double(), dm.abs().cpu().double(), 1)


def taylor_weights(model: nn.Module, adapter: Adapter, batch: dict, loss_fn: LossFn,
                   heads: Tensor, mlps: Tensor) -> BatchScores:
    """``(sum_w w * dL/dw)^2`` over each component's parameters, for the batch-mean loss."""
    B, L, H = _batch_size(batch), adapter.num_layers, adapter.num_heads
    names = sorted({sl.name for l in range(L) for h in range(H) for sl in adapter.head_params(l, h)}
                   | {sl.name for l in range(L) for sl in adapter.mlp_params(l)})
    params = [adapter.parameter(n) for n in names]
    with apply_gates(model, adapter, heads=heads.float(), mlps=mlps.float()):
        loss = loss_fn(model, batch).mean()
    grads = dict(zip(names, torch.autograd.grad(loss, params, allow_unused=True)))
    wg = {n: (p.detach() * g).double() if g is not None else torch.zeros_like(p, dtype=torch.float64)
          for n, p, g in zip(names, params, grads.values())}

    def first_order(slices) -> Tensor:
        total = torch.zeros((), dtype=torch.float64, device=params[0].device)
        for sl in slices:
            total = total + wg[sl.name].narrow(sl.dim, sl.start, sl.stop - sl.start).sum() * sl.share
        return total

    hs = torch.stack([torch.stack([first_order(adapter.head_params(l, h)) for h in range(H)]) for l in range(L)])
    ms = torch.stack([first_order(adapter.mlp_params(l)) for l in range(L)])
    return BatchScores((hs ** 2).cpu() * B, (ms ** 2).cpu() * B, B)


@contextmanager
def _recorded_activations(adapter: Adapter) -> Iterator[tuple[list, list]]:
    """Record every head's (out-projection input) and MLP's output tensor as it flows; hooks removed on exit."""
    heads: list = [None] * adapter.num_layers
    mlps: list = [None] * adapter.num_layers
    handles = []
    try:
        for l in range(adapter.num_layers):
            handles.append(adapter.head_output_module(l).register_forward_pre_hook(
                lambda m, a, l=l: heads.__setitem__(l, a[0])))
            handles.append(adapter.mlp_output_module(l).register_forward_hook(
                lambda m, a, o, l=l: mlps.__setitem__(l, o)))
        yield heads, mlps
    finally:
        for h in handles:
            h.remove()


def grad_x_activation(model: nn.Module, adapter: Adapter, batch: dict, loss_fn: LossFn,
                      heads: Tensor, mlps: Tensor) -> BatchScores:
    """``sum_x sum_c |sum_pos a_c * dL(x)/da_c|`` over each component's output channels."""
    B, L, H, d = _batch_size(batch), adapter.num_layers, adapter.num_heads, adapter.head_dim
    with apply_gates(model, adapter, heads=heads.float(), mlps=mlps.float()):
        with _recorded_activations(adapter) as (acts_h, acts_m):  # registered after the gates: sees gated values
            losses = loss_fn(model, batch)  # [B]
    grads = torch.autograd.grad(losses.sum(), acts_h + acts_m)
    mask = batch.get("attention_mask")
    pos = mask.to(model_device(model)).unsqueeze(-1).float() if mask is not None else 1.0  # [B, P, 1]
    hs, ms = [], []
    for a, g in zip(acts_h, grads[:L]):  # [B, P, H * d]
        prod = (a.detach().float() * g.float() * pos).sum(1).view(B, H, d)  # [B, H, d]
        hs.append(prod.abs().sum(-1).sum(0))
    for a, g in zip(acts_m, grads[L:]):  # [B, P, hidden]
        prod = (a.detach().float() * g.float() * pos).sum(1)  # [B, hidden]
        ms.append(prod.abs().sum(-1).sum(0))
    return BatchScores(torch.stack(hs).cpu().double(), torch.stack(ms).cpu().double(), B)


CRITERIA: dict[str, Criterion] = {
    "sensitivity": gate_sensitivity,
    "sensitivity-per-batch": gate_sensitivity_per_batch,
    "taylor": taylor_weights,
    "grad-x-activation": grad_x_activation,
}


def get_criterion(name_or_fn: str | Criterion) -> Criterion:
    if callable(name_or_fn):
        return name_or_fn
    if name_or_fn not in CRITERIA:
        raise SubnetlabError(f"unknown importance criterion {name_or_fn!r}; choose one of {', '.join(CRITERIA)}")
    return CRITERIA[name_or_fn]


# -- averaging and normalising -------------------------------------------------------------
def normalize_layerwise(heads: Tensor, eps: float = 1e-20) -> Tensor:
    """Divide each layer's head scores by their L2 norm (Molchanov et al., 2017; Michel et al., 2019)."""
    return heads / (heads.norm(dim=-1, keepdim=True) + eps)


def importance(
    model: nn.Module,
    adapter: Adapter,
    batches: Iterable[dict],
    loss_fn: LossFn = classification_loss,
    criterion: str | Criterion = "sensitivity",
    heads: Tensor | None = None,
    mlps: Tensor | None = None,
    normalize: bool = True,
) -> tuple[Tensor, Tensor]:
    """Mean score per head ``[L, H]`` and per MLP ``[L]`` over ``batches``, in the masked model.

    With ``normalize``, head scores are divided layer-wise by their L2 norm and MLP
    scores by the L2 norm of the MLP vector (one MLP per layer, so a layer-wise norm
    would make them all 1; a global rescaling leaves their ranking unchanged).
    Pruned components (mask 0) get score 0 before normalising.
    """
    L, H = adapter.num_layers, adapter.num_heads
    heads = torch.ones(L, H) if heads is None else heads.detach().float().cpu()
    mlps = torch.ones(L) if mlps is None else mlps.detach().float().cpu()
    fn = get_criterion(criterion)
    total_h = torch.zeros(L, H, dtype=torch.float64)
    total_m = torch.zeros(L, dtype=torch.float64)
    count = 0.0
    was_training = model.training
    model.eval()  # no dropout: the sensitivity of the deterministic network
    try:
        for batch in batches:
            scores = fn(model, adapter, batch, loss_fn, heads, mlps)
            total_h += scores.heads
            total_m += scores.mlps
            count += scores.count
    finally:
        model.train(was_training)
    if count == 0:
        raise SubnetlabError("importance needs at least one batch of data")
    mean_h = (total_h / count).float() * heads
    mean_m = (total_m / count).float() * mlps
    if normalize:
        mean_h = normalize_layerwise(mean_h)
        mean_m = mean_m / (mean_m.norm() + 1e-20)
    return mean_h, mean_m
