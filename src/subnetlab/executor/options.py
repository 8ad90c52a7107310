"""How to run a sweep: ``ExecutorOptions``, the executor's settings packed into one value.

    from subnetlab.executor import ExecutorOptions

    report = ExecutorOptions(jobs=2).run(jobs, sweep_dir=out)   # two local processes

The command-line options that fill it in (and the ``executor_options``
decorator that adds them to a command) live in
``subnetlab.cli.commands._executor_options``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from subnetlab.executor.job import Job
from subnetlab.executor.report import SweepReport
from subnetlab.executor.run import check_options, run_jobs


@dataclass(frozen=True)
class ExecutorOptions:
    """How to run a sweep.

    ``backend=None`` picks ``processes`` when ``jobs > 1``, ``ray`` with an address, else ``local``.
    """

    backend: str | None = None
    jobs: int | None = None
    address: str | None = None
    cpus_per_job: int | None = None  # None: the cores shared among the jobs at once (executor.run.run_jobs)
    gpus_per_job: float = 0.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        check_options(self.resolved_backend, self.jobs, self.address, self.cpus_per_job, self.gpus_per_job,
                      self.max_retries)  # before the command loads anything, not when the sweep starts

    @property
    def resolved_backend(self) -> str:
        if self.backend is not None:
            return self.backend
        if self.address is not None:
            return "ray"
        return "processes" if self.jobs is not None and self.jobs > 1 else "local"

    def run(self, jobs: Sequence[Job], sweep_dir: str | os.PathLike | None = None) -> SweepReport:
        """``run_jobs`` with these options."""
        return run_jobs(
            jobs,
            backend=self.resolved_backend,
            n_jobs=self.jobs,
            address=self.address,
            cpus_per_job=self.cpus_per_job,
            gpus_per_job=self.gpus_per_job,
            max_retries=self.max_retries,
            sweep_dir=sweep_dir,
        )


__all__ = ["ExecutorOptions"]
