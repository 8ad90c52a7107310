"""Effective size: the smallest subnetwork faithful to the model (Bhaskar et al., 2024, section 4).

A subnetwork is *faithful* to the model on data D when their accuracies on D
differ by at most a threshold (3 points in the paper). The model's effective
size on D is the size of the smallest faithful subnetwork: prune to every
sparsity level on a 5% grid, average accuracy over seeds at each level, and
take the highest level that is faithful. Size is reported as the fraction of
components kept (``1 - sparsity``).

D is the in-domain set, the out-of-domain set (mean over its subcases), or the
equally weighted mix of the two. Under the Competing Subnetworks hypothesis the
OOD effective size should *fall* when the model starts to generalize; the paper
finds it *rises*.

This module holds the pure functions (no models); ``effective_size`` in
``subnetlab.experiments.heuristic_core`` produces their inputs by pruning.

Searching the levels cheaply (``StopRule``, ``warm_start_index``): the answer is
the highest faithful level, so a staircase that climbs the levels can stop once
accuracy has left the threshold for good. "For good" is an assumption: the
rule stops after ``consecutive`` (2) unfaithful levels in a row, which misses
the answer only if a higher level is faithful again (``comes_back`` measures
how often that happens on a full curve). Over training, a checkpoint's search
can start a couple of levels below the previous checkpoint's answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from subnetlab.analysis.scores import mean_of, ood_columns, score_columns
from subnetlab.errors import SubnetlabError

On = Literal["id", "ood", "mixed"]
ON_CHOICES: tuple[str, ...] = ("id", "ood", "mixed")


def level_grid(start: float = 0.05, stop: float = 0.70, step: float = 0.05) -> list[float]:
    """Sparsity levels ``start, start + step, ..., stop`` (inclusive), rounded to 4 decimals."""
    if not (0.0 < start <= stop < 1.0 and step > 0.0):
        raise SubnetlabError(f"sparsity levels {start}:{stop}:{step} must satisfy 0 < start <= stop < 1, step > 0")
    n = int(round((stop - start) / step)) + 1
    return [round(start + i * step, 4) for i in range(n)]


def data_accuracy(id_accuracy: float, ood_accuracy: float, on: str) -> float:
    """Accuracy on the chosen evaluation data: ID, OOD, or their equally weighted mix."""
    if on == "id":
        return id_accuracy
    if on == "ood":
        return ood_accuracy
    if on == "mixed":
        return 0.5 * (id_accuracy + ood_accuracy)
    raise SubnetlabError(f"on: {on!r} is not one of {', '.join(ON_CHOICES)}", setting="on")


@dataclass(frozen=True)
class EffectiveSize:
    """The answer at one checkpoint: the highest faithful sparsity and the size it implies."""

    sparsity: float  # 0.0 when no level is faithful (only the full model is)
    size: float  # 1 - sparsity: fraction of components kept
    model_accuracy: float
    mean_accuracy: dict[float, float]  # level -> accuracy averaged over seeds
    faithful: list[float]  # levels whose mean accuracy is within the threshold

    def to_dict(self) -> dict:
        return {"sparsity": self.sparsity, "size": self.size, "model_accuracy": self.model_accuracy,
                "mean_accuracy": {f"{k:.4f}": v for k, v in self.mean_accuracy.items()},
                "faithful_levels": self.faithful}


SIDES: tuple[str, ...] = ("two", "one")
AGGREGATES: tuple[str, ...] = ("seed-mean", "per-seed")


def effective_size(
    accuracies: Mapping[float, Sequence[float]],
    model_accuracy: float,
    faithfulness: float = 0.03,
    sides: str = "two",
) -> EffectiveSize:
    """Highest sparsity level whose seed-mean accuracy is within ``faithfulness`` of the model's.

    ``accuracies`` maps each sparsity level to the accuracies of its seeds (on the
    chosen data). ``sides="two"``: as the paper's text reads ("within 3%"), a
    subnetwork far *better* than the model on D does not approximate it either;
    ``sides="one"``: as the authors' plotting script
    (``scripts/visualization/mnli-effective-size.py``: ``pruned > orig - margin``),
    any subnetwork no more than ``faithfulness`` *worse* counts. Levels need not be
    contiguous; the paper picks the highest faithful one.
    """
    if faithfulness < 0:
        raise SubnetlabError(f"faithfulness {faithfulness} must be non-negative", setting="faithfulness")
    if not accuracies:
        raise SubnetlabError("effective size needs accuracies at one sparsity level at least")
    means: dict[float, float] = {}
    for level, accs in sorted(accuracies.items()):
        values = [float(a) for a in accs if a is not None and not math.isnan(float(a))]
        if not values:
            raise SubnetlabError(f"no accuracy measured at sparsity {level}")
        means[float(level)] = sum(values) / len(values)
    faithful = [lvl for lvl, acc in means.items() if is_faithful(acc, model_accuracy, faithfulness, sides)]
    best = max(faithful, default=0.0)
    return EffectiveSize(best, round(1.0 - best, 6), model_accuracy, means, faithful)


def per_seed_effective_size(
    accuracies: Mapping[float, Sequence[float]],
    model_accuracy: float,
    faithfulness: float = 0.03,
    sides: str = "two",
) -> dict:
    """Each seed's own effective size (its highest faithful level), and their mean: the authors' plotting script
    computes one size per seed and plots the mean over seeds, where ``effective_size`` thresholds the seed-mean
    accuracy. ``accuracies[level][i]`` is seed ``i``'s accuracy; every level must list the same seeds."""
    counts = {len(v) for v in accuracies.values()}
    if len(counts) != 1:
        raise SubnetlabError(f"per-seed effective size needs every level measured for the same seeds (got {sorted(counts)})")
    n = counts.pop()
    sparsities = [effective_size({lvl: [accs[i]] for lvl, accs in accuracies.items()}, model_accuracy, faithfulness,
                                 sides).sparsity for i in range(n)]  # each seed on its own: a mean of one
    sizes = [round(1.0 - s, 6) for s in sparsities]
    return {"sizes": sizes, "sparsities": sparsities, "mean_size": sum(sizes) / n}


