"""`subnetlab prune` refuses bad input with one `error:` line and exit status 2, before any job runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.runs.prune_summary import flatten_scores, format_summary, summarize

TASK = ["--task", "nli-synthetic", "--task-option", "n_train=20", "--task-option", "n_eval=10",
        "--task-option", "hans_per_subcase=1"]


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["prune", *args])
    return int(exit_info.value.code), capsys.readouterr().err


@pytest.fixture()
def bert_dir(tmp_path: Path) -> Path:
    """A directory that looks like a BERT checkpoint (config only: nothing is loaded on these paths)."""
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "bert", "num_labels": 3}))
    return d


@pytest.mark.parametrize("args,message", [
    (["--sparsity", "1.5"], "--sparsity: 1.5 is outside (0, 1)"),
    (["--sparsity", "0"], "--sparsity: 0.0 is outside (0, 1)"),
    (["--sparsity", "half"], "--sparsity: malformed value 'half'"),
    (["--sparsity", "0.5", "1.2"], "--sparsity: 1.2 is outside (0, 1)"),
    (["--seeds", "0"], "--sparsity: give at least one target"),
    (["--sparsity", "0.5", "--seeds", "3-1"], "--seeds: malformed value '3-1'"),
    (["--sparsity", "0.5", "--seeds", "a"], "--seeds: malformed value 'a'"),
    (["--sparsity", "0.5", "--schedule", "cosine"], "--schedule 'cosine'"),
    (["--sparsity", "0.5", "--schedule", "staircase", "--levels", "0.3,0.2"], "--levels must increase"),
    (["--sparsity", "0.5", "--set", "lr=-1"], "learning rates must be positive"),
    (["--sparsity", "0.5", "--set", "nonsense=1"], "unknown pruning setting(s) nonsense"),
    (["--sparsity", "0.5", "--ablation", "gaussian"], "ablation 'gaussian'"),
    (["--sparsity", "0.5", "--splits", "id,nope"], "has no evaluation split 'nope' (it has: id, hans-synthetic)"),
    (["--sparsity", "0.5", "--device", "tpu"], "--device 'tpu': expected auto, cpu, cuda, cuda:N or mps"),
])
def test_bad_values(args, message, bert_dir: Path, tmp_path: Path, capsys) -> None:
    code, err = run_cli(["--model", str(bert_dir), *TASK, "--out", str(tmp_path / "out"), *args], capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "out" / "sweep.json").exists()


def test_unsupported_checkpoints(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = run_cli(["--model", str(empty), *TASK, "--sparsity", "0.5", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "not a Hugging Face model directory (no config.json)" in err
    t5 = tmp_path / "t5"
    t5.mkdir()
    (t5 / "config.json").write_text(json.dumps({"model_type": "t5"}))
    code, err = run_cli(["--model", str(t5), *TASK, "--sparsity", "0.5", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "model type 't5' is not supported" in err


def test_summary_is_table5_shaped() -> None:
    def scores(acc: float, sub: float) -> dict:
        return {"id": {"accuracy": acc, "n": 10}, "hans": {"accuracy": sub, "n": 4, "subcases": {"sc1": sub}}}

    summary = summarize({"0.50": [scores(0.8, 0.5), scores(0.6, 0.7)]}, scores(0.9, 0.4))
    row = summary["0.50"]["rows"]["id"]
    assert summary["0.50"]["seeds"] == 2 and set(summary["0.50"]["rows"]) == {"id", "hans", "hans/sc1"}
    assert row["model"] == 0.9 and row["min"] == 0.6 and row["max"] == 0.8
    assert row["mean"] == pytest.approx(0.7) and row["std"] == pytest.approx(0.1414213, abs=1e-6)
    assert flatten_scores(scores(0.8, 0.5))["hans/sc1"] == 0.5
    text = format_summary(summary)
    assert "sparsity 50%: 2 seed(s)" in text and "hans/sc1" in text and "90.0" in text


def test_sparsity_lists() -> None:
    from subnetlab.cli.commands._options import parse_sparsities

    assert parse_sparsities(["0.7", "0.5"]) == [0.5, 0.7]  # --sparsity 0.7 0.5 (the second as an argument)
    with pytest.raises(SubnetlabError, match="--sparsity 0.5 given twice: each target once"):
        parse_sparsities(["0.5,0.7", "0.5"])  # a target twice is refused, not merged (issue 53, class 6)
