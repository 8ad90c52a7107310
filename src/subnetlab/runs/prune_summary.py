"""Across-seed summary of pruning runs, as Table 5 of the Heuristic Core paper.

For every target sparsity (or staircase level) and every evaluation set (each
split's accuracy, and each out-of-domain subcase or in-domain group), the full
model's accuracy beside the min, max, mean and standard deviation (ddof = 1,
the spread between seeds) over the seeds' subnetworks, and how many seeds'
subnetworks ``runs.health`` found a problem in.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

SUMMARY_FILE = "summary.json"


def flatten_scores(scores: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """``{split: score}`` -> ``{"split": acc, "split/subcase": acc, "split/group": acc}``."""
    flat: dict[str, float] = {}
    for split, score in scores.items():
        flat[split] = float(score["accuracy"])
        for key in ("subcases", "groups"):
            for name, value in (score.get(key) or {}).items():
                flat[f"{split}/{name}"] = float(value)
    return flat


def _stats(values: list[float]) -> dict[str, float | int | None]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return {"min": None, "max": None, "mean": None, "std": None, "n": 0}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"min": min(values), "max": max(values), "mean": statistics.fmean(values), "std": std, "n": len(values)}


def summarize(groups: Mapping[str, Iterable[Mapping[str, Any]]], model_scores: Mapping[str, Any] | None,
              healths: Mapping[str, Iterable[Mapping[str, Any] | None]] | None = None) -> dict[str, Any]:
    """``{sparsity: [eval dict of each seed]}`` -> ``{sparsity: {"seeds": n, "rows": {set: stats}}}``; with
    ``healths`` (``{sparsity: [health entry of each seed]}``) each sparsity also gets ``health``
    (``health_counts``)."""
    model = flatten_scores(model_scores) if model_scores else {}
    out: dict[str, Any] = {}
    for key in sorted(groups, key=float):
        flats = [flatten_scores(scores) for scores in groups[key]]
        names = list(dict.fromkeys(name for flat in flats for name in flat))
        rows = {name: {"model": model.get(name), **_stats([f[name] for f in flats if name in f])} for name in names}
        out[key] = {"seeds": len(flats), "rows": rows}
        if healths is not None and key in healths:
            out[key]["health"] = health_counts(healths[key])
    return out


def health_counts(entries: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """How many seeds' subnetworks have each problem (``runs.health``), of how many judged, and the mean share
    of undecided gates."""
    judged = [e for e in entries if isinstance(e, Mapping)]
    problems: dict[str, int] = {}
    for e in judged:
        for p in e.get("problems") or ():
            problems[p] = problems.get(p, 0) + 1
    shares = [e["undecided_share"] for e in judged if e.get("undecided_share") is not None]
    return {"judged": len(judged), "problems": problems,
            "undecided_share_mean": statistics.fmean(shares) if shares else None}


def format_health(counts: Mapping[str, Any], share: bool = True) -> str:
    """``off-target in 4 of 4 seed(s), undecided in 3 of 4 seed(s) (mean 62% of gates undecided)`` (``share``: the
    part in brackets)."""
    n = counts["judged"]
    mean = counts.get("undecided_share_mean")
    undecided = f" (mean {mean:.0%} of gates undecided)" if share and mean is not None else ""
    if not counts["problems"]:
        return f"no problem in {n} seed(s){undecided}"
    return ", ".join(f"{p} in {k} of {n} seed(s)" for p, k in counts["problems"].items()) + undecided


def format_summary(summary: Mapping[str, Any]) -> str:
    """Plain-text tables (accuracies in percent), one per sparsity."""
    lines: list[str] = []
    for key, block in summary.items():
        lines.append(f"sparsity {float(key):.0%}: {block['seeds']} seed(s)")
        if block.get("health", {}).get("judged"):
            lines.append(f"  health: {format_health(block['health'])}")
        rows = block["rows"]
        width = max([len("evaluation set")] + [len(name) for name in rows])
        lines.append(f"  {'evaluation set':<{width}}  {'model':>6}  {'min':>6}  {'max':>6}  {'mean':>6}  {'std':>5}")
        for name, r in rows.items():
            cells = [_pct(r["model"]), _pct(r["min"]), _pct(r["max"]), _pct(r["mean"])]
            std = "-" if r["std"] is None else f"{100 * r['std']:.1f}"
            lines.append(f"  {name:<{width}}  " + "  ".join(f"{c:>6}" for c in cells) + f"  {std:>5}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"
