"""What a sweep did: one ``JobResult`` per job, gathered into a ``SweepReport``.

The report is also written to ``<sweep dir>/sweep.json`` (atomically, even when
the sweep is interrupted), so a failed job's config and error survive the
terminal that launched it.
"""

from __future__ import annotations

import os
import traceback as tb
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from subnetlab.io import write_json

SWEEP_FILE = "sweep.json"
SWEEP_FORMAT = "subnetlab.sweep/1"

Status = Literal["done", "skipped", "failed", "pending"]


def error_text(exc: BaseException) -> str:
    """One line naming the exception, for reports and ``sweep.json``."""
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__


def traceback_text(exc: BaseException) -> str:
    return "".join(tb.format_exception(exc))


@dataclass
class JobResult:
    """The outcome of one job. ``attempts`` is None where the backend does not say (Ray)."""

    name: str
    out_dir: Path
    status: Status
    config: dict
    metrics: dict | None = None
    error: str | None = None
    traceback: str | None = None
    attempts: int | None = 0
    seconds: float | None = None
    # CPU seconds of the job's process, every thread counted (the last attempt's; None where the backend does
    # not say): beside ``seconds`` it shows how many cores a job kept busy
    cpu_seconds: float | None = None

    def to_dict(self, root: Path | None = None) -> dict:
        out_dir = str(self.out_dir)
        if root is not None:
            try:
                out_dir = os.path.relpath(self.out_dir, root)
            except ValueError:  # another drive on Windows
                pass
        entry: dict = {"name": self.name, "status": self.status, "out_dir": out_dir, "error": self.error}
        entry["attempts"] = self.attempts
        entry["seconds"] = None if self.seconds is None else round(self.seconds, 3)
        if self.cpu_seconds is not None:
            entry["cpu_seconds"] = round(self.cpu_seconds, 3)
        if self.status == "failed":
            entry["config"] = self.config
            entry["traceback"] = self.traceback
        return entry


@dataclass
class SweepReport:
    """All jobs of a sweep, in the order they were given."""

    jobs: list[JobResult] = field(default_factory=list)
    backend: str = "local"

    def _with(self, status: Status) -> list[JobResult]:
        return [j for j in self.jobs if j.status == status]

    @property
    def done(self) -> list[JobResult]:
        """Jobs that ran to completion in this call."""
        return self._with("done")

    @property
    def skipped(self) -> list[JobResult]:
        """Jobs whose ``metrics.json`` already existed (their metrics are loaded)."""
        return self._with("skipped")

    @property
    def failed(self) -> list[JobResult]:
        return self._with("failed")

    @property
    def pending(self) -> list[JobResult]:
        """Jobs not finished when the sweep was interrupted."""
        return self._with("pending")

    @property
    def ok(self) -> bool:
        """True when every job has its metrics (done now or before)."""
        return all(j.status in ("done", "skipped") for j in self.jobs)

    @property
    def metrics(self) -> list[dict | None]:
        """Each job's metrics in job order (None for failed or pending jobs)."""
        return [j.metrics for j in self.jobs]

    def counts(self) -> dict[str, int]:
        return {s: len(self._with(s)) for s in ("done", "skipped", "failed", "pending")}

    def summary(self) -> str:
        """E.g. ``12 jobs: 9 done, 2 skipped, 1 failed (seed3: ValueError: ...)``."""
        c = self.counts()
        parts = [f"{n} {s}" for s, n in c.items() if n]
        text = f"{len(self.jobs)} jobs: " + (", ".join(parts) or "nothing to do")
        failed = self.failed
        if failed:
            shown = "; ".join(f"{j.name}: {j.error}" for j in failed[:3])
            more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
            text += f" ({shown}{more})"
        return text

    def to_dict(self, root: Path | None = None) -> dict:
        return {
            "format": SWEEP_FORMAT,
            "backend": self.backend,
            "counts": self.counts(),
            "jobs": [j.to_dict(root) for j in self.jobs],
        }

    def write(self, sweep_dir: Path) -> Path:
        """Write ``sweep.json`` atomically; run directories are stored relative to ``sweep_dir``."""
        path = Path(sweep_dir) / SWEEP_FILE
        write_json(path, self.to_dict(Path(sweep_dir)))
        return path
