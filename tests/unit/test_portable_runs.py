"""Portable run directories: paths stored relative to the run directory (or absolute when outside), configs
compared by meaning. The same `prune` with `--out` spelled relative or absolute, or a sweep directory copied
elsewhere, is reused instead of refused."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json
from subnetlab.models import resolve
from subnetlab.run_directory import absolute_inputs, check_config, resolve_run_path, run_relative, same_config
from subnetlab.tasks import NLI3


@pytest.fixture(autouse=True)
def one_thread(one_thread):
    yield


def test_paths_are_stored_relative_to_the_run_directory_and_read_back(tmp_path: Path) -> None:
    run = tmp_path / "sweep" / "sparsity-0.50" / "seed-0"
    assert run_relative(tmp_path / "sweep" / "cache", run) == "../../cache"
    assert resolve_run_path("../../cache", run) == str(tmp_path / "sweep" / "cache")
    assert resolve_run_path("/abs/cache", run) == "/abs/cache" and resolve_run_path(None, run) is None


def test_local_inputs_become_absolute_and_names_stay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ft").mkdir()
    (tmp_path / "hans.tsv").write_text("x\n")
    (tmp_path / "train.csv").write_text("x\n")
    got = absolute_inputs({"model": "ft", "task": "file:train.csv", "eval_data": ["hans:hans=hans.tsv", "x=missing"],
                           "splits": None})
    assert got == {"model": str(tmp_path / "ft"), "task": f"file:{tmp_path / 'train.csv'}",
                   "eval_data": [f"hans:hans={tmp_path / 'hans.tsv'}", "x=missing"], "splits": None}
    assert absolute_inputs({"model": "minilm", "task": "nli-synthetic"}) == {"model": "minilm", "task": "nli-synthetic"}


def test_configs_are_compared_by_meaning_not_spelling(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "out" / "sparsity-0.50" / "seed-0"
    stored = {"model": str(tmp_path / "ft"), "cache_dir": "../../cache", "prune": {"seed": 0}}
    assert same_config(stored, {**stored, "cache_dir": str(tmp_path / "out" / "cache")}, run)
    assert same_config(stored, {**stored, "model": "ft"}, run)  # relative to the working directory
    legacy = {**stored, "cache_dir": "out/cache"}  # how earlier versions stored it: from the working directory
    assert same_config(legacy, stored, run)
    assert not same_config(stored, {**stored, "cache_dir": "../cache"}, run)
    assert not same_config(stored, {**stored, "model": str(tmp_path / "other")}, run)
    assert not same_config(stored, {**stored, "prune": {"seed": 1}}, run)
    assert not same_config({"ablation": "zero"}, {"ablation": "mean"}, run)
    assert same_config({"eval_data": ["hans=data/h.tsv"]}, {"eval_data": [f"hans={tmp_path / 'data/h.tsv'}"]}, run)
    assert not same_config({"eval_data": ["hans=data/h.tsv"]}, {"eval_data": [f"hans2={tmp_path / 'data/h.tsv'}"]}, run)
    run.mkdir(parents=True)
    (run / "config.json").write_text('{"model": "m", "cache_dir": "../../cache"}')
    assert check_config(run, {"model": "m", "cache_dir": str(tmp_path / "out" / "cache")})
    with pytest.raises(SubnetlabError, match="differs in cache_dir"):
        check_config(run, {"model": "m", "cache_dir": str(tmp_path / "elsewhere")})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3, initializer_range=0.3,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    where = tmp_path_factory.mktemp("tiny") / "model"
    BertForSequenceClassification(config).eval().save_pretrained(where)
    tok.save_pretrained(where)
    return where


SMALL = ["--set", "batch_size=8", "--set", "train_limit=24", "--set", "means_examples=16", "--set", "eval_batch_size=16",
         "--set", "max_length=24", "--set", "warmup_steps=2", "--set", "total_steps=4", "--set", "checkpoint_every=2"]


def prune(model: Path | str, out: Path | str) -> None:
    with pytest.raises(SystemExit) as done:
        main(["prune", "--model", str(model), "--task", "nli-synthetic", "--task-option", "n_train=24",
              "--task-option", "n_eval=8", "--task-option", "hans_per_subcase=1", "--sparsity", "0.5", "--seeds", "0",
              "--preset", "demo", *SMALL, "--out", str(out)])
    assert done.value.code in (0, None)


def saved(path: Path) -> tuple[dict, dict]:
    """A safetensors file's tensors (as bytes: bit-exact) and metadata (its order in the header varies by process)."""
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k).numpy().tobytes() for k in f.keys()}, f.metadata()


def statuses(out: Path) -> dict[str, str]:
    return {job["name"]: job["status"] for job in read_json(out / "sweep.json")["jobs"]}


