"""Stability of "good" subnetworks across fine-tuning seeds (Prasanna et al., section 5.1).

Given the structured subnetworks that s-pruning found after fine-tuning with
different seeds: how much do their surviving heads overlap (pairwise Jaccard),
how often does each head survive (a ``[layers, heads]`` frequency map), and
which heads survive in every seed (the *super-survivors*).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError, check_count
from subnetlab.models.adapters import head_name, mlp_name
from subnetlab.subnetwork import Subnetwork


def _structured(subnetworks: Sequence[Subnetwork]) -> list[Subnetwork]:
    subs = list(subnetworks)
    if not subs:
        raise SubnetlabError("stability needs at least one subnetwork")
    for s in subs:
        if s.kind != "structured":
            raise SubnetlabError("stability over seeds compares structured (heads / MLPs) subnetworks")
        if s.fingerprint != subs[0].fingerprint:
            raise SubnetlabError("the subnetworks come from different architectures")
    return subs


def jaccard(a: Tensor, b: Tensor) -> float:
    """|A and B| / |A or B| of two 0/1 masks (1.0 when both are empty)."""
    a, b = a > 0.5, b > 0.5
    union = int((a | b).sum())
    return int((a & b).sum()) / union if union else 1.0


def pairwise_jaccard(subnetworks: Sequence[Subnetwork], part: str = "heads") -> Tensor:
    """``[n, n]`` Jaccard overlap of the surviving ``heads`` (or ``mlps``) of every pair."""
    subs = _structured(subnetworks)
    masks = [getattr(s, part) for s in subs]
    n = len(masks)
    out = torch.ones(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = jaccard(masks[i], masks[j])
    return out


def survival_frequency(subnetworks: Sequence[Subnetwork]) -> tuple[Tensor, Tensor]:
    """Fraction of seeds in which each head ``[L, H]`` and each MLP ``[L]`` survives."""
    subs = _structured(subnetworks)
    heads = torch.stack([s.heads.float() for s in subs]).mean(0)
    mlps = torch.stack([s.mlps.float() for s in subs]).mean(0)
    return heads, mlps


def super_survivors(subnetworks: Sequence[Subnetwork]) -> tuple[Tensor, Tensor]:
    """0/1 masks of the heads ``[L, H]`` and MLPs ``[L]`` that survive in every seed."""
    heads, mlps = survival_frequency(subnetworks)
    return (heads >= 1.0).float(), (mlps >= 1.0).float()


def pearson(x: Tensor, y: Tensor) -> float:
    """Pearson correlation of two equally shaped tensors (NaN when either is constant)."""
    x, y = x.flatten().double(), y.flatten().double()
    xc, yc = x - x.mean(), y - y.mean()
    denom = float(xc.norm() * yc.norm())
    return float((xc * yc).sum()) / denom if denom > 0 else math.nan


def stability_summary(subnetworks: Sequence[Subnetwork]) -> dict:
    """Everything the report needs: overlaps, frequencies, super-survivors by name."""
    subs = _structured(subnetworks)
    pj = pairwise_jaccard(subs)
    n = len(subs)
    off = [float(pj[i, j]) for i in range(n) for j in range(i + 1, n)]
    freq_h, freq_m = survival_frequency(subs)
    sup_h, sup_m = super_survivors(subs)
    L, H = sup_h.shape
    return {
        "seeds": [s.seed for s in subs],
        "pairwise_jaccard": pj.tolist(),
        "mean_jaccard": sum(off) / len(off) if off else math.nan,
        "min_jaccard": min(off) if off else math.nan,
        "max_jaccard": max(off) if off else math.nan,
        "heads_kept": [int(s.heads.sum()) for s in subs],
        "mlps_kept": [int(s.mlps.sum()) for s in subs],
        "head_frequency": freq_h.tolist(),
        "mlp_frequency": freq_m.tolist(),
        "super_survivor_heads": [head_name(l, h) for l in range(L) for h in range(H) if sup_h[l, h] > 0.5],
        "super_survivor_mlps": [mlp_name(l) for l in range(L) if sup_m[l] > 0.5],
    }


# Fewer values than this give a percentile "interval" that is only their range (two seeds: their min and max), so
# none is computed: the mean is reported with its n and range instead.
MIN_INTERVAL_VALUES = 5


def bootstrap_interval(values: Sequence[float], seed: int, *, resamples: int = 2000,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampled with replacement, ``seed``)."""
    x = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if x.numel() == 0:
        raise SubnetlabError("a bootstrap interval needs at least one value")
    g = torch.Generator().manual_seed(int(seed))
    means = x[torch.randint(0, x.numel(), (resamples, x.numel()), generator=g)].mean(1)
    tail = (1.0 - level) / 2
    return float(torch.quantile(means, tail)), float(torch.quantile(means, 1.0 - tail))


def score_over_circuits(score: Mapping[str, Any]) -> str:
    """A ``mask_stability`` score in words: the mean with its n, and its bootstrap interval where one was computed
    (from ``MIN_INTERVAL_VALUES`` values), else the range, never called an interval."""
    n = score.get("n")
    over = f"{n} {score.get('over', 'seeds')}" if n is not None else score.get("over", "seeds")
    if score.get("bootstrap_95"):
        low, high = score["bootstrap_95"]
        return f"{score['mean']:.3f} (95% bootstrap over {over}: {low:.3f} to {high:.3f})"
    low, high = score.get("range") or (math.nan, math.nan)
    return (f"{score['mean']:.3f} (mean over {over}, range {low:.3f} to {high:.3f}; fewer than "
            f"{MIN_INTERVAL_VALUES} values give no interval)")