def size_bound(entry: Mapping, levels: Sequence[float]) -> tuple[float, int, int]:
    """``(value, capped, seeds)`` of one saved effective size (an ``EffectiveSize.to_dict()``, with ``per_seed``
    when aggregated per seed), telling a measured size from a capped one.

    A seed with no faithful level has size 1.0 ("only the full model is faithful"), but all the measurement says
    is that every subnetwork tested, the largest keeping ``1 - min(levels)``, was unfaithful: its size is above
    ``1 - min(levels)``, not 100%. ``value`` replaces each such seed's 1.0 with that bound (so the true value is
    strictly above ``value`` whenever ``capped`` > 0); ``capped`` counts them among ``seeds``.
    """
    top = 1.0 - min(float(x) for x in levels)
    per = entry.get("per_seed")
    if isinstance(per, Mapping) and per.get("sparsities"):
        sparsities = [float(x) for x in per["sparsities"]]
        capped = [s <= 0.0 for s in sparsities]
        sizes = [top if c else 1.0 - s for c, s in zip(capped, sparsities)]
        return sum(sizes) / len(sizes), sum(capped), len(sizes)
    sparsity = float(entry.get("level_sparsity", entry.get("sparsity", 1.0 - float(entry["size"]))))
    if sparsity <= 0.0:
        return top, 1, 1
    return float(entry["size"]), 0, 1


def is_faithful(accuracy: float, model_accuracy: float, faithfulness: float, sides: str = "two") -> bool:
    """Within ``faithfulness`` of the model's accuracy: either side (``two``), or no more than that below (``one``)."""
    gap = float(accuracy) - float(model_accuracy)
    if sides == "two":
        return abs(gap) <= faithfulness + 1e-12
    if sides == "one":
        return gap >= -faithfulness - 1e-12
    raise SubnetlabError(f"faithfulness sides {sides!r}: expected one of {', '.join(SIDES)}", setting="sides")


def id_ood_accuracy(scores: Mapping[str, Mapping], id_splits: Sequence[str],
                    subcases: Sequence[str] | None = None) -> tuple[float, float]:
    """``(in-domain, out-of-domain)`` accuracy of one evaluation: mean of the ID splits, mean of the OOD columns."""
    cols = score_columns(scores, id_splits, subcases)
    return mean_of(cols, list(id_splits)), mean_of(cols, ood_columns(cols, id_splits))


def settled(climbed: Sequence[float], model_accuracy: float, faithfulness: float = 0.03, consecutive: int = 2) -> bool:
    """True once ``consecutive`` levels in a row of ``climbed`` are unfaithful.

    ``climbed``: the seed-mean accuracy at each level reached so far, in the
    order the staircase climbs them. Once this holds, the highest faithful level
    among those already measured is the effective size, unless accuracy comes
    back within the threshold higher up, which the early stop assumes it does not.
    """
    if consecutive < 1:
        raise SubnetlabError(f"consecutive {consecutive} must be at least 1", setting="consecutive")
    run = 0
    for acc in climbed:
        run = 0 if is_faithful(acc, model_accuracy, faithfulness) else run + 1
        if run >= consecutive:
            return True
    return False


