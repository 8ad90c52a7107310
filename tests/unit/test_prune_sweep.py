"""The one prune-sweep builder: the jobs `subnetlab prune`, the Heuristic Core study and the
effective-size sweep run, checked against the layout and configs written out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.heuristic_core.effective_size import sweep_jobs
from subnetlab.methods.head_pruning.config import preset_config
from subnetlab.runs.prune import FULL_MODEL_JOB, PRUNE_JOB, prune_sweep
from subnetlab.runs.prune_setup import PruneJobConfig

BASE = {"model": "runs/ft/model", "task": "nli-synthetic", "task_options": {"n_train": 50}, "eval_data": [],
        "splits": None}


def test_linear_sweep_is_the_full_model_then_one_run_per_target_and_seed(tmp_path):
    jobs = prune_sweep(BASE, tmp_path, targets=[0.5, 0.7], seeds=[0, 3], preset="demo")
    assert [j.fn for j in jobs] == [FULL_MODEL_JOB] + [PRUNE_JOB] * 4
    assert [j.out_dir.relative_to(tmp_path).as_posix() for j in jobs] == [
        "full-model", "sparsity-0.50/seed-0", "sparsity-0.50/seed-3", "sparsity-0.70/seed-0", "sparsity-0.70/seed-3"]
    run = jobs[3].config
    by_hand = {**BASE, "cache_dir": "../../cache", "preset": "demo",  # relative to the run directory: portable
               "prune": preset_config("demo", 0.7, seed=0).to_dict(), "device": "auto"}
    assert run == by_hand
    assert PruneJobConfig.from_dict(run).to_dict() == run  # config.json round-trips through the typed config
    assert PruneJobConfig.from_dict({**run, "device": "cpu"}).device == "cpu"
    cfg = preset_config("demo", 0.5, seed=0)
    assert jobs[0].config == {**BASE, "eval": {"batch_size": cfg.eval_batch_size, "max_length": cfg.max_length,
                                               "limit": cfg.eval_limit}, "device": "auto"}
    assert jobs[0].name == "full-model"


def test_staircase_is_one_run_per_seed_up_to_the_last_level(tmp_path):
    levels = (0.1, 0.3, 0.5)
    jobs = prune_sweep(BASE, tmp_path, targets=(), seeds=[0, 1], preset="demo", schedule="staircase", levels=levels,
                       overrides={"ramp_steps": 5})
    prune = [j.config["prune"] for j in jobs[1:]]
    assert [p["sparsity"] for p in prune] == [0.5, 0.5] and [p["seed"] for p in prune] == [0, 1]
    assert all(p["levels"] == list(levels) and p["ramp_steps"] == 5 for p in prune)
    assert [j.out_dir.relative_to(tmp_path).as_posix() for j in jobs[1:]] == ["staircase/seed-0", "staircase/seed-1"]


def test_effective_size_sweep_names_every_job_once(tmp_path):
    base = {k: v for k, v in BASE.items() if k != "model"}
    jobs = sweep_jobs([(40, Path("ck/40")), (80, Path("ck/80"))], base, [0, 1], [0.1, 0.3], "demo", {}, tmp_path)
    names = [j.name for j in jobs]
    assert len(set(names)) == len(names) == 6
    assert "step-40/full-model" in names and "step-80/seed-1" in names
    assert {j.config["model"] for j in jobs if "step-80" in j.name} == {"ck/80"}
    assert {j.config.get("cache_dir") for j in jobs if "step-40" in j.name and j.fn == PRUNE_JOB} == {"../../cache"}
    assert {(j.out_dir / "../../cache").resolve() for j in jobs if "step-40" in j.name and j.fn == PRUNE_JOB} == {
        (tmp_path / "step-40" / "cache").resolve()}


def test_a_bad_sweep_is_refused_before_any_job(tmp_path):
    with pytest.raises(SubnetlabError, match="at least one seed"):
        prune_sweep(BASE, tmp_path, targets=[0.5], seeds=[], preset="demo")
    with pytest.raises(SubnetlabError, match="unknown job setting"):
        prune_sweep({**BASE, "modle": "x"}, tmp_path, targets=[0.5], seeds=[0], preset="demo")
