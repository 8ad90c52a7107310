"""Random circuits of the method's sizes: the null a circuit's faithfulness is read against (CD-T's control).

A circuit's faithfulness means little on its own: at 10 % of the edges a
random circuit may already score 0.6. Here each of ``draws`` random circuits is
one random ranking of the items (``torch.rand(draws, items)`` from a generator
seeded ``seed``), passed through **the method's own selection rule**
(``select(scores, k)``: top-k, EAP-IG's greedy walk from the logits, MIB's top-n
then pruning, ``models.circuit``), so a random circuit is connected to the
logits exactly as the method's are. A rule that prunes what does not connect
may keep fewer items than asked: the realised sizes are recorded beside the
asked ones. One draw's ranking gives its circuits at every size (nested, as a
method's are), so each draw is a random curve with its own CPR and CMD.

Per size, against the method's ``f`` (``null_comparison``):

* the random circuits' mean, standard deviation (n - 1), minimum and maximum;
* the method's **percentile** among them: ``100 * (#below + #equal / 2) / N``
  (mid-rank, so ties count half);
* an **empirical p-value** ``(1 + #{random >= method}) / (N + 1)`` (Phipson and
  Smyth 2010: never 0, so ``N`` random circuits can show at best ``1 / (N + 1)``).

The random **mean curve**'s CPR and CMD sit beside the method's, and each
draw's own CPR and CMD give the same p-value for the areas (higher CPR, lower
CMD is better). Draws are reproducible from ``seed``, and the first ``n`` of
``N`` draws are the draws of a run with ``n``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError, check_count

Select = Callable[[Tensor, int], Tensor]  # (scores [items], k) -> keep [items] bool, the method's rule
Areas = Callable[[Sequence[float], Sequence[float]], tuple[float, float]]  # (fractions, f) -> (CPR, CMD)


def check_draws(draws: Any, setting: str = "random_circuits") -> int:
    """A number of random circuits: a whole number of at least 0 (0: none), within ``errors.COUNT_BOUNDS``."""
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 0:
        raise SubnetlabError(f"{setting} {draws!r}: a whole number of random circuits, at least 0 (0: none)",
                             setting=setting)
    return check_count(setting, draws)


def random_scores(draws: int, items: int, seed: int) -> Tensor:
    """``[draws, items]`` uniform scores in [0, 1) from a generator seeded ``seed``: one random ranking per draw."""
    check_draws(draws)
    g = torch.Generator().manual_seed(int(seed))
    return torch.rand(draws, items, generator=g)


def p_value(null: Sequence[float], observed: float, higher_is_better: bool = True) -> float:
    """``(1 + #{null at least as good as observed}) / (N + 1)``."""
    at_least = sum((x >= observed) if higher_is_better else (x <= observed) for x in null)
    return (1 + at_least) / (len(null) + 1)


def percentile(null: Sequence[float], observed: float) -> float:
    """Where ``observed`` falls among ``null``, in percent: ``100 * (#below + #equal / 2) / N``."""
    if not null:
        raise SubnetlabError("a percentile among no random circuits")
    below = sum(x < observed for x in null)
    equal = sum(x == observed for x in null)
    return 100.0 * (below + equal / 2) / len(null)


def null_comparison(null: Sequence[float], observed: float | None, higher_is_better: bool = True) -> dict[str, Any]:
    """The random values' mean, ``std`` (n - 1; None for one draw), ``min``, ``max``, and the observed value's
    ``percentile`` and ``p_value`` among them (None where the observed value is undefined)."""
    values = [float(x) for x in null]
    if not values:
        raise SubnetlabError("a comparison with no random circuits")
    out: dict[str, Any] = {"mean": statistics.fmean(values),
                           "std": statistics.stdev(values) if len(values) > 1 else None,
                           "min": min(values), "max": max(values), "method": observed}
    out["percentile"] = out["p_value"] = None
    if observed is not None and math.isfinite(observed):
        out["percentile"] = percentile(values, observed)
        out["p_value"] = p_value(values, observed, higher_is_better)
    return out


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def random_circuit_null(evaluate: Callable[[Tensor], Mapping[str, float]], items: int, counts: Sequence[int],
                        select: Select, *, draws: int, seed: int, metric: str, full: float, empty: float,
                        method: Mapping[str, Sequence[float | None]], fractions: Sequence[float] | None = None,
                        areas: Areas | None = None, method_areas: Mapping[str, tuple[float, float]] | None = None,
                        ) -> dict[str, Any]:
    """``draws`` random circuits at each of ``counts`` (items kept, the method's sizes) measured by ``evaluate``
    and compared with the method's ``f`` of ``metric`` at each size (``method``: curve name -> one value per
    size; MIB's signed and absolute rankings are two curves).

    ``f = (m - empty) / (full - empty)`` with the method's own ``full`` and ``empty``. With ``fractions`` (the x
    of each size, at least two) and ``areas(fractions, f) -> (CPR, CMD)``, the random mean curve's areas and each
    draw's, against ``method_areas`` (curve name -> (CPR, CMD)). Plain JSON-ready data."""
    check_draws(draws)
    if draws < 1:
        raise SubnetlabError("random circuits: at least one draw", setting="random_circuits")
    if full == empty:
        raise SubnetlabError(f"the full model and the empty circuit both score {metric} = {full:.6g}: faithfulness "
                             "is undefined", setting="metric")
    for name, values in method.items():
        if len(values) != len(counts):
            raise SubnetlabError(f"{len(values)} values of curve {name!r} for {len(counts)} sizes")
    scores = random_scores(draws, items, seed)
    f: list[list[float]] = []  # [draws][sizes]
    realised: list[list[int]] = []
    for d in range(draws):
        row, kept = [], []
        for k in counts:
            keep = select(scores[d], int(k)).reshape(-1).cpu().bool()
            kept.append(int(keep.sum()))
            row.append((float(evaluate(keep)[metric]) - empty) / (full - empty))
        f.append(row)
        realised.append(kept)
    sizes = []
    for j, k in enumerate(counts):
        column = [f[d][j] for d in range(draws)]
        kept = [realised[d][j] for d in range(draws)]
        entry: dict[str, Any] = {"count": int(k), "realised": {"mean": statistics.fmean(kept), "min": min(kept),
                                                               "max": max(kept)}}
        if fractions is not None:
            entry["fraction"] = float(fractions[j])
        stats = {name: null_comparison(column, _number(values[j])) for name, values in method.items()}
        first = next(iter(stats.values()))
        entry.update({k2: first[k2] for k2 in ("mean", "std", "min", "max")})
        entry.update({"method": {n: s["method"] for n, s in stats.items()},
                      "percentile": {n: s["percentile"] for n, s in stats.items()},
                      "p_value": {n: s["p_value"] for n, s in stats.items()}, "values": column})
        sizes.append(entry)
    out: dict[str, Any] = {"draws": draws, "seed": int(seed), "metric": metric, "sizes": sizes,
                           "exact_sizes": all(s["realised"]["min"] == s["realised"]["max"] == s["count"] for s in sizes)}
    if fractions is not None and areas is not None and len(counts) >= 2:
        mean_curve = [s["mean"] for s in sizes]
        cpr, cmd = areas(fractions, mean_curve)
        per_draw = [areas(fractions, row) for row in f]
        out["mean_curve"] = {"cpr": cpr, "cmd": cmd}
        out["draw_areas"] = {"cpr": null_comparison([a[0] for a in per_draw], None),
                             "cmd": null_comparison([a[1] for a in per_draw], None, higher_is_better=False)}
        if method_areas is not None:
            out["method_areas"] = {}
            for name, (m_cpr, m_cmd) in method_areas.items():
                out["method_areas"][name] = {
                    "cpr": m_cpr, "cmd": m_cmd,
                    "cpr_percentile": percentile([a[0] for a in per_draw], m_cpr),
                    "cpr_p_value": p_value([a[0] for a in per_draw], m_cpr),
                    "cmd_p_value": p_value([a[1] for a in per_draw], m_cmd, higher_is_better=False)}
    return out


__all__ = ["Areas", "Select", "check_draws", "null_comparison", "p_value", "percentile", "random_circuit_null",
           "random_scores"]
