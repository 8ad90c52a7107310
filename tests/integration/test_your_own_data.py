"""A new user's first hour: docs/your-own-model.md's tutorial `bash` blocks, run verbatim, on their own model and file.

The page's blocks are read from the page itself and run by bash, unchanged, in a folder
holding what the page asks the user to bring: ``my-model`` and ``train.csv`` (a tiny BERT
or GPT-2 classifier built from a config and saved with ``save_pretrained`` beside MiniLM's
tokenizer, never trained; 60 rows), or ``my-llama`` and ``qa.jsonl`` (48 rows). ``subnetlab``
on the PATH is this checkout's command. So a flag the page shows is a flag the test runs,
and a size the page uses is a size the test runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2ForSequenceClassification,
    LlamaConfig,
    LlamaForCausalLM,
)

from subnetlab.models import load_model

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "your-own-model.md"
WORDS = ["cat", "dog", "bird", "fish", "tree", "car", "sun", "rain"]


def page_blocks() -> list[str]:
    """The page's ```bash blocks, in order, their indentation (inside a list item) removed."""
    blocks = []
    for indent, body in re.findall(r"^( *)```bash\n(.*?)^ *```", PAGE.read_text(), flags=re.M | re.S):
        blocks.append("".join(line[len(indent):] + "\n" for line in body.splitlines()))
    return blocks


def _classification_and_lm_blocks() -> tuple[list[str], list[str]]:
    """The page's two paths: a classifier's (finetune, prune and core, ablate) and a causal LM's (finetune and
    prune, then discover and transfer). The circuit blocks after them are another page's subject (prompt pairs)."""
    blocks = page_blocks()
    lm = next(i for i, b in enumerate(blocks) if "qa.jsonl" in b)
    transfer = next(i for i, b in enumerate(blocks) if "subnetlab transfer" in b)
    assert lm < transfer, "the page shows no causal-LM block before its discover / transfer block"
    return blocks[:lm], blocks[lm:transfer + 1]


def _run_blocks(where: Path, blocks: list[str]) -> str:
    bin_dir = where / "bin"
    bin_dir.mkdir()
    (bin_dir / "subnetlab").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m subnetlab.cli "$@"\n')
    (bin_dir / "subnetlab").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    script = "set -euo pipefail\n" + "".join(blocks)
    done = subprocess.run(["bash", "-c", script], cwd=where, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _tokenizer():
    return load_model("minilm").tokenizer


def _classifier(where: Path, family: str) -> None:
    tok = _tokenizer()
    if family == "bert":
        model = BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                                         num_attention_heads=4, intermediate_size=64, num_labels=2))
    else:
        model = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4,
                                                         n_positions=128, num_labels=2, pad_token_id=tok.pad_token_id))
    model.save_pretrained(where / "my-model")
    tok.save_pretrained(where / "my-model")
    rows = []
    for i in range(60):
        a, b = WORDS[i % 8], WORDS[(i * 3 + 1) % 8]
        same = i % 2 == 0
        rows.append(f"the {a} saw the {b},{f'the {a} saw the {b}' if same else f'a {b} saw a {a}'},"
                    f"{'same' if same else 'different'}\n")
    (where / "train.csv").write_text("premise,hypothesis,label\n" + "".join(rows))


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_the_pages_classifier_commands_run_verbatim(tmp_path, family):
    _classifier(tmp_path, family)
    blocks, _ = _classification_and_lm_blocks()
    log = _run_blocks(tmp_path, blocks)
    runs = tmp_path / "runs"
    metrics = json.loads((runs / "ft" / "metrics.json").read_text())
    assert set(metrics["final"]) == {"eval", "test"} and metrics["train_examples"] == 48  # 6 + 6 of 60 rows held out
    assert metrics["final"]["eval"]["accuracy"] == 1.0  # --lr 1e-3 trains the never-trained model
    assert "looks freshly initialised" not in log  # a training rate: no warning about it
    assert "[subnetlab] step 100/500: train loss" in log  # a line per evaluation
    for out, target in (("p50", 0.5), ("p70", 0.7)):
        run = json.loads((runs / out / f"sparsity-{target:.2f}" / "seed-3" / "metrics.json").read_text())
        assert run["target_sparsity"] == target and run["steps"] == {0.5: 600, 0.7: 640}[target]  # quick: 100 + 200 sp, then 400
    assert (runs / "core" / "metrics.json").is_file()
    assert json.loads((runs / "ablate" / "metrics.json").read_text())


def test_the_pages_causal_lm_commands_run_verbatim(tmp_path):
    """The decoder form (--answer-column) on a tiny Llama, then discover and transfer."""
    tok = _tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "my-llama")
    tok.save_pretrained(tmp_path / "my-llama")
    rows = [(f"the {WORDS[i % 8]} is", ["red", "blue"][i % 8 < 4]) for i in range(48)]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    _, blocks = _classification_and_lm_blocks()
    _run_blocks(tmp_path, blocks)
    runs = tmp_path / "runs"
    metrics = json.loads((runs / "ft-lm" / "metrics.json").read_text())
    assert metrics["train_examples"] == 38 and metrics["final"]["eval"]["n"] == 5  # 10% + 10% of 48 held out
    run = json.loads((runs / "p50-lm" / "sparsity-0.50" / "seed-3" / "metrics.json").read_text())
    assert run["target_sparsity"] == 0.5 and run["steps"] == 600
    assert (runs / "disc" / "subnetwork.safetensors").is_file()
    assert (runs / "transfer" / "sweep.json").is_file()


def test_a_never_trained_model_at_the_default_rate_gets_one_warning_line(tmp_path):
    """The page's finetune command without --lr (the default 2e-5) on its never-trained model."""
    _classifier(tmp_path, "bert")
    finetune = next(line for line in page_blocks()[0].splitlines() if "finetune" in line)
    command = finetune.replace("--lr 1e-3 ", "").replace("--max-steps 500", "--max-steps 2")
    log = _run_blocks(tmp_path, [page_blocks()[0].splitlines()[0] + "\n", command + "\n"])
    warnings = [line for line in log.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "looks freshly initialised" in warnings[0] and "lr 2e-05" in warnings[0]
