"""``subnetlab results DIR``: every number every run under DIR measured, as one long table (CSV + Parquet).

Its columns are ``executor.results.LONG_COLUMNS`` (documented there and in docs/results.md), then each run's raw
``config.*`` and ``metrics.*`` columns."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # pandas loads only when the command runs, not for every `subnetlab` call
    import pandas as pd

MAX_RUNS = 40


def _cell(value: object) -> str:
    import pandas as pd

    if value is None or (not isinstance(value, str) and bool(pd.isna(value))):  # NaN, pandas' NA
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_summary(frame: pd.DataFrame, written: tuple[Path, Path]) -> None:
    """One row per run (``executor.results.run_summary``): what it is and its headline numbers; every number
    is in the files written."""
    from rich.console import Console
    from rich.table import Table

    from subnetlab.executor.results import run_summary

    summary = run_summary(frame) if len(frame) else frame
    columns = [c for c in summary.columns if c == "run_dir" or summary[c].notna().any()]
    rows = [[_cell(row[c]) for c in columns] for _, row in summary.head(MAX_RUNS).iterrows()]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    console = Console()
    if not console.is_terminal:  # piped or logged: as wide as the table, never wrapped mid-name
        console = Console(width=max(80, sum(w + 3 for w in widths) + 1))
    runs = frame["run_dir"].nunique()
    table = Table(title=f"{runs} runs, {len(frame)} measurements, {frame.shape[1]} columns (one row per run)",
                  title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if runs > MAX_RUNS:
        console.print(f"... and {runs - MAX_RUNS} more runs")
    console.print(f"wrote every measurement to {written[0]} and {written[1]}", soft_wrap=True)  # paths whole


STABILITY = ("mean_jaccard", "min_jaccard", "mean_jaccard_across_steps", "mean_jaccard_across_seeds", "kept_in_every",
             "kept_in_any", "score.bootstrap_95", "bootstrap.estimate.cpr", "bootstrap.interval.cpr",
             "bootstrap.estimate.cmd", "bootstrap.interval.cmd")


def stability_rows(frame: pd.DataFrame) -> list[tuple[str, str, str]]:
    """``(run_dir, quantity, value)`` of the stability summaries (circuits over seeds or step counts) and the
    bootstrap intervals (over seeds, or CPR / CMD over the pairs) in the long table; an interval as low..high."""
    metrics = frame["metric"].astype(str)
    chosen = frame[metrics.map(lambda m: any(m == q or m.endswith("." + q) for q in STABILITY))]
    rows = []
    for (run, metric), group in chosen.groupby(["run_dir", "metric"], sort=False):
        values = [_cell(float(v)) for v in group["value"]]
        rows.append((str(run), str(metric), values[0] if len(values) == 1 else "..".join(values)))
    return rows


def print_stability(frame: pd.DataFrame) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = stability_rows(frame)
    if not rows:
        return
    table = Table(title="stability across seeds / step counts, bootstrap intervals", title_justify="left")
    for column in ("run_dir", "quantity", "value"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(width=max(80, max(sum(len(c) + 3 for c in r) for r in rows) + 1)).print(table)


def register(app: typer.Typer) -> None:
    @app.command("results")
    def results(
        directory: Path = typer.Argument(
            ..., metavar="DIR", help="Directory holding run directories (searched recursively)."
        ),
        out: Path = typer.Option(None, "--out", help="File stem for STEM.csv and STEM.parquet [default: DIR/results]."),
    ) -> None:
        """Collect every run's config.json and metrics.json under DIR into one long table (CSV and Parquet): one
        row per number measured, with the columns run_dir, command, model, task, seed, sparsity, split, metric,
        value, position, metric_path, health, then each run's raw config.* and metrics.* columns."""
        from subnetlab.executor.results import results_table, write_results
        from subnetlab.run_directory import check_output_file

        stem = out if out is not None else directory / "results"
        bare = stem.with_suffix("") if stem.suffix in (".csv", ".parquet") else stem  # as write_results reads it
        for suffix in (".csv", ".parquet"):  # both files checked before the runs are read
            check_output_file(bare.with_name(bare.name + suffix), "out")
        frame = results_table(directory)
        written = write_results(frame, stem)
        print_summary(frame, written)
        print_stability(frame)
