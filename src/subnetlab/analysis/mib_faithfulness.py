"""CPR and CMD as the MIB circuit track computes them, beside subnetlab's own definition.

MIB (hannamw/MIB-circuit-track, ``MIB_circuit_track/evaluation.py`` ``evaluate_area_under_curve``,
``run_evaluation.py``, ``print_results.py``) evaluates a method's edge scores on EAP-IG's graph
(one embedding node, ``models.mib_graph``):

1. ``m(N)``: the model on the clean prompts; ``m(empty)``: the graph with no edge (``apply_topn(0)``).
2. At each of ``PERCENTAGES`` (0.1 % ... 100 %) the circuit keeps ``n = int(pct * edges)`` edges: EAP-IG's
   ``apply_topn(n, absolute)`` (a descending ``argsort`` of the scores, or of their magnitudes, over its
   ``[n_forward, n_backward]`` matrix), then ``prune()`` (nodes without a kept incoming or outgoing edge
   and their edges go, until nothing changes), then ``evaluate_graph`` (which prunes again).
3. ``f = (m(C) - m(empty)) / (m(N) - m(empty))``; trapezoids over the *fractions* (linear x, from 0.001 to
   1): ``area_under`` (CPR) and ``area_from_1`` (CMD, under ``|1 - f|``).
4. The leaderboard runs the evaluation twice and takes **CPR from ``absolute=False``** (the signed
   ranking: positive scores first) and **CMD from ``absolute=True``** (``print_results.py`` prefers the
   ``abs-False`` results for CPR and the ``abs-True`` ones for CMD; the autoeval labels them so), and
   prints them with two decimals.

subnetlab's own definition (``analysis.faithfulness``, ``circuit-eval`` without MIB's) ranks by magnitude
for both areas (or by value for log-alphas), keeps the top-k set without pruning, breaks ties by edge
order and accepts any graph (two embedding nodes by default) and any sizes. Under patching, pruning does
not change ``m(C)`` (a pruned edge carries its writer's corrupted output either way); the two definitions
differ by the ranking (CPR), the graph (its edge count sets the sizes) and, under zero ablation, pruning.

Ties: EAP-IG's ``argsort`` is not stable; here ties go to the lower matrix index (writer, then reader),
which is what a stable sort of its matrix gives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from subnetlab.analysis.faithfulness import Evaluate
from subnetlab.analysis.stability import check_resamples, pair_bootstrap
from subnetlab.errors import SubnetlabError
from subnetlab.models.graph import Graph
from subnetlab.models.mib_graph import check_mappable, matrix_index, prune

PERCENTAGES = (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)
DEFINITIONS = ("subnetlab", "mib")


def top_n(graph: Graph, scores: Tensor, n: int, absolute: bool) -> Tensor:
    """``[edges]`` bool: EAP-IG's ``apply_topn(n, absolute, prune=True)`` on the edge level."""
    if not 0 <= n <= graph.num_edges:
        raise SubnetlabError(f"top {n} of {graph.num_edges} edges", setting="sizes")
    flat = scores.detach().reshape(-1).cpu().float()
    key = flat.abs() if absolute else flat
    by_cell = torch.argsort(matrix_index(graph), stable=True)  # edges in matrix order
    order = by_cell[torch.argsort(key[by_cell], descending=True, stable=True)]
    keep = torch.zeros(graph.num_edges, dtype=torch.bool)
    keep[order[:n]] = True
    return prune(graph, keep)[0]


def areas(percentages: tuple[float, ...] | list[float], faithfulnesses: list[float]) -> dict[str, float]:
    """``evaluate_area_under_curve``'s trapezoids: ``area_under``, ``area_from_1`` and the ``average``."""
    area_under = area_from_1 = 0.0
    for i in range(len(faithfulnesses) - 1):
        width = percentages[i + 1] - percentages[i]
        area_from_1 += width * ((abs(1.0 - faithfulnesses[i]) + abs(1.0 - faithfulnesses[i + 1])) / 2)
        area_under += width * ((faithfulnesses[i] + faithfulnesses[i + 1]) / 2)
    return {"area_under": area_under, "area_from_1": area_from_1,
            "average": sum(faithfulnesses) / len(faithfulnesses)}


def _measure(evaluate: Evaluate, keep: Tensor) -> dict[str, float]:
    out = evaluate(keep)
    if not isinstance(out, Mapping) or not out:
        raise SubnetlabError("evaluate(keep) must return a mapping of metric name to value")
    return {k: float(v) for k, v in out.items()}


def _check_baseline(full: dict[str, float], empty: dict[str, float], metric: str) -> None:
    if metric not in full:
        raise SubnetlabError(f"metric {metric!r} is not measured (measured: {', '.join(full)})", setting="metric")
    if full[metric] == empty[metric]:
        raise SubnetlabError(f"the full model and the empty circuit both score {metric} = {full[metric]:.6g}: "
                             "faithfulness is undefined", setting="metric")


