"""Is a found subnetwork a result? The one place that judges it (issue 26).

The methods report raw numbers about what they found (how many units the
subnetwork keeps out of how many could be masked, how many gates were still
undecided at the end, the expected sparsity beside the target, the objective
over training); ``judge`` turns them into a ``Health`` with a flag per problem:

* **degenerate**: keeps nothing, or everything that can be masked. Such a
  "subnetwork" says nothing about which units compute the task (an empty mask
  transferred is the from-scratch model again).
* **undecided**: more than ``MAX_UNDECIDED_SHARE`` of the gates are still
  strictly between the bounds of ``methods.decided.UNDECIDED`` at the end: the
  binary subnetwork rests on small score differences and another seed may pick
  another one.
* **off target**: the expected sparsity at the end misses the target by more
  than ``TARGET_TOLERANCE``: a top-k selection then forced the target onto gates
  that training never moved (so its sparsity reads as the target regardless).
* **unconverged**: the objective was still falling over the last
  ``CONVERGENCE_STRETCH`` of training by more than ``MAX_FINAL_FALL``.

A number a method does not have is ``None`` and its check is skipped (a
magnitude-pruned subnetwork has no gates; a continuous-sparsification run no
target). Structured (heads/MLPs), weight-level and edge-level subnetworks pass
the same numbers (their units: components, weights, edges). Every run writes
``Health.to_dict()`` as the ``health`` entry of its ``metrics.json``; the CLI
prints ``messages()`` as ``warning:`` lines, or refuses when told to be strict
(``subnetlab.cli.commands._health``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from subnetlab.methods.decided import UNDECIDED

# The thresholds are choices (no paper states one), kept here so every command, report and verdict uses the same.
# More than this share of gates undecided at the end: "undecided" (one gate in ten left to small score
# differences; the demo's Table 2 had 85% undecided at 50%, issue 26).
MAX_UNDECIDED_SHARE = 0.10
# |expected sparsity - target| above this (a difference of sparsities, in [0, 1]): "off target" (issue 26's BERT
# run after 40 steps: 0.047 against 0.5).
TARGET_TOLERANCE = 0.05
# The last stretch of training looked at for convergence, as a share of the recorded objective values...
CONVERGENCE_STRETCH = 0.2
# ... with at least this many values (fewer: not judged, the stretch's halves would be single noisy values) ...
MIN_STRETCH_POINTS = 4
# ... and the largest relative fall allowed between the means of its first and second halves: "unconverged".
MAX_FINAL_FALL = 0.05
# An objective (KL or cross-entropy, in nats) whose stretch's first half averages below this has nothing left to
# lose: not judged (a KL of 1e-7 against the full model is float noise, and its relative changes are noise too).
OBJECTIVE_FLOOR = 1e-3

PROBLEMS = ("degenerate", "undecided", "off-target", "unconverged")


@dataclass(frozen=True)
class Health:
    """The raw numbers of one subnetwork and the problems ``judge`` found in them (``problems`` ⊆ ``PROBLEMS``)."""

    kept: int | None = None  # units the subnetwork keeps
    maskable: int | None = None  # units that could have been masked
    undecided: int | None = None  # gates still undecided at the end
    gates: int | None = None  # gates in all (the denominator of the undecided share)
    expected_sparsity: float | None = None  # the gates' expected sparsity at the end of training
    target_sparsity: float | None = None
    objective_fall: float | None = None  # relative fall over the last stretch (``final_fall``)
    problems: tuple[str, ...] = ()
    undecided_advice: str | None = None  # what to raise when gates stay undecided, in the run's own settings

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def empty(self) -> bool:
        """Keeps nothing (the degenerate case a transfer must not train on)."""
        return self.kept == 0 and bool(self.maskable)

    @property
    def undecided_share(self) -> float | None:
        return self.undecided / self.gates if self.undecided is not None and self.gates else None

    def messages(self) -> list[str]:
        """One sentence per problem, with its numbers and the threshold it broke."""
        out = []
        if "degenerate" in self.problems:
            if self.kept == 0:
                out.append(f"degenerate: keeps nothing (0 of {self.maskable} maskable units)")
            else:
                out.append(f"degenerate: keeps everything ({self.kept} of {self.maskable} maskable units)")
        if "undecided" in self.problems:
            out.append(f"undecided: {self.undecided} of {self.gates} gates ({self.undecided_share:.0%}) still between "
                       f"{UNDECIDED[0]:g} and {UNDECIDED[1]:g} at the end (more than {MAX_UNDECIDED_SHARE:.0%}); "
                       + (f"raise {self.undecided_advice}" if self.undecided_advice
                          else "another seed may select other units"))
        if "off-target" in self.problems:
            out.append(f"off target: expected sparsity {self.expected_sparsity:.3f} at the end against the target "
                       f"{self.target_sparsity:.3f} (tolerance {TARGET_TOLERANCE:g}); the selection forced the target on "
                       "gates training had not moved there")
        if "unconverged" in self.problems:
            out.append(f"unconverged: the objective still fell {self.objective_fall:.1%} over the last "
                       f"{CONVERGENCE_STRETCH:.0%} of training (more than {MAX_FINAL_FALL:.0%}); train longer")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``health`` entry of ``metrics.json``: the numbers, the problems, their sentences and the thresholds."""
        return {"kept": self.kept, "maskable": self.maskable, "undecided": self.undecided, "gates": self.gates,
                "undecided_share": self.undecided_share, "expected_sparsity": self.expected_sparsity,
                "target_sparsity": self.target_sparsity, "objective_fall": self.objective_fall,
                "problems": list(self.problems), "messages": self.messages(), "thresholds": thresholds(),
                **({"undecided_advice": self.undecided_advice} if self.undecided_advice else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Health:
        """Read a ``health`` entry back (the problems as written: a report shows what the run was judged)."""
        fields = ("kept", "maskable", "undecided", "gates", "expected_sparsity", "target_sparsity", "objective_fall")
        return cls(**{k: data.get(k) for k in fields}, problems=tuple(data.get("problems") or ()),
                   undecided_advice=data.get("undecided_advice"))


def thresholds() -> dict[str, Any]:
    return {"undecided_bounds": list(UNDECIDED), "max_undecided_share": MAX_UNDECIDED_SHARE,
            "target_tolerance": TARGET_TOLERANCE, "convergence_stretch": CONVERGENCE_STRETCH,
            "max_final_fall": MAX_FINAL_FALL, "objective_floor": OBJECTIVE_FLOOR}


def final_fall(objective: Sequence[float]) -> float | None:
    """Relative fall of ``objective`` (values over training, in order) across its last ``CONVERGENCE_STRETCH``.

    The stretch's first and second halves are averaged (per-step values are noisy) and the fall is
    ``(first - second) / |first|``: positive while still falling. ``None`` when the stretch has fewer than
    ``MIN_STRETCH_POINTS`` finite values or its first half averages less than ``OBJECTIVE_FLOOR`` in size."""
    values = [float(v) for v in objective if v is not None and math.isfinite(float(v))]
    n = max(MIN_STRETCH_POINTS, math.ceil(CONVERGENCE_STRETCH * len(values)))
    if len(values) < n:
        return None
    stretch = values[-n:]
    first, second = statistics.fmean(stretch[: n // 2]), statistics.fmean(stretch[n // 2 :])
    if abs(first) < OBJECTIVE_FLOOR:
        return None
    return (first - second) / abs(first)


def judge(*, kept: int | None = None, maskable: int | None = None, undecided: int | None = None,
          gates: int | None = None, expected_sparsity: float | None = None, target_sparsity: float | None = None,
          objective: Sequence[float] | None = None, undecided_advice: str | None = None) -> Health:
    """The ``Health`` of a subnetwork from what its method reported (each check needs its own numbers).
    ``undecided_advice``: the settings to raise, with their values, named in the undecided message."""
    fall = final_fall(objective) if objective is not None else None
    problems = []
    if kept is not None and maskable:
        if kept <= 0 or kept >= maskable:
            problems.append("degenerate")
    if undecided is not None and gates:
        if undecided / gates > MAX_UNDECIDED_SHARE:
            problems.append("undecided")
    if expected_sparsity is not None and target_sparsity is not None:
        if abs(expected_sparsity - target_sparsity) > TARGET_TOLERANCE:
            problems.append("off-target")
    if fall is not None and fall > MAX_FINAL_FALL:
        problems.append("unconverged")
    return Health(kept, maskable, undecided, gates, expected_sparsity, target_sparsity, fall, tuple(problems),
                  undecided_advice)


def read_health(metrics: Mapping[str, Any]) -> Health | None:
    """The ``health`` entry of a run's metrics, or ``None`` for a run written before health was recorded."""
    data = metrics.get("health")
    return Health.from_dict(data) if isinstance(data, Mapping) else None


__all__ = ["CONVERGENCE_STRETCH", "Health", "MAX_FINAL_FALL", "MAX_UNDECIDED_SHARE", "MIN_STRETCH_POINTS", "OBJECTIVE_FLOOR",
           "PROBLEMS", "TARGET_TOLERANCE", "UNDECIDED", "final_fall", "judge", "read_health",
           "thresholds"]
