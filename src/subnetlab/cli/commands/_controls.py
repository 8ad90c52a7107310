"""The command line's side of search controls (``methods.controls``, ``runs.controls``): ``--control`` read the
same way by every searching command, and the sweep's comparison written to ``DIR/metrics.json`` and printed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer

CONTROL_HELP = ("Also run the same search, budget and seeds as a control (repeatable or a comma list): "
                "random-weights (the architecture re-initialised by its own initialiser, seeded by the run's seed) "
                "or shuffled-labels (answers permuted within the task, seeded); each under DIR/controls/<control>/, "
                "compared with the found masks in DIR/metrics.json.")


def parse_controls(values: Sequence[str]) -> tuple[str, ...]:
    """``--control a --control b`` or ``--control a,b``: each control once, an unknown one refused."""
    from subnetlab.methods.controls import check_controls

    return check_controls([v.strip() for value in values for v in value.split(",")])  # '' and a,a refused


def report_sweep(out: Path, results: Sequence[Any], command: str, *, controls: Sequence[str], measure: Callable,
                 score_name: str, masks: Callable | None = None) -> dict[str, Any]:
    """Compare the sweep's runs (controls, stability over seeds; ``runs.controls.write_comparison``) and print
    the comparison when there is one."""
    from subnetlab.runs.controls import format_comparison, write_comparison

    comparison = write_comparison(out, results, command, controls=controls, measure=measure, score_name=score_name,
                                  masks=masks)
    if controls or any("stability" in entry for entry in comparison.values()):
        typer.echo(format_comparison(comparison), nl=False)
    write_stability_report(out, comparison, f"{command}: stability of the masks found over seeds")
    return comparison


def write_stability_report(out: Path, targets: dict[str, Any], title: str) -> None:
    """``out/stability.md`` (``report.stability``) when any target has a stability entry."""
    from subnetlab.io import write_text
    from subnetlab.report.stability import stability_report

    if any(isinstance(e, dict) and "stability" in e for e in targets.values()):
        write_text(out / "stability.md", stability_report(targets, title))
        typer.echo(f"written: {out / 'stability.md'}")


def show_comparison(comparison: dict[str, Any], heading: Callable[[str], str], where: Path) -> None:
    """Print a command's comparison with its controls (``runs.controls.format_comparison``) and where it is."""
    from subnetlab.runs.controls import format_comparison

    typer.echo(format_comparison(comparison, heading), nl=False)
    typer.echo(f"controls compared in {where}")
