"""--device and --dtype from the command line: the resolved pair printed first and kept in config.json,
float16 refused on the CPU, and a run's device not part of what a rerun must match."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from subnetlab.cli import main
from subnetlab.models import resolve
from subnetlab.progress import set_quiet


@pytest.fixture(scope="module")
def data_and_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("dtype")
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32, max_position_embeddings=64, num_labels=2)).save_pretrained(root / "m")
    tok.save_pretrained(root / "m")
    words = ["cat", "dog", "bird", "fish", "tree", "car", "sun", "rain", "sea", "hill"]
    (root / "d.csv").write_text("text,label\n" + "".join(f"the {w} ran,{'ab'[i % 2]}\n" for i, w in enumerate(words)))
    return root


def _cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    set_quiet(False)
    try:
        with pytest.raises(SystemExit) as done:
            main(list(args))
    finally:
        set_quiet(True)
    return done.value.code, capsys.readouterr().err


def test_evaluate_prints_and_records_the_resolved_device_and_dtype(data_and_model, tmp_path, capsys):
    root = data_and_model
    common = ["evaluate", "--model", str(root / "m"), "--task", f"file:{root / 'd.csv'}", "--max-length", "16"]
    code, err = _cli(capsys, *common, "--out", str(tmp_path / "f32"))
    assert code == 0 and "[subnetlab] device cpu, dtype float32" in err.splitlines()[0]  # the first line said
    code, err = _cli(capsys, *common, "--dtype", "bfloat16", "--out", str(tmp_path / "bf16"))
    assert code == 0 and "device cpu, dtype bfloat16 (autocast)" in err
    config = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert (config["device"], config["dtype"], config["resolved_device"], config["resolved_dtype"]) == (
        "auto", "bfloat16", "cpu", "bfloat16")
    full = json.loads((tmp_path / "f32" / "metrics.json").read_text())["eval"]
    low = json.loads((tmp_path / "bf16" / "metrics.json").read_text())["eval"]
    assert low["n"] == full["n"] == 1
    code, err = _cli(capsys, *common, "--dtype", "float16", "--out", str(tmp_path / "f16"))
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        "error: --dtype float16: half-precision forward passes run on CUDA or Apple mps only")
    assert not (tmp_path / "f16").exists()


def test_finetune_autocasts_records_and_resumes_on_another_device_name(data_and_model, tmp_path, capsys):
    root = data_and_model
    args = ["finetune", "--model", str(root / "m"), "--task", f"file:{root / 'd.csv'}", "--max-steps", "2", "--batch-size", "4",
            "--save-every", "2", "--eval-every", "2", "--max-length", "16", "--out", str(tmp_path / "ft")]
    code, err = _cli(capsys, *args, "--dtype", "bfloat16", "--device", "auto")
    assert code == 0 and "device cpu, dtype bfloat16 (autocast)" in err
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["finetune"]["dtype"] == "bfloat16" and config["resolved_device"] == "cpu"
    code, err = _cli(capsys, *args, "--dtype", "bfloat16", "--device", "cpu")  # the same run, the device named otherwise
    assert code == 0 and "already finished" in err
    code, err = _cli(capsys, *args, "--device", "cpu")  # float32 is another run
    assert code == 2 and "different configuration (dtype)" in err
    code, err = _cli(capsys, *args[:-1], str(tmp_path / "f16"), "--dtype", "float16")
    assert code == 2 and "error: --dtype float16 has no loss scaling" in err and not (tmp_path / "f16").exists()


def test_a_finetune_config_without_dtype_is_the_float32_run():
    from subnetlab.methods.finetune.config import resolve_config

    assert "dtype" not in resolve_config(model="m").to_json()  # runs written before --dtype existed still resume
    assert resolve_config(model="m", dtype="bfloat16").to_json()["dtype"] == "bfloat16"


def test_a_discovery_job_records_where_it_ran_and_resumes_elsewhere(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from subnetlab.executor import Job, execute
    from subnetlab.runs.directory import check_config

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=23, n_embd=16, n_layer=1, n_head=2, n_positions=8)).save_pretrained(tmp_path / "lm")
    config = {"model": str(tmp_path / "lm"), "task": "arith:ab", "task_options": {"n_train": 40, "n_eval": 10, "n_test": 10},
              "seed": 0, "threads": 1, "device": "auto",
              "cs": {"epochs": 1, "lr": 0.01, "batch_size": 20, "include": ["attention"], "keep": "last", "l0_lambda": 1e-7}}
    execute(Job("subnetlab.runs.transfer:discover_job", config, tmp_path / "run"))
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    assert written["resolved_device"] == "cpu" and written["resolved_dtype"] == "float32"
    assert check_config(tmp_path / "run", {**config, "device": "cuda"})  # the same run on a GPU machine
