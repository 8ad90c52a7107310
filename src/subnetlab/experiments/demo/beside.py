"""Studies that run in a child process beside the others during ``subnetlab demo``.

The circuits study trains and prunes tiny models on one thread. Run after the others it keeps one core busy and
leaves the other idle. Run beside them it uses the core time they leave idle: the in-process stages gain only ~1.5x
from a second thread, a single job leaves one worker idle, and a sweep's last odd job does too
(``demo-timings.json`` has each stage's CPU seconds beside its wall time). Its progress goes to ``OUT/NAME.log``.

    child = launch("circuits", "demo", out / "circuits", out / "circuits.log")
    ...  # the other studies
    finished = wait(child)  # its exit status, wall and CPU seconds

The child is ``python -m subnetlab.experiments.demo.beside NAME PRESET OUT USAGE``: the reproduction's own ``run``
with the preset's settings, as ``subnetlab reproduce`` runs it. It writes its own wall and CPU seconds to USAGE
(``NAME.usage.json`` beside its log) as it ends: the parent reaps it whenever it polls, so the parent's
``getrusage(RUSAGE_CHILDREN)`` cannot say which reap was the child's, nor when it ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BESIDE = ("circuits",)  # one-thread studies: each keeps one core busy


@dataclass
class Child:
    """A study running in its own process (``command``)."""

    name: str
    out: Path
    log: Path
    usage: Path  # what the child writes as it ends (``main``)
    process: subprocess.Popen


@dataclass
class Finished:
    name: str
    returncode: int
    # the child's own figures: its wall time, and the CPU time of its process and of its sweeps' workers (None:
    # it died before it could write them)
    wall_seconds: float | None
    cpu_seconds: float | None


def usage_path(log: Path) -> Path:
    return log.with_suffix(".usage.json")


def command(name: str, preset: str, out: Path, usage: Path) -> list[str]:
    """The child's command line: this module run with the study, its preset, its run directory, its usage file."""
    return [sys.executable, "-m", __name__, name, preset, str(out), str(usage)]


def run_study(name: str, preset: str, out: Path) -> Path:
    """What the child does: the reproduction ``name`` with the settings of ``preset``, into ``out``."""
    from subnetlab.experiments import get_reproduction, settings_for

    module = get_reproduction(name)
    return module.run(settings_for(module, preset), Path(out))


def launch(name: str, preset: str, out: Path, log: Path, argv: list[str] | None = None) -> Child:
    """Start the study ``name`` (or ``argv``) in a child process writing its output to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    usage = usage_path(log)
    usage.unlink(missing_ok=True)  # an earlier demo's
    with open(log, "wb") as stream:  # the child's own output, as it comes: a log, not a result
        process = subprocess.Popen(argv or command(name, preset, out, usage), stdout=stream,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return Child(name, out, log, usage, process)


def wait(child: Child) -> Finished:
    """Wait for ``child``; its exit status and the seconds it reported."""
    from subnetlab.io import read_json

    returncode = child.process.wait()
    usage = read_json(child.usage) if child.usage.is_file() else {}
    return Finished(child.name, returncode, usage.get("wall_seconds"), usage.get("cpu_seconds"))


class ThreadShare:
    """This process's torch threads while children run beside it: one core fewer per child still running.

    Two threads of one process on a core that a child also wants lose far more than a third: each parallel region
    waits at its barrier for the thread that is descheduled (the Heuristic Core's in-process fine-tuning took 8x
    longer beside three busy processes). One-thread workers and children just share the cores. ``update`` (called
    at every progress line) gives the cores back as the children finish; ``restore`` at the end."""

    def __init__(self, children: list[Child]) -> None:
        import torch

        self.children, self.original = children, torch.get_num_threads()
        self.update()

    def update(self) -> None:
        import torch

        running = sum(child.process.poll() is None for child in self.children)
        wanted = max(1, self.original - running)
        if torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)

    def restore(self) -> None:
        import torch

        if torch.get_num_threads() != self.original:
            torch.set_num_threads(self.original)


def stop(child: Child) -> None:
    """Stop a child still running (the demo was interrupted or failed); its finished steps stay on disk."""
    if child.process.poll() is None:
        child.process.terminate()
        try:
            child.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m subnetlab.experiments.demo.beside NAME PRESET OUT USAGE", file=sys.stderr)
        return 2
    from subnetlab.errors import SubnetlabError
    from subnetlab.executor import worker_cpu_seconds
    from subnetlab.io import write_json

    started = time.monotonic()
    try:
        report = run_study(argv[0], argv[1], Path(argv[2]))
        status = 0
    except SubnetlabError as e:
        print(f"error: {e}", file=sys.stderr)
        status = 2
    finally:  # written even when the study raises: the CPU it spent is part of the demo's
        write_json(Path(argv[3]), {"wall_seconds": round(time.monotonic() - started, 3),
                                   "cpu_seconds": round(time.process_time() + worker_cpu_seconds(), 3)})
    if status == 0:
        print(f"report: {report}")
    return status


__all__ = ["BESIDE", "Child", "Finished", "ThreadShare", "command", "launch", "main", "run_study", "stop",
           "usage_path", "wait"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
