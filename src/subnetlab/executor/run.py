"""``run_jobs``: run a list of independent jobs on one of three backends, skipping finished ones.

Every multi-job command (prune over seeds and sparsities, effective size over
checkpoints, transfer over conditions, lottery seeds) builds ``Job`` objects and
hands them here. Checks that cost nothing (options, duplicate run directories,
importable job functions, a run directory holding another config) happen before
any job starts, so a typo never surfaces hours into a sweep.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path

from subnetlab.distributed import world
from subnetlab.errors import SubnetlabError
from subnetlab.executor.job import Job, check_existing_config, execute, load_metrics, resolve_function
from subnetlab.executor.report import JobResult, SweepReport, error_text, traceback_text
from subnetlab.progress import stage, track

BACKENDS = ("local", "processes", "ray")


def check_options(
    backend: str, n_jobs: int | None, address: str | None, cpus_per_job: int | None, gpus_per_job: float,
    max_retries: int
) -> None:
    if backend not in BACKENDS:
        raise SubnetlabError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}", setting="backend")
    if n_jobs is not None and (not isinstance(n_jobs, int) or n_jobs < 1):
        raise SubnetlabError(f"n_jobs {n_jobs}: expected a positive integer", setting="n_jobs")
    if backend == "local" and n_jobs not in (None, 1):
        raise SubnetlabError(
            f"n_jobs {n_jobs}: the local backend runs one job at a time; use the processes or ray backend",
            setting="n_jobs",
        )
    if address is not None and backend != "ray":
        raise SubnetlabError(f"address {address}: only the ray backend joins a cluster", setting="address")
    if cpus_per_job is not None and (isinstance(cpus_per_job, bool) or not isinstance(cpus_per_job, int)
                                     or cpus_per_job < 1):
        raise SubnetlabError(f"cpus_per_job {cpus_per_job}: expected a positive integer", setting="cpus_per_job")
    if gpus_per_job < 0 or (gpus_per_job > 1 and gpus_per_job != int(gpus_per_job)):
        raise SubnetlabError(f"gpus_per_job {gpus_per_job:g}: expected a fraction up to 1 or a whole number of GPUs",
                             setting="gpus_per_job")
    if not isinstance(max_retries, int) or max_retries < 0:
        raise SubnetlabError(f"max_retries {max_retries}: expected a non-negative integer", setting="max_retries")
    if gpus_per_job > 0 and address is None and not _has_gpu():  # a Ray cluster's GPUs are not ours to see
        raise SubnetlabError(f"gpus_per_job {gpus_per_job:g}: this machine has no GPU (CUDA is not available); "
                             "leave it at 0 to run on the CPU", setting="gpus_per_job")


def _has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _name_jobs(jobs: Sequence[Job], sweep_dir: Path) -> list[Job]:
    """Give unnamed jobs their run directory relative to the sweep directory; refuse duplicates."""
    named, seen_dirs, seen_names = [], {}, {}
    for job in jobs:
        if not isinstance(job, Job):
            raise SubnetlabError(f"expected Job objects, got {type(job).__name__}")
        key = os.path.abspath(job.out_dir)
        if key in seen_dirs:
            raise SubnetlabError(f"{job.out_dir}: two jobs share this run directory")
        seen_dirs[key] = True
        name = job.name or Path(os.path.relpath(key, os.path.abspath(sweep_dir))).as_posix()
        if name in seen_names:
            raise SubnetlabError(f"job name {name!r} is used twice")
        seen_names[name] = True
        named.append(Job(fn=job.fn, config=job.config, out_dir=job.out_dir, name=name))
    return named


def default_sweep_dir(jobs: Sequence[Job]) -> Path:
    """The deepest directory holding every job's run directory (commands should pass their output directory)."""
    parents = [os.path.dirname(os.path.abspath(j.out_dir)) for j in jobs]
    return Path(os.path.commonpath(parents))


def run_local(jobs: Sequence[Job]) -> Iterator[JobResult]:
    """The default backend: one job after another in this process (no retries: a death ends the sweep).

    Across processes (``torchrun``: every rank runs the same jobs in the same order, each job's collectives
    matching the other ranks') a job that fails ends the sweep on this rank, after its result is reported: a
    rank that went on to the next job would meet the others' collectives of this one."""
    across = world().size > 1
    for job in jobs:
        common = dict(name=job.name, out_dir=job.out_dir, config=job.config, attempts=1)
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            metrics = execute(job)
        except (Exception, SystemExit) as e:  # the job's own error: report it, run the next one
            yield JobResult(status="failed", error=error_text(e), traceback=traceback_text(e),
                            seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu_started,
                            **common)
            if across:
                raise stopped_sweep(job, e) from None
        else:
            yield JobResult(status="done", metrics=metrics, seconds=time.perf_counter() - started,
                            cpu_seconds=time.process_time() - cpu_started, **common)


def stopped_sweep(job: Job, error: BaseException) -> SubnetlabError:
    """Across processes: the one-line error that ends a sweep at its failed ``job`` (a library error as it is: it
    names its rank and cause already; anything else named with the job)."""
    if isinstance(error, SubnetlabError):
        return error
    here = world()
    return SubnetlabError(f"rank {here.rank} of {here.size}: run {job.name} failed ({error_text(error)}); across "
                          "processes every rank runs the sweep's jobs in step, so the sweep stops here (rerun the "
                          "same launch to resume)")


