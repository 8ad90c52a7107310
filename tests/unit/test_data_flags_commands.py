"""The data flags (--text-column ... --eval-split) on discover, transfer, lottery-prune, lottery-retrain,
lottery-patterns, effective-size and attention: each reaches the task (its config.json keeps them), and
discover/transfer take your own data in the answer-column form with a test split held out of its rows."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

from subnetlab.cli import main
from subnetlab.models import resolve
from subnetlab.progress import set_quiet

WORDS = ["one", "two", "three", "four", "five"]
PAIRS = [("the cat ran", "a dog sat"), ("the sun set", "a sea rose"), ("the car hit", "a tree fell"),
         ("the owl saw", "a fish swam"), ("the rain fell", "a hill stood")]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny GPT-2 and a tiny BERT classifier beside MiniLM's WordPiece tokenizer (every number word is one token)."""
    root = tmp_path_factory.mktemp("own")
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=16,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(root / "lm")
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=32, max_position_embeddings=64, num_labels=2)).save_pretrained(root / "bert")
    for name in ("lm", "bert"):
        tok.save_pretrained(root / name)
    # prompts "A plus B" (three tokens each), the answer the sum's word modulo 5
    (root / "sums.csv").write_text("question,reply\n" + "".join(
        f"{a} plus {b},{WORDS[(i + j) % 5]}\n" for i, a in enumerate(WORDS) for j, b in enumerate(WORDS)) * 2)
    (root / "pairs.csv").write_text("first,second,verdict\n" + "".join(
        f"{a} {k},{b},{'yes' if (i + k) % 2 else 'no'}\n" for k in range(4) for i, (a, b) in enumerate(PAIRS)))
    return root


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    set_quiet(False)
    try:
        with pytest.raises(SystemExit) as done:
            main([str(a) for a in args])
    finally:
        set_quiet(True)
    captured = capsys.readouterr()
    return done.value.code, captured.out, captured.err


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[subnetlab]")]
    assert len(lines) == 1, err
    return lines[0]


SUMS = ["--text-column", "question", "--answer-column", "reply"]
PAIR_FLAGS = ["--text-column", "first", "--text-pair-column", "second", "--label-column", "verdict"]


def test_a_held_out_test_split_is_carved_from_the_training_rows(models):
    from subnetlab.tasks.user_files import make_file_task

    plain = make_file_task(str(models / "sums.csv"), text_column="question", answer_column="reply", seed=3)
    task = make_file_task(str(models / "sums.csv"), text_column="question", answer_column="reply", test_fraction=0.1, seed=3)
    n = 50  # rows of the file
    assert len(plain.eval_splits["eval"]) == 5 and len(plain.train) == 45
    assert task.eval_splits["eval"] == plain.eval_splits["eval"]  # the evaluation rows do not move
    assert len(task.eval_splits["test"]) == 4 and len(task.train) == n - 5 - 4  # 10% of the 45 left: 4.5, rounded to even
    assert sorted(map(repr, task.train + task.eval_splits["test"])) == sorted(map(repr, plain.train))  # a partition
    assert task.options["test_from_train"] == {"fraction": 0.1, "rows": 4}
    again = make_file_task(str(models / "sums.csv"), text_column="question", answer_column="reply", test_fraction=0.1, seed=3)
    assert again.eval_splits["test"] == task.eval_splits["test"]  # drawn from the seed


def test_discover_then_transfer_on_your_own_data(models, tmp_path, capsys):
    common = ["--model", models / "lm", "--task", f"file:{models / 'sums.csv'}", *SUMS, "--device", "cpu"]
    # --init 0.05: one epoch from the default -0.1 keeps no weight, and transfer refuses an empty subnetwork
    code, out, err = _cli(capsys, "discover", *common, "--lambdas", "1e-7", "--epochs", "1", "--batch-size", "8",
                          "--init", "0.05", "--out", tmp_path / "disc")
    assert code == 0, err
    assert ("task file:sums.csv: lm, 5 answers (five, four, one, three, two); 41 training rows; evaluation split 'eval': "
            "5 rows (10%) held out of the training data with seed 0; test split 'test': 4 rows (10%) held out") in err
    config = json.loads((tmp_path / "disc" / "config.json").read_text())
    assert config["task_options"] == {"text_column": "question", "answer_column": "reply", "test_fraction": 0.1}
    job = json.loads((tmp_path / "disc" / "lambda_1e-07" / "config.json").read_text())
    assert job["task_options"] == config["task_options"]
    metrics = json.loads((tmp_path / "disc" / "metrics.json").read_text())
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and "subtask test accuracy" in out

    code, out, err = _cli(capsys, "transfer", *common, "--subnetwork", tmp_path / "disc" / "subnetwork.safetensors",
                          "--condition", "subnetwork,scratch", "--epochs", "1", "--batch-size", "8", "--out", tmp_path / "tr")
    assert code == 0, err
    for condition in ("subnetwork", "scratch"):
        run = json.loads((tmp_path / "tr" / condition / "n0_s0" / "config.json").read_text())
        assert run["task_options"] == config["task_options"] and run["runs"] == [{"condition": condition, "size": 0, "seed": 0}]
    runs = json.loads((tmp_path / "tr" / "metrics.json").read_text())["runs"]
    assert {r["train_rows"] for r in runs} == {41}  # the task's own training rows, no disambiguation rows

    code, _, err = _cli(capsys, "transfer", *common, "--condition", "scratch", "--disambiguation", "0,10",
                        "--out", tmp_path / "dis")
    assert code == 2 and _one_error(err).startswith("error: --disambiguation: task file:")
    assert not (tmp_path / "dis").exists()


