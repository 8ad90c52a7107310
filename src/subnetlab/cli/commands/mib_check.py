"""`subnetlab mib-check DIR`: is DIR a well-formed MIB circuit-track submission (one line per task/model folder)?"""

from __future__ import annotations

from pathlib import Path

import typer


def mib_check(
    root: Path = typer.Argument(..., help="The submission folder: one <task>_<model> folder each holding one "
                                "importance file or nine binary circuits (.json or .pt, EAP-IG's graph files)."),
    any_names: bool = typer.Option(False, "--any-names", help="Accept task and model names other than MIB's, and "
                                   "fewer than two tasks or models (folders of your own models)."),
) -> None:
    """Check a MIB circuit-track submission folder as the leaderboard expects it; a malformed file is refused with
    one error line naming the file and field."""
    from subnetlab.models.mib_submission import check

    for row in check(root, mib_names=not any_names):
        detail = (f"importances ({row['edges']} edges scored)" if row["kind"] == "importances"
                  else f"{len(row['files'])} circuits keeping {', '.join(map(str, row['kept']))} of {row['edges']} edges")
        typer.echo(f"{row['folder']}: {detail}")
    typer.echo(f"{root}: a well-formed MIB submission")


def register(app: typer.Typer) -> None:
    app.command("mib-check")(mib_check)
