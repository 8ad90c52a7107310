"""The ``processes`` backend: up to N jobs at once, each in its own worker process.

One fresh process per job attempt rather than a long-lived pool: a job that
kills its process (out of memory, a segfault in a kernel) takes nothing else
down, is seen by its exit status, and is retried up to ``max_retries`` times; a
job that raises is reported and not retried; no state leaks from one job into
the next. Processes are forked from a ``multiprocessing`` fork server that has
imported subnetlab once, so a job starts in milliseconds instead of the seconds
that importing torch and transformers takes (``spawn`` where there is no fork
server). Workers get ``cpus_per_job`` threads and, with ``gpus_per_job``, their
own ``CUDA_VISIBLE_DEVICES`` (fractions of a GPU pack several jobs on one device).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path

from subnetlab.errors import SubnetlabError
from subnetlab.executor.job import Job, load_metrics
from subnetlab.executor.report import JobResult
from subnetlab.io import read_json, write_json
from subnetlab.progress import SAID_VARIABLE, said, stage

_UNITS = 1000  # GPU capacity is tracked in thousandths, so 0.1 + 0.2 cannot drift
_worker_cpu = [0.0]  # CPU seconds of every finished worker of this process (``worker_cpu_seconds``)


def worker_cpu_seconds() -> float:
    """CPU seconds the workers of this process's sweeps have used, every thread counted.

    A worker's CPU time is not in this process's ``time.process_time()``, and the fork server reaps the workers,
    so ``getrusage(RUSAGE_CHILDREN)`` misses it too; each worker reports its own at exit."""
    return _worker_cpu[0]


def visible_gpus() -> list[str]:
    """GPU ids this process may hand out: ``CUDA_VISIBLE_DEVICES`` if set, else all CUDA devices."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


