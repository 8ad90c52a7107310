"""When a learned gate or mask counts as *decided*: the one pair of bounds every method counts with.

A gate (hard-concrete head/MLP gate, continuous-sparsification weight mask,
an edge mask) is decided when the probability that it keeps its unit is at
most ``UNDECIDED[0]`` or at least ``UNDECIDED[1]``; in between, the binary
subnetwork taken from it rests on small score differences (top-k) or on where a
threshold falls, and another seed could choose differently. The methods count
undecided gates with these bounds and report the raw count; ``subnetlab.runs.health``
judges the share against its threshold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: the CLI's help reads UNDECIDED (through runs.health) without loading torch
    from torch import Tensor

UNDECIDED = (0.05, 0.95)  # strictly between: undecided (the Heuristic Core report's 0.05 < P(open) < 0.95)


def count_undecided(probabilities: Tensor, bounds: tuple[float, float] = UNDECIDED) -> int:
    """How many of ``probabilities`` (each a gate's probability of keeping its unit) lie strictly inside ``bounds``."""
    low, high = bounds
    p = probabilities.detach()
    return int(((p > low) & (p < high)).sum())


__all__ = ["UNDECIDED", "count_undecided"]
