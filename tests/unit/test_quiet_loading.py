"""Logs are one line per stage (issue 30): no transformers "Loading weights" bar or LOAD REPORT table from a
command or from ``sl.load_model``, and a user-data task is described once per sweep, not once per worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from subnetlab import progress
from subnetlab.executor.processes import _worker_env

SRC = Path(__file__).resolve().parents[2] / "src"
CHATTER = ("Loading weights", "LOAD REPORT", "Writing model shards")


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory) -> Path:
    """A tiny BERT classifier: loaded without its head (``head="base"``), transformers reports its unused keys."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=2)
    path = tmp_path_factory.mktemp("quiet") / "tinybert"
    BertForSequenceClassification(config).save_pretrained(str(path))
    return path


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    env["PYTHONPATH"] = str(SRC)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def test_cli_load_prints_no_library_chatter(classifier_dir):
    done = _run(["-m", "subnetlab.cli", "inspect", "--model", str(classifier_dir)])
    assert done.returncode == 0, done.stderr
    assert not [c for c in CHATTER if c in done.stderr + done.stdout]


def test_python_load_model_prints_no_library_chatter_and_restores_verbosity(classifier_dir):
    code = ("import subnetlab as sl\n"
            "from transformers.utils import logging as hf\n"
            "hf.set_verbosity_warning(); hf.enable_progress_bar()\n"
            f"m = sl.load_model({str(classifier_dir)!r})\n"
            "print(hf.get_verbosity() == hf.WARNING, hf.is_progress_bar_enabled())\n")
    done = _run(["-c", code])
    assert done.returncode == 0, done.stderr
    assert not [c for c in CHATTER if c in done.stderr + done.stdout]
    assert done.stdout.split() == ["True", "True"]  # the caller's settings are back after the load


def test_a_notice_is_given_once_per_run_and_not_again_in_a_worker(monkeypatch):
    heard: list[str] = []
    monkeypatch.setattr(progress, "_said", set())
    monkeypatch.delenv(progress.SAID_VARIABLE, raising=False)
    with progress.listen(heard.append):
        progress.stage_once("task A", "task A: 3 labels")
        progress.stage_once("task A", "task A: 3 labels")
        assert heard == ["task A: 3 labels"]
        env = _worker_env(1, None)  # what a sweep's worker process gets
        monkeypatch.setattr(progress, "_said", set())  # a fresh worker process ...
        monkeypatch.setenv(progress.SAID_VARIABLE, env[progress.SAID_VARIABLE])  # ... with its parent's notices
        progress.stage_once("task A", "task A: 3 labels")
        progress.stage_once("task B", "task B: 2 labels")
    assert heard == ["task A: 3 labels", "task B: 2 labels"]
