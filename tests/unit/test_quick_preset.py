"""``--preset quick``: a user's own small model pruned in minutes, its steps by the formula its help states."""

from __future__ import annotations

import pytest

from subnetlab.cli import main
from subnetlab.methods.head_pruning.config import PRESETS, preset_config


@pytest.mark.parametrize("sparsity, warmup, total", [(0.5, 200, 225), (0.7, 240, 275)])
def test_quick_steps_follow_100_plus_2sp_then_sp_over_2(sparsity, warmup, total):
    cfg = preset_config("quick", sparsity, seed=1)
    assert (cfg.warmup_steps, cfg.total_steps) == (warmup, total)
    assert (cfg.batch_size, cfg.accumulation, cfg.max_length, cfg.train_limit) == (16, 1, 64, 2000)
    paper = preset_config("paper", sparsity)
    assert cfg.total_steps * cfg.effective_batch * 100 < paper.total_steps * paper.effective_batch  # rows seen


def test_quick_is_its_own_copy_of_the_demo_sizes():
    assert PRESETS["quick"] == PRESETS["demo"] and PRESETS["quick"] is not PRESETS["demo"]


@pytest.mark.parametrize("command", ["prune", "effective-size"])
def test_the_help_states_what_quick_costs(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "quick (your own small model on a CPU: 225-275 steps of 16 rows per run, minutes per sweep)" in text
