"""The ``ray`` backend: jobs as Ray tasks, on a local Ray instance or an existing cluster.

Ray does the scheduling (``num_cpus`` / ``num_gpus`` per task, fractional GPUs
included) and retries tasks whose worker died (``max_retries``). Exceptions
raised by a job are caught inside the task and returned as a failed result, so
Ray never retries them. Only the job's JSON config and its small metrics dict
cross Ray's object store; artefacts are written by the job straight into its run
directory, which on a cluster must live on a filesystem that every node mounts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.executor.job import Job, execute, load_metrics
from subnetlab.executor.report import JobResult, error_text, traceback_text

_OBJECT_STORE_BYTES = 200 * 1024**2  # a local instance only carries configs and metrics


def import_ray() -> Any:
    """Import Ray lazily: it is an optional extra."""
    try:
        import ray
    except ImportError:
        raise SubnetlabError("the ray backend needs Ray: pip install subnetlab[ray]", setting="backend") from None
    return ray


def _ray_task(job_dict: dict, threads: int, driver_path: list[str]) -> dict:
    """Body of one Ray task: make the driver's modules importable, run the job, report."""
    for p in driver_path:
        if p not in sys.path:
            sys.path.append(p)
    started = time.perf_counter()
    try:
        execute(Job.from_dict(job_dict), threads=threads)
    except (Exception, SystemExit) as e:
        return {"status": "failed", "error": error_text(e), "traceback": traceback_text(e)}
    return {"status": "done", "seconds": time.perf_counter() - started}


def _connect(ray: Any, address: str | None, n_jobs: int | None, cpus_per_job: int) -> bool:
    """Start or join Ray unless this process already did; True when we must shut it down."""
    if ray.is_initialized():
        return False
    common = dict(include_dashboard=False, logging_level="ERROR", configure_logging=True)
    try:
        if address is None:
            num_cpus = n_jobs * cpus_per_job if n_jobs is not None else None
            ray.init(num_cpus=num_cpus, object_store_memory=_OBJECT_STORE_BYTES, **common)
        else:
            ray.init(address=address, **common)
    except ConnectionError as e:
        raise SubnetlabError(f"address {address}: cannot reach a Ray cluster ({e})", setting="address") from None
    return True


def _check_resources(ray: Any, cpus_per_job: int, gpus_per_job: float, local: bool) -> None:
    """On a fixed local instance a job asking more than exists would wait forever: refuse it."""
    if not local:
        return
    total = ray.cluster_resources()
    if cpus_per_job > total.get("CPU", 0):
        raise SubnetlabError(f"cpus_per_job {cpus_per_job}: the local Ray instance has {total.get('CPU', 0):g} CPUs",
                             setting="cpus_per_job")
    if gpus_per_job > total.get("GPU", 0):
        gpus = total.get("GPU", 0)
        raise SubnetlabError(f"gpus_per_job {gpus_per_job:g}: the local Ray instance has {gpus:g} GPUs",
                             setting="gpus_per_job")


def run_ray(
    jobs: Sequence[Job],
    n_jobs: int | None,
    address: str | None,
    cpus_per_job: int,
    gpus_per_job: float,
    max_retries: int,
) -> Iterator[JobResult]:
    """Submit every job as a Ray task and yield results as they finish."""
    ray = import_ray()
    started_here = _connect(ray, address, n_jobs, cpus_per_job)
    refs: dict[Any, tuple[Job, float]] = {}
    try:
        _check_resources(ray, cpus_per_job, gpus_per_job, local=started_here and address is None)
        task = ray.remote(_ray_task)
        driver_path = [p for p in sys.path if p]
        for job in jobs:
            ref = task.options(
                num_cpus=cpus_per_job,
                num_gpus=gpus_per_job,
                max_retries=max_retries,
                retry_exceptions=False,
                name=f"subnetlab:{job.name}",
            ).remote(job.to_dict(), cpus_per_job, driver_path)
            refs[ref] = (job, time.perf_counter())
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                job, submitted = refs.pop(ref)
                yield _collect(ray, ref, job, submitted)
    finally:
        for ref in refs:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def _collect(ray: Any, ref: Any, job: Job, submitted: float) -> JobResult:
    common = dict(name=job.name, out_dir=job.out_dir, config=job.config, attempts=None)
    try:
        outcome = ray.get(ref)
    except ray.exceptions.RayError as e:  # the worker died on every attempt, or the node went away
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        return JobResult(status="failed", error=f"worker died ({type(e).__name__}: {first})", **common)
    if outcome["status"] == "failed":
        return JobResult(status="failed", error=outcome["error"], traceback=outcome["traceback"], **common)
    if not job.is_done:
        error = (f"{job.out_dir}: metrics.json not visible from the driver; "
                 "run directories must be on a filesystem every Ray node shares")
        return JobResult(status="failed", error=error, **common)
    return JobResult(status="done", metrics=load_metrics(job), seconds=outcome["seconds"], **common)
