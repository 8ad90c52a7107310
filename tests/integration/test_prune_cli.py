"""`subnetlab prune` end to end on a tiny BERT with MiniLM's tokenizer: layout, summary, staircase, SIGKILL + resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from subnetlab.cli import main
from subnetlab.io import load_tensors, read_json
from subnetlab.models import build_model, get_adapter, load_model, resolve
from subnetlab.runs.pruned_runs import find_pruned_runs
from subnetlab.subnetwork import Subnetwork
from tests.conftest import REPO, tiny_config

pytestmark = pytest.mark.integration

TASK = ["--task", "nli-synthetic", "--task-option", "n_train=64", "--task-option", "n_eval=16",
        "--task-option", "hans_per_subcase=1"]
FAST = ["--preset", "demo", "--set", "batch_size=8", "--set", "train_limit=64", "--set", "eval_limit=16",
        "--set", "means_examples=32", "--set", "checkpoint_every=4", "--set", "eval_batch_size=32",
        "--set", "max_length=48", "--set", "init_log_alpha=3"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny BERT (2 layers x 4 heads, 3 labels) saved with MiniLM's tokenizer, as a fine-tuned run would be."""
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    config = tiny_config("bert")
    config.vocab_size = len(tok)
    loaded = build_model(config, head="classification", seed=0)
    d = tmp_path_factory.mktemp("tiny-bert")
    loaded.model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def prune_cli(checkpoint: Path, out: Path, *extra: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["prune", "--model", str(checkpoint), *TASK, *FAST, "--out", str(out), *extra])
    assert exit_info.value.code == 0


def test_linear_sweep_layout_summary_and_skip(checkpoint: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    prune_cli(checkpoint, out, "--sparsity", "0.5", "--seeds", "0-1", "--set", "total_steps=12", "--set", "warmup_steps=8")
    printed = capsys.readouterr().out
    assert "sparsity 50%: 2 seed(s)" in printed and "hans-synthetic" in printed
    adapter = get_adapter(load_model(str(checkpoint), head="classification").model)
    for seed in (0, 1):
        run = out / "sparsity-0.50" / f"seed-{seed}"
        for name in ("config.json", "metrics.json", "subnetwork.safetensors", "subnetwork-threshold.safetensors",
                     "history.json", "checkpoint.safetensors", "checkpoint.json"):
            assert (run / name).is_file(), name
        metrics = read_json(run / "metrics.json")
        assert metrics["sparsity"] == 0.5 and metrics["seed"] == seed and metrics["selection"] == "topk"
        assert set(metrics["selections"]) == {"topk", "threshold", "jaccard", "undecided_gates", "gates"}
        assert 0 <= metrics["selections"]["undecided_gates"] <= metrics["selections"]["gates"]
        assert set(metrics["eval"]) == {"id", "hans-synthetic"} and "subcases" in metrics["eval"]["hans-synthetic"]
        sub = Subnetwork.load(run / "subnetwork.safetensors", adapter=adapter)
        assert sub.seed == seed and sub.target_sparsity == 0.5 and sub.method == "hard-concrete"
        assert sub.kept_names() == metrics["selections"]["topk"]["kept"]
        assert read_json(run / "config.json")["prune"]["total_steps"] == 12
    summary = read_json(out / "summary.json")
    rows = summary["0.50"]["rows"]
    assert summary["0.50"]["seeds"] == 2 and rows["id"]["n"] == 2 and rows["id"]["model"] is not None
    assert any(name.startswith("hans-synthetic/") for name in rows)
    assert len(list((out / "cache").glob("means-*.safetensors"))) == 1  # shared by both seeds
    assert [r.seed for r in find_pruned_runs(out)] == [0, 1]  # what the Heuristic Core analyses read
    prune_cli(checkpoint, out, "--sparsity", "0.5", "--seeds", "0-1", "--set", "total_steps=12", "--set", "warmup_steps=8")
    assert {j["status"] for j in read_json(out / "sweep.json")["jobs"]} == {"skipped"}
    assert read_json(out / "summary.json") == summary


def test_staircase_writes_every_level(checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "stairs"
    prune_cli(checkpoint, out, "--seeds", "0", "--schedule", "staircase", "--levels", "0.2,0.4",
              "--set", "ramp_steps=4", "--set", "hold_steps=3", "--set", "first_ramp_steps=6")
    run = out / "staircase" / "seed-0"
    metrics = read_json(run / "metrics.json")
    assert set(metrics["levels"]) == {"0.20", "0.40"} and metrics["steps"] == 16
    for level in ("0.20", "0.40"):
        sub = Subnetwork.load(run / "levels" / level / "subnetwork.safetensors")
        assert sub.target_sparsity == float(level) and sub.sparsity == pytest.approx(float(level))
        assert read_json(run / "levels" / level / "metrics.json")["eval"]["id"]["n"] == 16
    assert set(read_json(out / "summary.json")) == {"0.20", "0.40"}


def test_sigkill_then_rerun_is_bit_identical(checkpoint: Path, tmp_path: Path) -> None:
    steps = ["--sparsity", "0.5", "--seeds", "3", "--set", "total_steps=60", "--set", "warmup_steps=40"]
    prune_cli(checkpoint, tmp_path / "whole", *steps)
    killed = tmp_path / "killed"
    run = killed / "sparsity-0.50" / "seed-3"
    cmd = [sys.executable, "-m", "subnetlab.cli", "prune", "--model", str(checkpoint), *TASK, *FAST,
           "--out", str(killed), *steps]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    try:
        while time.time() < deadline and proc.poll() is None:
            state = run / "checkpoint.json"
            if state.is_file() and json.loads(state.read_text())["step"] >= 8:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (run / "metrics.json").exists()  # killed mid-run
    prune_cli(checkpoint, killed, *steps)
    whole = tmp_path / "whole" / "sparsity-0.50" / "seed-3"
    assert read_json(run / "metrics.json")["resumed_from"] >= 8
    a, b = load_tensors(whole / "checkpoint.safetensors"), load_tensors(run / "checkpoint.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    sa, sb = Subnetwork.load(whole / "subnetwork.safetensors"), Subnetwork.load(run / "subnetwork.safetensors")
    assert torch.equal(sa.heads, sb.heads) and torch.equal(sa.mlps, sb.mlps) and sa.metadata() == sb.metadata()
    assert read_json(whole / "history.json") == read_json(run / "history.json")