class GpuSlots:
    """Hands out GPUs to jobs: a fraction of one device, or whole devices for amounts > 1."""

    def __init__(self, devices: Sequence[str], per_job: float) -> None:
        self.per_job = round(per_job * _UNITS)
        self.free = {d: _UNITS for d in devices}
        need = max(1, round(per_job)) if per_job > 1 else 1
        if per_job > 0 and len(self.free) < need:
            raise SubnetlabError(f"gpus_per_job {per_job:g}: only {len(self.free)} GPU(s) visible", setting="gpus_per_job")

    def take(self) -> list[str] | None:
        """Devices for one job, or None when none are free now."""
        if self.per_job == 0:
            return []
        if self.per_job <= _UNITS:  # best fit: fill partly used GPUs first
            fits = [d for d, f in self.free.items() if f >= self.per_job]
            if not fits:
                return None
            device = min(fits, key=lambda d: self.free[d])
            self.free[device] -= self.per_job
            return [device]
        whole = [d for d, f in self.free.items() if f == _UNITS][: self.per_job // _UNITS]
        if len(whole) * _UNITS < self.per_job:
            return None
        for d in whole:
            self.free[d] = 0
        return whole

    def give(self, devices: Sequence[str]) -> None:
        for d in devices:
            self.free[d] = min(_UNITS, self.free[d] + (self.per_job if self.per_job <= _UNITS else _UNITS))


@dataclass
class _Attempt:
    job: Job
    attempt: int
    process: multiprocessing.process.BaseProcess
    outcome: Path
    devices: list[str]
    started: float


def _context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    """A fork server that has imported subnetlab (and the job modules); spawn where unavailable.

    The fork server starts with this process's ``sys.path``, so whatever the
    caller can import (a test helper, a benchmark script's module) workers can too.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # models.loading brings torch and transformers, which ``import subnetlab`` leaves out (a fast CLI start)
    context.set_forkserver_preload(["subnetlab.executor.worker", "subnetlab.models.loading", *preload])
    return context


@contextmanager
def _caller_main_not_rerun() -> Iterator[None]:
    """Stop multiprocessing from re-running the caller's script in every worker.

    Jobs name their function by import string, so workers never need the caller's
    ``__main__``. Without this, each worker would re-execute the calling script
    (the ``if __name__ == "__main__"`` pitfall) and fail outright for drivers
    read from stdin or a notebook. A main module whose spec is named
    ``__main__`` is left alone by multiprocessing's child preparation.
    """
    main = sys.modules["__main__"]
    saved = getattr(main, "__spec__", None)
    main.__spec__ = ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = saved


def _worker_env(threads: int, devices: list[str] | None) -> dict[str, str]:
    """Variables a worker sets before its job runs: thread counts, GPU assignment, the notices already given."""
    env = {var: str(threads) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    env[SAID_VARIABLE] = said()
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    return env


def _death(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def run_processes(
    jobs: Sequence[Job],
    n_jobs: int,
    cpus_per_job: int,
    gpus_per_job: float,
    max_retries: int,
) -> Iterator[JobResult]:
    """Yield one result per job as each finishes; kill running workers if interrupted."""
    from subnetlab.executor.worker import child_main

    slots = GpuSlots(visible_gpus(), gpus_per_job) if gpus_per_job > 0 else None
    context = _context(sorted({job.fn.split(":")[0] for job in jobs}))
    queue: deque[tuple[int, Job, int]] = deque((i, job, 1) for i, job in enumerate(jobs))
    running: dict[int, _Attempt] = {}
    scratch = Path(tempfile.mkdtemp(prefix="subnetlab-sweep-"))
    try:
        while queue or running:
            while queue and len(running) < n_jobs:
                devices = slots.take() if slots else None
                if devices is None and slots is not None:
                    break
                index, job, attempt = queue.popleft()
                spec = scratch / f"job{index}.try{attempt}.json"
                outcome = scratch / f"job{index}.try{attempt}.outcome.json"
                write_json(spec, {"job": job.to_dict(), "threads": cpus_per_job, "outcome": str(outcome),
                                  "env": _worker_env(cpus_per_job, devices)})
                process = context.Process(target=child_main, args=(str(spec),), name=f"subnetlab:{job.name}")
                with _caller_main_not_rerun():
                    process.start()
                running[index] = _Attempt(job, attempt, process, outcome, devices or [], time.perf_counter())

            finished = [i for i, a in running.items() if a.process.exitcode is not None]
            if not finished:
                multiprocessing.connection.wait([a.process.sentinel for a in running.values()], timeout=1.0)
            for index in finished:
                a = running.pop(index)
                if slots is not None:
                    slots.give(a.devices)
                result = _collect(a, max_retries)
                a.process.close()
                if result is None:
                    queue.appendleft((index, a.job, a.attempt + 1))
                else:
                    yield result
    finally:
        for a in running.values():
            a.process.kill()
        for a in running.values():
            a.process.join()
        shutil.rmtree(scratch, ignore_errors=True)


def _collect(a: _Attempt, max_retries: int) -> JobResult | None:
    """Turn a finished worker into a result, or None to retry a worker that died."""
    seconds = time.perf_counter() - a.started
    common = dict(name=a.job.name, out_dir=a.job.out_dir, config=a.job.config, attempts=a.attempt, seconds=seconds)
    if a.outcome.is_file():
        outcome = read_json(a.outcome)
        common["cpu_seconds"] = outcome.get("cpu_seconds")
        _worker_cpu[0] += float(common["cpu_seconds"] or 0.0)
        if outcome["status"] == "done" and a.job.is_done:
            return JobResult(status="done", metrics=load_metrics(a.job), **common)
        if outcome["status"] == "failed":
            return JobResult(status="failed", error=outcome["error"], traceback=outcome["traceback"], **common)
    why = _death(a.process.exitcode)
    if a.attempt <= max_retries:
        stage(f"job {a.job.name}: worker died ({why}); retry {a.attempt}/{max_retries}")
        return None
    error = f"worker died ({why}) on all {a.attempt} attempts"
    return JobResult(status="failed", error=error, **common)
