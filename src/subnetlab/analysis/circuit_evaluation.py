"""The ``evaluate(keep)`` of ``analysis.faithfulness`` for a circuit task, at both granularities.

* ``edge_evaluator``: ``keep`` is one flag per edge of the model's graph
  (``models.graph``), applied by ``intervene.edges.apply_edges``; a removed
  edge delivers its writer's output on the pair's corrupted prompt (patching,
  as MIB and Edge Pruning evaluate circuits), zero, or given values (means).
* ``node_evaluator``: ``keep`` is one flag per head and MLP (Heuristic Core's
  granularity) in ``component_index`` order (layer by layer: ``L0.H0 ..
  L0.H{H-1}, L0.MLP, L1.H0 ...``), applied by ``intervene.gates.apply_gates``
  with the same replacement values. Removing a node this way is removing every
  edge out of it, so node circuits and edge circuits land on one scale:
  ``curve_from_scores(node_scores, node_evaluator(...))`` next to the edge curve.

Both return the mean over the pairs of one split of every metric the task
measures (``CircuitTask.metrics``: ``logit_diff``, ``answer_prob``, ``kl`` to the
full model, and greater-than's ``prob_diff``). The empty edge circuit is the model run on the corrupted prompt (every
reader, the logits included, sees the corrupted run); the empty node circuit
keeps the clean embeddings. MIB normalises both granularities by the former
(its ``m(empty)`` is the graph with no edge, whatever the level), which every
evaluator measures as ``corrupted_run``: pass it as ``empty=`` to
``curve_from_scores`` to put a node curve on the edge scale. When the two
prompts of every pair end in the same token (all builtin tasks: the metrics
read only that position) the two empty circuits give the same metrics.

Evaluators run the full model once per batch (the reference of the KL and
``m(N)``) and capture the corrupted outputs once, then one intervened forward
per batch for each circuit; memory holds every batch's corrupted outputs
(pairs x positions x components x width floats).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.activations import ComponentValues, capture_activations
from subnetlab.intervene.edges import WriterValues, apply_edges, capture_writers, check_edge_family
from subnetlab.intervene.gates import apply_gates
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph
from subnetlab.subnetwork.subnetwork import component_index
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


Ablation = Literal["corrupted", "zero"]


class Evaluator:
    """``evaluate(keep) -> {metric: mean over the pairs}``; ``corrupted_run`` holds the model's own metrics on the
    corrupted prompts (MIB's ``m(empty)``: the graph with no edge, every reader fed the corrupted run)."""

    def __init__(self, model: nn.Module, task: CircuitTask, tokenizer: Any, split: str, batch_size: int,
                 limit: int | None, capture: Callable[[dict[str, Tensor]], Any],
                 intervene: Callable[[Tensor, Any], Any]) -> None:
        device = next(model.parameters()).device
        self.model, self.task, self.intervene, self.batches = model, task, intervene, []
        full_pairs: list[dict[str, Tensor]] = []
        corrupted_pairs: list[dict[str, Tensor]] = []
        with torch.no_grad():
            for batch in task.pair_batches(tokenizer, split, batch_size, limit):
                batch = {k: v.to(device) for k, v in batch.items()}
                full = model(**clean_inputs(batch)).logits.float()  # [B, T, V]
                self.batches.append((batch, full, capture(batch)))
                full_pairs.append(task.metrics(full, batch, full))
                corrupted_pairs.append(task.metrics(model(**corrupted_inputs(batch)).logits.float(), batch, full))
        self.count = sum(len(b["answer_id"]) for b, _, _ in self.batches)
        # [pairs] per metric: the full model's and the corrupted run's values, for the baseline's spread
        self.full_pairs = {n: torch.cat([p[n].detach().cpu().double() for p in full_pairs]) for n in full_pairs[0]}
        self.corrupted_pairs = {n: torch.cat([p[n].detach().cpu().double() for p in corrupted_pairs])
                                for n in corrupted_pairs[0]}
        corrupted: dict[str, float] = {}
        for per_pair in corrupted_pairs:
            _add_sums(corrupted, per_pair)
        self.corrupted_run = {name: total / self.count for name, total in corrupted.items()}

    def baseline(self, metric: str) -> dict[str, Any]:
        """``analysis.faithfulness.baseline`` of ``metric``: the full model against the corrupted run, per pair."""
        from subnetlab.analysis.faithfulness import baseline

        if metric not in self.full_pairs:
            raise SubnetlabError(f"metric {metric!r} is not measured (measured: {', '.join(self.full_pairs)})",
                                 setting="metric")
        return baseline(self.full_pairs[metric], self.corrupted_pairs[metric], metric)

    @torch.no_grad()
    def _batch_metrics(self, keep: Tensor) -> Iterator[dict[str, Tensor]]:
        for batch, full, values in self.batches:
            with self.intervene(keep, values):
                logits = self.model(**clean_inputs(batch)).logits.float()
            yield self.task.metrics(logits, batch, full)

    def __call__(self, keep: Tensor) -> dict[str, float]:
        totals: dict[str, float] = {}
        for per_pair in self._batch_metrics(keep):
            _add_sums(totals, per_pair)
        return {name: total / self.count for name, total in totals.items()}

    def per_pair(self, keep: Tensor) -> dict[str, Tensor]:
        """``{metric: [pairs]}`` (float64, in pair order): the values whose mean ``evaluate(keep)`` returns, for a
        bootstrap over the pairs (``analysis.stability.pair_bootstrap``)."""
        rows: dict[str, list[Tensor]] = {}
        for per_pair in self._batch_metrics(keep):
            for name, values in per_pair.items():
                rows.setdefault(name, []).append(values.detach().cpu().double())
        return {name: torch.cat(parts) for name, parts in rows.items()}


def _add_sums(totals: dict[str, float], per_pair: dict[str, Tensor]) -> None:
    for name, values in per_pair.items():
        totals[name] = totals.get(name, 0.0) + float(values.sum())


def _check_ablation(ablation: Any, values_type: type) -> None:
    if not (isinstance(ablation, values_type) or ablation in ("corrupted", "zero")):
        raise SubnetlabError(f"circuit ablation {ablation!r} is not 'corrupted', 'zero' or values", setting="ablation")


def node_evaluator(model: nn.Module, adapter: Adapter, task: CircuitTask, tokenizer: Any, split: str, *,
                   batch_size: int = 32, limit: int | None = None,
                   ablation: Ablation | ComponentValues = "corrupted") -> Evaluator:
    """``evaluate(keep [nodes]) -> {"logit_diff", "answer_prob", "kl"}``, each the mean over the pairs of ``split``;
    ``ablation``: ``corrupted`` (patching), ``zero`` or ``ComponentValues`` (means)."""
    _check_ablation(ablation, ComponentValues)

    def capture(batch: dict[str, Tensor]) -> ComponentValues | None:
        if ablation == "corrupted":
            return capture_activations(model, adapter, corrupted_inputs(batch))
        return None if ablation == "zero" else ablation  # type: ignore[return-value]

    def intervene(keep: Tensor, values: ComponentValues | None) -> Any:
        heads, mlps = node_gates(keep, adapter)
        device = next(model.parameters()).device
        return apply_gates(model, adapter, heads.to(device), mlps.to(device), ablation=values)

    return Evaluator(model, task, tokenizer, split, batch_size, limit, capture, intervene)


def edge_evaluator(model: nn.Module, adapter: Adapter, graph: Graph, task: CircuitTask, tokenizer: Any, split: str, *,
                   batch_size: int = 32, limit: int | None = None,
                   ablation: Ablation | WriterValues = "corrupted") -> Evaluator:
    """``evaluate(keep [edges of graph]) -> {"logit_diff", "answer_prob", "kl"}``, means over the pairs of ``split``;
    ``ablation``: ``corrupted`` (patching), ``zero`` or ``WriterValues`` (means, ``intervene.edges.writer_means``)."""
    _check_ablation(ablation, WriterValues)
    check_edge_family(adapter)

    def capture(batch: dict[str, Tensor]) -> WriterValues | None:
        if ablation == "corrupted":
            return capture_writers(model, adapter, corrupted_inputs(batch))
        return None if ablation == "zero" else ablation  # type: ignore[return-value]

    def intervene(keep: Tensor, values: WriterValues | None) -> Any:
        if keep.numel() != graph.num_edges:
            raise SubnetlabError(f"an edge circuit of this graph has {graph.num_edges} flags, got {keep.numel()}")
        return apply_edges(model, adapter, graph, keep.reshape(-1).float(), values)

    return Evaluator(model, task, tokenizer, split, batch_size, limit, capture, intervene)


__all__ = ["Evaluator", "edge_evaluator", "node_evaluator", "node_gates", "node_names", "node_vector"]
