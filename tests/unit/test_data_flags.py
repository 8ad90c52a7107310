"""Your own data from the command line: --text-column, --text-pair-column, --label-column, --answer-column,
--eval-file, --eval-split (the file: task's options; --task-option KEY=VALUE keeps working), and their errors."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from subnetlab.cli import main
from subnetlab.models import resolve
from subnetlab.progress import set_quiet

ROWS = [(f"the {a} saw it", f"a {a} saw it", "same" if i % 2 else "other") for i, a in
        enumerate(["cat", "dog", "bird", "fish", "tree", "car", "sun", "rain", "sea", "hill"])]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32, max_position_embeddings=64, num_labels=2)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _csv(path, header="first,second,verdict"):
    path.write_text(header + "\n" + "".join(f"{a},{b},{y}\n" for a, b, y in ROWS))
    return path


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    return done.value.code, captured.out, captured.err


def test_finetune_and_evaluate_take_the_column_flags(tiny_bert, tmp_path, capsys):
    data = _csv(tmp_path / "d.csv")
    flags = ["--task", f"file:{data}", "--text-column", "first", "--text-pair-column", "second", "--label-column", "verdict"]
    set_quiet(False)
    try:
        code, _, err = _cli(capsys, "finetune", "--model", str(tiny_bert), *flags, "--max-steps", "2", "--batch-size", "4",
                            "--save-every", "2", "--eval-every", "2", "--max-length", "16", "--out", str(tmp_path / "ft"))
    finally:
        set_quiet(True)
    assert code == 0, err
    assert "task file:d.csv: classification, 2 labels (other, same); 8 training rows; evaluation split 'eval': 1 rows (10%); test split 'test': 1 rows (10%)" in err
    options = json.loads((tmp_path / "ft" / "config.json").read_text())["finetune"]["task_options"]
    assert options == {"text_column": "first", "text_pair_column": "second", "label_column": "verdict"}
    held = tmp_path / "held.csv"
    held.write_text("first,second,verdict\nthe owl saw it,a owl saw it,same\nthe elk saw it,an elk saw it,other\n")
    code, out, err = _cli(capsys, "evaluate", "--model", str(tmp_path / "ft" / "model"), *flags[:4], "--task-option",
                          "label_column=verdict", "--eval-file", str(held), "--max-length", "16", "--out", str(tmp_path / "ev"))
    assert code == 0, err
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["eval"]["n"] == 2


@pytest.mark.parametrize("extra, fragment", [
    (["--task", "mnli", "--text-column", "first"], "--text-column: only for your own data (--task file:PATH or hub:NAME[:CONFIG]), not task mnli"),
    (["--text-column", "first", "--task-option", "text_column=second"], "--text-column 'first' and --task-option text_column='second' disagree"),
    (["--text-column", "first", "--label-column", "label"], "--label-column: {data}: no label column 'label' (columns: first, second, verdict)"),
    (["--text-column", "sentence"], "--text-column: {data}: no text column 'sentence'"),
    (["--text-column", "first", "--label-column", "verdict", "--eval-split", "validation"],
     "--eval-split: {data}: a single table has no split 'validation'"),
])
def test_bad_data_flags_are_one_error_line_and_write_nothing(tiny_bert, tmp_path, capsys, extra, fragment):
    data = _csv(tmp_path / "d.csv")
    args = ["--task", f"file:{data}", *extra] if extra[0] != "--task" else extra
    for command in (["prune", "--sparsity", "0.5", "--seeds", "0"], ["finetune"], ["evaluate"]):
        code, _, err = _cli(capsys, command[0], "--model", str(tiny_bert), *args, *command[1:], "--out", str(tmp_path / "o"))
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[subnetlab]")]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: " + fragment.format(data=data)), (command, err)
        assert not (tmp_path / "o").exists()


def test_a_head_of_another_size_is_refused_by_evaluate_and_prune(tiny_bert, tmp_path, capsys):
    data = tmp_path / "three.csv"
    data.write_text("text,label\n" + "".join(f"the {w} ran,{'abc'[i % 3]}\n" for i, w in enumerate("abcdefghij" * 4)))
    for command in (["prune", "--sparsity", "0.5", "--seeds", "0", "--set", "batch_size=4"], ["evaluate"]):
        code, _, err = _cli(capsys, command[0], "--model", str(tiny_bert), "--task", f"file:{data}", *command[1:],
                            "--out", str(tmp_path / "o"))
        assert code == 2 and (f"error: --model {tiny_bert} has a classification head with 2 outputs, but task file:three.csv "
                              "has 3 labels (a, b, c); the head must match") in err, err
        assert not (tmp_path / "o").exists()
