"""Health on the command line (issue 26): a prune run with too few steps is flagged off target in its
metrics.json and warned about; discover passes over a degenerate lambda; transfer refuses an empty
subnetwork except for the empty-mask control; ``subnetlab --strict`` turns a warning into exit 2."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

from subnetlab.cli import main
from subnetlab.models import resolve
from subnetlab.progress import set_quiet
from subnetlab.runs.health import TARGET_TOLERANCE

WORDS = ["one", "two", "three", "four", "five"]
PAIRS = [("the cat ran", "a dog sat"), ("the sun set", "a sea rose"), ("the car hit", "a tree fell"),
         ("the owl saw", "a fish swam"), ("the rain fell", "a hill stood")]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny GPT-2 and a tiny BERT classifier with MiniLM's tokenizer, sums for the LM, pairs for BERT."""
    root = tmp_path_factory.mktemp("health")
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=16,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(root / "lm")
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=32, max_position_embeddings=64, num_labels=2)).save_pretrained(root / "bert")
    for name in ("lm", "bert"):
        tok.save_pretrained(root / name)
    (root / "sums.csv").write_text("question,reply\n" + "".join(
        f"{a} plus {b},{WORDS[(i + j) % 5]}\n" for i, a in enumerate(WORDS) for j, b in enumerate(WORDS)) * 2)
    (root / "pairs.csv").write_text("first,second,verdict\n" + "".join(
        f"{a} {k},{b},{'yes' if (i + k) % 2 else 'no'}\n" for k in range(8) for i, (a, b) in enumerate(PAIRS)))
    return root


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    set_quiet(False)
    try:
        with pytest.raises(SystemExit) as done:
            main([str(a) for a in args])
    finally:
        set_quiet(True)
    captured = capsys.readouterr()
    return done.value.code, captured.out, captured.err


def _lines(err: str, prefix: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(prefix)]


def _prune(files, out) -> list:
    return ["prune", "--model", files / "bert", "--task", f"file:{files / 'pairs.csv'}", "--text-column", "first",
            "--text-pair-column", "second", "--label-column", "verdict", "--sparsity", "0.5", "--seeds", "0",
            "--preset", "demo", "--set", "total_steps=4", "--set", "warmup_steps=3", "--set", "batch_size=8",
            "--set", "max_length=16", "--set", "means_examples=16", "--device", "cpu", "--out", out]


def test_prune_with_too_few_steps_is_flagged_and_warned(files, tmp_path, capsys):
    code, out, err = _cli(capsys, *_prune(files, tmp_path / "p"))
    assert code == 0, err
    run = tmp_path / "p" / "sparsity-0.50" / "seed-0"
    metrics = json.loads((run / "metrics.json").read_text())
    history = json.loads((run / "history.json").read_text())
    health = metrics["health"]
    assert metrics["sparsity"] == 0.5  # top-k forced the target ...
    assert health["expected_sparsity"] == pytest.approx(history[-1]["expected_sparsity"])  # ... the gates did not move
    assert abs(health["expected_sparsity"] - 0.5) > TARGET_TOLERANCE and "off-target" in health["problems"]
    assert health["gates"] == 6 and health["kept"] == 3  # 2 x 2 heads + 2 MLPs, half kept
    warnings = _lines(err, "warning: ")
    full = json.loads((tmp_path / "p" / "full-model" / "metrics.json").read_text())
    assert full["health"]["problems"] == ["at-chance"]  # 3 of 4 rows right with 2 labels: 1 standard error above 0.5
    assert full["health"]["chance"] == {"split": "eval", "accuracy": 0.75, "n": 4, "labels": 2, "chance": 0.5,
                                        "z": pytest.approx(1.0)}
    assert warnings[0].startswith("warning: full-model: at chance: the full model's accuracy on eval is 0.750 over 4")
    assert warnings[1].startswith("warning: sparsity-0.50/seed-0: off target: expected sparsity")
    assert len(warnings) == 1 + len(health["problems"])
    assert "health: off-target in 1 of 1 seed(s)" in out  # the summary printed
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["0.50"]["health"]["problems"]["off-target"] == 1

    code, out, err = _cli(capsys, "--strict", *_prune(files, tmp_path / "p"))  # the finished run, judged strictly
    errors = [line for line in err.splitlines() if line.strip() and not line.startswith("[subnetlab]")]
    assert code == 2 and len(errors) == 1, err
    assert errors[0].startswith("error: --strict: full-model: at chance") and "more problem(s)" in errors[0]


