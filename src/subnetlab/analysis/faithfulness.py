"""Faithfulness of circuits as the MIB benchmark measures it (Mueller et al. 2025, circuit track).

A circuit ``C`` is a set of kept items (edges, or heads and MLPs) of a model
``N``; everything else is ablated (patched from the corrupted prompt, in MIB).
For a task metric ``m`` (logit difference, answer probability, KL ...)::

    f(C) = (m(C) - m(empty)) / (m(N) - m(empty))

so the empty circuit scores 0 and the full model 1. A method's scores rank the
items; the circuit of size ``s`` keeps the top ``floor(s * items)`` of them by
absolute score (MIB's ``apply_topn(absolute=True)``), at ``s`` = 0.1, 0.2, 0.5,
1, 2, 5, 10, 20, 50 and 100 % (``CIRCUIT_SIZES``). Two areas summarise the
curve, each by the trapezoid rule over those ten points, with the fraction of
items (not a percentage, not a log scale) on the x axis, as MIB's
``evaluate_area_under_curve`` computes them:

* **CPR** = area under ``f`` (higher is better);
* **CMD** = area under ``|1 - f|`` (lower is better).

The x axis starts at 0.001, not 0, so a circuit with ``f = 1`` at every size
has CPR 0.999 and CMD 0, as in MIB's numbers. Ties in the scores are broken by
item index (lower first), so a curve is reproducible (``models.circuit``'s
ranking); MIB's ``argsort`` leaves them to the sort. MIB then prunes edges that
no longer connect the input to the logits; under patching such edges carry
their writer's corrupted output anyway, so ``m(C)`` is unchanged and this
module keeps the top-k set as it is.

The evaluation is a callable ``evaluate(keep) -> {metric: value}`` over a
boolean ``[items]`` tensor, so this module does not know how items are applied:
``analysis.circuit_evaluation`` gives one for the edges of a model's graph and
one for its heads and MLPs (Heuristic Core's granularity), on one scale.
Circuits found at fixed sizes (masks rather than scores, e.g. Edge Pruning at
several target sparsities) get the same curve from ``curve_from_masks``.

Two things decide whether the numbers mean anything, and both are recorded:

* the **baseline** (``baseline``): ``f`` divides by ``m(N) - m(empty)``; the
  gap beside the metric's spread over the pairs and its direction, for
  ``runs.health`` to judge;
* the **span** (``span``): CPR and CMD are areas over the sizes measured. Over
  MIB's 0.1-100 % they compare across methods; circuits that cover only part
  of it (two Edge Pruning circuits at 5.1 and 10.2 %) give areas over that part
  only, a few times smaller, and are labelled partial (``describe_areas``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.models.circuit import top_k_mask
from subnetlab.tasks.circuits.metrics import HIGHER_IS_BETTER

CIRCUIT_SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

Evaluate = Callable[[Tensor], Mapping[str, float]]  # keep [items] bool -> metric name -> value over the data


def circuit_size(fraction: float, items: int) -> int:
    """Items kept at ``fraction`` of ``items``: MIB's ``int(pct * n)`` (floored, robust to float rounding)."""
    if not 0.0 <= fraction <= 1.0:
        raise SubnetlabError(f"circuit size {fraction} is not a fraction of the items in [0, 1]", setting="sizes")
    return min(items, math.floor(fraction * items + 1e-9))


def top_k(scores: Tensor, k: int, absolute: bool = True) -> Tensor:
    """``[items]`` bool: the ``k`` items with the highest (absolute) score, ties to the lower index."""
    return top_k_mask(scores.detach().reshape(-1).float(), k, absolute=absolute)


def area(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The trapezoid rule over the points ``(xs[i], ys[i])`` (``xs`` increasing)."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise SubnetlabError(f"an area needs at least two points with one value each ({len(xs)} x, {len(ys)} y)")
    return sum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(len(xs) - 1))


def faithfulness(value: float, full: float, empty: float) -> float:
    """``(m(C) - m(empty)) / (m(N) - m(empty))``; NaN when the full model and the empty circuit score alike."""
    return (value - empty) / (full - empty) if full != empty else float("nan")


