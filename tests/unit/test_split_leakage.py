"""No evaluation or test row of a command is a training row of an earlier one (issue 26, item 2).

The tutorial's Subtask Induction sequence on your own data (docs/your-own-model.md): finetune, discover,
transfer with two seeds, evaluate, on a tiny GPT-2 and a JSONL file of unique prompts. Which rows each
command trained and evaluated on is observed from the tasks the commands build (``Task.__init__`` is
wrapped), compared by the rows' text, independently of the split manifest code. Then the refusals: a
split that would put training rows into evaluation, a fine-tuning run without its split record, another
file holding the fine-tuning's training rows; and a later command taking the fine-tuning's split settings.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from subnetlab.cli import main
from subnetlab.models import load_model
from subnetlab.progress import set_quiet
from subnetlab.tasks import base

WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
ROWS = [(f"{WORDS[i // 10]} plus {WORDS[i % 10]}", WORDS[(i // 10 + i % 10) % 5]) for i in range(80)]  # unique prompts


def _jsonl(path, rows=ROWS):
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny GPT-2 beside MiniLM's WordPiece tokenizer (every number word is one token), and the data file."""
    root = tmp_path_factory.mktemp("leak")
    tok = load_model("minilm").tokenizer
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=16)).save_pretrained(root / "lm")
    tok.save_pretrained(root / "lm")
    return root


