"""Is a found subnetwork a result? The one place that judges it.

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
  that training never moved (so its sparsity reads as the target regardless); a
  threshold selection (Edge Pruning's ``selection="threshold"``) forces nothing and
  keeps what the gates decided, so its circuit misses the target too.
* **unconverged**: the objective was still falling over the last
  ``CONVERGENCE_STRETCH`` of training by more than ``MAX_FINAL_FALL``. A run
  trained with plateau stopping (``optim.Plateau``) is judged by its stopping
  record instead (``stopping_verdict``): stopped at a plateau of its held-out
  value, converged; reached its cap while that value still improved,
  unconverged. The data decide, not a fixed epoch count.
* **degenerate baseline** (circuits): faithfulness ``f = (m(C) - m(empty)) /
  (m(full) - m(empty))`` divides by the gap between the full model and the
  empty circuit. When that gap is small against how much the metric varies
  over the pairs (its effect size below ``MIN_BASELINE_EFFECT``), or the empty
  circuit scores beyond the full model in the metric's direction, every ``f``
  is noise or upside down (a CPR above 1, f values below 0), whatever the circuit.
* **at chance** (pruning's full model): the unpruned model's accuracy on its first labelled split is within
  ``MAX_CHANCE_Z`` binomial standard errors of guessing one of its labels uniformly: a subnetwork of a model
  that never learned the task says nothing about how the task is computed.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.methods.decided import UNDECIDED

# The thresholds are choices (no paper states one), kept here so every command, report and verdict uses the same.
# More than this share of gates undecided at the end: "undecided" (one gate in ten left to small score
# differences; a demo's Table 2 once had 85% undecided at 50%).
MAX_UNDECIDED_SHARE = 0.10
# |expected sparsity - target| above this (a difference of sparsities, in [0, 1]): "off target" (a BERT run
# stopped after 40 steps: 0.047 against 0.5).
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

# |m(full) - m(empty)| over the pooled standard deviation of the metric over the pairs (the full model's values and
# the empty circuit's, Cohen's d) below this: "degenerate baseline" (0.2 is Cohen's "small" effect; the tutorial's
# untrained GPT-2 has a gap of 0.001 in logit difference).
MIN_BASELINE_EFFECT = 0.2

# The full model's accuracy less chance (1 / labels), in binomial standard errors at chance, below this: "at
# chance" (two standard errors: a model at chance passes one time in forty; 40 rows of 3 labels: below 0.48).
MAX_CHANCE_Z = 2.0

THRESHOLD = "threshold"  # a selection that keeps the gates' own decisions (Edge Pruning's authors' final circuit)

PROBLEMS = ("degenerate", "undecided", "off-target", "unconverged", "degenerate-baseline", "at-chance")


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
    baseline: Mapping[str, Any] | None = None  # a circuit's m(full) and m(empty) (``analysis.faithfulness.baseline``)
    undecided_advice: str | None = None  # what to raise when gates stay undecided, in the run's own settings
    chance: Mapping[str, Any] | None = None  # a full model's accuracy against chance (``chance_level``)
    selection: str | None = None  # how the binary subnetwork was taken from the gates (``THRESHOLD``: forces nothing)
    stopping: Mapping[str, Any] | None = None  # how training ended (``optim.stopping_record``), when recorded

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
            head = (f"off target: expected sparsity {self.expected_sparsity:.3f} at the end against the target "
                    f"{self.target_sparsity:.3f} (tolerance {TARGET_TOLERANCE:g}); ")
            if self.selection == THRESHOLD:
                out.append(head + "the threshold selection forces no target (it keeps the gates as training left "
                           "them), so the circuit is off the target as well; train longer")
            else:
                out.append(head + "the selection forced the target on gates training had not moved there")
        if "unconverged" in self.problems and stopping_verdict(self.stopping) is False:
            s = self.stopping or {}
            out.append(f"unconverged: {s.get('monitor', 'the held-out value')} still improved by more than "
                       f"{s.get('min_delta')} within the last {s.get('patience')} evaluations when the cap of "
                       f"{s.get('cap')} epochs was reached; raise the cap")
        elif "unconverged" in self.problems:
            out.append(f"unconverged: the objective still fell {self.objective_fall:.1%} over the last "
                       f"{CONVERGENCE_STRETCH:.0%} of training (more than {MAX_FINAL_FALL:.0%}); train longer")
        if "degenerate-baseline" in self.problems and self.baseline is not None:
            out.append(baseline_message(self.baseline))
        if "at-chance" in self.problems and self.chance is not None:
            c = self.chance
            out.append(f"at chance: the full model's accuracy on {c['split']} is {c['accuracy']:.3f} over {c['n']} rows, "
                       f"within {MAX_CHANCE_Z:g} standard errors of guessing one of its {c['labels']} labels "
                       f"({c['chance']:.3f}); a subnetwork of a model that never learned the task says nothing about "
                       "how it is computed (is the model fine-tuned on this task?)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``health`` entry of ``metrics.json``: the numbers, the problems, their sentences and the thresholds."""
        return {"kept": self.kept, "maskable": self.maskable, "undecided": self.undecided, "gates": self.gates,
                "undecided_share": self.undecided_share, "expected_sparsity": self.expected_sparsity,
                "target_sparsity": self.target_sparsity, "objective_fall": self.objective_fall,
                "problems": list(self.problems), "messages": self.messages(), "thresholds": thresholds(),
                **({"baseline": dict(self.baseline)} if self.baseline is not None else {}),
                **({"undecided_advice": self.undecided_advice} if self.undecided_advice else {}),
                **({"chance": dict(self.chance)} if self.chance is not None else {}),
                **({"selection": self.selection} if self.selection else {}),
                **({"stopping": dict(self.stopping)} if self.stopping is not None else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Health:
        """Read a ``health`` entry back (the problems as written: a report shows what the run was judged)."""
        fields = ("kept", "maskable", "undecided", "gates", "expected_sparsity", "target_sparsity", "objective_fall")
        baseline, chance = data.get("baseline"), data.get("chance")
        return cls(**{k: data.get(k) for k in fields}, problems=tuple(data.get("problems") or ()),
                   baseline=baseline if isinstance(baseline, Mapping) else None,
                   undecided_advice=data.get("undecided_advice"),
                   chance=chance if isinstance(chance, Mapping) else None, selection=data.get("selection"),
                   stopping=data.get("stopping") if isinstance(data.get("stopping"), Mapping) else None)


def thresholds() -> dict[str, Any]:
    return {"undecided_bounds": list(UNDECIDED), "max_undecided_share": MAX_UNDECIDED_SHARE,
            "target_tolerance": TARGET_TOLERANCE, "convergence_stretch": CONVERGENCE_STRETCH,
            "max_final_fall": MAX_FINAL_FALL, "objective_floor": OBJECTIVE_FLOOR,
            "min_baseline_effect": MIN_BASELINE_EFFECT, "max_chance_z": MAX_CHANCE_Z}


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


def stopping_verdict(stopping: Mapping[str, Any] | None) -> bool | None:
    """Converged by its stopping record: True when a plateau-stopped run stopped at its plateau, False when it
    reached its cap (its held-out value still improved within the patience); None for fixed epochs or no record
    (the objective's fall, or the best epoch's place in training, judges those)."""
    if not isinstance(stopping, Mapping) or stopping.get("rule") != "plateau":
        return None
    return str(stopping.get("reason", "")).startswith("plateau")


def judge(*, kept: int | None = None, maskable: int | None = None, undecided: int | None = None,
          gates: int | None = None, expected_sparsity: float | None = None, target_sparsity: float | None = None,
          objective: Sequence[float] | None = None, baseline: Mapping[str, Any] | None = None,
          undecided_advice: str | None = None, chance: Mapping[str, Any] | None = None,
          selection: str | None = None, stopping: Mapping[str, Any] | None = None) -> Health:
    """The ``Health`` of a subnetwork from what its method reported (each check needs its own numbers);
    ``baseline``: a circuit's full-model and empty-circuit metric (``analysis.faithfulness.baseline``);
    ``undecided_advice``: the settings to raise, with their values, named in the undecided message;
    ``chance``: a full model's accuracy against chance (``chance_level``); ``selection``: how the subnetwork was
    taken from the gates (``THRESHOLD`` forces no target: the off-target message says so); ``stopping``: how
    training ended (``optim.stopping_record``): under plateau stopping it decides "unconverged"
    (``stopping_verdict``), the objective's fall is still recorded."""
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
    converged = stopping_verdict(stopping)
    if converged is False or (converged is None and fall is not None and fall > MAX_FINAL_FALL):
        problems.append("unconverged")
    if baseline is not None and baseline_degenerate(baseline):
        problems.append("degenerate-baseline")
    if chance is not None and chance["z"] < MAX_CHANCE_Z:
        problems.append("at-chance")
    return Health(kept, maskable, undecided, gates, expected_sparsity, target_sparsity, fall, tuple(problems),
                  None if baseline is None else dict(baseline), undecided_advice,
                  None if chance is None else dict(chance), selection,
                  None if stopping is None else dict(stopping))


def chance_level(scores: Mapping[str, Any]) -> dict[str, Any] | None:
    """A full model's accuracy against chance on the first split of ``scores`` (``methods.evaluate``'s
    ``{split: {"accuracy", "n", "labels": {label: accuracy}}}``) with two labels or more: ``{split, accuracy, n,
    labels, chance (1 / labels), z}``, z the accuracy's distance above chance in binomial standard errors at
    chance. ``None`` where no split has labels (a language-model task: its chance is not 1 / anything)."""
    for split, entry in scores.items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("labels"), Mapping):
            continue
        labels, n, accuracy = len(entry["labels"]), entry.get("n"), entry.get("accuracy")
        if labels < 2 or not isinstance(n, int) or n < 1 or not isinstance(accuracy, (int, float)):
            continue
        chance = 1.0 / labels
        z = (float(accuracy) - chance) / math.sqrt(chance * (1 - chance) / n)
        return {"split": str(split), "accuracy": float(accuracy), "n": n, "labels": labels, "chance": chance, "z": z}
    return None


def baseline_degenerate(baseline: Mapping[str, Any]) -> bool:
    """The empty circuit scores beyond the full model in the metric's direction, or the gap between them is small
    against the metric's spread over the pairs (effect size below ``MIN_BASELINE_EFFECT``)."""
    if baseline.get("inverted"):
        return True
    effect = baseline.get("effect")
    return effect is not None and effect < MIN_BASELINE_EFFECT


def baseline_message(b: Mapping[str, Any]) -> str:
    """``degenerate baseline: ...`` with the two values, the gap against the spread, and what it means for f."""
    metric, full, empty = b["metric"], b["full"], b["empty"]
    head = f"degenerate baseline: {metric} of the full model {full:.4g}, of the empty circuit {empty:.4g}"
    effect = b.get("effect")
    if b.get("inverted") and not (effect is not None and effect < MIN_BASELINE_EFFECT):  # a tiny gap: its sign is noise
        better = "above" if b.get("higher_is_better", True) else "below"
        return (f"{head}; the empty circuit scores {better} the full model, so f is upside down (circuits nearer "
                "the full model get lower f); check the corrupted prompts or the model")
    spread = b.get("spread")
    return (f"{head}: a gap of {abs(full - empty):.3g} against a spread of {spread:.3g} over {b.get('pairs')} pairs "
            f"(effect {effect:.3g}, below {MIN_BASELINE_EFFECT:g}); f divides by this gap, so it is mostly noise "
            "(is the model trained on the task, and does the corruption change its answer?)")


class HealthWarning(UserWarning):
    """A health problem reported to a Python caller (``warnings``): the text of the command's ``warning:`` line."""


def health_problems(entries: Iterable[tuple[str, Health | None]]) -> list[str]:
    """``WHAT: PROBLEM`` for every problem of every entry (runs without a health entry have none)."""
    return [f"{what}: {message}" for what, health in entries if health is not None for message in health.messages()]


def report_health(entries: Iterable[tuple[str, Health | None]], *, strict: bool,
                  emit: Callable[[str], Any]) -> list[str]:
    """Every problem of ``entries`` handed to ``emit`` (the command prints ``warning: LINE``, the Python API
    warns with ``HealthWarning``); with ``strict`` nothing is emitted and the first problem is refused (naming
    how many more there are). Returns the problems."""
    found = health_problems(entries)
    if found and strict:
        more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
        raise SubnetlabError(f"{found[0]}{more}; refused under strict health checks", setting="strict")
    for line in found:
        emit(line)
    return found


def refuse_or_warn(message: str, *, strict: bool, emit: Callable[[str], Any]) -> None:
    """A problem that is not one subnetwork's (a sweep with no healthy run): emitted, or refused under ``strict``."""
    if strict:
        raise SubnetlabError(f"{message}; refused under strict health checks", setting="strict")
    emit(message)


def read_health(metrics: Mapping[str, Any]) -> Health | None:
    """The ``health`` entry of a run's metrics, or ``None`` for a run written before health was recorded."""
    data = metrics.get("health")
    return Health.from_dict(data) if isinstance(data, Mapping) else None


__all__ = ["CONVERGENCE_STRETCH", "Health", "HealthWarning", "MAX_FINAL_FALL", "MAX_UNDECIDED_SHARE",
           "MAX_CHANCE_Z", "MIN_BASELINE_EFFECT", "MIN_STRETCH_POINTS", "OBJECTIVE_FLOOR", "PROBLEMS", "TARGET_TOLERANCE",
           "THRESHOLD", "UNDECIDED",
           "baseline_degenerate", "baseline_message", "chance_level", "final_fall", "health_problems", "judge", "read_health",
           "refuse_or_warn", "report_health", "stopping_verdict", "thresholds"]
