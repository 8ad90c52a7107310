"""The demo's closing table: one row per headline claim of each paper, from each study's ``findings.py``.

    write_findings(Path("runs/demo"), ["heuristic-core", "subtask-induction", "lottery", "circuits"])  # -> findings.md

Each study's rows come from its own module (``experiments/<study>/findings.py``),
which reads that study's saved results in ``OUT/<study>``; a study whose run is
missing or unreadable gives "not measurable" rows, never an error.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from subnetlab.experiments.demo.verdicts import NOT_MEASURABLE, NOT_SHOWN, SEARCH_CONTROLS, SHOWN, SHOWN_WEAKLY, Finding
from subnetlab.io import write_json, write_text

MODULES = {
    "heuristic-core": "subnetlab.experiments.heuristic_core.findings",
    "subtask-induction": "subnetlab.experiments.subtask_induction.findings",
    "circuits": "subnetlab.experiments.circuits.findings",
    "lottery": "subnetlab.experiments.lottery.findings",
}
VERDICT_MARK = {SHOWN: "**shown**", SHOWN_WEAKLY: "**shown**, weakly identified", NOT_SHOWN: "not shown",
                NOT_MEASURABLE: "not measurable at this scale"}


def collect(out: Path, demos: Sequence[str]) -> list[Finding]:
    """Every study's findings rows, in the order of ``demos``; links relative to ``out``."""
    rows: list[Finding] = []
    for name in demos:
        if name not in MODULES:
            continue
        module = importlib.import_module(MODULES[name])
        rows += module.findings(Path(out) / name, Path(out))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(rows: Sequence[Finding]) -> str:
    """The findings table in Markdown, with a line per rule after it."""
    lines = ["# Findings of the demo", "",
             "One row per headline claim of each paper: the paper's figure, this run's figure with its seed spread, "
             "and a verdict decided by the rule in the last column (written in `experiments/<study>/findings.py`). "
             "Each claim links to the section of the study's report it comes from. The demo runs small models on "
             "small data, so \"not shown\" means not shown *at this scale*. Every rule uses every measured point (a "
             "trend over every checkpoint, every N, every sparsity), needs at least three seeds for a spread, and "
             "never counts a capped value (\"> X%\": no tested level was faithful, the size is above what the grid "
             "measures) as a rise; \"weakly "
             "identified\" marks a result resting on subnetworks whose gates were largely undecided at the end.", "",
             "| paper | claim | paper's figure | this run | verdict | rule |", "|:--|:--|:--|:--|:--|:--|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(c) for c in (
            r.paper, f"[{r.claim}]({r.link})", r.paper_figure, r.this_run, VERDICT_MARK.get(r.verdict, r.verdict),
            r.rule)) + " |")
    controls = [r for r in rows if SEARCH_CONTROLS in r.claim]
    lines += ["", "Search controls (the same search on a re-initialised model and on shuffled answers; a claim that a "
                  "found mask computes something is shown only when it beats both beyond the seed spread): "
              + ("; ".join(f"{r.paper}: {VERDICT_MARK.get(r.verdict, r.verdict)} ({r.this_run})" for r in controls)
                 if controls else "none in this run") + "."]
    counts = {v: sum(r.verdict == v for r in rows) for v in VERDICT_MARK}
    weak = f" ({counts[SHOWN_WEAKLY]} of them weakly identified)" if counts[SHOWN_WEAKLY] else ""
    lines += ["", f"{counts[SHOWN] + counts[SHOWN_WEAKLY]} shown{weak}, {counts[NOT_SHOWN]} not shown, "
                  f"{counts[NOT_MEASURABLE]} not measurable at this scale, of {len(rows)} claims."]
    return "\n".join(lines) + "\n"


def render_plain(rows: Sequence[Finding]) -> str:
    """The table as text: one block per claim (Markdown tables this wide wrap badly)."""
    out = []
    for r in rows:
        out.append(f"[{r.verdict.upper()}] {r.paper}: {r.claim}\n    paper: {r.paper_figure}\n"
                   f"    this run: {r.this_run}\n    rule: {r.rule}\n    see: {r.link}")
    return "\n".join(out)


def print_table(rows: Sequence[Finding], interactive: bool) -> None:
    """On a terminal a Rich table that wraps its cells; otherwise the text blocks of ``render_plain``."""
    if not interactive:
        print(render_plain(rows), flush=True)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Findings of the demo", show_lines=True)
    for name, ratio in (("paper", 1), ("claim", 3), ("paper's figure", 3), ("this run", 4), ("verdict", 1),
                        ("see", 2)):
        table.add_column(name, ratio=ratio, overflow="fold")
    style = {SHOWN: "bold green", SHOWN_WEAKLY: "green", NOT_SHOWN: "red", NOT_MEASURABLE: "yellow"}
    for r in rows:
        table.add_row(r.paper, r.claim, r.paper_figure, r.this_run, f"[{style.get(r.verdict, '')}]{r.verdict}[/]",
                      r.link)
    Console().print(table)


def write_findings(out: Path, demos: Sequence[str]) -> tuple[Path, list[Finding]]:
    """``OUT/findings.md`` and ``OUT/findings.json``; returns the Markdown path and the rows."""
    out = Path(out)
    rows = collect(out, demos)
    write_text(out / "findings.md", render(rows))
    write_json(out / "findings.json", [r.to_dict() for r in rows])
    return out / "findings.md", rows


__all__ = ["MODULES", "collect", "print_table", "render", "render_plain", "write_findings"]
