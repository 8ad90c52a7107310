"""`subnetlab reproduce heuristic-core --preset demo` at its smallest size, end to end on MiniLM."""

from __future__ import annotations

import copy

import pytest
import torch

from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.io import read_json

pytestmark = pytest.mark.integration


def smallest_demo() -> dict:
    """The demo preset with every size turned down to the minimum that still exercises each stage."""
    module = get_reproduction("heuristic-core")
    s = copy.deepcopy(settings_for(module, "demo"))
    s["finetune"].update(max_steps=6, batch_size=16, save_every=3, eval_every=3, max_length=48, warmup_ratio=0.0)
    study = s["studies"][0]
    study["task_options"].update(n_train=96, n_eval=40, hans_per_subcase=2)
    study["ood"]["per_subcase"] = 8
    study["real_ood"].update(per_subcase=8, curve_per_subcase=2)
    s["seeds"] = [0, 1]
    s["prune"].update(warmup_steps=6, total_steps=8, train_limit=64, means_examples=64, checkpoint_every=4,
                      eval_batch_size=128, max_length=48)
    s["effective_size"].update(seeds=[0], levels="0.3,0.6", checkpoints=2,
                               prune={"ramp_steps": 3, "hold_steps": 2, "first_ramp_steps": 3})
    s["ablation"]["non_listed"] = 2
    s["attention"].update(examples=4, maps=1, max_length=48)
    return s


@pytest.fixture
def one_thread():
    """Inputs of ~20 tokens gain little from a second thread, and a busy CI machine makes two much slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_demo_at_smallest_size_writes_a_complete_report(tmp_path, one_thread):
    module = get_reproduction("heuristic-core")
    settings = smallest_demo()
    report = module.run(settings, tmp_path / "hc")
    text = report.read_text(encoding="utf-8")
    for heading in ("Setup", "Subnetworks across seeds", "Shared heads: the core", "Ablating the core heads",
                    "Effective size over training", "Attention patterns of the core heads"):
        assert heading in text
    assert "minilm" in text and "demo" in text
    metrics = read_json(tmp_path / "hc" / "metrics.json")
    nli = metrics["studies"]["nli"]
    assert 0 <= nli["core_size"] <= 72 and len(nli["subcases"]) == 4
    core = read_json(tmp_path / "hc" / "nli" / "core" / "metrics.json")
    assert core["n_a"] == 2 and core["n_b"] == 2
    # every figure the report links to exists
    import re

    for rel in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (tmp_path / "hc" / rel).is_file(), rel
    # a rerun resumes: nothing is recomputed and the report is the same apart from the wall time
    stamp = (tmp_path / "hc" / "nli" / "ablation" / "metrics.json").stat().st_mtime_ns
    again = module.run(settings, tmp_path / "hc").read_text(encoding="utf-8")
    assert (tmp_path / "hc" / "nli" / "ablation" / "metrics.json").stat().st_mtime_ns == stamp
    strip = lambda t: re.sub(r"wall time: .* on this machine", "", t)  # noqa: E731
    assert strip(again) == strip(text)