def baseline(full: Tensor, empty: Tensor, metric: str) -> dict[str, Any]:
    """The normaliser of ``f`` for ``metric`` from its per-pair values on the full model and the empty circuit
    (``[pairs]`` each): both means, the pooled standard deviation over the pairs (``spread``), the gap's effect
    size ``|m(N) - m(empty)| / spread`` (Cohen's d; None when the spread is 0), and ``inverted``: the empty
    circuit scores beyond the full model in the metric's direction."""
    full, empty = full.detach().double().reshape(-1), empty.detach().double().reshape(-1)
    if full.numel() != empty.numel() or full.numel() == 0:
        raise SubnetlabError(f"a baseline needs the same pairs on both sides ({full.numel()} and {empty.numel()})")
    up = HIGHER_IS_BETTER.get(metric, True)
    m_full, m_empty = float(full.mean()), float(empty.mean())
    n = full.numel()
    var = (float(full.var(unbiased=True)) + float(empty.var(unbiased=True))) / 2 if n > 1 else 0.0
    spread = math.sqrt(var)
    gap = abs(m_full - m_empty)
    return {"metric": metric, "full": m_full, "empty": m_empty, "pairs": n, "spread": spread,
            "effect": gap / spread if spread > 0 else None, "higher_is_better": up,
            "inverted": (m_empty > m_full) if up else (m_empty < m_full)}


def span(fractions: Sequence[float]) -> dict[str, Any]:
    """The sizes a curve covers (fractions of the items) and whether that is MIB's whole range (``CIRCUIT_SIZES``'
    first size to every item): the areas of a partial span are over that part only."""
    low, high = min(fractions), max(fractions)
    return {"from": low, "to": high, "partial": not (low <= CIRCUIT_SIZES[0] + 1e-12 and high >= 1.0 - 1e-12)}


def describe_areas(cpr: float, cmd: float, covered: Mapping[str, Any] | None, items: str = "items") -> str:
    """``CPR 0.512, CMD 0.203`` over the whole range, or ``CPR 0.021, CMD 0.030 over 5.1-10.2% of edges (partial
    span)``: areas over part of the range are never shown as if whole."""
    text = f"CPR {cpr:.3f}, CMD {cmd:.3f}"
    if covered is not None and covered.get("partial"):
        text += f" over {100 * covered['from']:.3g}-{100 * covered['to']:.3g}% of {items} (partial span)"
    return text


