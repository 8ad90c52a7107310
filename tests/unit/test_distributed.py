"""Across processes on torch.distributed (``subnetlab.distributed``), gloo on the CPU, two ranks started by
``torchrun``: the attribution scores file equals one process's; rank 0 alone writes; what does not split across
processes is refused with one ``error:`` line before any rank waits for another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from subnetlab.io import load_tensors
from tests.unit.test_circuit_eval_cli import _run, tiny  # noqa: F401 (the fixture)

REPO = Path(__file__).resolve().parents[2]
# 40 training pairs in batches of 16: three batches, rank 0 scores batches 0 and 2 (32 pairs), rank 1 batch 1
TASK40 = ["--task", "circuit:ioi", "--task-option", "n_train=40", "--task-option", "n_eval=6"]


def _torchrun_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]), "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "SUBNETLAB_DIST_TIMEOUT_MINUTES": "2"}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def torchrun(args: list[str], ranks: int = 2, timeout: float = 240) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node RANKS tests/unit/torchrun_commands.py ARGS`` on the CPU."""
    env = _torchrun_env()
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(ranks), str(REPO / "tests" / "unit" / "torchrun_commands.py"), *args],
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_attribution_on_two_gloo_ranks_is_one_process(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    """eap and exact: the scores file of 2 ranks (each its batches, the sums all-reduced, one division by the 40
    pairs) equals the single process's to 1e-6 (float32 scores; the float64 sums differ only in their order)."""
    root = tiny[0]
    methods = ("eap", "exact")
    commands: list[str] = []
    for method in methods:
        base = ["circuit", "--model", str(root / "model"), *TASK40, "--method", method, "--device", "cpu"]
        _run([*base, "--out", str(tmp_path / f"one-{method}")], capsys)
        commands += [*base, "--out", str(tmp_path / f"two-{method}"), "::"]
    result = torchrun(commands)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("written: ") == len(methods), result.stdout  # rank 0 reports, rank 1 is quiet
    for method in methods:
        one, two = tmp_path / f"one-{method}", tmp_path / f"two-{method}"
        assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
        a, b = load_tensors(one / "scores.safetensors"), load_tensors(two / "scores.safetensors")
        assert a.keys() == b.keys() and a["edges"].dtype == torch.float32
        assert float(a["edges"].abs().max()) > 1e-2  # scores that mean something
        for key in a:
            assert torch.allclose(a[key], b[key], rtol=0, atol=1e-6), (method, key, (a[key] - b[key]).abs().max())
        metrics = json.loads((two / "metrics.json").read_text())
        assert metrics["pairs"] == 40 and metrics["top_edges"]
        assert json.loads((two / "config.json").read_text()) == json.loads((one / "config.json").read_text())
        assert not (two / ".subnetlab.lock").exists()


def test_world_shares_and_single_process():
    from subnetlab.distributed import World, world

    for n in (0, 1, 5, 16, 17):
        for size in (1, 2, 3):
            parts = [World(r, size).share(n) for r in range(size)]
            assert [i for part in parts for i in part] == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1
    here = world()
    assert (here.rank, here.size, here.is_writer) == (0, 1, True)
    t = torch.tensor([1.5, -2.0])
    assert here.all_reduce_sum(t) is t and t.tolist() == [1.5, -2.0]


@pytest.fixture
def launched_env(monkeypatch):
    """The environment torchrun gives rank 0 of 2 (no group is joined: the refusals come first; the refusals of
    every command are rows of tests/unit/test_bad_inputs.py)."""
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)