def _cli(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    set_quiet(False)
    try:
        with pytest.raises(SystemExit) as done:
            main([str(a) for a in args])
    finally:
        set_quiet(True)
    return done.value.code, capsys.readouterr().err


def _task(data):
    return ["--task", f"file:{data}", "--text-column", "question", "--answer-column", "answer", "--device", "cpu"]


def _finetune(capsys, tiny, data, out, *extra):
    code, err = _cli(capsys, "finetune", "--model", tiny / "lm", *_task(data), *extra, "--max-steps", "2",
                     "--batch-size", "16", "--lr", "1e-3", "--save-every", "2", "--eval-every", "2", "--out", out)
    assert code == 0, err


def _error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[subnetlab]")]
    assert len(lines) == 1, err
    return lines[0]


def test_tutorial_sequence_never_leaks(tiny, tmp_path, capsys, monkeypatch):
    data = _jsonl(tmp_path / "qa.jsonl")
    seen: dict[str, list[tuple[set[str], dict[str, list[str]]]]] = {}
    step = {"name": None}
    original = base.Task.__init__

    def recording(self, name, kind, labels, train, eval_splits, **kw):
        original(self, name, kind, labels, train, eval_splits, **kw)
        if name.startswith("file:"):
            seen.setdefault(step["name"], []).append(
                ({e.text_a for e in train}, {k: [e.text_a for e in v] for k, v in eval_splits.items()}))

    monkeypatch.setattr(base.Task, "__init__", recording)
    step["name"] = "finetune"
    _finetune(capsys, tiny, data, tmp_path / "ft")
    step["name"] = "discover"
    code, err = _cli(capsys, "discover", "--model", tmp_path / "ft" / "model", *_task(data), "--lambdas", "1e-7",
                     "--epochs", "1", "--batch-size", "32", "--out", tmp_path / "disc")
    assert code == 0, err
    step["name"] = "transfer"
    code, err = _cli(capsys, "transfer", "--model", tmp_path / "ft" / "model", *_task(data), "--subnetwork",
                     tmp_path / "disc" / "subnetwork.safetensors", "--condition", "empty-mask,scratch", "--seeds", "0-1",
                     "--epochs", "1", "--batch-size", "32", "--out", tmp_path / "tr")
    assert code == 0, err
    step["name"] = "evaluate"
    code, err = _cli(capsys, "evaluate", "--model", tmp_path / "ft" / "model", *_task(data), "--out", tmp_path / "ev")
    assert code == 0, err

    assert [len(seen[s]) for s in ("finetune", "discover", "transfer", "evaluate")] == [1, 2, 5, 1]  # 4 transfer runs (the tiny discovery keeps nothing: empty-mask, which transfer accepts)
    prompts = {q for q, _ in ROWS}
    trained: set[str] = set()
    for name in ("finetune", "discover", "transfer", "evaluate"):
        for train, splits in seen[name]:
            assert set(splits) == {"eval", "test"}
            held = [t for rows in splits.values() for t in rows]
            assert held and not set(held) & trained, (name, sorted(set(held) & trained))
            assert not set(held) & train and set(held) | train == prompts  # each task: a partition of the file
        trained |= {t for train, _ in seen[name] for t in train}
    first = seen["finetune"][0][1]
    assert all(splits == first for step_tasks in seen.values() for _, splits in step_tasks)  # one split, every seed
    assert len(first["eval"]) == len(first["test"]) == 8 and len(trained) == 64  # 10% + 10% of 80 rows
    manifests = [json.loads(p.read_text()) for p in tmp_path.rglob("splits.json")]
    assert len(manifests) == 1 + 2 + 5 + 1 and all(m["test"] == manifests[0]["test"] for m in manifests)


def test_a_split_that_puts_fine_tuning_rows_into_evaluation_is_refused(tiny, tmp_path, capsys):
    data = _jsonl(tmp_path / "qa.jsonl")
    _finetune(capsys, tiny, data, tmp_path / "ft")
    code, err = _cli(capsys, "discover", "--model", tmp_path / "ft" / "model", *_task(data), "--task-option",
                     "split_seed=1", "--lambdas", "1e-7", "--epochs", "1", "--out", tmp_path / "disc")
    assert code == 2 and _error(err).startswith(f"error: --task-option: {data}: "), err
    assert f"were training rows of fine-tuning run {tmp_path / 'ft'}" in err and "split_seed=0" in err
    assert not (tmp_path / "disc").exists()

    moved = ["--task-option", "split_seed=1"]
    for command in (["prune", "--model", tmp_path / "ft" / "model", "--sparsity", "0.5", "--seeds", "0"],
                    ["ablate", "--model", tmp_path / "ft" / "model", "--heads", "L0.H0", "--id-split", "eval"],
                    ["effective-size", "--checkpoints", tmp_path / "ft", "--id-split", "eval", "--on", "id"],
                    ["lottery-prune", "--model", tmp_path / "ft" / "model", "--method", "importance"]):
        code, err = _cli(capsys, *command, *_task(data)[:-2], *moved, "--out", tmp_path / "o")
        assert code == 2 and "were training rows of fine-tuning run" in _error(err), (command[0], err)
        assert not (tmp_path / "o").exists()

    other = _jsonl(tmp_path / "other.jsonl", [(q.replace("plus", "minus"), a) for q, a in ROWS[:60]] + ROWS[:20])
    code, err = _cli(capsys, "evaluate", "--model", tmp_path / "ft" / "model", *_task(other), "--out", tmp_path / "ev")
    assert code == 2 and f"{other}: " in _error(err) and "were training rows of fine-tuning run" in err
    assert not (tmp_path / "ev").exists()

    (tmp_path / "ft" / "splits.json").unlink()  # a run from before split records: which rows trained is unknown
    code, err = _cli(capsys, "transfer", "--model", tmp_path / "ft" / "model", *_task(data), "--condition", "scratch",
                     "--epochs", "1", "--out", tmp_path / "tr")
    assert code == 2 and "records no split of its rows (splits.json)" in _error(err)


def test_later_commands_take_the_fine_tunings_split_settings(tiny, tmp_path, capsys):
    data = _jsonl(tmp_path / "qa.jsonl")
    _finetune(capsys, tiny, data, tmp_path / "ft", "--task-option", "split_seed=4", "--task-option", "test_fraction=0.2")
    code, err = _cli(capsys, "evaluate", "--model", tmp_path / "ft" / "model", *_task(data), "--out", tmp_path / "ev")
    assert code == 0, err
    ft, ev = (json.loads((tmp_path / d / "splits.json").read_text()) for d in ("ft", "ev"))
    assert ev == ft and ft["settings"] == {"eval_fraction": 0.1, "test_fraction": 0.2, "split_seed": 4}
    assert len(ft["test"]) == 16 and json.loads((tmp_path / "ev" / "metrics.json").read_text())["test"]["n"] == 16
    copy = shutil.copy(data, tmp_path / "renamed.jsonl")  # the same content under another name: the same rows
    code, err = _cli(capsys, "evaluate", "--model", tmp_path / "ft" / "checkpoints" / "step-2", *_task(copy),
                     "--out", tmp_path / "ev2")
    assert code == 0, err
    assert json.loads((tmp_path / "ev2" / "splits.json").read_text())["test"] == ft["test"]
