"""``subnetlab results DIR``: every run under DIR as one table (CSV + Parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # pandas loads only when the command runs, not for every `subnetlab` call
    import pandas as pd

MAX_ROWS = 15
MAX_COLUMNS = 7


HEALTH = "health"  # the column naming each run's problems (subnetlab.runs.health), from metrics.health.problems
HEALTH_PROBLEMS = "metrics.health.problems"


def with_health(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a ``health`` column after ``run_dir``: ``ok``, the problems (``off-target,undecided``), or
    empty for a run that records no health (written before it was judged, or not a subnetwork)."""
    import json

    if HEALTH_PROBLEMS not in frame.columns:
        return frame

    def text(value: object) -> str:
        if not isinstance(value, str):
            return ""
        problems = json.loads(value)
        return ",".join(problems) if problems else "ok"

    frame = frame.copy()
    frame.insert(1, HEALTH, frame[HEALTH_PROBLEMS].map(text))
    return frame


def _summary_columns(frame: pd.DataFrame) -> list[str]:
    """The columns worth a glance: health, config values that vary across runs (the grid), then metrics."""
    first = ["run_dir"] + ([HEALTH, "metrics.health.undecided_share"] if HEALTH in frame.columns else [])
    varying = [c for c in frame.columns if c.startswith("config.") and frame[c].astype(str).nunique() > 1]
    metrics = [c for c in frame.columns if c.startswith("metrics.") and not c.startswith("metrics.health.")]
    return first + (varying + metrics)[: MAX_COLUMNS - len(first)]


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if value != value else f"{value:.4g}"
    return "" if value is None else str(value)


def print_summary(frame: pd.DataFrame, written: tuple[Path, Path]) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = _summary_columns(frame)
    rows = [[_cell(row[c]) for c in columns] for _, row in frame.head(MAX_ROWS).iterrows()]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    console = Console()
    if not console.is_terminal:  # piped or logged: as wide as the table, never wrapped mid-name
        console = Console(width=max(80, sum(w + 3 for w in widths) + 1))
    table = Table(title=f"{len(frame)} runs, {frame.shape[1]} columns", title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if len(frame) > MAX_ROWS:
        console.print(f"... and {len(frame) - MAX_ROWS} more runs")
    console.print(f"wrote {written[0]} and {written[1]}")


def register(app: typer.Typer) -> None:
    @app.command("results")
    def results(
        directory: Path = typer.Argument(
            ..., metavar="DIR", help="Directory holding run directories (searched recursively)."
        ),
        out: Path = typer.Option(None, "--out", help="File stem for STEM.csv and STEM.parquet [default: DIR/results]."),
    ) -> None:
        """Collect every run's config.json and metrics.json under DIR into one table (CSV and Parquet); the
        health column names each run's problems (degenerate, undecided, off-target, unconverged) or says ok."""
        from subnetlab.executor.results import collect_results, write_results

        frame = with_health(collect_results(directory))
        written = write_results(frame, out if out is not None else directory / "results")
        print_summary(frame, written)
