"""The executor on Ray: a local Ray instance with 2 CPUs, started once for this module.

Kept to two tests: starting Ray costs seconds. The first lets ``run_jobs`` start
and stop its own instance; the second shares one the test started, as a user on
a cluster would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from subnetlab.executor import Job, run_jobs
from subnetlab.io import read_json
from tests.unit.executor_jobs import calls, expected_metrics

ray = pytest.importorskip("ray")

FN = "tests.unit.executor_jobs:draw"
GRID = [{"seed": s, "n": n} for s in (0, 1) for n in (3, 5)]


def grid_jobs(root: Path, configs: list[dict] = GRID) -> list[Job]:
    return [Job(FN, c, root / f"seed{c['seed']}_n{c['n']}") for c in configs]


def test_ray_gives_the_same_results_as_local(tmp_path: Path) -> None:
    local = run_jobs(grid_jobs(tmp_path / "local"))
    on_ray = run_jobs(grid_jobs(tmp_path / "ray"), backend="ray", n_jobs=2, cpus_per_job=1)
    assert not ray.is_initialized()  # run_jobs stopped the instance it started
    assert on_ray.ok and len(on_ray.done) == 4
    for config, a, b in zip(GRID, local.metrics, on_ray.metrics):
        assert {k: v for k, v in a.items() if k != "threads"} == {k: v for k, v in b.items() if k != "threads"}
        assert {k: b[k] for k in ("mean", "norm", "grid")} == expected_metrics(config)
        assert b["threads"] == 1
    assert read_json(tmp_path / "ray" / "sweep.json")["backend"] == "ray"


@pytest.fixture(scope="module")
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", object_store_memory=100 * 1024**2)
    yield
    ray.shutdown()


def test_ray_retries_dead_workers_reports_raising_jobs_and_resumes(tmp_path: Path, ray_instance: None) -> None:
    configs = [GRID[0], dict(GRID[1], fail=True), dict(GRID[2], die="once"), GRID[3]]
    jobs = grid_jobs(tmp_path, configs)
    report = run_jobs(jobs, backend="ray", max_retries=2, gpus_per_job=0.0)
    assert ray.is_initialized()  # an instance the caller started is left running
    assert [j.status for j in report.jobs] == ["done", "failed", "done", "done"]
    assert report.jobs[1].error == "ValueError: seed 0 fails on purpose"
    assert [calls(j.out_dir) for j in jobs] == [1, 1, 2, 1]  # raised: not retried; died: retried
    assert {k: report.jobs[2].metrics[k] for k in ("mean", "norm", "grid")} == expected_metrics(configs[2])

    rerun = run_jobs(jobs, backend="ray")
    assert [j.status for j in rerun.jobs] == ["skipped", "failed", "skipped", "skipped"]
    assert [calls(j.out_dir) for j in jobs] == [1, 2, 2, 1]  # only the unfinished job ran again