def mask_stability(masks: Sequence[Tensor], names: Sequence[str], scores: Sequence[float] | None = None, *,
                   seed: int = 0, resamples: int = 2000) -> dict:
    """Stability of circuits (0/1 masks over the same units, e.g. edges) found with different seeds: how often
    each unit is kept, the pairwise Jaccard of the masks, and a seeded bootstrap interval of the mean of
    ``scores`` (one per mask: faithfulness, CPR or CMD) over the masks, from ``MIN_INTERVAL_VALUES`` scores on (fewer
    give their mean, n and range only)."""
    if not masks:
        raise SubnetlabError("stability needs at least one circuit")
    stacked = torch.stack([(m > 0.5).flatten().float() for m in masks])
    if stacked.shape[1] != len(names):
        raise SubnetlabError(f"stability: {stacked.shape[1]} mask entries but {len(names)} names")
    n = len(masks)
    pj = torch.ones(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1, n):
            pj[i, j] = pj[j, i] = jaccard(stacked[i], stacked[j])
    off = [float(pj[i, j]) for i in range(n) for j in range(i + 1, n)]
    freq = stacked.mean(0)
    out = {
        "circuits": n,
        "kept": [int(k) for k in stacked.sum(1).tolist()],
        "pairwise_jaccard": pj.tolist(),
        "mean_jaccard": sum(off) / len(off) if off else math.nan,
        "min_jaccard": min(off) if off else math.nan,
        "kept_in_every": int((freq >= 1.0).sum()),
        "kept_in_any": int((freq > 0.0).sum()),
        "frequency": {name: float(f) for name, f in zip(names, freq.tolist()) if f > 0.0},
    }
    if scores is not None:
        values = [float(s) for s in scores if s is not None and not math.isnan(float(s))]
        if values:
            out["score"] = {"mean": sum(values) / len(values), "n": len(values), "range": [min(values), max(values)],
                            "over": "seeds"}
            if len(values) >= MIN_INTERVAL_VALUES:
                low, high = bootstrap_interval(values, seed, resamples=resamples)
                out["score"].update({"bootstrap_95": [low, high], "resamples": resamples, "seed": int(seed)})
    return out


def check_resamples(resamples: int, setting: str = "bootstrap") -> None:
    """A bootstrap needs at least one resample (a whole number)."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise SubnetlabError(f"bootstrap resamples {resamples!r}: a whole number of at least 1", setting=setting)
    check_count("bootstrap", resamples)


def resample_indices(count: int, resamples: int, seed: int) -> Tensor:
    """``[resamples, count]`` indices into ``count`` items, drawn with replacement from a generator seeded ``seed``."""
    check_resamples(resamples)
    if count < 1:
        raise SubnetlabError("a bootstrap over the pairs needs at least one pair")
    g = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, count, (resamples, count), generator=g)


def percentile_interval(draws: Sequence[float], level: float = 0.95) -> list[float]:
    """The ``level`` percentile interval of the finite ``draws`` (linear interpolation, numpy's default);
    [NaN, NaN] when none is finite."""
    x = torch.tensor([d for d in draws if math.isfinite(d)], dtype=torch.float64)
    if x.numel() == 0:
        return [math.nan, math.nan]
    tail = (1.0 - level) / 2
    return [float(torch.quantile(x, tail)), float(torch.quantile(x, 1.0 - tail))]


def pair_bootstrap(per_pair: Mapping[str, Tensor], statistic: Callable[[dict[str, Tensor]], Mapping[str, float]], *,
                   resamples: int, seed: int, level: float = 0.95) -> dict:
    """Percentile bootstrap over the pairs (examples) of statistics computed from means over the pairs.

    ``per_pair``: name -> ``[..., pairs]`` values, every entry over the same pairs in the same order;
    ``statistic(means)``, with means name -> ``[...]``, returns named numbers (NaN where undefined, e.g. a
    faithfulness whose full and empty runs agree on the resample). Each resample draws the pairs with replacement
    (``resample_indices``, seeded) and recomputes every statistic from the resampled means; the estimate is the
    statistic of the plain means over all pairs."""
    if not 0.0 < level < 1.0:
        raise SubnetlabError(f"bootstrap level {level!r}: a fraction in (0, 1)", setting="level")
    counts = {v.shape[-1] for v in per_pair.values()}
    if len(counts) != 1:
        raise SubnetlabError(f"a bootstrap over the pairs needs every value over the same pairs, got {sorted(counts)}")
    count = counts.pop()
    index = resample_indices(count, resamples, seed)
    estimate = {k: float(v) for k, v in statistic({k: v.double().mean(-1) for k, v in per_pair.items()}).items()}
    resampled = {k: v.double()[..., index].mean(-1) for k, v in per_pair.items()}  # [..., resamples]
    draws: dict[str, list[float]] = {k: [] for k in estimate}
    for r in range(resamples):
        for k, value in statistic({name: m[..., r] for name, m in resampled.items()}).items():
            draws[k].append(float(value))
    return {"over": "pairs", "pairs": count, "resamples": resamples, "seed": int(seed), "level": level,
            "estimate": estimate, "interval": {k: percentile_interval(d, level) for k, d in draws.items()},
            "undefined": {k: sum(not math.isfinite(x) for x in d) for k, d in draws.items()}}
