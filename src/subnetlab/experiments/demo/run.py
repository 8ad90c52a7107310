"""``subnetlab demo``: calibrate, say how long it will take, run each demo under one progress board,
print each report's path as soon as it exists, and end with the findings table.

    run_demo(Path("runs/demo"))

Writes ``OUT/<study>/`` (each reproduction's run directory and ``report.md``),
``OUT/findings.md`` (and ``findings.json``) and ``OUT/demo-timings.json``: the
calibrated rates, each stage's work, predicted and measured seconds, and the
wall time of the whole demo, so a slow machine or a slow stage is visible.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from subnetlab.experiments.demo.estimate import STAGE_BUILDERS, Plan, Stage, minutes
from subnetlab.io import write_json
from subnetlab.progress import Board, Status, listen, stage

DEMOS = ("heuristic-core", "subtask-induction", "lottery", "circuits")
# each study's preset in ``subnetlab demo``: its ``tour`` preset where it has one (the ``demo`` preset trimmed to its
# share of the demo's time), else ``demo``
TOUR = "tour"


def demo_preset(module: ModuleType) -> str:
    """The preset ``subnetlab demo`` runs a study with."""
    return TOUR if TOUR in module.PRESETS else "demo"

RATE_WORDS = {
    "hc_job_gate_step": ("a pruning step", 1.0, "s"),
    "hc_train_row": ("a fine-tuning row", 1000.0, "ms"),
    "hc_eval_row": ("an evaluated row", 1000.0, "ms"),
    "gpt2_mask_row": ("a weight-mask row", 1000.0, "ms"),
    "gpt2_train_row": ("a transfer row", 1000.0, "ms"),
    "tiny_prune_step": ("an edge-pruning step", 1000.0, "ms"),
    "lottery_train_row": ("a lottery fine-tuning row", 1000.0, "ms"),
}


def _real_hans() -> bool:
    from subnetlab.tasks.registry import shared_data_dir

    try:
        return (shared_data_dir() / "hans" / "hans_subset_val.tsv").is_file()
    except Exception:  # no shared data directory configured: the demo runs without the real file
        return False


def plan_stages(settings: Mapping[str, Mapping[str, Any]], out: Path, cores: int | None = None) -> list[Stage]:
    """Every stage of every demo still to run (a demo whose ``metrics.json`` exists only re-renders its report)."""
    stages: list[Stage] = []
    for name, s in settings.items():
        if (Path(out) / name / "metrics.json").is_file() or name not in STAGE_BUILDERS:
            continue
        if name == "heuristic-core":
            stages += STAGE_BUILDERS[name](s, _real_hans(), cores=cores)
        else:
            stages += STAGE_BUILDERS[name](s, cores=cores)
    return stages


def describe_rates(rates: Mapping[str, float]) -> str:
    return ", ".join(f"{words} {rates[k] * scale:.2f} {unit}" for k, (words, scale, unit) in RATE_WORDS.items()
                     if k in rates)


class Tracker:
    """The plan, the demo running now, and the ``Status`` a board shows."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.demo: str | None = None
        self.board: Board | None = None

    def status(self) -> Status:
        current = self.plan.current()
        label = f"{current.demo}: {current.label}" if current is not None else (
            f"{self.demo}: done" if self.demo else "starting")
        return Status(label, self.plan.done_fraction(), self.plan.remaining())

    def on_line(self, message: str) -> None:
        if self.demo is not None and self.plan.on_line(self.demo, message) and self.board is not None:
            self.board.update()

    def begin(self, name: str) -> None:
        self.demo = name
        first = next((s for s in self.plan.stages if s.demo == name), None)
        if first is not None:
            self.plan.start(Plan.key(first))
        if self.board is not None:
            self.board.update()

    def end(self, name: str) -> None:
        self.plan.finish_demo(name)
        if self.board is not None:
            self.board.update()


def run_demo(
    out: Path,
    demos: Sequence[str] = DEMOS,
    *,
    get_reproduction: Callable[[str], ModuleType] | None = None,
    calibrate: Callable[[Mapping[str, Mapping[str, Any]]], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    echo: Callable[[str], None] = print,
    interactive: bool | None = None,
    cores: int | None = None,
) -> dict[str, Any]:
    """Run ``demos`` into ``out``; returns the report paths, the findings path and the timing record.

    ``get_reproduction`` and ``calibrate`` default to the real ones (tests pass fakes).
    """
    from subnetlab.experiments import get_reproduction as real_get, settings_for
    from subnetlab.experiments.demo.findings import print_table, write_findings

    get = get_reproduction or real_get
    if calibrate is None:
        from subnetlab.experiments.demo.calibrate import calibrate as real_calibrate

        calibrate = real_calibrate
    out = Path(out)
    started = clock()
    modules = {name: get(name) for name in demos}
    settings = {name: settings_for(module, demo_preset(module)).to_dict() for name, module in modules.items()}
    stages = plan_stages(settings, out, cores or os.cpu_count())
    stage("calibrating: timing a few steps of each demo's real work on this machine")
    cal = calibrate({name: settings[name] for name in {s.demo for s in stages}})
    plan = Plan(stages, cal.rates, clock=clock)
    bounds = f"; counted at the most the settings allow: {'; '.join(plan.bounds())}" if plan.bounds() else ""
    echo(f"The demo should take {minutes(plan.total())} on this machine "
         f"({len(stages)} stages; calibrated in {cal.seconds:.0f} s: {describe_rates(cal.rates)}{bounds}).")
    tracker = Tracker(plan)
    reports: dict[str, str] = {}
    record: dict[str, Any] = {"calibration": {"rates": cal.rates, "seconds": round(cal.seconds, 1),
                                              "details": getattr(cal, "details", {})},
                              "predicted_seconds": round(plan.total(), 1)}
    if demos:
        tracker.begin(demos[0])  # the board's first line names the first stage
    with Board("demo", tracker.status, interactive=interactive) as board, listen(tracker.on_line):
        tracker.board = board
        for name in demos:
            tracker.begin(name)
            report = modules[name].run(settings[name], out / name)
            tracker.end(name)
            reports[name] = str(report)
            board.print(f"{name} report: {report}")
    record.update(stages=plan.table(), wall_seconds=round(clock() - started, 1), reports=reports)
    write_json(out / "demo-timings.json", record)
    path, rows = write_findings(out, demos)
    if echo is print:
        print_table(rows, interactive=board.interactive)
    else:
        from subnetlab.experiments.demo.findings import render_plain

        echo(render_plain(rows))
    echo(f"findings: {path}")
    return {"reports": reports, "findings": str(path), "timings": record}


__all__ = ["DEMOS", "TOUR", "Tracker", "demo_preset", "describe_rates", "plan_stages", "run_demo"]
