"""`subnetlab results DIR`: one row per run directory, nested keys flattened, CSV + Parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job, collect_results, run_jobs
from subnetlab.executor.results import flatten
from subnetlab.io import write_json, write_text


def make_run(path: Path, config: dict, metrics: dict) -> None:
    write_json(path / "config.json", config)
    write_json(path / "metrics.json", metrics)


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    for seed in (0, 1):
        for sparsity in (0.5, 0.7):
            make_run(
                root / f"seed{seed}" / f"sp{sparsity}",
                {"seed": seed, "sparsity": sparsity, "prune": {"lr": 0.1, "steps": 10}, "tasks": ["mnli", "hans"]},
                {"accuracy": {"mnli": 0.8 - sparsity / 10 + seed / 100, "hans": 0.5}, "kept_heads": 7 + seed},
            )
    write_text(root / "notes.txt", "not a run")
    (root / "empty_dir").mkdir()
    return root


def test_flatten_joins_nested_keys_with_dots_and_keeps_lists_as_json() -> None:
    assert flatten({"a": {"b": {"c": 1}, "d": 2}, "e": [1, 2], "f": {}, "g": None}, "x.") == {
        "x.a.b.c": 1, "x.a.d": 2, "x.e": "[1, 2]", "x.f": "{}", "x.g": None,
    }


def test_one_row_per_run_with_flattened_columns(sweep: Path) -> None:
    table = collect_results(sweep)
    assert list(table["run_dir"]) == ["seed0/sp0.5", "seed0/sp0.7", "seed1/sp0.5", "seed1/sp0.7"]
    assert list(table.columns) == [
        "run_dir", "config.seed", "config.sparsity", "config.prune.lr", "config.prune.steps", "config.tasks",
        "metrics.accuracy.mnli", "metrics.accuracy.hans", "metrics.kept_heads",
    ]
    for _, row in table.iterrows():
        metrics = json.loads((sweep / row["run_dir"] / "metrics.json").read_text())
        config = json.loads((sweep / row["run_dir"] / "config.json").read_text())
        assert row["metrics.accuracy.mnli"] == metrics["accuracy"]["mnli"]
        assert row["config.seed"] == config["seed"] and row["config.sparsity"] == config["sparsity"]
        assert json.loads(row["config.tasks"]) == config["tasks"]


def test_cli_writes_csv_and_parquet_that_round_trip(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["results", str(sweep), "--out", str(tmp_path / "table")])
    assert exit_info.value.code == 0
    expected = collect_results(sweep)
    from_csv = pd.read_csv(tmp_path / "table.csv")
    from_parquet = pd.read_parquet(tmp_path / "table.parquet")
    assert len(from_csv) == len(from_parquet) == 4
    pd.testing.assert_frame_equal(from_parquet, expected, check_dtype=False)
    assert list(from_csv.columns) == list(expected.columns)
    assert from_csv["metrics.accuracy.mnli"].tolist() == pytest.approx(expected["metrics.accuracy.mnli"].tolist())
    out = capsys.readouterr().out
    assert "4 runs" in out and "table.parquet" in out
    assert not list(tmp_path.glob(".*.tmp"))


def test_default_output_lives_in_dir_and_is_not_collected_again(sweep: Path) -> None:
    for _ in range(2):
        with pytest.raises(SystemExit):
            main(["results", str(sweep)])
    assert len(pd.read_parquet(sweep / "results.parquet")) == 4


def test_mixed_types_in_one_column_become_text(tmp_path: Path) -> None:
    make_run(tmp_path / "a", {"device": 0}, {"loss": 1.0})
    make_run(tmp_path / "b", {"device": "cpu"}, {"loss": None})
    make_run(tmp_path / "c", {}, {"loss": 2.0, "extra": True})
    table = collect_results(tmp_path)
    assert table["config.device"].tolist()[:2] == ["0", "cpu"]
    assert len(table) == 3 and "metrics.extra" in table.columns
    from subnetlab.executor import write_results

    _, parquet = write_results(table, tmp_path / "out")
    assert pd.read_parquet(parquet)["config.device"].tolist()[:2] == ["0", "cpu"]


def test_a_sweep_run_by_the_executor_gives_one_row_per_job(tmp_path: Path) -> None:
    configs = [{"seed": s, "n": 3} for s in range(3)]
    report = run_jobs([Job("tests.unit.executor_jobs:draw", c, tmp_path / f"s{c['seed']}") for c in configs])
    table = collect_results(tmp_path)
    assert table["run_dir"].tolist() == ["s0", "s1", "s2"]
    assert table["metrics.mean"].tolist() == [m["mean"] for m in report.metrics]
    assert table["metrics.grid.seed"].tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "no such directory"),
        (lambda d: d.mkdir(), "no run directories"),
        (lambda d: (d / "r").mkdir(parents=True) or write_text(d / "r" / "metrics.json", '{"a": 1,\n oops}'),
         "metrics.json:2: malformed JSON"),
    ],
)
def test_bad_dir_is_one_error_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, setup, message: str
) -> None:
    target = tmp_path / "runs"
    setup(target)
    with pytest.raises(SystemExit) as exit_info:
        main(["results", str(target)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    with pytest.raises(SubnetlabError):
        collect_results(target)


def test_the_health_column_names_each_runs_problems(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from subnetlab.runs.health import judge

    root = tmp_path / "runs"
    make_run(root / "bad", {"seed": 0}, {"eval": 0.5, "health": judge(expected_sparsity=0.047, target_sparsity=0.5,
                                                                        undecided=10, gates=10).to_dict()})
    make_run(root / "good", {"seed": 1}, {"eval": 0.7, "health": judge(kept=3, maskable=6).to_dict()})
    make_run(root / "old", {"seed": 2}, {"eval": 0.6})  # written before health was recorded
    with pytest.raises(SystemExit) as exit_info:
        main(["results", str(root), "--out", str(tmp_path / "table")])
    assert exit_info.value.code == 0
    table = pd.read_csv(tmp_path / "table.csv", keep_default_na=False)
    assert list(table.columns[:2]) == ["run_dir", "health"]
    assert dict(zip(table["run_dir"], table["health"])) == {"bad": "undecided,off-target", "good": "ok", "old": ""}
    out = capsys.readouterr().out
    assert "undecided,off-target" in out and "metrics.health.undecided_share" in out
