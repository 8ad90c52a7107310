"""`subnetlab reproduce NAME --dry-run`: the resolved configuration of every step, nothing run, nothing written."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from subnetlab.cli import app
from subnetlab.experiments import REPRODUCTIONS


def run_cli(*args: str):
    """In process (a subprocess per case would import torch nine times)."""
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("name", list(REPRODUCTIONS))
@pytest.mark.parametrize("preset", ["demo", "paper"])
def test_dry_run_prints_json_and_writes_nothing(tmp_path, name, preset):
    out = tmp_path / "out"
    done = run_cli("reproduce", name, "--preset", preset, "--dry-run", "--out", str(out))
    assert done.exit_code == 0, done.output
    resolved = json.loads(done.stdout)
    assert resolved["reproduction"] == name and resolved["preset"] == preset
    assert not out.exists()


def test_heuristic_core_paper_plan_is_the_authors_recipe(tmp_path):
    """The issue's list: AdamW with weight decay 0.01, a 200-step warm-up then linear decay, the Lagrangian on the
    sampled sparsity; one-sided faithfulness and per-seed effective size; top-3 joint row, zero/resample controls,
    all non-core heads in the baseline."""
    done = run_cli("reproduce", "heuristic-core", "--preset", "paper", "--dry-run", "--out", str(tmp_path / "o"))
    plan = json.loads(done.stdout)
    for study in ("mnli", "qqp"):
        steps = plan["steps"][study]
        for cfg in [*steps["prune"]["config_by_sparsity"].values(), steps["effective_size"]["staircase_prune_config"]]:
            assert (cfg["optimizer"], cfg["weight_decay"], cfg["lr_warmup_steps"], cfg["sparsity_estimate"]) == (
                "adamw", 0.01, 200, "sample")
        assert steps["prune"]["config_by_sparsity"]["0.5" if study == "mnli" else "0.3"]["lr_decay"] == "linear"
        assert (steps["effective_size"]["sides"], steps["effective_size"]["aggregate"]) == ("one", "per-seed")
        assert steps["ablation"]["joint_heads"] == "top-3" and steps["ablation"]["non_listed"] == "all"
        assert steps["ablation"]["controls"] == ["zero", "resample"]
    assert plan["steps"]["mnli"]["ood_data"]["subcases"] == "paper"
    assert len(plan["steps"]["mnli"]["prune"]["seeds"]) == 12