def test_a_one_process_command_is_refused_under_torchrun(tmp_path, capsys, launched_env, monkeypatch):
    from subnetlab.cli import main

    monkeypatch.setenv("RANK", "1")
    with pytest.raises(SystemExit) as e:
        main(["prune", "--model", "minilm", "--task", "nli:synthetic", "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: rank 1 of 2: prune: runs in one process"), err
    assert err.count("\n") == 1 and not (tmp_path / "p").exists()


def test_a_bad_timeout_is_refused(monkeypatch):
    from subnetlab.distributed import DEFAULT_TIMEOUT_MINUTES, TIMEOUT_VARIABLE, timeout_minutes
    from subnetlab.errors import SubnetlabError

    monkeypatch.delenv(TIMEOUT_VARIABLE, raising=False)
    assert timeout_minutes() == DEFAULT_TIMEOUT_MINUTES
    monkeypatch.setenv(TIMEOUT_VARIABLE, "0.5")
    assert timeout_minutes() == 0.5
    for bad in ("0", "-3", "soon"):
        monkeypatch.setenv(TIMEOUT_VARIABLE, bad)
        with pytest.raises(SubnetlabError, match=TIMEOUT_VARIABLE):
            timeout_minutes()


def test_edge_pruning_masks_on_two_gloo_ranks_are_one_process(tmp_path, one_thread):
    """12 steps of 2 micro-batches of 7 pairs (slices of 4 and 3): the log-alphas, the multipliers and the KLs of
    2 ranks (the gradients all-reduced) are the single process's to 1e-5 (float32 masks); rank 0 alone wrote the
    checkpoint, at the last step."""
    from subnetlab.methods.l0.checkpoint import load_checkpoint
    from tests.unit.torchrun_edge_pruning import STEPS, train_masks

    train_masks(tmp_path / "one.safetensors", tmp_path / "one")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(REPO / "tests" / "unit" / "torchrun_edge_pruning.py"), str(tmp_path / "two.safetensors"),
         str(tmp_path / "two")], env=_torchrun_env(), capture_output=True, text=True, timeout=240, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = load_tensors(tmp_path / "one.safetensors"), load_tensors(tmp_path / "two.safetensors")
    start = torch.full_like(one["edges"], 3.0)  # the demo preset's init_log_alpha (plus a little noise)
    assert float((one["edges"] - start).abs().max()) > 0.05  # the masks moved
    for key in ("edges", "nodes", "kl", "lambdas"):
        assert torch.allclose(one[key], two[key], rtol=0, atol=1e-5), (key, (one[key] - two[key]).abs().max())
    assert torch.equal(one["selection"], two["selection"])
    assert load_checkpoint(tmp_path / "two").step == STEPS


# Edge Pruning through the command: 14 training pairs in batches of 7 (slices of 4 and 3 on 2 ranks), 12 steps,
# checkpoints at steps 5, 10 and 12
EDGE_PRUNING = ["--task", "circuit:ioi", "--task-option", "n_train=14", "--task-option", "n_eval=6", "--method",
                "edge-pruning", "--preset", "quick", "--set", "total_steps=12", "--set", "warmup_steps=8", "--set",
                "batch_size=7", "--set", "accumulation=2", "--set", "checkpoint_every=5", "--sparsity", "0.5",
                "--device", "cpu"]
SEED0 = Path("sparsity-0.500") / "seed-0"


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _same_circuit(one: Path, two: Path) -> None:
    """The run ``two`` ended with the masks of ``one`` (checkpoints to 1e-5, float32) and the same circuit (kept
    edges, its subnetwork file's masks, its metrics)."""
    a, b = load_tensors(one / "checkpoint.safetensors"), load_tensors(two / "checkpoint.safetensors")
    assert a.keys() == b.keys() and a["log_alpha_edges"].dtype == torch.float32
    assert float((a["log_alpha_edges"] - 3.0).abs().max()) > 0.05  # the masks moved from the quick preset's start
    for key in a:
        assert torch.allclose(a[key].double(), b[key].double(), rtol=0, atol=1e-5), (key, (a[key] - b[key]).abs().max())
    sub_a, sub_b = load_tensors(one / "subnetwork.safetensors"), load_tensors(two / "subnetwork.safetensors")
    assert sub_a.keys() == sub_b.keys() and all(torch.equal(sub_a[k], sub_b[k]) for k in sub_a)
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
    assert 0 < ma["kept_edges"] < ma["edges"] and mb["kept"] == ma["kept"] and mb["kept_edges"] == ma["kept_edges"]
    assert mb["faithfulness"] == pytest.approx(ma["faithfulness"], abs=1e-5)
    assert json.loads((two / "config.json").read_text()) == json.loads((one / "config.json").read_text())


