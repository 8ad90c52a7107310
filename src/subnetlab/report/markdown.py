"""Markdown reports: tables, figures with captions, numbers formatted one way everywhere.

A report is built section by section and written atomically::

    doc = MarkdownReport("Heuristic Core (demo preset)")
    doc.section("Setup").bullets([f"model: {name}", "seeds: 4"])
    doc.table(["split", "accuracy"], [["id", pct(0.83)]])
    doc.figure("heatmap.png", "Heads near the top-right corner are shared by every subnetwork.")
    doc.write(out / "report.md")

Every number in a report is measured; these helpers only format it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from subnetlab.io import write_text


def pct(value: float | None, digits: int = 1) -> str:
    """A fraction in [0, 1] as a percentage string (``0.833 -> '83.3'``); NaN / None as '-'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{100.0 * value:.{digits}f}"


def delta_pct(value: float, base: float, digits: int = 1) -> str:
    """A change in percentage points with an arrow, as the paper's ablation tables print it."""
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (value, base)):
        return "-"
    d = 100.0 * (value - base)
    arrow = "↑" if d > 0.05 else "↓"
    return f"{arrow}{abs(d):.{digits}f}"


def points(x: float) -> str:
    """A share as points with one decimal, no sign (``0.057`` -> ``'5.7'``): the words around it give the direction
    (``moves``, ``compare``), so a rise never reads as a negative drop."""
    return f"{100 * abs(x):.1f}"


def moves(name: str, delta: float) -> str:
    """A change in words: ``moves("OOD", 0.057)`` -> ``'OOD rises 5.7 points'`` (``delta``: new minus old).

    A change that rounds to 0.0 points is "unchanged"; the sign is never left to the reader.
    """
    if round(100 * abs(delta), 1) == 0:
        return f"{name} is unchanged"
    return f"{name} {'rises' if delta > 0 else 'falls'} {points(delta)} points"


def compare(what: str, a: str, b: str, difference: float) -> str:
    """``difference`` = a's quantity minus b's, in words: ``compare("the fall", "OOD", "ID", 0.04)`` ->
    ``'the fall is 4.0 points larger on OOD than on ID'``."""
    if round(100 * abs(difference), 1) == 0:
        return f"{what} is the same on {a} as on {b}"
    return f"{what} is {points(difference)} points {'larger' if difference > 0 else 'smaller'} on {a} than on {b}"


def num(value: Any, digits: int = 3) -> str:
    """A number in a table: ints as ints, small or large floats in scientific notation."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value != 0 and (abs(value) < 10 ** (-digits) or abs(value) >= 1e6):
            return f"{value:.{max(digits - 1, 1)}e}"
        return f"{value:.{digits}f}"
    return str(value)


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else num(value)
    return text.replace("|", "\\|").replace("\n", " ")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A GitHub-flavoured Markdown table; ``align`` is one letter per column (l, r, c)."""
    headers = list(headers)
    align = align or "l" + "r" * (len(headers) - 1)
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |",
             "|" + "|".join(marks.get(a, "---") for a in align) + "|"]
    for row in rows:
        cells = list(row)
        if len(cells) != len(headers):
            raise ValueError(f"table row has {len(cells)} cells, the header {len(headers)}")
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


class MarkdownReport:
    """An ordered list of Markdown blocks; ``render()`` joins them, ``write()`` saves atomically."""

    def __init__(self, title: str) -> None:
        self.blocks: list[str] = [f"# {title}"]
        self._figures = 0
        self._tables = 0

    def section(self, title: str, level: int = 2) -> "MarkdownReport":
        self.blocks.append("#" * level + " " + title)
        return self

    def para(self, text: str) -> "MarkdownReport":
        self.blocks.append(text.strip())
        return self

    def bullets(self, items: Iterable[str]) -> "MarkdownReport":
        self.blocks.append("\n".join(f"- {item}" for item in items))
        return self

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[Any]], caption: str | None = None,
              align: str | None = None) -> "MarkdownReport":
        """A numbered table; the caption goes above it, as in a paper."""
        self._tables += 1
        block = table(headers, rows, align)
        if caption:
            block = f"**Table {self._tables}.** {caption}\n\n{block}"
        self.blocks.append(block)
        return self

    def figure(self, path: str | os.PathLike, caption: str, base: str | os.PathLike | None = None) -> "MarkdownReport":
        """A numbered figure with a one-line caption saying what to look for.

        ``path`` is written relative to ``base`` (the report's directory) when given.
        """
        self._figures += 1
        p = Path(path)
        rel = os.path.relpath(p, base) if base is not None else p.as_posix()
        self.blocks.append(f"![Figure {self._figures}]({Path(rel).as_posix()})\n\n*Figure {self._figures}.* {caption}")
        return self

    def render(self) -> str:
        return "\n\n".join(self.blocks) + "\n"

    def write(self, path: str | os.PathLike) -> Path:
        write_text(path, self.render())
        return Path(path)
