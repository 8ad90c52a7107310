"""Subtask Induction's stopping rule per preset: the paper's fixed epochs unchanged; the demo's plateau caps."""

from __future__ import annotations

from pathlib import Path

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.subtask_induction import reproduce
from subnetlab.experiments.subtask_induction.settings import SubtaskInductionSettings
from subnetlab.runs.transfer import DiscoverJobConfig, TransferJobConfig


def _jobs(preset: str, **overrides):
    settings = SubtaskInductionSettings.from_preset(reproduce.PRESETS, preset, overrides or None)
    out = Path("/nonexistent/out")
    transfer = reproduce._transfer_jobs(settings, settings.layers[0], out / "model", str(out / "sub.safetensors"), out)
    discover = reproduce._discover_job(settings, out / "model", settings.lambdas[0], settings.seed, out / "d")
    return settings, transfer, discover


def test_paper_preset_keeps_the_authors_fixed_epochs():
    settings, transfer, discover = _jobs("paper")
    assert "transfer_patience" not in settings.to_dict() and "cs_patience" not in settings.to_dict()
    for job in transfer:  # 100 epochs at every size (transfer_min_steps 0), as before plateau stopping existed
        assert job.config["train"]["epochs"] == 100 and "patience" not in job.config["train"]
        assert TransferJobConfig.from_dict(job.config).settings.plateau is None
    assert discover.config["cs"]["epochs"] == 50 and "patience" not in discover.config["cs"]
    assert DiscoverJobConfig.from_dict(discover.config).strategy.patience is None


@pytest.mark.parametrize("preset", ["demo", "tour"])
def test_demo_presets_stop_at_a_plateau_capped_at_the_fixed_schedule(preset):
    settings, transfer, discover = _jobs(preset)
    for job in transfer:
        size = job.config["runs"][0]["size"]
        train = TransferJobConfig.from_dict(job.config).settings
        assert train.epochs == reproduce.schedule(settings, size)[0]  # the cap: the epochs the fixed run trained
        assert (train.patience, train.min_delta) == (settings.transfer_patience, settings.transfer_min_delta)
    strategy = DiscoverJobConfig.from_dict(discover.config).strategy
    assert strategy.epochs == settings.cs_epochs == 30 and strategy.patience == settings.cs_patience


def test_bad_patience_is_refused_naming_the_setting():
    with pytest.raises(SubnetlabError, match="transfer_patience"):
        SubtaskInductionSettings.from_preset(reproduce.PRESETS, "demo", {"transfer_patience": 0})
