"""`reproduce lottery` at its smallest size on the real MiniLM, end to end, then resumed; the CLI on its outputs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.io import read_json
from subnetlab.runtime import torch_threads
from subnetlab.subnetwork import Subnetwork

pytestmark = pytest.mark.integration

SMALLEST = {
    "task_options": {"nli-synthetic": {"n_train": 48, "n_eval": 16, "hans_per_subcase": 1}},
    "seeds": [0, 1], "max_steps": 2, "batch_size": 16, "eval_limit": 16, "importance_limit": 16,
    "prune_max_steps": 2, "pattern_pairs": 2,
    # in-process: the kill test stops the study's own process at a write, which a worker process would absorb
    "backend": "local", "jobs": None,
}


def _without_invocation_time(report: str) -> str:
    """The report minus the one line that changes on a rerun: how long this invocation took."""
    return "\n".join(line for line in report.splitlines() if "this invocation took" not in line)


def smallest() -> dict:
    return settings_for(get_reproduction("lottery"), "demo", {k: v for k, v in SMALLEST.items()}).to_dict()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One uninterrupted smallest run (one thread), shared by the tests below: (out, report text)."""
    out = tmp_path_factory.mktemp("lottery") / "lottery"
    with torch_threads(1):
        yield out, get_reproduction("lottery").run(smallest(), out).read_text()


def test_lottery_demo_smallest_end_to_end(demo, tmp_path):
    module = get_reproduction("lottery")
    settings = smallest()
    out, text = demo
    for heading in ("pruning and re-fine-tuning", "stability across fine-tuning seeds", "attention pattern types"):
        assert heading in text
    for fig in ("tickets", "pruning", "survival", "patterns"):
        assert (out / "figures" / f"nli-synthetic-{fig}.png").stat().st_size > 1000
    task = out / "nli-synthetic"
    good = Subnetwork.load(task / "prune" / "importance-seed0" / "subnetwork.safetensors")
    bad = Subnetwork.load(task / "prune" / "importance-seed0" / "bad.safetensors")
    rnd = Subnetwork.load(task / "prune" / "importance-seed0" / "random.safetensors")
    assert good.kind == "structured" and good.heads.shape == (6, 12)
    assert int(bad.heads.sum()) == int(rnd.heads.sum()) == int(good.heads.sum())
    m_good = Subnetwork.load(task / "prune" / "magnitude-seed0" / "subnetwork.safetensors")
    assert m_good.kind == "weights" and len(m_good.weights) == 6 * 6
    metrics = read_json(out / "metrics.json")["tasks"]["nli-synthetic"]
    assert set(metrics["retrain"]) == {f"{m}-{c}-seed0" for m in ("magnitude", "importance") for c in ("good", "random", "bad")}
    assert metrics["stability"]["seeds"] == [0, 1]
    assert set(metrics["prune"]["magnitude-seed0"]["controls_metric"]) == {"random", "bad"}

    # a rerun resumes: every job is skipped, the report is rewritten from the same numbers
    assert _without_invocation_time(module.run(settings, out).read_text()) == _without_invocation_time(text)

    # the CLI re-fine-tunes a saved control with its mask pinned
    result = subprocess.run(
        [sys.executable, "-m", "subnetlab.cli", "lottery-retrain", "--model", "minilm", "--task", "nli-synthetic",
         "--subnetwork", str(task / "prune" / "magnitude-seed0" / "bad.safetensors"), "--out", str(tmp_path / "rt"),
         "--task-option", "n_train=32", "--task-option", "n_eval=16", "--task-option", "hans_per_subcase=1",
         "--max-steps", "1", "--batch-size", "16", "--eval-limit", "16", "--no-save-model"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "bad" in result.stdout and (tmp_path / "rt" / "metrics.json").is_file()
    used = Subnetwork.load(tmp_path / "rt" / "subnetwork.safetensors")
    assert all(torch.equal(used.weights[n], Subnetwork.load(task / "prune" / "magnitude-seed0" / "bad.safetensors").weights[n])
               for n in used.weights)


def test_demo_killed_mid_pruning_resumes_to_the_same_results(demo, tmp_path):
    """SIGKILLed once the second s-pruning run has written its subnetwork (its controls and metrics not yet; the
    fine-tuning runs and the first pruning run are done), then rerun: every tensor and JSON result equals the
    uninterrupted run's."""
    from tests.kill_helpers import assert_same_results, run_study_killed

    resumed = tmp_path / "lottery"
    prune = resumed / "nli-synthetic" / "prune"
    run_study_killed("lottery", smallest(), resumed, "nli-synthetic/prune/importance-seed1/subnetwork.safetensors")
    assert (prune / "importance-seed0" / "metrics.json").is_file()
    assert not (prune / "importance-seed1" / "metrics.json").exists() and not (resumed / "metrics.json").exists()
    with torch_threads(1):
        get_reproduction("lottery").run(smallest(), resumed)
    assert assert_same_results(demo[0], resumed) >= 20
