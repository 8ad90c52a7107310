"""`subnetlab reproduce shape-bias` end to end at its smallest size: every step, the report, resuming."""

from __future__ import annotations

import copy
import json

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.models.vision import vision_adapter
from subnetlab.subnetwork import Subnetwork

pytestmark = pytest.mark.integration

SMALL_SIZES = {"pretrain": 96, "train": 48, "discovery": 32, "discovery-eval": 16, "test": 24, "cue-conflict": 24,
               "texture-free": 16}


def _smallest() -> dict:
    module = get_reproduction("shape-bias")
    settings = settings_for(module, "demo", {"num_classes": 2, "image_size": 16, "sizes": SMALL_SIZES}).to_dict()
    for family in ("resnet", "vit"):
        fs = copy.deepcopy(settings[family])
        fs.update(base_steps=6, train_steps=4, mixture_steps=2, linear_steps=2, eval_every=2, batch_size=16)
        fs["discovery"].update(epochs=2, lambdas=[1e-5, 1e-3], init=0.1, lr=0.05)  # starts all-kept: mechanics only
        if family == "resnet":
            fs["model"] = {"hidden_sizes": [8, 16], "depths": [1, 1], "embedding_size": 8}
        else:
            fs["model"] = {"patch_size": 4, "hidden_size": 16, "layers": 1, "heads": 2}
        settings[family] = fs
    return settings


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One uninterrupted smallest run, shared by the tests below: (out, report text)."""
    out = tmp_path_factory.mktemp("shape-bias")
    return out, get_reproduction("shape-bias").run(_smallest(), out).read_text()


def test_demo_smallest_runs_reports_and_resumes(demo):
    module = get_reproduction("shape-bias")
    settings = _smallest()
    tmp_path, text = demo
    assert "## Table 1 analogue" in text and "## Table 2 analogue" in text and "training_curves.png" in text
    assert (tmp_path / "training_curves.png").is_file() and (tmp_path / "examples.png").is_file()
    assert "## Notes: the paper's text, the authors' released vision code" in text and "`vision/vision_ablate.py`" in text
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    timing = metrics.pop("timing")
    assert timing["cpu_s"] > 0 and timing["wall_s"] > 0
    assert set(metrics) == {"resnet", "vit"}
    for family, m in metrics.items():
        assert set(m["table1"]) == set(settings["conditions"])
        for row in m["table1"].values():
            for key in ("original", "mean-pooled", "cue-conflict/accuracy", "cue-conflict/robustness"):
                assert 0.0 <= row[key] <= 1.0
            # robustness >= accuracy: a shape decision is never a texture decision
            assert row["cue-conflict/robustness"] >= row["cue-conflict/accuracy"]
        assert 0.0 < m["table2"]["kept_fraction"] <= 1.0
        assert f"{family.replace('resnet', 'ResNet').replace('vit', 'ViT')} + Subtask Induction" in text
    # the subnetwork file fits the base model (fingerprint) and masks exactly the vision targets
    from subnetlab.experiments.shape_bias.data import prepare_data
    from subnetlab.experiments.shape_bias.models import base_model
    from subnetlab.models.vision import vision_weight_matrices

    data = prepare_data(module.Settings.from_dict(settings), tmp_path)
    base, _ = base_model("resnet", settings["resnet"], data, tmp_path / "resnet", 16, 0)
    sub = Subnetwork.load(tmp_path / "resnet" / "subnetwork.safetensors", adapter=vision_adapter(base))
    assert sorted(sub.weights) == sorted(vision_weight_matrices(base))
    # a rerun finds every step done and reproduces the same metrics without training
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "resnet").glob("*.json")}
    module.run(settings, tmp_path)
    again = json.loads((tmp_path / "metrics.json").read_text())
    again.pop("timing")
    assert again == metrics
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "resnet").glob("*.json")} == before
    # other settings in the same directory are refused, not silently mixed with the old results
    changed = copy.deepcopy(settings)
    changed["resnet"]["lr"] = 0.5
    with pytest.raises(SubnetlabError, match="other settings"):
        module.run(changed, tmp_path)


def test_demo_killed_after_discovery_resumes_to_the_same_results(demo, tmp_path):
    """SIGKILLed once ResNet's subnetwork is written (its discovery summary not yet: the rerun loads the trained base
    model from its file and discovers again), then rerun: every tensor and JSON result equals the uninterrupted
    run's (``timing``: this invocation's seconds)."""
    from tests.kill_helpers import assert_same_results, run_study_killed

    resumed = tmp_path / "sb"
    run_study_killed("shape-bias", _smallest(), resumed, "resnet/subnetwork.safetensors")
    assert not (resumed / "resnet" / "discovery.json").exists() and not (resumed / "metrics.json").exists()
    get_reproduction("shape-bias").run(_smallest(), resumed)
    assert assert_same_results(demo[0], resumed, ignore_keys={"timing"}) >= 20


def test_released_vision_code_choices_run_end_to_end(tmp_path):
    """ViT with the paper preset's released-code choices: classifier masked, best-latest epoch, reinit masked,
    class-weighted loss."""
    module = get_reproduction("shape-bias")
    settings = _smallest()
    settings["models"], settings["conditions"] = ["vit"], ["subtask-induction", "scratch"]
    settings["vit"].update(transfer_reinit="masked", class_weighted_loss=True)
    settings["vit"]["discovery"].update(keep="best-latest", mask_classifier=True)
    text = module.run(settings, tmp_path).read_text()
    assert "This run: transfer_reinit vit `masked`" in text and "mask_classifier vit `True`" in text
    from subnetlab.experiments.shape_bias.data import prepare_data
    from subnetlab.experiments.shape_bias.models import base_model

    typed = module.Settings.from_dict(settings)  # the study's own settings, as its run built them
    base, _ = base_model("vit", typed.vit, prepare_data(typed, tmp_path), tmp_path / "vit", 16, 0)
    sub = Subnetwork.load(tmp_path / "vit" / "subnetwork.safetensors", adapter=vision_adapter(base))
    assert "classifier.weight" in sub.weights


def test_cli_rejects_unknown_family_without_writing(tmp_path, capsys):
    from subnetlab.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "shape-bias", "--preset", "demo", "--out", str(out), "--set", "models=[cnn]"])
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "cnn" in lines[0]
    assert not (out / "config.json").exists()
