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
    from subnetlab.run_directory import check_config

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=23, n_embd=16, n_layer=1, n_head=2, n_positions=8)).save_pretrained(tmp_path / "lm")
    config = {"model": str(tmp_path / "lm"), "task": "arith:ab", "task_options": {"n_train": 40, "n_eval": 10, "n_test": 10},
              "seed": 0, "threads": 1, "device": "auto",
              "cs": {"epochs": 1, "lr": 0.01, "batch_size": 20, "include": ["attention"], "keep": "last", "l0_lambda": 1e-7}}
    execute(Job("subnetlab.runs.transfer:discover_job", config, tmp_path / "run"))
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    assert written["resolved_device"] == "cpu" and written["resolved_dtype"] == "float32"
    assert check_config(tmp_path / "run", {**config, "device": "cuda"})  # the same run on a GPU machine


def _recording(monkeypatch, module, name: str, seen: list) -> None:
    """Replace ``module.name`` by a wrapper that notes whether CPU autocast, and which dtype, is on at each call."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("lm")
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=16,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(root / "lm")
    tok.save_pretrained(root / "lm")
    words = ["one", "two", "three", "four", "five"]
    (root / "sums.csv").write_text("question,reply\n" + "".join(
        f"{a} plus {b},{words[(i + j) % 5]}\n" for i, a in enumerate(words) for j, b in enumerate(words)))
    return root


def test_discover_and_transfer_run_their_forward_passes_in_the_dtype_and_record_it(tiny_lm, tmp_path, capsys, monkeypatch):
    import subnetlab.runs.transfer as jobs

    seen: list = []
    _recording(monkeypatch, jobs, "accuracy", seen)
    common = ["--model", str(tiny_lm / "lm"), "--task", f"file:{tiny_lm / 'sums.csv'}", "--text-column", "question",
              "--answer-column", "reply"]
    code, err = _cli(capsys, "discover", *common, "--lambdas", "1e-7", "--epochs", "1", "--batch-size", "8",
                     "--dtype", "bfloat16", "--out", str(tmp_path / "d"))
    assert code == 0 and err.splitlines()[0].endswith("device cpu, dtype bfloat16 (autocast)"), err
    assert seen and set(seen) == {torch.bfloat16}  # full model, every evaluation and the test score, all under autocast
    for where in (tmp_path / "d", tmp_path / "d" / "lambda_1e-07"):
        config = json.loads((where / "config.json").read_text())
        assert (config["dtype"], config["resolved_device"], config["resolved_dtype"]) == ("bfloat16", "cpu", "bfloat16")
    code, err = _cli(capsys, "discover", *common, "--lambdas", "1e-7", "--epochs", "1", "--batch-size", "8",
                     "--dtype", "bfloat16", "--device", "cpu", "--out", str(tmp_path / "d"))
    assert code == 0 and "1 already done" in err  # the device named otherwise: the same run

    seen.clear()
    _recording(monkeypatch, jobs, "train_model", seen)
    code, err = _cli(capsys, "transfer", *common, "--condition", "scratch", "--epochs", "1", "--batch-size", "8",
                     "--dtype", "bfloat16", "--out", str(tmp_path / "t"))
    assert code == 0 and seen == [torch.bfloat16], err
    config = json.loads((tmp_path / "t" / "scratch" / "n0_s0" / "config.json").read_text())
    assert (config["dtype"], config["resolved_device"], config["resolved_dtype"]) == ("bfloat16", "cpu", "bfloat16")
    seen.clear()
    code, err = _cli(capsys, "transfer", *common, "--condition", "scratch", "--epochs", "1", "--batch-size", "8",
                     "--out", str(tmp_path / "t32"))
    assert code == 0 and None in seen and torch.bfloat16 not in seen  # float32: no autocast
    config = json.loads((tmp_path / "t32" / "scratch" / "n0_s0" / "config.json").read_text())
    assert "dtype" not in config and config["resolved_dtype"] == "float32"  # float32 configs are as before

    for command in (["discover"], ["transfer", "--condition", "scratch"]):
        code, err = _cli(capsys, command[0], *common, *command[1:], "--dtype", "float16", "--out", str(tmp_path / "f16"))
        assert code == 2 and err.strip().splitlines()[-1].startswith("error: --dtype float16: half-precision forward "
                                                                     "passes run on CUDA or Apple mps only"), err
        assert not (tmp_path / "f16").exists()


def test_lottery_prune_and_retrain_autocast_record_and_resume(data_and_model, tmp_path, capsys, monkeypatch):
    import subnetlab.runs.lottery as jobs

    root = data_and_model
    seen: list = []
    _recording(monkeypatch, jobs, "evaluate", seen)
    prune = ["lottery-prune", "--model", str(root / "m"), "--task", f"file:{root / 'd.csv'}", "--method", "magnitude",
             "--max-steps", "2", "--max-length", "16", "--out", str(tmp_path / "lp")]
    code, err = _cli(capsys, *prune, "--dtype", "bfloat16")
    assert code == 0 and "device cpu, dtype bfloat16 (autocast)" in err, err
    assert seen and set(seen) == {torch.bfloat16}  # the full model, every step and both controls
    config = json.loads((tmp_path / "lp" / "config.json").read_text())
    assert (config["dtype"], config["device"], config["resolved_device"], config["resolved_dtype"]) == (
        "bfloat16", "auto", "cpu", "bfloat16")
    code, err = _cli(capsys, *prune, "--dtype", "bfloat16", "--device", "cpu")
    assert code == 0 and "already finished" in err
    code, err = _cli(capsys, *prune)  # float32 is another run
    assert code == 2 and "dtype" in err.strip().splitlines()[-1]

    seen.clear()
    _recording(monkeypatch, jobs, "train_masked", seen)
    retrain = ["lottery-retrain", "--model", str(root / "m"), "--subnetwork", str(tmp_path / "lp" / "subnetwork.safetensors"),
               "--task", f"file:{root / 'd.csv'}", "--max-steps", "2", "--batch-size", "4", "--max-length", "16",
               "--no-save-model"]
    code, err = _cli(capsys, *retrain, "--dtype", "bfloat16", "--out", str(tmp_path / "lr"))
    assert code == 0 and seen == [torch.bfloat16], err
    config = json.loads((tmp_path / "lr" / "config.json").read_text())
    assert config["finetune"]["dtype"] == "bfloat16" and config["resolved_dtype"] == "bfloat16"
    code, err = _cli(capsys, *prune[:-1], str(tmp_path / "f16"), "--dtype", "float16")
    assert code == 2 and "error: --dtype float16: half-precision forward passes run on CUDA" in err
    code, err = _cli(capsys, *retrain, "--dtype", "float16", "--out", str(tmp_path / "f16"))
    assert code == 2 and "error: --dtype float16 has no loss scaling" in err
    assert not (tmp_path / "f16").exists()


def test_the_lottery_dtype_follows_the_device_auto_picks(monkeypatch):
    from subnetlab.cli.commands.lottery import forward_dtype
    from subnetlab.errors import SubnetlabError
    from subnetlab.runs.transfer import check_dtype_name

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert forward_dtype("float16", "auto") == "float16"  # a GPU machine: half precision allowed
    assert forward_dtype("float32", "auto") is None and forward_dtype(None, "auto") is None  # float32: the earlier config
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("subnetlab.runtime._mps_available", lambda: False)
    with pytest.raises(SubnetlabError, match="dtype float16: half-precision"):
        forward_dtype("float16", "auto")  # auto is the CPU here
    assert forward_dtype("bfloat16", "auto") == "bfloat16"
    with pytest.raises(SubnetlabError, match="dtype 'half': expected float32, bfloat16, float16"):
        check_dtype_name("half")  # a job config naming no known precision


def _fake_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Fake GPU")


def test_on_a_gpu_float16_is_refused_where_gradients_are_trained(data_and_model, tiny_lm, tmp_path, capsys, monkeypatch):
    """A monkeypatched CUDA machine: auto picks it, float16 passes the device check, and the commands that
    train (discover, transfer, importance pruning, re-fine-tuning) refuse it for want of loss scaling."""
    _fake_gpu(monkeypatch)
    lm = ["--model", str(tiny_lm / "lm"), "--task", f"file:{tiny_lm / 'sums.csv'}", "--text-column", "question",
          "--answer-column", "reply", "--dtype", "float16", "--out", str(tmp_path / "o")]
    for command, what in ((["discover"], "discovery"), (["transfer", "--condition", "scratch"], "transfer training")):
        code, err = _cli(capsys, *command, *lm)
        assert code == 2 and "device cuda:0 (Fake GPU), dtype float16 (autocast)" in err, err
        assert err.strip().splitlines()[-1].startswith(f"error: --dtype float16 has no loss scaling in {what}"), err
    bert = ["--model", str(data_and_model / "m"), "--task", f"file:{data_and_model / 'd.csv'}", "--dtype", "float16",
            "--out", str(tmp_path / "o")]
    code, err = _cli(capsys, "lottery-prune", *bert, "--method", "importance")
    assert code == 2 and "error: --dtype float16 has no loss scaling in importance pruning" in err, err
    code, err = _cli(capsys, "lottery-retrain", *bert, "--subnetwork", str(data_and_model / "d.csv"))
    assert code == 2 and "error: --dtype float16 has no loss scaling in fine-tuning" in err, err  # before the file is read
    assert not (tmp_path / "o").exists()

    from subnetlab.runs.lottery import prune_config

    config = prune_config(model="m", task="nli-synthetic", method="magnitude", dtype="float16")
    assert config["dtype"] == "float16"  # magnitude pruning only scores forward passes: half precision is fine