def mib_curves(graph: Graph, scores: Tensor, evaluate: Evaluate, metric: str = "logit_diff", *,
               bootstrap: int | None = None, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """MIB's evaluation of edge ``scores`` on ``graph``: both rankings, CPR (signed) and CMD (absolute).

    ``evaluate(keep [edges]) -> {metric: mean over the pairs}`` (``analysis.circuit_evaluation.edge_evaluator``
    on ``graph``). Returns plain JSON-ready data with ``definition: "mib"``. With ``bootstrap`` (a number of
    resamples) every circuit is measured per pair (``evaluate.per_pair``), the means are taken from those values,
    and ``"bootstrap"`` holds a percentile interval of CPR and CMD over the pairs resampled with ``seed``
    (``mib_bootstrap``).
    """
    check_mappable(graph, "MIB's evaluation", setting="scores")
    if scores.numel() != graph.num_edges:
        raise SubnetlabError(f"{scores.numel()} scores for {graph.num_edges} edges", setting="scores")
    if bootstrap is not None:
        check_resamples(bootstrap)
        if not callable(getattr(evaluate, "per_pair", None)):
            raise SubnetlabError("a bootstrap over the pairs needs per-pair values (an evaluator with per_pair)",
                                 setting="bootstrap")
    n = graph.num_edges
    counts = [int(pct * n) for pct in PERCENTAGES]
    masks = {"full": torch.ones(n, dtype=torch.bool), "empty": torch.zeros(n, dtype=torch.bool)}
    for name, absolute in (("signed", False), ("absolute", True)):
        masks.update({(name, i): top_n(graph, scores, count, absolute) for i, count in enumerate(counts)})
    pairs: dict[Any, dict[str, Tensor]] = {}
    measured: dict[Any, dict[str, float]] = {}
    for key, keep in masks.items():  # full and empty first: an undefined faithfulness is refused before the rest
        if bootstrap is None:
            measured[key] = _measure(evaluate, keep)
        else:
            pairs[key] = evaluate.per_pair(keep)  # type: ignore[attr-defined]
            measured[key] = {m: float(v.mean()) for m, v in pairs[key].items()}
        if key == "empty":
            _check_baseline(measured["full"], measured["empty"], metric)
    full, empty = measured["full"], measured["empty"]
    rankings: dict[str, Any] = {}
    for name, absolute in (("signed", False), ("absolute", True)):
        values = [measured[(name, i)] for i in range(len(counts))]
        f = {m: [(v[m] - empty[m]) / (full[m] - empty[m]) if full[m] != empty[m] else None for v in values]
             for m in full}
        kept = [int(masks[(name, i)].sum()) for i in range(len(counts))]
        rankings[name] = {"absolute": absolute, "edge_counts": kept,
                          "values": {m: [v[m] for v in values] for m in full}, "faithfulness": f,
                          **areas(PERCENTAGES, f[metric])}
    cpr, cmd = rankings["signed"]["area_under"], rankings["absolute"]["area_from_1"]
    out = {"definition": "mib", "metric": metric, "items": n, "fractions": list(PERCENTAGES), "counts": counts,
           "full": full, "empty": empty, "signed": rankings["signed"], "absolute": rankings["absolute"],
           "cpr": cpr, "cmd": cmd, "cpr_printed": f"{cpr:.2f}", "cmd_printed": f"{cmd:.2f}"}
    if bootstrap is not None:
        per_pair = {"full": pairs["full"][metric], "empty": pairs["empty"][metric],
                    **{name: torch.stack([pairs[(name, i)][metric] for i in range(len(counts))])
                       for name in ("signed", "absolute")}}
        out["bootstrap"] = mib_bootstrap(per_pair, resamples=bootstrap, seed=seed, level=level)
    return out


def mib_areas(means: Mapping[str, Tensor]) -> dict[str, float]:
    """CPR (area under f of the signed ranking) and CMD (area under ``|1 - f|`` of the absolute ranking) from the
    metric's means: ``full`` and ``empty`` (scalars), ``signed`` and ``absolute`` (one per size); NaN when the
    full and empty means agree."""
    full, empty = float(means["full"]), float(means["empty"])
    if full == empty:
        return {"cpr": math.nan, "cmd": math.nan}
    f = {name: [(float(v) - empty) / (full - empty) for v in means[name].tolist()] for name in ("signed", "absolute")}
    return {"cpr": areas(PERCENTAGES, f["signed"])["area_under"],
            "cmd": areas(PERCENTAGES, f["absolute"])["area_from_1"]}


def mib_bootstrap(per_pair: Mapping[str, Tensor], *, resamples: int, seed: int, level: float = 0.95) -> dict[str, Any]:
    """Percentile bootstrap interval of MIB's CPR and CMD over the pairs (``analysis.stability.pair_bootstrap``):
    ``per_pair`` holds the metric's per-pair values ``full`` and ``empty`` ``[pairs]``, ``signed`` and
    ``absolute`` ``[sizes, pairs]``; each resample recomputes the means, f and both areas."""
    return pair_bootstrap(per_pair, mib_areas, resamples=resamples, seed=seed, level=level)


__all__ = ["DEFINITIONS", "PERCENTAGES", "areas", "mib_areas", "mib_bootstrap", "mib_curves", "top_n"]
