"""`subnetlab reproduce NAME --preset demo|paper --out DIR` and `subnetlab demo`."""

from __future__ import annotations

from pathlib import Path

import typer

from subnetlab.errors import SubnetlabError


def _parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SubnetlabError(f"--set: expected KEY=VALUE, got {pair!r}")
        overrides[key.replace("-", "_")] = value
    return overrides


def reproduce(
    name: str = typer.Argument(..., help="heuristic-core, subtask-induction, lottery, shape-bias or circuits."),
    preset: str = typer.Option("demo", "--preset", help="demo (a 2-core CPU), paper (the paper's setting), or tour "
                                "(heuristic-core, subtask-induction, lottery: the demo trimmed for `subnetlab demo`)."),
    out: Path = typer.Option(..., "--out", help="Run directory; a rerun resumes."),
    set_: list[str] = typer.Option([], "--set", help="Override one preset setting, KEY=VALUE (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved configuration of every step as JSON; "
                                 "run nothing, write nothing."),
) -> None:
    """Run one paper's study end to end and write DIR/report.md."""
    from subnetlab.experiments import get_reproduction, settings_for

    module = get_reproduction(name)
    settings = settings_for(module, preset, _parse_overrides(set_))
    if dry_run:
        import json

        plan = getattr(module, "plan", None)
        resolved = plan(settings, out) if plan is not None else {
            "reproduction": module.NAME, "preset": preset, "out": str(out), "settings": settings.to_dict(),
            "note": "this reproduction resolves each step's configuration from these settings when it runs"}
        print(json.dumps(resolved, indent=2, default=str))
        return
    report = module.run(settings, out)
    print(f"report: {report}")


def demo(out: Path = typer.Option(Path("runs/demo"), "--out", help="Where the demo runs go.")) -> None:
    """The embedded default: the Heuristic Core, Subtask Induction, lottery-ticket and circuits demos.

    Each study runs its `tour` preset where it has one (the `demo` preset trimmed so that the whole demo fits
    30 minutes on a 2-core CPU), else its `demo` preset. Starts with a few seconds of calibration and says how long the demo
    should take here; shows the time left for the whole demo as it runs; prints each report's path when it is
    written; ends with DIR/findings.md, whose rows name the `reproduce` command that measures what the tour skips,
    and the demo's wall and CPU time. The circuits study keeps one core busy, so it runs in its own process beside
    the others (its output: DIR/circuits.log).
    """
    from subnetlab.experiments.demo.run import run_demo

    run_demo(out)


def register(app: typer.Typer) -> None:
    app.command("reproduce")(reproduce)
    app.command("demo")(demo)
