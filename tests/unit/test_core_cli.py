"""`subnetlab core` on pruning run directories written by hand (the layout of `subnetlab prune`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from subnetlab.cli import main
from subnetlab.io import read_json, write_json
from subnetlab.subnetwork import Subnetwork
from tests.conftest import tiny_model

HEADS_A = [[[1, 1, 0, 0], [0, 1, 1, 0]], [[1, 0, 1, 0], [0, 1, 0, 1]], [[1, 1, 1, 0], [0, 1, 0, 0]]]
HEADS_B = [[[1, 0, 0, 0], [0, 1, 0, 0]], [[1, 0, 0, 0], [0, 1, 0, 1]]]


def write_runs(root: Path, sparsity: float, masks, staircase_noise: bool = False, health=None) -> None:
    adapter = tiny_model("bert").adapter
    for seed, heads in enumerate(masks):
        run = root / f"sparsity-{sparsity:.2f}" / f"seed-{seed}"
        sub = Subnetwork.structured(adapter, torch.tensor(heads, dtype=torch.float32), method="hard-concrete",
                                    seed=seed, target_sparsity=sparsity, extra={"schedule": "linear"})
        sub.save(run / "subnetwork.safetensors")
        write_json(run / "config.json", {"seed": seed})
        write_json(run / "metrics.json", {"eval": {}, **({"health": health(seed)} if health else {})})
    if staircase_noise:  # staircase levels below the same root must not be mistaken for linear runs
        sub = Subnetwork.structured(adapter, torch.ones(2, 4), seed=0, target_sparsity=0.05, extra={"schedule": "staircase"})
        sub.save(root / "staircase" / "seed-0" / "levels" / "0.05" / "subnetwork.safetensors")


def run(*args: str) -> int:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    return int(e.value.code)


def test_core_from_two_directories(tmp_path, capsys):
    write_runs(tmp_path / "a", 0.5, HEADS_A)
    write_runs(tmp_path / "b", 0.7, HEADS_B)
    out = tmp_path / "core"
    assert run("core", "--runs", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)) == 0
    m = read_json(out / "metrics.json")
    assert m["labels"] == ["50%", "70%"]
    assert m["core"] == ["L0.H0", "L1.H1"]
    assert m["n_a"] == 3 and m["n_b"] == 2 and m["heatmap"][3][2] == 2
    assert m["seeds"] == {"50%": [0, 1, 2], "70%": [0, 1]}
    for f in ("heatmap.png", "frequencies.png", "report.md", "config.json"):
        assert (out / f).is_file()
    assert "L0.H0, L1.H1" in capsys.readouterr().out
    stamp = (out / "metrics.json").stat().st_mtime_ns
    assert run("core", "--runs", str(tmp_path / "a"), "--runs", str(tmp_path / "b"), "--out", str(out)) == 0
    assert (out / "metrics.json").stat().st_mtime_ns == stamp  # the same runs however spelled: skipped


def test_core_from_one_directory_ignores_staircase_levels(tmp_path):
    write_runs(tmp_path / "sweep", 0.5, HEADS_A, staircase_noise=True)
    write_runs(tmp_path / "sweep", 0.7, HEADS_B)
    out = tmp_path / "core"
    assert run("core", "--runs", str(tmp_path / "sweep"), "--out", str(out)) == 0
    assert read_json(out / "metrics.json")["core"] == ["L0.H0", "L1.H1"]
    stamp = (out / "metrics.json").stat().st_mtime_ns
    assert run("core", "--runs", str(tmp_path / "sweep"), "--out", str(out)) == 0
    assert (out / "metrics.json").stat().st_mtime_ns == stamp  # finished: skipped


def test_core_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run("core", "--runs", str(tmp_path / "empty"), str(tmp_path / "empty"), "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "no subnetwork.safetensors" in err[0]
    write_runs(tmp_path / "one", 0.5, HEADS_A)
    assert run("core", "--runs", str(tmp_path / "one"), "--out", str(tmp_path / "o")) == 2
    assert "two sparsities" in capsys.readouterr().err
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_core_reports_the_health_of_its_runs(tmp_path, capsys):
    """The runs' health entries (as ``prune`` writes them) are counted per sparsity in the metrics, the printed
    summary and the report; under --strict a core resting on flagged runs is refused (after it is written)."""
    from subnetlab.runs.health import judge

    def undecided(seed):  # seeds 0 and 1 of the 50% runs: 6 of 10 gates undecided
        return judge(undecided=6 if seed < 2 else 0, gates=10, expected_sparsity=0.5, target_sparsity=0.5).to_dict()

    write_runs(tmp_path / "a", 0.5, HEADS_A, health=undecided)
    write_runs(tmp_path / "b", 0.7, HEADS_B, health=lambda seed: judge(kept=4, maskable=10).to_dict())
    out = tmp_path / "core"
    assert run("core", "--runs", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)) == 0
    health = read_json(out / "metrics.json")["health"]
    assert health["50%"]["problems"] == {"undecided": 2} and health["50%"]["judged"] == 3
    assert health["50%"]["undecided_share_mean"] == pytest.approx((0.6 + 0.6 + 0.0) / 3)
    assert health["70%"] == {"judged": 2, "problems": {}, "undecided_share_mean": None}
    captured = capsys.readouterr()
    assert "health of the runs at 50%: undecided in 2 of 3 seed(s) (mean 40% of gates undecided)" in captured.out
    assert captured.err.strip().splitlines()[-1] == (
        "warning: the core rests on pruned runs with health problems: at 50%, undecided in 2 of 3 seed(s)")
    assert "Health of the pruned runs" in (out / "report.md").read_text()
    assert run("--strict", "core", "--runs", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --strict: the core rests on pruned runs")