@dataclass(frozen=True)
class StopRule:
    """When a staircase over sparsity levels may stop: every chosen data has settled (``settled``).

    ``on`` names the data whose effective sizes are wanted (``id``, ``ood``,
    ``mixed``); the staircase stops only when the last of them has had
    ``consecutive`` unfaithful levels in a row, so each one's answer is among
    the levels measured. ``consecutive=0`` never stops (the whole staircase).
    """

    faithfulness: float = 0.03
    on: tuple[str, ...] = ("ood",)
    consecutive: int = 2

    def __post_init__(self) -> None:
        if not 0.0 <= self.faithfulness < 1.0:
            raise SubnetlabError(f"faithfulness {self.faithfulness} is outside [0, 1)", setting="faithfulness")
        object.__setattr__(self, "on", tuple(self.on))
        bad = [c for c in self.on if c not in ON_CHOICES]
        if bad or not self.on:
            raise SubnetlabError(f"on {list(self.on)}: expected some of {', '.join(ON_CHOICES)}", setting="on")
        if isinstance(self.consecutive, bool) or not isinstance(self.consecutive, int) or self.consecutive < 0:
            raise SubnetlabError(f"consecutive {self.consecutive!r} must be a whole number >= 0 (0: never stop)",
                                 setting="consecutive")

    def should_stop(self, climbed: Sequence[tuple[float, float]], model: tuple[float, float]) -> bool:
        """``climbed``: seed-mean ``(id, ood)`` accuracy per level reached, climbing; ``model``: the full model's."""
        if self.consecutive == 0:
            return False
        return all(settled([data_accuracy(i, o, c) for i, o in climbed], data_accuracy(*model, c), self.faithfulness,
                           self.consecutive) for c in self.on)

    def unfaithful_on(self, accuracy: tuple[float, float], model: tuple[float, float]) -> list[str]:
        """The chosen data on which a level with seed-mean ``(id, ood)`` ``accuracy`` is not faithful."""
        return [c for c in self.on
                if not is_faithful(data_accuracy(*accuracy, c), data_accuracy(*model, c), self.faithfulness)]


def warm_start_index(levels: Sequence[float], previous: float, below: int = 2) -> int:
    """Where a checkpoint's staircase starts: ``below`` levels under the previous checkpoint's answer.

    ``previous`` is that answer's sparsity (0.0: no level was faithful, so start
    at the bottom). The index is into ``levels`` (increasing); a ``previous``
    between grid points counts as the grid point under it.
    """
    if below < 0:
        raise SubnetlabError(f"below {below} must be >= 0", setting="below")
    at = max((i for i, lvl in enumerate(levels) if lvl <= previous + 1e-9), default=None)
    return 0 if at is None else max(0, at - below)


def comes_back(mean_accuracy: Mapping[float, float], model_accuracy: float, faithfulness: float = 0.03,
               consecutive: int = 2) -> dict:
    """Does accuracy return within the threshold after ``consecutive`` unfaithful levels in a row?

    On a curve measured at every level: the first level at which the early stop
    would fire, the levels above it that are faithful again (empty: the stop
    loses nothing on this curve), and the effective size with and without the stop.
    """
    levels = sorted(mean_accuracy)
    run, stop_at = 0, None
    for lvl in levels:
        run = 0 if is_faithful(mean_accuracy[lvl], model_accuracy, faithfulness) else run + 1
        if run >= consecutive:
            stop_at = lvl
            break
    later = [lvl for lvl in levels if stop_at is not None and lvl > stop_at
             and is_faithful(mean_accuracy[lvl], model_accuracy, faithfulness)]
    reached = {lvl: [acc] for lvl, acc in mean_accuracy.items() if stop_at is None or lvl <= stop_at}
    return {"stops_after": stop_at, "faithful_again": later,
            "sparsity_with_stop": effective_size(reached, model_accuracy, faithfulness).sparsity,
            "sparsity_without_stop": effective_size({k: [v] for k, v in mean_accuracy.items()}, model_accuracy,
                                                    faithfulness).sparsity}


def generalization_onset(ood_accuracy: Sequence[float], fraction: float = 0.2, min_rise: float = 0.02) -> int | None:
    """Index of the checkpoint just before OOD accuracy starts to rise, or None if it never does.

    The rise is measured from the lowest OOD accuracy reached before the peak; it
    *starts* at the first checkpoint after that low point that has covered
    ``fraction`` of the total rise. A total rise under ``min_rise`` counts as none.
    """
    acc = [float(a) for a in ood_accuracy]
    if len(acc) < 2:
        return None
    peak = max(range(len(acc)), key=lambda i: (acc[i], -i))
    low = min(range(peak + 1), key=lambda i: (acc[i], -i))  # the last minimum before the peak
    total = acc[peak] - acc[low]
    if total < min_rise:
        return None
    for i in range(low + 1, peak + 1):
        if acc[i] - acc[low] >= fraction * total:
            return i - 1
    return None  # unreachable: the peak itself covers the whole rise


def compare_heads(before: Sequence[str], core: Sequence[str], chance: float | None = None) -> dict:
    """How the heads kept before generalization relate to the final core.

    ``chance`` is the fraction of heads a random subnetwork (or intersection)
    of the same size would keep; the expected number of core heads found by
    chance is then ``len(core) * chance``.
    """
    b, c = set(before), set(core)
    return {
        "core": sorted(c, key=_head_key), "before": sorted(b, key=_head_key),
        "core_in_before": sorted(c & b, key=_head_key), "core_missing_before": sorted(c - b, key=_head_key),
        "fraction_of_core_present": (len(c & b) / len(c)) if c else float("nan"),
        "expected_by_chance": len(c) * chance if chance is not None else None,
    }


def _head_key(name: str) -> tuple[int, int]:
    layer, _, head = name.partition(".")
    try:
        return int(layer.lstrip("L")), int(head.lstrip("H")) if head.startswith("H") else 10**6
    except ValueError:
        return 10**6, 10**6
