"""``subnetlab demo``: calibrate, say how long it will take, run each demo under one progress board,
print each report's path as soon as it exists, and end with the findings table.

    run_demo(Path("runs/demo"))

The one-thread circuits study runs in a child process beside the others (``beside``: it uses the core time they
leave idle; its output goes to ``OUT/circuits.log``). Writes ``OUT/<study>/`` (each reproduction's run directory
and ``report.md``), ``OUT/findings.md`` (and ``findings.json``) and ``OUT/demo-timings.json``: the calibrated
rates, each stage's predicted and measured seconds and CPU seconds, the studies run beside, and the wall and CPU
time of the whole demo, so a slow machine or a slow stage is visible.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.demo import beside as side
from subnetlab.experiments.demo.estimate import STAGE_BUILDERS, Plan, Stage, minutes
from subnetlab.io import write_json
from subnetlab.progress import Board, listen, stage

DEMOS = ("heuristic-core", "subtask-induction", "lottery", "circuits")
# each study's preset in ``subnetlab demo``: its ``tour`` preset where it has one (the ``demo`` preset trimmed to its
# share of the demo's time), else ``demo``
TOUR = "tour"


def demo_preset(module: ModuleType) -> str:
    """The preset ``subnetlab demo`` runs a study with."""
    return TOUR if TOUR in module.PRESETS else "demo"


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
    cpu_clock: Callable[[], float] | None = None,
    beside: Sequence[str] = side.BESIDE,
    launch: Callable[[str, str, Path, Path], side.Child] = side.launch,
) -> dict[str, Any]:
    """Run ``demos`` into ``out``; returns the report paths, the findings path and the timing record.

    The unfinished ``demos`` named in ``beside`` run in child processes (``launch``) while the others run here.
    ``get_reproduction``, ``calibrate``, ``cpu_clock`` (CPU seconds used so far: this process's and its sweep
    workers') and ``launch`` default to the real ones (tests pass fakes).
    """
    from subnetlab.experiments import get_reproduction as real_get
    from subnetlab.experiments import settings_for
    from subnetlab.experiments.demo.findings import print_table, write_findings

    get = get_reproduction or real_get
    if calibrate is None:
        from subnetlab.experiments.demo.calibrate import calibrate as real_calibrate

        calibrate = real_calibrate
    if cpu_clock is None:
        from subnetlab.executor import worker_cpu_seconds

        def cpu_clock() -> float:
            return time.process_time() + worker_cpu_seconds()
    out = Path(out)
    cores = cores or os.cpu_count() or 1
    started, cpu_started = clock(), cpu_clock()
    modules = {name: get(name) for name in demos}
    settings = {name: settings_for(module, demo_preset(module)).to_dict() for name, module in modules.items()}
    apart = [name for name in demos if name in beside and not (out / name / "metrics.json").is_file()]
    here = [name for name in demos if name not in apart]
    stages = plan_stages({name: settings[name] for name in here}, out, cores)
    stage("calibrating: timing a few steps of each demo's real work on this machine")
    t0 = clock()
    rates = calibrate({name: settings[name] for name in {s.demo for s in stages}})
    plan, calibrated = Plan(stages, rates, clock=clock, cpu_clock=cpu_clock), clock() - t0
    fixed, bounded = sum(not s.bound for s in stages), plan.bounds()
    decided = (f", and up to {math.ceil(plan.total(exact=False) / 60)} min more for the {len(bounded)} whose size "
               f"the data decides ({'; '.join(bounded)})") if bounded else ""
    alongside = "".join(f"; {name} runs beside them in its own process (its log: {out / f'{name}.log'})"
                        for name in apart)
    echo(f"The demo should take {minutes(plan.total(exact=True))} on this machine for the {fixed} stages its "
         f"settings fix{decided}{alongside}; calibrated in {calibrated:.0f} s.")
    record: dict[str, Any] = {"calibration": {"rates": rates, "seconds": round(calibrated, 1)},
                              "predicted_seconds": round(plan.total(), 1)}
    reports: dict[str, str] = {}
    children = [launch(name, demo_preset(modules[name]), out / name, out / f"{name}.log") for name in apart]
    finished: list[side.Finished] = []
    threads = side.ThreadShare(children)  # this process's threads leave a core to each child still running

    def on_line(line: str) -> None:
        threads.update()
        if plan.on_line(line):
            board.update()

    try:
        if here:
            plan.begin(here[0])  # the board's first line names the first stage
        with Board("demo", plan.status, interactive=interactive) as board, listen(on_line):
            for name in here:
                plan.begin(name)
                board.update()
                report = modules[name].run(settings[name], out / name)
                plan.end()
                board.update()
                reports[name] = str(report)
                board.print(f"{name} report: {report}")
            for child in children:
                if child.process.poll() is None:
                    stage(f"waiting for {child.name}, which runs beside the others (its log: {child.log})")
                finished.append(side.wait(child))
                if finished[-1].returncode == 0:
                    reports[child.name] = str(child.out / "report.md")
                    board.print(f"{child.name} report: {reports[child.name]}")
    finally:
        for child in children:
            side.stop(child)
        threads.restore()
    wall, cpu = clock() - started, cpu_clock() - cpu_started + sum(f.cpu_seconds or 0.0 for f in finished)
    record.update(stages=plan.table(), wall_seconds=round(wall, 1), cpu_seconds=round(cpu, 1), cores=cores,
                  reports=reports, beside={f.name: {"exit_status": f.returncode, "wall_seconds": f.wall_seconds,
                                                    "cpu_seconds": f.cpu_seconds} for f in finished})
    write_json(out / "demo-timings.json", record)
    path, rows = write_findings(out, demos)
    if echo is print:
        print_table(rows, interactive=board.interactive)
    else:
        from subnetlab.experiments.demo.findings import render_plain

        echo(render_plain(rows))
    echo(f"findings: {path}")
    # the CPU work bounds the wall time from below however the stages are arranged on these cores
    echo(f"The demo took {wall:.0f} s ({minutes(wall)}) and {cpu:.0f} CPU-seconds: on {cores} cores no arrangement "
         f"of the same work takes under {cpu / cores:.0f} s.")
    failed = [f for f in finished if f.returncode != 0]
    if failed:  # everything else is written; a rerun resumes the failed study's finished steps
        raise SubnetlabError("; ".join(f"the {f.name} study failed (exit status {f.returncode}); its log: "
                                       f"{out / f'{f.name}.log'}" for f in failed))
    return {"reports": reports, "findings": str(path), "timings": record}


__all__ = ["DEMOS", "TOUR", "demo_preset", "plan_stages", "run_demo"]
