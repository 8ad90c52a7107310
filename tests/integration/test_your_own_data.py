"""A new user's first hour: their own model folder and CSV / JSONL file through finetune, prune and core.

Tiny BERT, GPT-2 and Llama models are built from configs and saved with ``save_pretrained``
beside MiniLM's tokenizer (no downloads); the data are files written here. The commands and
flags are those of ``docs/your-own-model.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from transformers import (BertConfig, BertForSequenceClassification, GPT2Config, GPT2ForSequenceClassification,
                          LlamaConfig, LlamaForCausalLM)

from subnetlab.models import load_model

pytestmark = pytest.mark.integration

WORDS = ["cat", "dog", "bird", "fish", "tree", "car", "sun", "rain"]


def _rows(n: int = 60) -> list[tuple[str, str, str]]:
    rows = []
    for i in range(n):
        a, b = WORDS[i % 8], WORDS[(i * 3 + 1) % 8]
        same = i % 2 == 0
        rows.append((f"the {a} saw the {b}", f"the {a} saw the {b}" if same else f"a {b} saw a {a}",
                     "same" if same else "different"))
    return rows


def _model(tmp_path, family: str):
    tok = load_model("minilm").tokenizer
    if family == "bert":
        model = BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                                         num_attention_heads=4, intermediate_size=64, num_labels=2))
    else:
        model = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4,
                                                         n_positions=64, num_labels=2, pad_token_id=tok.pad_token_id))
    where = tmp_path / f"{family}-model"
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return where


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "subnetlab.cli", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("family, fmt", [("bert", "csv"), ("gpt2", "jsonl")])
def test_finetune_prune_core_on_a_users_file(tmp_path, family, fmt):
    rows = _rows()
    data = tmp_path / f"train.{fmt}"
    if fmt == "csv":
        data.write_text("premise,hypothesis,label\n" + "".join(f"{a},{b},{y}\n" for a, b, y in rows))
    else:
        data.write_text("".join(json.dumps({"premise": a, "hypothesis": b, "label": y}) + "\n" for a, b, y in rows))
    task = ["--task", f"file:{data}", "--text-column", "premise", "--text-pair-column", "hypothesis"]  # as the tutorial
    model = _model(tmp_path, family)
    _run("finetune", "--model", str(model), *task, "--out", str(tmp_path / "ft"), "--max-steps", "20", "--batch-size", "8",
         "--lr", "1e-3", "--save-every", "20", "--eval-every", "20", "--max-length", "24")
    metrics = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert set(metrics["final"]) == {"eval", "test"} and metrics["train_examples"] == 48  # 6 + 6 of 60 rows held out
    for out in ("pa", "pb"):
        _run("prune", "--model", str(tmp_path / "ft" / "model"), *task, "--sparsity", "0.5", "--seeds", "0-1",
             "--preset", "demo", "--set", "total_steps=12", "--set", "warmup_steps=6", "--set", "max_length=24",
             "--out", str(tmp_path / out))
    for out in ("pa", "pb"):
        run = json.loads((tmp_path / out / "sparsity-0.50" / "seed-0" / "metrics.json").read_text())
        assert run["target_sparsity"] == 0.5 and "eval" in run["eval"]
    _run("core", "--runs", str(tmp_path / "pa"), str(tmp_path / "pb"), "--out", str(tmp_path / "core"))
    core = json.loads((tmp_path / "core" / "metrics.json").read_text())
    heads = "core:" + str(tmp_path / "core") if core["core"] else "L0.H1,L1.H2"  # a tiny model may share no head
    _run("ablate", "--model", str(tmp_path / "ft" / "model"), *task, "--heads", heads, "--id-split", "eval",
         "--max-length", "24", "--out", str(tmp_path / "ablate"))
    table = json.loads((tmp_path / "ablate" / "metrics.json").read_text())
    assert table  # one row per ablated head, and the joint row


def test_a_causal_lm_learns_one_token_answers_then_is_pruned(tmp_path):
    """The tutorial's decoder form: --answer-column on a tiny Llama (grouped-query attention)."""
    tok = load_model("minilm").tokenizer
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=tok.pad_token_id)
    model = tmp_path / "llama-model"
    LlamaForCausalLM(config).save_pretrained(model)
    tok.save_pretrained(model)
    rows = [(f"the {WORDS[i % 8]} is", ["red", "blue"][i % 8 < 4]) for i in range(48)]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    task = ["--task", f"file:{data}", "--text-column", "question", "--answer-column", "answer"]
    _run("finetune", "--model", str(model), *task, "--out", str(tmp_path / "ft"), "--max-steps", "30", "--batch-size", "8",
         "--lr", "3e-3", "--save-every", "30", "--eval-every", "30", "--max-length", "16")
    metrics = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert metrics["train_examples"] == 38 and metrics["final"]["eval"]["n"] == 5  # 10% + 10% of 48 held out
    _run("prune", "--model", str(tmp_path / "ft" / "model"), *task, "--sparsity", "0.5,0.7", "--seeds", "0-1",
         "--preset", "demo", "--set", "total_steps=12", "--set", "warmup_steps=6", "--set", "max_length=16",
         "--set", "batch_size=8", "--out", str(tmp_path / "p"))
    run = json.loads((tmp_path / "p" / "sparsity-0.50" / "seed-1" / "metrics.json").read_text())
    assert run["target_sparsity"] == 0.5 and "eval" in run["eval"]
    _run("core", "--runs", str(tmp_path / "p"), "--out", str(tmp_path / "core"))
    assert (tmp_path / "core" / "metrics.json").is_file()
