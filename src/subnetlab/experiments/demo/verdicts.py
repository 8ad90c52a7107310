"""One row of the demo's findings table, the verdict rules, and links to a report's sections.

A study's ``findings.py`` reads its saved results and returns ``Finding`` rows;
every verdict is one of ``SHOWN``, ``NOT_SHOWN`` or ``NOT_MEASURABLE`` and comes
from a rule below, with the reason in words. Missing results are never an
error: ``missing(...)`` gives a "not measurable" row that names what is absent.
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

SHOWN = "shown"
NOT_SHOWN = "not shown"
NOT_MEASURABLE = "not measurable at this scale"


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


# -- rules ------------------------------------------------------------------------------------

def beyond_spread(difference: float, spread: float, n: int, margin: float = 0.0) -> tuple[str, str]:
    """A difference (positive: the claimed direction) against the seed spread.

    Shown when it exceeds ``max(spread, margin)``; not measurable with fewer than two
    seeds (no spread to exceed); not shown otherwise.
    """
    if n < 2:
        return NOT_MEASURABLE, f"{n} seed(s): no seed spread to compare the difference with"
    bar = max(spread, margin)
    if difference > bar:
        return SHOWN, f"difference {difference:+.2f} exceeds {bar:.2f} (seed spread{' or margin' if margin else ''})"
    return NOT_SHOWN, f"difference {difference:+.2f} does not exceed {bar:.2f} (seed spread{' or margin' if margin else ''})"


def ahead_at_low_n(cells: Mapping[str, tuple[float, float, int]]) -> tuple[str, str]:
    """Per low N, ``(difference, spread, n)``: shown when ahead at every low N and beyond the spread at one or more.

    ``n`` is the smaller seed count of the two sides. No low N, or any low N with
    fewer than two seeds on a side: not measurable.
    """
    if not cells:
        return NOT_MEASURABLE, "no low N in this run"
    thin = [s for s, (_, _, n) in cells.items() if n < 2]
    if thin:
        return NOT_MEASURABLE, f"fewer than two seeds at N = {', '.join(thin)}"
    ahead = [s for s, (d, _, _) in cells.items() if d > 0]
    clear = [s for s, (d, sp, _) in cells.items() if d > sp]
    if len(ahead) == len(cells) and clear:
        return SHOWN, f"ahead at every low N, beyond the seed spread at N = {', '.join(clear)}"
    if len(ahead) == len(cells):
        return NOT_SHOWN, "ahead at every low N but within the seed spread"
    behind = [s for s in cells if s not in ahead]
    return NOT_SHOWN, f"not ahead at N = {', '.join(behind)}"


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


__all__ = ["Finding", "Missing", "NOT_MEASURABLE", "NOT_SHOWN", "SHOWN", "ahead_at_low_n", "beyond_spread", "get",
           "headings", "in_band", "missing", "number", "read_json_or_missing", "section_link", "sd", "slug"]
