"""`subnetlab reproduce heuristic-core --preset demo` at its smallest size, end to end on MiniLM,
then the analysis commands on what it produced."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from subnetlab.cli import main
from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.io import read_json
from subnetlab.runtime import torch_threads
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.integration


def smallest_demo() -> dict:
    """The demo preset with every size turned down to the minimum that still exercises each stage."""
    module = get_reproduction("heuristic-core")
    s = settings_for(module, "demo").to_dict()
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
    # in-process: the kill test stops the study's own process at a write, which a worker process would absorb
    # (the executor retries a dead worker); the processes backend is the executor's tests' and make demo's
    s["backend"], s["jobs"] = "local", None
    return s


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """One smallest demo run, shared by the tests below (one thread: ~20-token inputs gain little
    from a second one, and lose much on a busy CI machine)."""
    out = tmp_path_factory.mktemp("heuristic-core") / "hc"
    with torch_threads(1):
        get_reproduction("heuristic-core").run(smallest_demo(), out)
        yield out


def test_demo_writes_a_complete_report(demo):
    text = (demo / "report.md").read_text(encoding="utf-8")
    for heading in ("Setup", "Subnetworks across seeds", "Shared heads: the core", "Ablating the core heads",
                    "Effective size over training", "Attention patterns of the core heads"):
        assert heading in text
    assert "`minilm`" in text and "**demo**" in text
    nli = read_json(demo / "metrics.json")["studies"]["nli"]
    core = read_json(demo / "nli" / "core" / "metrics.json")
    assert core["n_a"] == 2 and core["n_b"] == 2 and nli["core"] == core["core"]
    assert len(nli["subcases"]) == 4 and isinstance(nli["alike_id_spread_ood"], bool)
    assert (demo / "nli" / "data" / "real.tsv").is_file() == (SHARED_DATA / "hans").is_dir()
    # the ablation table: entailment columns of the chosen heuristics beside the non-entailment subcases, control rows
    abl = read_json(demo / "nli" / "ablation" / "metrics.json")
    assert any(c.startswith("ood-entailed:") for c in abl["columns"])
    assert {("single", "zero"), ("single", "resample")} <= {(r["kind"], r["replacement"]) for r in abl["rows"]}
    assert "Entailed [" in text and "undecided gates per seed" in text
    assert all(u is not None for u in nli["undecided_share"].values()) and nli["undecided_share"]
    # one source per model: Figure 1's points are the effective-size sweep's full-model accuracies at the same step
    curves = read_json(demo / "nli" / "curves" / "curves.json")
    for c in read_json(demo / "nli" / "effective_size" / "metrics.json")["checkpoints"]:
        at = curves["step"].index(c["step"])
        assert (curves["id"][at], curves["ood"][at]) == (c["id_accuracy"], c["ood_accuracy"])
    for rel in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):  # every linked figure exists
        assert (demo / rel).is_file(), rel


def test_rerun_resumes_without_recomputing(demo):
    text = (demo / "report.md").read_text(encoding="utf-8")
    stamps = {p: p.stat().st_mtime_ns for p in demo.rglob("metrics.json") if p.parent != demo}
    with torch_threads(1):
        again = get_reproduction("heuristic-core").run(smallest_demo(), demo).read_text(encoding="utf-8")
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    strip = lambda t: re.sub(r"wall time: .* on this machine", "", t)  # noqa: E731
    assert strip(again) == strip(text)


def cli(*args: str) -> int:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    return int(e.value.code)


def test_analysis_commands_on_the_demo_outputs(demo, tmp_path, capsys):
    model = demo / "nli" / "finetune" / "model"
    core = demo / "nli" / "core"
    task_opts = ["--task-option", "n_train=96", "--task-option", "n_eval=40", "--task-option", "hans_per_subcase=2"]
    heads = read_json(core / "metrics.json")["core"] or ["L0.H0"]
    spec = f"core:{core}" if read_json(core / "metrics.json")["core"] else ",".join(heads)
    assert cli("ablate", "--model", model, "--task", "nli-synthetic", *task_opts, "--heads", spec, "--non-listed", "1",
               "--subcases", "ln_subject/object_swap,cn_embedded_under_if", "--means-examples", "32",
               "--max-length", "48", "--out", tmp_path / "ablate") == 0
    table = read_json(tmp_path / "ablate" / "metrics.json")
    assert table["columns"] == ["id", "ln_subject/object_swap", "cn_embedded_under_if"]
    assert [r["label"] for r in table["rows"][2:2 + len(heads)]] == heads
    pairs = demo / "nli" / "data" / "attention.jsonl"
    assert cli("attention", "--model", model, "--data", pairs, "--format", "paws-qqp", "--heads", spec,
               "--examples", "3", "--maps", "1", "--out", tmp_path / "att") == 0
    att = read_json(tmp_path / "att" / "metrics.json")
    assert att["examples"] == 3 and len(att["heads"]) == 72 and [r["head"] for r in att["selected"]] == heads
    assert cli("effective-size", "--checkpoints", demo / "nli" / "finetune", "--task", "nli-synthetic", *task_opts,
               "--seeds", "1", "--levels", "0.5", "--every", "2", "--preset", "demo", "--on", "id,ood",
               "--set", "ramp_steps=2", "--set", "hold_steps=2", "--set", "first_ramp_steps=2",
               "--set", "train_limit=32", "--set", "means_examples=32", "--set", "max_length=48",
               "--subcases", "ln_subject/object_swap", "--core", core, "--out", tmp_path / "es") == 0
    es = read_json(tmp_path / "es" / "metrics.json")
    assert [c["step"] for c in es["checkpoints"]] == [3, 6] and es["on"] == ["id", "ood"]
    assert (tmp_path / "es" / "effective_size.png").is_file()
    capsys.readouterr()
    assert cli("ablate", "--model", model, "--task", "nli-synthetic", "--heads", "L99.H0", "--out", tmp_path / "x") == 2
    assert "L99.H0" in capsys.readouterr().err


def test_demo_killed_mid_pruning_resumes_to_the_same_results(demo, tmp_path):
    """SIGKILLed at the second pruning run's first checkpoint (seed 1 at 50%; fine-tuning, the data and seed 0 are
    done), then rerun: every tensor and JSON result equals the uninterrupted run's (``demo``)."""
    from tests.kill_helpers import assert_same_results, run_study_killed

    resumed = tmp_path / "hc"
    run_study_killed("heuristic-core", smallest_demo(), resumed, "nli/prune/sparsity-0.50/seed-1/checkpoint.json")
    assert (resumed / "nli" / "prune" / "sparsity-0.50" / "seed-0" / "metrics.json").is_file()
    assert not (resumed / "nli" / "prune" / "sparsity-0.50" / "seed-1" / "metrics.json").exists()
    with torch_threads(1):
        get_reproduction("heuristic-core").run(smallest_demo(), resumed)
    assert read_json(resumed / "nli" / "prune" / "sparsity-0.50" / "seed-1" / "metrics.json")["resumed_from"] == 4
    # timings.json: one record per invocation of the study
    assert assert_same_results(demo, resumed, skip_files={"timings.json"}) >= 30