def agreed_pending(jobs: Sequence[Job], root: Path) -> list[Job]:
    """The jobs not done yet, the same on every rank: each rank reads the run directories (written by rank 0), so
    a rank that sees other runs finished (the sweep directory not on a file system every rank sees) is refused on
    every rank before any job starts."""
    here = world()
    pending = [job for job in jobs if not job.is_done]
    if not here.all_same([0 if job.is_done else 1 for job in jobs]):
        raise SubnetlabError(f"rank {here.rank} of {here.size}: the ranks see different runs finished under "
                             f"{root} (this rank: {len(jobs) - len(pending)} of {len(jobs)}); the "
                             "output directory must be on a file system every rank sees")
    return pending


def run_jobs(
    jobs: Sequence[Job],
    backend: str = "local",
    n_jobs: int | None = None,
    address: str | None = None,
    cpus_per_job: int | None = None,
    gpus_per_job: float = 0.0,
    max_retries: int = 2,
    sweep_dir: str | os.PathLike | None = None,
) -> SweepReport:
    """Run every job not already done; return what happened and write ``<sweep_dir>/sweep.json``.

    ``backend``: ``local`` (sequential, in this process), ``processes`` (``n_jobs``
    worker processes at once; default: CPUs // ``cpus_per_job``) or ``ray`` (a
    local Ray instance sized ``n_jobs * cpus_per_job`` CPUs, default all CPUs,
    unless Ray is already initialised or ``address`` names a cluster: ``auto`` or
    ``HOST:PORT``). ``cpus_per_job`` sets each worker's torch threads (the
    local backend leaves threads alone: all cores); None shares this machine's
    cores among the workers that run at once, so one job alone gets them all
    (``threads_per_job``); on Ray, None is one. ``gpus_per_job`` may be fractional.
    A worker that dies is retried ``max_retries`` times; a job that raises is
    reported as failed and the others carry on. ``sweep_dir`` defaults to the
    deepest directory holding all run directories. KeyboardInterrupt stops the
    sweep, records the unfinished jobs as pending in ``sweep.json`` and propagates;
    rerunning the same call finishes only those.
    """
    check_options(backend, n_jobs, address, cpus_per_job, gpus_per_job, max_retries)
    if backend == "ray":
        from subnetlab.executor.ray_backend import import_ray

        import_ray()
    if not jobs:
        return SweepReport([], backend)
    root = Path(sweep_dir) if sweep_dir is not None else default_sweep_dir(jobs)
    jobs = _name_jobs(jobs, root)
    for spec in dict.fromkeys(j.fn for j in jobs):
        resolve_function(spec)
    for job in jobs:
        check_existing_config(job)

    results: dict[str, JobResult] = {}
    pending = agreed_pending(jobs, root) if backend == "local" else [job for job in jobs if not job.is_done]
    waiting = {job.name for job in pending}
    for job in jobs:
        if job.name not in waiting:
            results[job.name] = JobResult(job.name, job.out_dir, "skipped", job.config, metrics=load_metrics(job))
    report = SweepReport([], backend)
    where = f"{backend}" + (f" x{n_jobs}" if n_jobs else "")
    stage(f"sweep: {len(jobs)} jobs, {len(jobs) - len(pending)} already done, running {len(pending)} ({where})")
    outcomes = _backend(pending, backend, n_jobs, address, cpus_per_job, gpus_per_job, max_retries)
    try:
        for result in track(outcomes, total=len(pending), description="sweep"):
            results[result.name] = result
            if result.status == "failed":
                stage(f"job {result.name} failed: {result.error}")
    finally:
        outcomes.close()  # stops workers now, not at garbage collection
        report.jobs = [
            results.get(j.name) or JobResult(j.name, j.out_dir, "pending", j.config, attempts=None) for j in jobs
        ]
        if world().is_writer:  # across processes rank 0 writes the sweep's record
            report.write(root)
    stage(f"sweep: {report.summary()}")
    return report


def _backend(
    jobs: list[Job], backend: str, n_jobs: int | None, address: str | None,
    cpus_per_job: int | None, gpus_per_job: float, max_retries: int,
) -> Generator[JobResult, None, None]:
    if backend == "local" or not jobs:  # nothing to run: start no workers and no Ray
        return run_local(jobs)
    if backend == "processes":
        from subnetlab.executor.processes import run_processes

        cores = os.cpu_count() or 1
        workers = n_jobs if n_jobs is not None else max(1, cores // (cpus_per_job or 1))
        threads = cpus_per_job or threads_per_job(cores, min(workers, len(jobs)))
        return run_processes(jobs, workers, threads, gpus_per_job, max_retries)
    from subnetlab.executor.ray_backend import run_ray

    return run_ray(jobs, n_jobs, address, cpus_per_job or 1, gpus_per_job, max_retries)


def threads_per_job(cores: int, running: int) -> int:
    """The torch threads of each of ``running`` workers at once on ``cores`` cores: the cores shared out, at least
    one each (one job alone gets every core; a sweep of more jobs than cores, one core each)."""
    return max(1, cores // max(1, running))
