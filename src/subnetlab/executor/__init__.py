"""Run many independent jobs locally, on local processes, or on Ray; collect their results.

A job is a JSON config, its own run directory and a job function named by an
import string (``"package.module:function"``, called as ``fn(config, out_dir)``
and returning a metrics dict). ``run_jobs`` writes ``config.json`` before and
``metrics.json`` after each job, skips jobs whose ``metrics.json`` exists, retries
jobs whose worker died, reports jobs that raised, and writes ``sweep.json``::

    from subnetlab.executor import Job, run_jobs

    jobs = [Job("mypkg.jobs:prune", {"seed": s, "sparsity": p}, out / f"s{s}_p{p}")
            for s in range(12) for p in (0.5, 0.7)]
    report = run_jobs(jobs, backend="processes", n_jobs=2, sweep_dir=out)
    print(report.summary())

``collect_results(dir)`` turns every run under a directory into one table;
``ExecutorOptions`` packs ``run_jobs``'s settings into one value (the CLI's
multi-job commands fill it in from their options).
"""

from subnetlab.executor.job import CONFIG_FILE, METRICS_FILE, Job, execute, resolve_function
from subnetlab.executor.options import ExecutorOptions
from subnetlab.executor.processes import worker_cpu_seconds
from subnetlab.executor.report import SWEEP_FILE, JobResult, SweepReport
from subnetlab.executor.run import BACKENDS, run_jobs

__all__ = [
    "BACKENDS",
    "CONFIG_FILE",
    "METRICS_FILE",
    "SWEEP_FILE",
    "ExecutorOptions",
    "Job",
    "JobResult",
    "SweepReport",
    "collect_results",
    "execute",
    "resolve_function",
    "run_jobs",
    "worker_cpu_seconds",
    "write_results",
]


def __getattr__(name: str):  # pandas is imported only by those who collect results
    if name in ("collect_results", "write_results"):
        from subnetlab.executor import results

        return getattr(results, name)
    raise AttributeError(f"module 'subnetlab.executor' has no attribute {name!r}")
