"""One row of the demo's findings table, the verdict rules, and links to a report's sections.

A study's ``findings.py`` reads its saved results and returns ``Finding`` rows;
every verdict is one of ``SHOWN``, ``SHOWN_WEAKLY``, ``NOT_SHOWN`` or
``NOT_MEASURABLE`` and comes from a rule below, with the reason in words.
Missing results are never an error: ``missing(...)`` gives a "not measurable"
row that names what is absent.

The rules claim no more than the numbers: they use every measured
point (a trend is monotone over every checkpoint, not first against last), a
spread needs at least ``MIN_SEEDS`` seeds, a value the measurement could not
reach (``Reading.capped``) is never counted as a rise, and changes are written
in words ("OOD rises 5.7 points"), never as a signed drop. A claim about a distribution from
one run (``too_few_runs``) and a verdict on unconverged inputs (``unconverged``) are not measurable.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from subnetlab.report.markdown import compare, moves, points

SHOWN = "shown"
SHOWN_WEAKLY = "shown, weakly identified"  # shown, but the subnetworks it rests on have many undecided gates
NOT_SHOWN = "not shown"
NOT_MEASURABLE = "not measurable at this scale"
# the words every search-control row's claim holds (``beats_controls``): the table lists those rows after it
SEARCH_CONTROLS = "beats the same search on random weights and on shuffled"
# A seed spread (a standard deviation) from fewer seeds than this is not a measurement of the spread: with two
# seeds it is half their difference, and any difference "exceeds" it one time in two by chance alone.
MIN_SEEDS = 3


@dataclass(frozen=True)
class Finding:
    """A headline claim of a paper against this run."""

    paper: str
    claim: str
    paper_figure: str
    this_run: str
    verdict: str
    rule: str  # the rule applied, and why the verdict follows (or what is missing)
    link: str  # report path relative to the findings file, with the section's anchor

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Missing(Exception):
    """A result the rule needs is not in the saved files (the run is older, newer or unfinished)."""


def get(data: Any, *path: str | int, what: str = "") -> Any:
    """``data[path[0]][path[1]]...``; raises ``Missing`` naming the path (and ``what`` file) when absent."""
    here = data
    for i, key in enumerate(path):
        try:
            here = here[key]
        except (KeyError, IndexError, TypeError):
            where = "/".join(str(k) for k in path[: i + 1])
            raise Missing(f"no `{where}`" + (f" in {what}" if what else "")) from None
    if here is None:
        raise Missing(f"`{'/'.join(str(k) for k in path)}` is empty" + (f" in {what}" if what else ""))
    return here


def number(data: Any, *path: str | int, what: str = "") -> float:
    value = get(data, *path, what=what)
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise Missing(f"`{'/'.join(str(k) for k in path)}` is not a number ({value!r})") from None
    if math.isnan(out):
        raise Missing(f"`{'/'.join(str(k) for k in path)}` is not a number (NaN)")
    return out


def read_json_or_missing(path: Path) -> Any:
    """A results file, or ``Missing`` naming it (absent or unreadable)."""
    import json

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Missing(f"{path} does not exist") from None
    except (OSError, ValueError) as e:
        raise Missing(f"{path} cannot be read ({e.__class__.__name__})") from None


# -- readings that may be capped ----------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """A measured value, or a bound when the measurement could not reach it.

    ``capped``: how many of ``seeds`` seeds hit the end of the measured range (an effective size where no tested
    sparsity level was faithful); their value is replaced by ``bound`` (the edge of the range) in ``value``, and the
    true value is then strictly above ``value``. A capped reading is never a rise: the range ran out, the
    quantity may not have moved.
    """

    value: float
    capped: int = 0
    seeds: int = 1

    def text(self) -> str:
        if not self.capped:
            return f"{points(self.value)}%"
        note = "" if self.capped == self.seeds else f", {self.capped} of {self.seeds} seeds capped"
        return f"> {points(self.value)}%{note}"


# -- rules ------------------------------------------------------------------------------------

def trend(values: Sequence[float], tolerance: float = 0.0) -> str:
    """The direction of a series over *every* point: ``'rises'``, ``'falls'``, ``'flat'`` or ``'up and down'``.

    Rises: no step between neighbours falls by more than ``tolerance`` and the last value is more than
    ``tolerance`` above the first (falls: the mirror image); flat: every value within ``tolerance`` of every
    other. A series that rises overall but dips in the middle by more than ``tolerance`` is "up and down",
    never "rises": a first-vs-last comparison would hide the dip.
    """
    v = [float(x) for x in values]
    if len(v) < 2 or max(v) - min(v) <= tolerance + 1e-12:
        return "flat"
    steps = [b - a for a, b in zip(v, v[1:])]
    if all(d >= -tolerance - 1e-12 for d in steps) and v[-1] - v[0] > tolerance + 1e-12:
        return "rises"
    if all(d <= tolerance + 1e-12 for d in steps) and v[0] - v[-1] > tolerance + 1e-12:
        return "falls"
    return "up and down"


def beyond_spread(difference: float, spread: float, n: int, margin: float = 0.0) -> tuple[str, str]:
    """A difference (positive: the claimed direction) against the seed spread.

    Shown when it exceeds ``max(spread, margin)``; not measurable with fewer than
    ``MIN_SEEDS`` seeds (no spread worth exceeding); not shown otherwise.
    """
    if n < MIN_SEEDS:
        return NOT_MEASURABLE, f"{n} seed(s), fewer than {MIN_SEEDS}: no seed spread to compare the difference with"
    bar = max(spread, margin)
    word = "ahead" if difference > 0 else "behind"
    if difference > bar:
        return SHOWN, f"{points(difference)} points ahead, more than {points(bar)} (seed spread{' or margin' if margin else ''})"
    return NOT_SHOWN, (f"{points(difference)} points {word}, not ahead by more than {points(bar)} "
                       f"(seed spread{' or margin' if margin else ''})")


def ahead_at_low_n(cells: Mapping[str, tuple[float, float, int]]) -> tuple[str, str]:
    """Per low N, ``(difference, spread, n)``: shown when ahead at every low N and beyond the spread at one or more.

    ``n`` is the smaller seed count of the two sides. No low N, or any low N with
    fewer than ``MIN_SEEDS`` seeds on a side: not measurable.
    """
    if not cells:
        return NOT_MEASURABLE, "no low N in this run"
    thin = [s for s, (_, _, n) in cells.items() if n < MIN_SEEDS]
    if thin:
        return NOT_MEASURABLE, f"fewer than {MIN_SEEDS} seeds at N = {', '.join(thin)}"
    ahead = [s for s, (d, _, _) in cells.items() if d > 0]
    clear = [s for s, (d, sp, _) in cells.items() if d > sp]
    if len(ahead) == len(cells) and clear:
        return SHOWN, f"ahead at every low N, beyond the seed spread at N = {', '.join(clear)}"
    if len(ahead) == len(cells):
        return NOT_SHOWN, "ahead at every low N but within the seed spread"
    behind = [s for s in cells if s not in ahead]
    return NOT_SHOWN, f"not ahead at N = {', '.join(behind)}"


def not_behind(cells: Mapping[str, tuple[float, float, int]], other: str) -> tuple[str, str]:
    """Per N, ``(difference, spread, n)`` with ``difference`` = reference minus ``other``: "at least as good".

    Shown when at no N is ``other`` ahead by more than the seed spread; not shown (a row that goes against the
    paper) when it is at some N, naming the largest lead: "full beats the subnetwork by 30.0 points at N = 100".
    Not measurable without any N or with fewer than ``MIN_SEEDS`` seeds at one.
    """
    if not cells:
        return NOT_MEASURABLE, "no N in common"
    thin = [s for s, (_, _, n) in cells.items() if n < MIN_SEEDS]
    if thin:
        return NOT_MEASURABLE, f"fewer than {MIN_SEEDS} seeds at N = {', '.join(thin)}"
    lost = {s: (d, sp) for s, (d, sp, _) in cells.items() if -d > sp}
    if lost:
        worst = max(lost, key=lambda s: -lost[s][0])
        d, sp = lost[worst]
        rest = f" (also at N = {', '.join(s for s in lost if s != worst)})" if len(lost) > 1 else ""
        return NOT_SHOWN, (f"{other} beats the subnetwork by {points(d)} points at N = {worst}, beyond the seed "
                           f"spread {points(sp)}{rest}")
    behind = [s for s, (d, _, _) in cells.items() if d < 0]
    return SHOWN, ("never behind beyond the seed spread" + (f" (behind within it at N = {', '.join(behind)})"
                                                             if behind else ""))


def beats_controls(real: Sequence[float], controls: Mapping[str, Sequence[float]], *, what: str = "score",
                   scale: float = 1.0, unit: str = "") -> tuple[str, str, str]:
    """A claim that a found mask *computes* something, against the same search on nothing to find (``real``: the
    found masks' score per seed; ``controls``: each search control's, ``methods.controls``).

    Shown only when the real mask beats every control by more than the seed spread (the two sides' standard
    deviations summed, ``methods.controls.control_verdict``); not shown naming the controls it does not beat;
    not measurable without a control or with fewer than ``MIN_SEEDS`` seeds on a side. Returns
    ``(this run's numbers, verdict, rule)``; ``scale`` and ``unit`` write the scores (100 and "%": accuracy)."""
    from subnetlab.methods.controls import control_verdict

    def fmt(x: float) -> str:
        return f"{x * scale:.1f}{unit}" if unit == "%" else f"{x * scale:.2f}{unit}"

    def gap(x: float) -> str:  # a difference of percentages is in points
        return f"{x * scale:.1f} points" if unit == "%" else fmt(x)

    result = control_verdict(real, controls)
    r = result["real"]
    head = ("-" if r["mean"] is None else f"{what}: real {fmt(r['mean'])} (s.d. {fmt(r['sd'])}, {r['n']} seeds)")
    parts = [head]
    for name, c in result["controls"].items():
        if c["mean"] is None:
            parts.append(f"{name}: no score")
            continue
        word = "ahead" if c["gap"] > 0 else "behind"
        parts.append(f"{name} {fmt(c['mean'])} (s.d. {fmt(c['sd'])}, {c['n']} seeds): real {gap(abs(c['gap']))} "
                     f"{word}, spread {gap(c['margin'])}")
    text = "; ".join(parts)
    rule = "shown only if the real mask beats every search control by more than the seed spread (s.d.s summed)"
    if not controls:
        return text, NOT_MEASURABLE, "not measurable: no search control was run; " + rule
    thin = min([r["n"], *(c["n"] for c in result["controls"].values())])
    if thin < MIN_SEEDS:
        return text, NOT_MEASURABLE, f"not measurable: {thin} seed(s) on a side, fewer than {MIN_SEEDS}; " + rule
    lost = [n for n, c in result["controls"].items() if not c["beaten"]]
    if lost:
        return text, NOT_SHOWN, f"not beyond the seed spread of {', '.join(lost)}; " + rule
    return text, SHOWN, "beats " + ", ".join(result["controls"]) + " beyond the seed spread; " + rule


def control_scores(comparison: Mapping[str, Any], what: str) -> tuple[str, list[float], dict[str, list[float]],
                                                                      dict[str, float | None]]:
    """From a sweep's controls comparison (``DIR/metrics.json`` of ``runs.controls``, one target): the target, the
    real masks' scores per seed, each control's, and each kind's mean density (kept fraction)."""
    targets = get(comparison, "targets", what=what)
    if len(targets) != 1:
        raise Missing(f"{len(targets)} targets in {what}, expected one")
    key, entry = next(iter(targets.items()))
    kinds = [k for k in entry if k not in ("score", "verdict", "stability")]
    if "real" not in kinds:
        raise Missing(f"no real runs in {what}")

    def mean(values: Sequence[Any]) -> float | None:
        got = [float(v) for v in values if v is not None]
        return sum(got) / len(got) if got else None

    scores = {k: [float(v) for v in get(entry, k, "score", what=what) if v is not None] for k in kinds}
    return key, scores.pop("real"), scores, {k: mean(entry[k].get("density") or []) for k in kinds}


def too_few_runs(n: int, unit: str = "seed") -> tuple[str, str] | None:
    """A claim about a distribution (over seeds, draws, runs) from fewer than ``MIN_SEEDS`` of them: not
    measurable, whatever the one run shows ("one run: not measurable"); None when there are enough."""
    if n >= MIN_SEEDS:
        return None
    head = "one run" if n == 1 else f"{n} runs"
    return NOT_MEASURABLE, (f"{head}: not measurable ({n} {unit}{'' if n == 1 else 's'}, fewer than {MIN_SEEDS}; "
                            "a claim about a distribution needs its spread)")


def unconverged(flags: Sequence[bool], what: str) -> tuple[str, str] | None:
    """A verdict resting on inputs whose training had not converged (``flags``: one per input, True when
    unconverged or still improving) is not measurable when any input is; None when every one converged."""
    bad = sum(bool(f) for f in flags)
    if not bad:
        return None
    return NOT_MEASURABLE, f"not measurable: {bad} of {len(flags)} {what} unconverged (still improving at the end)"


def identified(verdict: str, why: str, undecided_share: float | None, threshold: float) -> tuple[str, str]:
    """``SHOWN`` stays shown only when the share of undecided gates is within ``threshold`` (the share above which
    ``runs.health`` calls a subnetwork undecided); otherwise (or when the share was not saved) it becomes
    ``SHOWN_WEAKLY``: the subnetworks it rests on are weakly identified."""
    if verdict != SHOWN:
        return verdict, why
    if undecided_share is None:
        return SHOWN_WEAKLY, why + "; weakly identified: no undecided-gate share saved to check"
    if undecided_share <= threshold:
        return SHOWN, why + (f"; gates decided: {points(undecided_share)}% undecided at most, within "
                             f"{points(threshold)}%")
    return SHOWN_WEAKLY, why + (f"; weakly identified: up to {points(undecided_share)}% of gates undecided at the "
                                f"end of pruning, above {points(threshold)}%")


def in_band(value: float, low: float, high: float) -> tuple[str, str]:
    if low <= value <= high:
        return SHOWN, f"{value:.2f} lies in [{low:g}, {high:g}]"
    return NOT_SHOWN, f"{value:.2f} lies outside [{low:g}, {high:g}]"


def sd(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


# -- links ------------------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(markdown: str) -> list[tuple[str, str]]:
    """``(heading text, anchor)`` in order; repeated anchors get ``-1``, ``-2``... as on GitHub."""
    seen: dict[str, int] = {}
    out = []
    fence = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.append((m.group(2), base if count == 0 else f"{base}-{count}"))
    return out


def section_link(report: Path, heading: str, relative_to: Path, after: str | None = None) -> str:
    """``REPORT#anchor`` of the first ``heading`` (after the heading ``after`` when given), relative to
    ``relative_to``; the bare report path when the report or the heading is missing."""
    rel = Path(os.path.relpath(report, relative_to)).as_posix()
    try:
        found = headings(Path(report).read_text(encoding="utf-8"))
    except OSError:
        return rel
    start = 0
    if after is not None:
        start = next((i + 1 for i, (h, _) in enumerate(found) if h == after), 0)
    for h, anchor in found[start:]:
        if h == heading:
            return f"{rel}#{anchor}"
    return rel


def missing(paper: str, claim: str, paper_figure: str, link: str, reason: str) -> Finding:
    """The row of a claim whose results are absent."""
    return Finding(paper, claim, paper_figure, "-", NOT_MEASURABLE, f"not measurable: {reason}", link)


__all__ = ["Finding", "MIN_SEEDS", "Missing", "NOT_MEASURABLE", "NOT_SHOWN", "Reading", "SEARCH_CONTROLS", "SHOWN",
           "SHOWN_WEAKLY",
           "ahead_at_low_n", "beats_controls", "beyond_spread", "control_scores", "compare", "get", "headings", "identified", "in_band", "missing", "moves",
           "not_behind", "number", "points", "read_json_or_missing", "section_link", "sd", "slug", "too_few_runs", "trend", "unconverged"]
