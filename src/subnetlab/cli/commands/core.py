"""`subnetlab core --runs DIR_A DIR_B --out DIR`: the heads every pruned subnetwork shares."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def core(
    runs: list[Path] = typer.Option(..., "--runs", help="Pruning run directories: DIR_A DIR_B (one per sparsity), or one DIR holding both."),
    more: Optional[list[Path]] = typer.Argument(None, metavar="DIR", hidden=True),  # DIR_B after --runs DIR_A
    out: Path = typer.Option(..., "--out", help="Where config.json, metrics.json, report.md and the figures go."),
) -> None:
    """Head frequencies over seeds at two sparsities, the Figure 5 heatmap, the core,
    Spearman's rho and the expected overlap of random subnetworks."""
    from subnetlab.experiments.heuristic_core.steps import core_step
    from subnetlab.report.markdown import num
    from subnetlab.run_directory import absolute_input

    metrics = core_step([Path(absolute_input(r)) for r in (*runs, *(more or []))], out)  # the same from any directory
    la, lb = metrics["labels"]
    print(f"{metrics['n_a']} subnetworks at {la}, {metrics['n_b']} at {lb}")
    print(f"core ({metrics['core_size']} heads): {', '.join(metrics['core']) or 'none'}")
    print(f"Spearman's rho {num(metrics['spearman_rho'], 3)} (p = {num(metrics['spearman_p'])}); "
          f"random subnetworks would share {num(metrics['expected_random_intersection'])} heads")
    from subnetlab.runs.prune_summary import format_health

    for label, counts in (metrics.get("health") or {}).items():
        if counts.get("judged"):
            print(f"health of the runs at {label}: {format_health(counts)}")
    print(f"report: {out / 'report.md'}")
    from subnetlab.cli.commands._health import refuse_if_strict

    flagged = {label: c for label, c in (metrics.get("health") or {}).items() if c.get("problems")}
    if flagged:  # the core rests on these runs: one line (each run's own warnings came with its prune command)
        refuse_if_strict("the core rests on pruned runs with health problems: " + "; ".join(
            f"at {label}, {format_health(c, share=False)}" for label, c in flagged.items()))


def register(app: typer.Typer) -> None:
    app.command("core")(core)