@dataclass(frozen=True)
class FaithfulnessCurve:
    """One method's circuits at each size, measured: raw metrics, ``f``, CPR and CMD per metric."""

    metric: str  # the headline metric (its CPR / CMD are ``cpr`` / ``cmd``)
    items: int  # how many items (edges, or nodes) the model has
    fractions: tuple[float, ...]  # x axis: the fraction of items each circuit keeps
    counts: tuple[int, ...]  # items each circuit keeps
    values: dict[str, tuple[float, ...]]  # metric -> m(C) at each size
    full: dict[str, float]  # metric -> m(N)
    empty: dict[str, float]  # metric -> m(empty circuit)
    faithfulness: dict[str, tuple[float, ...]] = field(default_factory=dict)  # metric -> f(C) at each size
    areas: dict[str, dict[str, float]] = field(default_factory=dict)  # metric -> {"cpr": ..., "cmd": ...}

    @property
    def cpr(self) -> float:
        return self.areas[self.metric]["cpr"]

    @property
    def cmd(self) -> float:
        return self.areas[self.metric]["cmd"]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready numbers (NaN as null)."""
        def clean(x: Any) -> Any:
            if isinstance(x, float):
                return None if math.isnan(x) else x
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (tuple, list)):
                return [clean(v) for v in x]
            return x

        return clean({"metric": self.metric, "items": self.items, "fractions": list(self.fractions),
                      "counts": list(self.counts), "values": self.values, "full": self.full, "empty": self.empty,
                      "faithfulness": self.faithfulness, "areas": self.areas, "cpr": self.cpr, "cmd": self.cmd,
                      "span": span(self.fractions)})


def _measured(evaluate: Evaluate, keep: Tensor) -> dict[str, float]:
    out = evaluate(keep)
    if not isinstance(out, Mapping) or not out:
        raise SubnetlabError("evaluate(keep) must return a mapping of metric name to value")
    return {k: float(v) for k, v in out.items()}


def _curve(evaluate: Evaluate, items: int, keeps: Sequence[Tensor], fractions: Sequence[float], metric: str,
           empty_reference: Mapping[str, float] | None) -> FaithfulnessCurve:
    if items < 1:
        raise SubnetlabError(f"a circuit needs at least one item, the model has {items}")
    full = _measured(evaluate, torch.ones(items, dtype=torch.bool))
    nothing = torch.zeros(items, dtype=torch.bool)
    empty = dict(empty_reference) if empty_reference is not None else _measured(evaluate, nothing)
    if set(empty) != set(full):
        raise SubnetlabError(f"the empty circuit's metrics ({', '.join(empty)}) are not the circuits' "
                             f"({', '.join(full)})")
    if metric not in full:
        raise SubnetlabError(f"metric {metric!r} is not measured (measured: {', '.join(full)})", setting="metric")
    if full[metric] == empty[metric]:
        raise SubnetlabError(f"the full model and the empty circuit both score {metric} = {full[metric]:.6g}: "
                             "faithfulness is undefined (does the corrupted prompt change the answer?)", setting="metric")
    measured = [_measured(evaluate, keep) for keep in keeps]
    values = {name: tuple(m[name] for m in measured) for name in full}
    f = {name: tuple(faithfulness(v, full[name], empty[name]) for v in values[name]) for name in full}
    areas = {name: {"cpr": area(fractions, f[name]), "cmd": area(fractions, [abs(1.0 - x) for x in f[name]])}
             for name in full}
    return FaithfulnessCurve(metric, items, tuple(fractions), tuple(int(k.sum()) for k in keeps), values, full, empty,
                             f, areas)


def curve_from_scores(scores: Tensor, evaluate: Evaluate, *, metric: str = "logit_diff",
                      sizes: Sequence[float] = CIRCUIT_SIZES, absolute: bool = True,
                      empty: Mapping[str, float] | None = None,
                      select: Callable[[int], Tensor] | None = None) -> FaithfulnessCurve:
    """The faithfulness curve of the top-k circuits by ``scores`` (``[items]``, any shape flattened) at ``sizes``.

    ``empty``: the metrics ``m(empty)`` to normalise by, instead of ``evaluate`` with nothing kept (a node
    curve on the edge scale: the evaluator's ``corrupted_run``, as MIB normalises every level).
    ``select(k)``: the ``[items]`` bool circuit of ``k`` items by another rule than top-k (greedy selection,
    ``models.circuit.Circuit.greedy``).
    """
    items = scores.numel()
    fractions = sorted(float(s) for s in sizes)
    keeps = [top_k(scores, circuit_size(s, items), absolute) if select is None else select(circuit_size(s, items))
             for s in fractions]
    return _curve(evaluate, items, keeps, fractions, metric, empty)


def curve_from_masks(masks: Sequence[Tensor], evaluate: Evaluate, *, metric: str = "logit_diff",
                     empty: Mapping[str, float] | None = None) -> FaithfulnessCurve:
    """The curve of circuits given as masks (``[items]``, 1 = kept), one per size; x is each one's kept fraction."""
    if len(masks) < 2:
        raise SubnetlabError(f"a curve needs circuits of at least two sizes, got {len(masks)}", setting="circuits")
    flat = [m.detach().reshape(-1).cpu() for m in masks]
    items = flat[0].numel()
    for m in flat:
        if m.numel() != items:
            raise SubnetlabError(f"circuits over {m.numel()} and {items} items cannot share one curve",
                                 setting="circuits")
        if bool(((m != 0) & (m != 1)).any()):
            raise SubnetlabError("a circuit's mask holds values other than 0 and 1; threshold it first",
                                 setting="circuits")
    keeps = sorted((m.bool() for m in flat), key=lambda k: int(k.sum()))
    return _curve(evaluate, items, keeps, [int(k.sum()) / items for k in keeps], metric, empty)


def circuit_faithfulness(mask: Tensor, evaluate: Evaluate, empty: Mapping[str, float] | None = None) -> dict[str, float]:
    """``f`` of one circuit (``[items]`` mask) for every metric ``evaluate`` measures (``empty``: as for curves)."""
    keep = mask.detach().reshape(-1).cpu().bool()
    full = _measured(evaluate, torch.ones_like(keep))
    empty = dict(empty) if empty is not None else _measured(evaluate, torch.zeros_like(keep))
    value = _measured(evaluate, keep)
    return {name: faithfulness(value[name], full[name], empty[name]) for name in full}


__all__ = ["CIRCUIT_SIZES", "Evaluate", "FaithfulnessCurve", "area", "baseline", "circuit_faithfulness", "circuit_size",
           "curve_from_masks", "curve_from_scores", "describe_areas", "faithfulness", "span", "top_k"]
