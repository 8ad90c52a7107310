"""One writer per run directory: a second `subnetlab` process on the same --out ends at once; a killed one's lock is taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.run_directory import LOCK_FILE, check_writable, lock, run_entries

TINY = ["--task", "nli-synthetic", "--task-option", "n_train=20", "--task-option", "n_eval=8",
        "--task-option", "hans_per_subcase=1"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> str:
    from transformers import BertConfig, BertForSequenceClassification

    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    path = tmp_path_factory.mktemp("lock") / "bert"
    torch.manual_seed(0)
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64, num_labels=3, id2label=dict(enumerate(NLI3)),
                        label2id={k: i for i, k in enumerate(NLI3)})
    BertForSequenceClassification(config).save_pretrained(path)
    word_tokenizer().save_pretrained(path)
    return str(path)


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.Popen([sys.executable, "-m", "subnetlab.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(condition, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


def test_a_second_process_on_the_same_out_ends_at_once_naming_the_first(bert, tmp_path) -> None:
    out = tmp_path / "ft"
    command = ["finetune", "--model", bert, *TINY, "--max-steps", "1000000", "--save-every", "1000000",
               "--eval-every", "1000000", "--device", "cpu", "--out", str(out)]
    first = _cli(*command)
    try:
        _wait_for(lambda: (out / "config.json").is_file() or first.poll() is not None)  # working, lock held
        assert first.poll() is None, first.communicate()
        assert (out / LOCK_FILE).read_text().split() == [str(first.pid)]
        started = time.monotonic()
        second = _cli(*command)
        _, err = second.communicate(timeout=120)
        seconds = time.monotonic() - started
        print(f"second process: exit {second.returncode} after {seconds:.1f} s (mostly Python start-up); "
              f"stderr: {err.strip()}")
        assert second.returncode == 2
        assert err.strip().splitlines() == [f"error: {out} is in use by another subnetlab process (pid {first.pid})"]
        assert first.poll() is None  # the first one carries on
        # kill -9 the first: the kernel drops its lock; its lock file (with its pid) stays behind, stale
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
        assert (out / LOCK_FILE).read_text().split() == [str(first.pid)]
        with lock(out):  # taken over at once
            assert (out / LOCK_FILE).read_text().split() == [str(os.getpid())]
        assert not (out / LOCK_FILE).exists()  # removed on leaving, while still held
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_the_lock_is_refused_while_held_and_free_after(tmp_path) -> None:
    out = tmp_path / "a" / "b"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom subnetlab.run_directory import lock\n"
                               "with lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(120)\n", str(out)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SubnetlabError, match=rf"is in use by another subnetlab process \(pid {holder.pid}\)$"):
            with lock(out):
                pass
    finally:
        holder.kill()
        holder.wait()
    with lock(out) as held:  # the killed holder's stale lock is taken over
        assert held == out and run_entries(out) == []  # the lock file is not content
    fresh = tmp_path / "c" / "d"
    with lock(fresh):
        assert fresh.is_dir()
    assert not fresh.exists() and not fresh.parent.exists()  # created by lock, left empty: removed again


def test_a_command_holds_the_lock_while_it_runs_and_leaves_none_behind(bert, tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "ev"
    seen = []
    from subnetlab.runs import evaluate as run_evaluate

    real = run_evaluate.evaluate_run

    def watching(job, where):
        seen.append((out / LOCK_FILE).read_text().split())
        return real(job, where)

    monkeypatch.setattr(run_evaluate, "evaluate_run", watching)
    for _ in range(2):  # a rerun on the same --out takes the lock again
        with pytest.raises(SystemExit) as done:
            main(["evaluate", "--model", bert, *TINY, "--out", str(out)])
        assert done.value.code == 0, capsys.readouterr().err
    assert seen == [[str(os.getpid())]] * 2
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "metrics.json"]


def test_out_checks_look_without_creating(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    for bad, message in [(tmp_path / "file", "exists and is not a directory"),
                         (tmp_path / "file" / "sub" / "run", "cannot be created: ")]:
        with pytest.raises(SubnetlabError, match=message) as info:
            check_writable(bad)
        assert info.value.setting == "out"
    assert check_writable(tmp_path / "new" / "run") == tmp_path / "new" / "run"
    assert not (tmp_path / "new").exists()