def _discover(files, out, *more) -> list:
    return ["discover", "--model", files / "lm", "--task", f"file:{files / 'sums.csv'}", "--text-column", "question",
            "--answer-column", "reply", "--epochs", "1", "--batch-size", "64", "--device", "cpu", "--out", out, *more]


def test_discover_passes_over_a_degenerate_lambda_and_transfer_refuses_an_empty_one(files, tmp_path, capsys):
    # lambda 10: the L0 term closes every mask (keeps nothing); lambda 0 from s = 5e-4: an Adam step of lr 1e-3
    # moves each logit by about 1e-3 along its own gradient, so some masks close and some stay open; beta reaches
    # 1e8 in the third (last) epoch, where every logit of size > 3e-8 is decided
    code, out, err = _cli(capsys, *_discover(files, tmp_path / "d", "--lambdas", "10,0", "--init", "5e-4",
                                             "--epochs", "3", "--beta-final", "1e12"))
    assert code == 0, err
    sweep = {row["l0_lambda"]: row for row in json.loads((tmp_path / "d" / "metrics.json").read_text())["sweep"]}
    assert sweep[10.0]["kept_percent"] == 0.0 and "degenerate" in sweep[10.0]["health"]["problems"]
    assert 0.0 < sweep[0.0]["kept_percent"] < 100.0 and sweep[0.0]["health"]["problems"] == []
    metrics = json.loads((tmp_path / "d" / "metrics.json").read_text())
    # the sparsest rule picks lambda 10 on accuracy alone (both runs are equally accurate here): passed over
    assert sweep[10.0]["eval_accuracy"] >= sweep[0.0]["eval_accuracy"] - 0.01
    assert metrics["l0_lambda"] == 0.0 and metrics["passed_over_degenerate"] == [10.0]
    assert "lambda 10 not selected: its subnetwork is degenerate (keeps nothing)" in out
    assert not _lines(err, "warning: ")  # the selected subnetwork is healthy

    empty = tmp_path / "d" / "lambda_10" / "subnetwork.safetensors"
    transfer = ["transfer", "--model", files / "lm", "--task", f"file:{files / 'sums.csv'}", "--text-column", "question",
                "--answer-column", "reply", "--subnetwork", empty, "--epochs", "1", "--batch-size", "64", "--device", "cpu"]
    code, _, err = _cli(capsys, *transfer, "--condition", "subnetwork,scratch", "--out", tmp_path / "t")
    assert code == 2 and _lines(err, "error: ") == [
        f"error: --subnetwork keeps nothing (0 of {sweep[10.0]['health']['maskable']} maskable units): condition "
        "'subnetwork' would train the empty-mask control under its name; rediscover it (a smaller L0 penalty, more "
        "epochs) or run only the empty-mask condition"]
    assert not (tmp_path / "t").exists()  # refused before any training
    code, _, err = _cli(capsys, *transfer, "--condition", "empty-mask", "--out", tmp_path / "e")
    assert code == 0, err  # the control itself may train on it (and is warned about the degenerate input)
    assert _lines(err, "warning: ") == [f"warning: subnetwork {empty}: degenerate: keeps nothing "
                                        f"(0 of {sweep[10.0]['health']['maskable']} maskable units)"]
    assert json.loads((tmp_path / "e" / "metrics.json").read_text())["health"]["problems"] == ["degenerate"]


def test_discover_with_no_healthy_lambda_warns_and_strict_refuses(files, tmp_path, capsys):
    # one epoch at beta 1: every soft mask is still near 0.5 (undecided), and lambda 10 or 20 closes every one
    code, out, err = _cli(capsys, *_discover(files, tmp_path / "d", "--lambdas", "10,20"))
    assert code == 0, err
    assert _lines(err, "warning: ")[0] == ("warning: no lambda of the sweep (10, 20) gave a healthy subnetwork; "
                                           "lambda 10 is selected anyway")
    assert "degenerate" in json.loads((tmp_path / "d" / "metrics.json").read_text())["health"]["problems"]
    code, out, err = _cli(capsys, *_discover(files, tmp_path / "d", "--lambdas", "10,20"), "--strict")  # after it too
    assert code == 2 and _lines(err, "error: ") == [
        "error: --strict: no lambda of the sweep (10, 20) gave a healthy subnetwork; lambda 10 is selected anyway; "
        "refused under strict health checks"]
    assert not _lines(err, "warning: ")
