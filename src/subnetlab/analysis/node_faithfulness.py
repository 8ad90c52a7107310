"""Node-level circuits (heads and MLPs, Heuristic Core's granularity) on the faithfulness scale of edges.

``node_evaluator`` is the ``evaluate(keep)`` of ``analysis.faithfulness`` for a
circuit task: ``keep`` is one flag per node, in ``component_index`` order
(layer by layer: ``L0.H0 .. L0.H{H-1}, L0.MLP, L1.H0 ...``). A removed node's
output is replaced, through ``intervene.gates.apply_gates``, by its output on
the pair's corrupted prompt (patching, as MIB and Edge Pruning evaluate edges),
by zero, or by given values (means). Removing a node this way is removing every
edge out of it, so node circuits and edge circuits are measured on one scale:
``curve_from_scores(node_scores, node_evaluator(...))`` next to the edge curve.

The evaluator runs the full model once per batch (the reference of the KL and
``m(N)``) and captures the corrupted activations once, then one gated forward
per batch for each circuit; memory holds every batch's corrupted activations
(pairs x positions x components x width floats).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.activations import ComponentValues, capture_activations
from subnetlab.intervene.gates import apply_gates
from subnetlab.models.adapters import Adapter
from subnetlab.subnetwork.subnetwork import component_index
from subnetlab.tasks.circuits.metrics import circuit_metrics
from subnetlab.tasks.circuits.pairs import CircuitTask, clean_inputs, corrupted_inputs


def node_names(adapter: Adapter) -> list[str]:
    """The nodes of a model in the order of a node vector: ``L0.H0 ... L0.MLP, L1.H0 ...``."""
    return list(component_index(adapter.num_layers, adapter.num_heads))


def node_vector(heads: Tensor, mlps: Tensor) -> Tensor:
    """``[L * (H + 1)]`` from per-head ``[L, H]`` and per-MLP ``[L]`` values (scores, masks, log-alphas)."""
    if heads.dim() != 2 or mlps.dim() != 1 or mlps.shape[0] != heads.shape[0]:
        raise SubnetlabError(f"node values need heads [layers, heads] and MLPs [layers], got {tuple(heads.shape)} "
                             f"and {tuple(mlps.shape)}")
    return torch.cat([heads, mlps[:, None].to(heads.dtype)], dim=1).reshape(-1)


def node_gates(keep: Tensor, adapter: Adapter) -> tuple[Tensor, Tensor]:
    """Head gates ``[L, H]`` and MLP gates ``[L]`` (float, 1 = kept) from a node vector."""
    L, H = adapter.num_layers, adapter.num_heads
    if keep.numel() != L * (H + 1):
        raise SubnetlabError(f"a node circuit of this model has {L * (H + 1)} flags ({L} layers x ({H} heads + MLP)), "
                             f"got {keep.numel()}")
    grid = keep.reshape(L, H + 1).float()
    return grid[:, :H], grid[:, H]


@torch.no_grad()
def node_evaluator(model: nn.Module, adapter: Adapter, task: CircuitTask, tokenizer: Any, split: str, *,
                   batch_size: int = 32, limit: int | None = None,
                   ablation: Literal["corrupted", "zero"] | ComponentValues = "corrupted") -> Callable[[Tensor], dict[str, float]]:
    """``evaluate(keep [nodes]) -> {"logit_diff", "answer_prob", "kl"}``, each the mean over the pairs of ``split``."""
    if not (isinstance(ablation, ComponentValues) or ablation in ("corrupted", "zero")):
        raise SubnetlabError(f"node ablation {ablation!r} is not 'corrupted', 'zero' or values", setting="ablation")
    device = next(model.parameters()).device
    batches = []
    for batch in task.pair_batches(tokenizer, split, batch_size, limit):
        batch = {k: v.to(device) for k, v in batch.items()}
        full = model(**clean_inputs(batch)).logits.float()  # [B, T, V]
        values = capture_activations(model, adapter, corrupted_inputs(batch)) if ablation == "corrupted" else \
            (None if ablation == "zero" else ablation)
        batches.append((batch, full, values))
    count = sum(len(b["answer_id"]) for b, _, _ in batches)

    @torch.no_grad()
    def evaluate(keep: Tensor) -> dict[str, float]:
        heads, mlps = node_gates(keep, adapter)
        heads, mlps = heads.to(device), mlps.to(device)
        totals: dict[str, float] = {}
        for batch, full, values in batches:
            with apply_gates(model, adapter, heads, mlps, ablation=values):
                logits = model(**clean_inputs(batch)).logits.float()
            for name, per_pair in circuit_metrics(logits, batch, full).items():
                totals[name] = totals.get(name, 0.0) + float(per_pair.sum())
        return {name: total / count for name, total in totals.items()}

    return evaluate


__all__ = ["node_evaluator", "node_gates", "node_names", "node_vector"]