def test_discover_refuses_classification_data_and_unequal_prompts_before_any_job(models, tmp_path, capsys):
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("question,reply\n" + "".join(f"{'one ' * (1 + i % 3)}plus two,{WORDS[i % 5]}\n" for i in range(30)))
    code, _, err = _cli(capsys, "discover", "--model", models / "lm", "--task", f"file:{ragged}", *SUMS, "--device", "cpu",
                        "--out", tmp_path / "o")
    assert code == 2 and "prompts of split 'train' differ in length" in _one_error(err)
    code, _, err = _cli(capsys, "discover", "--model", models / "lm", "--task", f"file:{models / 'pairs.csv'}", *PAIR_FLAGS,
                        "--device", "cpu", "--out", tmp_path / "o")
    assert code == 2 and "discovery runs on language-model tasks" in _one_error(err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", [
    ["discover"], ["transfer", "--condition", "scratch"], ["lottery-prune", "--method", "magnitude"],
    ["lottery-patterns"], ["attention", "--data", "task:nli-synthetic"],
])
def test_a_data_flag_on_a_builtin_task_is_one_error_line(models, tmp_path, capsys, command):
    task = [] if command[0] == "attention" else ["--task", "arith:ab" if command[0] in ("discover", "transfer") else "nli-synthetic"]
    code, _, err = _cli(capsys, command[0], "--model", models / "lm", *task, *command[1:], "--text-column", "first",
                        "--out", tmp_path / "o")
    assert code == 2 and _one_error(err).startswith("error: --text-column: only for your own data"), err
    assert not (tmp_path / "o").exists()


def test_the_lottery_commands_take_the_data_flags(models, tmp_path, capsys):
    task = ["--task", f"file:{models / 'pairs.csv'}", *PAIR_FLAGS]
    wanted = {"text_column": "first", "text_pair_column": "second", "label_column": "verdict"}
    code, _, err = _cli(capsys, "lottery-prune", "--model", models / "bert", *task, "--method", "importance",
                        "--max-length", "16", "--device", "cpu", "--out", tmp_path / "lp")
    assert code == 0, err
    assert "task file:pairs.csv: classification, 2 labels (no, yes); 18 training rows; evaluation split 'eval': 2 rows" in err
    assert json.loads((tmp_path / "lp" / "config.json").read_text())["task_options"] == wanted
    code, _, err = _cli(capsys, "lottery-retrain", "--model", models / "bert", "--subnetwork",
                        tmp_path / "lp" / "subnetwork.safetensors", *task, "--max-steps", "2", "--max-length", "16",
                        "--device", "cpu", "--no-save-model", "--out", tmp_path / "lr")
    assert code == 0, err
    assert json.loads((tmp_path / "lr" / "config.json").read_text())["finetune"]["task_options"] == wanted
    code, _, err = _cli(capsys, "lottery-patterns", "--model", models / "bert", *task, "--pairs", "2", "--max-length", "16",
                        "--device", "cpu", "--out", tmp_path / "pat")
    assert code == 0, err
    patterns = json.loads((tmp_path / "pat" / "patterns.json").read_text())
    assert patterns["task_options"] == wanted and patterns["examples"] == 2
    assert patterns["source"].endswith("'eval' split of file:pairs.csv")


def test_attention_reads_pairs_of_your_own_data(models, tmp_path, capsys):
    code, out, err = _cli(capsys, "attention", "--model", models / "bert", "--data", f"task:file:{models / 'pairs.csv'}",
                          *PAIR_FLAGS, "--examples", "2", "--max-length", "16", "--out", tmp_path / "att")
    assert code == 0, err
    config = json.loads((tmp_path / "att" / "config.json").read_text())
    assert config["examples"] == 2 and config["task_options"] == {
        "text_column": "first", "text_pair_column": "second", "label_column": "verdict"}
    code, _, err = _cli(capsys, "attention", "--model", models / "bert", "--data", f"task:file:{models / 'pairs.csv'}",
                        "--text-column", "first", "--text-pair-column", "nothing", "--label-column", "verdict",
                        "--out", tmp_path / "bad")
    assert code == 2 and _one_error(err).startswith(f"error: --text-pair-column: {models / 'pairs.csv'}: no text pair column")
    assert not (tmp_path / "bad").exists()


def test_effective_size_takes_the_data_flags(models, tmp_path, capsys):
    ft = tmp_path / "ft"
    task = ["--task", f"file:{models / 'pairs.csv'}", *PAIR_FLAGS]
    code, _, err = _cli(capsys, "finetune", "--model", models / "bert", *task, "--max-steps", "2", "--batch-size", "6",
                        "--save-every", "1", "--eval-every", "2", "--max-length", "16", "--device", "cpu", "--out", ft)
    assert code == 0, err
    code, out, err = _cli(capsys, "effective-size", "--checkpoints", ft, *task, "--id-split", "eval", "--on", "id",
                          "--seeds", "1", "--levels", "0.25,0.5", "--preset", "demo", "--every", "2",
                          "--set", "total_steps=4", "--set", "batch_size=6", "--set", "max_length=16",
                          "--set", "means_examples=6", "--out", tmp_path / "es")
    assert code == 0, err
    config = json.loads((tmp_path / "es" / "config.json").read_text())
    assert config["task_options"] == {"text_column": "first", "text_pair_column": "second", "label_column": "verdict"}
    runs = [json.loads(p.read_text()) for p in (tmp_path / "es").rglob("config.json") if "seed-" in str(p)]
    assert runs and all(r["task_options"] == config["task_options"] for r in runs)