def test_prune_with_out_relative_then_absolute_then_copied_reuses_the_runs(model_dir: Path, tmp_path: Path,
                                                                           monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    os.symlink(model_dir, tmp_path / "ft")
    prune("ft", "runs/prune")  # everything spelled relative to the working directory
    out = tmp_path / "runs" / "prune"
    assert set(statuses(out).values()) == {"done"}
    config = read_json(out / "sparsity-0.50" / "seed-0" / "config.json")
    assert config["cache_dir"] == "../../cache" and config["model"] == str(tmp_path / "ft")
    metrics = read_json(out / "sparsity-0.50" / "seed-0" / "metrics.json")
    subnetwork = saved(out / "sparsity-0.50" / "seed-0" / "subnetwork.safetensors")

    prune(tmp_path / "ft", out)  # the same command, spelled absolute: every run is reused, nothing redone
    assert set(statuses(out).values()) == {"skipped"}
    assert read_json(out / "sparsity-0.50" / "seed-0" / "metrics.json") == metrics

    copy = tmp_path / "elsewhere" / "prune-copy"
    shutil.copytree(out, copy)
    monkeypatch.chdir(tmp_path / "elsewhere")  # from another working directory too
    prune(tmp_path / "ft", "prune-copy")
    assert set(statuses(copy).values()) == {"skipped"}
    assert saved(copy / "sparsity-0.50" / "seed-0" / "subnetwork.safetensors") == subnetwork

    # an unfinished run in the copy resumes there, with the copy's own cache (the original is not touched)
    (copy / "sparsity-0.50" / "seed-0" / "metrics.json").unlink()
    shutil.rmtree(copy / "cache")
    prune(tmp_path / "ft", "prune-copy")
    assert statuses(copy)["sparsity-0.50/seed-0"] == "done"
    assert list((copy / "cache").glob("means-*.safetensors"))
    assert saved(copy / "sparsity-0.50" / "seed-0" / "subnetwork.safetensors") == subnetwork


# --- the other commands: a run directory copied elsewhere, rerun from another working directory with the model
# spelled relative to it, is recognised as the same run (its input files are stored absolute) ---------------------

NLI_SMALL = ["--task", "nli-synthetic", "--task-option", "n_train=24", "--task-option", "n_eval=8",
             "--task-option", "hans_per_subcase=1"]


def cli(*args: str | Path) -> None:
    with pytest.raises(SystemExit) as done:
        main([str(a) for a in args])
    assert done.value.code in (0, None)


def copied_and_rerun(tmp_path: Path, monkeypatch, model: Path, command: list[str], run_name: str, *,
                     summary: bool = False) -> tuple[Path, Path]:
    """Run ``command`` from ``A`` with ``--model m`` (a link to ``model``), copy its run directory to ``B``, rerun it
    there from ``B`` with ``--model ../A/m``: no finished run is redone (``summary``: the command's own
    ``metrics.json`` summarises its jobs and is rewritten). Returns (original, copy)."""
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    os.symlink(model, tmp_path / "A" / "m")
    monkeypatch.chdir(tmp_path / "A")
    cli(*command, "--model", "m", "--out", run_name)
    original = tmp_path / "A" / run_name
    copy = tmp_path / "B" / run_name
    shutil.copytree(original, copy)  # keeps the files' times
    finished = {p: p.stat().st_mtime_ns for p in copy.rglob("metrics.json") if not (summary and p.parent == copy)}
    monkeypatch.chdir(tmp_path / "B")
    cli(*command, "--model", "../A/m", "--out", run_name)
    assert finished and {p: p.stat().st_mtime_ns for p in finished} == finished  # nothing redone
    return original, copy


def test_finetune_copied_and_rerun_elsewhere_with_a_relative_model_is_the_same_finished_run(
        model_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    command = ["finetune", *NLI_SMALL, "--max-steps", "2", "--batch-size", "8", "--max-length", "24",
               "--eval-limit", "8", "--device", "cpu"]
    original, copy = copied_and_rerun(tmp_path, monkeypatch, model_dir, command, "ft")
    assert read_json(original / "config.json")["finetune"]["model"] == str(tmp_path / "A" / "m")
    assert read_json(copy / "metrics.json") == read_json(original / "metrics.json")
    # a model at another path is still another run
    shutil.copytree(model_dir, tmp_path / "B" / "other")
    with pytest.raises(SystemExit) as refused:
        main([*command, "--model", "other", "--out", "ft"])
    assert refused.value.code == 2
    assert "holds a fine-tuning run with a different configuration (model)" in capsys.readouterr().err


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> Path:
    from transformers import GPT2LMHeadModel

    from subnetlab.methods.finetune.model import arithmetic_gpt2_config

    torch.manual_seed(0)
    where = tmp_path_factory.mktemp("gpt2") / "model"
    GPT2LMHeadModel(arithmetic_gpt2_config(2, 23, 21)).save_pretrained(where)
    return where


def test_discover_copied_and_rerun_elsewhere_with_a_relative_model_skips_its_runs(gpt2_dir: Path, tmp_path: Path,
                                                                                    monkeypatch) -> None:
    command = ["discover", "--task", "arith:ab", "--samples", "40", "--task-option", "n_eval=10",
               "--task-option", "n_test=10", "--epochs", "1", "--lambdas", "1e-6", "--batch-size", "20",
               "--device", "cpu"]
    original, copy = copied_and_rerun(tmp_path, monkeypatch, gpt2_dir, command, "cs", summary=True)
    assert read_json(original / "config.json")["model"] == str(tmp_path / "A" / "m")
    assert set(statuses(original).values()) == {"done"} and set(statuses(copy).values()) == {"skipped"}
    assert saved(copy / "lambda_1e-06" / "subnetwork.safetensors") == saved(original / "lambda_1e-06" / "subnetwork.safetensors")


def test_lottery_prune_copied_and_rerun_elsewhere_with_a_relative_model_is_the_same_finished_run(
        model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    command = ["lottery-prune", *NLI_SMALL, "--method", "magnitude", "--batch-size", "8", "--max-length", "24",
               "--max-steps", "1", "--device", "cpu"]
    original, copy = copied_and_rerun(tmp_path, monkeypatch, model_dir, command, "lt")
    assert read_json(original / "config.json")["model"] == str(tmp_path / "A" / "m")
    assert saved(copy / "subnetwork.safetensors") == saved(original / "subnetwork.safetensors")