def test_edge_pruning_circuit_on_two_gloo_ranks_is_one_process(tiny, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                              one_thread):
    """``circuit --method edge-pruning --seeds 0,1`` on 2 gloo ranks writes the sweep one process writes: the same
    files, each run's masks to 1e-5 and the same kept edges; rank 0 alone writes and reports. Its seed-0 run
    resumes, on 2 ranks, a checkpoint one process wrote at step 5 (the other direction is the killed-rank test)."""
    import shutil

    import subnetlab.methods.l0.trainer as trainer

    root = tiny[0]
    base = ["circuit", "--model", str(root / "model"), *EDGE_PRUNING, "--seeds", "0,1"]
    written = trainer.save_checkpoint

    def keep_step_5(run_dir, state, optimizer):  # the one-process run's seed 0 as a kill at step 5 would leave it
        written(run_dir, state, optimizer)
        if state.step == 5 and Path(run_dir).as_posix().endswith(SEED0.as_posix()):
            shutil.copytree(run_dir, tmp_path / "two" / SEED0)

    monkeypatch.setattr(trainer, "save_checkpoint", keep_step_5)
    _run([*base, "--out", str(tmp_path / "one")], capsys)
    monkeypatch.undo()
    assert json.loads((tmp_path / "two" / SEED0 / "checkpoint.json").read_text())["step"] == 5
    result = torchrun([*base, "--out", str(tmp_path / "two")])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("edge circuits (edge-pruning)") == 1, result.stdout  # rank 0 reports, rank 1 is quiet
    assert "rank 1" not in result.stderr, result.stderr[-3000:]
    one, two = tmp_path / "one", tmp_path / "two"
    assert _files(two) == _files(one) and "stability.md" in _files(two)  # the sweep's files too; no lock left
    for seed, resumed in ((0, 5), (1, 0)):
        run = Path("sparsity-0.500") / f"seed-{seed}"
        _same_circuit(one / run, two / run)
        assert json.loads((two / run / "metrics.json").read_text())["resumed_from"] == resumed
    sweep = json.loads((two / "sweep.json").read_text())
    assert [job["status"] for job in sweep["jobs"]] == ["done", "done"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_killed_rank_leaves_the_run_resumable_under_one_process(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    """Two ranks started as a launcher other than torchrun starts them (one process each, the launch variables
    set by hand: torchrun would end the survivor itself). Rank 0 is SIGKILLed after writing its checkpoint at
    step 5; rank 1, waiting in the next step's all-reduce, exits with status 2 and one ``error:`` line naming
    itself. One process then resumes the 2 ranks' checkpoint to the circuit an uninterrupted process finds."""
    root = tiny[0]
    base = ["circuit", "--model", str(root / "model"), *EDGE_PRUNING, "--seeds", "0"]
    _run([*base, "--out", str(tmp_path / "one")], capsys)
    env = {**_torchrun_env(), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "SUBNETLAB_DIST_TIMEOUT_MINUTES": "1"}  # the backstop: a closed connection fails the all-reduce at once
    command = [sys.executable, "-m", "subnetlab", *base, "--out", str(tmp_path / "two")]
    killed = subprocess.Popen(command, env={**env, "RANK": "0", "LOCAL_RANK": "0",
                                            "SUBNETLAB_TEST_KILL_AFTER_WRITE": "*/checkpoint.json"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        survivor = subprocess.run(command, env={**env, "RANK": "1", "LOCAL_RANK": "1"}, capture_output=True,
                                  text=True, timeout=120, cwd=REPO)
        assert killed.wait(timeout=60) == -9, killed.stderr.read()[-3000:]
    finally:
        killed.kill()
    lines = [line for line in survivor.stderr.splitlines() if line.strip()]
    assert survivor.returncode == 2 and len(lines) == 1, survivor.stderr[-3000:]
    assert lines[0].startswith("error: rank 1 of 2: the other ranks did not answer"), lines[0]
    two = tmp_path / "two" / SEED0
    assert json.loads((two / "checkpoint.json").read_text())["step"] == 5 and not (two / "metrics.json").exists()
    _run([*base, "--out", str(tmp_path / "two")], capsys)
    _same_circuit(tmp_path / "one" / SEED0, two)
    assert json.loads((two / "metrics.json").read_text())["resumed_from"] == 5


def test_ranks_that_see_different_runs_finished_are_refused(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    """``--out`` not on a file system every rank sees, simulated by giving the ranks different directories: rank 1's
    holds the finished run, rank 0's none. Both ranks are refused with one ``error:`` line before any job starts
    (they would otherwise run different jobs, each meeting the other's collectives)."""
    root = tiny[0]
    base = ["circuit", "--model", str(root / "model"), *EDGE_PRUNING, "--seeds", "0"]
    _run([*base, "--out", str(tmp_path / "seen")], capsys)
    env = {**_torchrun_env(), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    command = [sys.executable, "-m", "subnetlab", *base, "--out"]
    rank0 = subprocess.Popen([*command, str(tmp_path / "empty")], env={**env, "RANK": "0", "LOCAL_RANK": "0"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        rank1 = subprocess.run([*command, str(tmp_path / "seen")], env={**env, "RANK": "1", "LOCAL_RANK": "1"},
                               capture_output=True, text=True, timeout=120, cwd=REPO)
        err0 = rank0.communicate(timeout=60)[1]
    finally:
        rank0.kill()
    for rank, code, err in ((0, rank0.returncode, err0), (1, rank1.returncode, rank1.stderr)):
        lines = [line for line in err.splitlines() if "error" in line]  # rank 0 also prints its stage lines
        assert code == 2 and len(lines) == 1, err[-3000:]
        assert lines[0].startswith(f"error: rank {rank} of 2: the ranks see different runs finished"), lines[0]
        assert f"this rank: {rank} of 1" in lines[0], lines[0]
    assert not (tmp_path / "empty" / SEED0).exists()  # no job started
