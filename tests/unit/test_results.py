"""`subnetlab results DIR`: one long row per measured number in canonical columns plus each run's raw columns
(``collect_results``: one wide row per run directory, nested keys flattened), CSV + Parquet."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job, collect_results, run_jobs
from subnetlab.executor.results import LONG_COLUMNS, flatten, results_table
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
    expected = results_table(sweep)
    from_csv = pd.read_csv(tmp_path / "table.csv")
    from_parquet = pd.read_parquet(tmp_path / "table.parquet")
    assert len(from_csv) == len(from_parquet) == 4 * 3  # 4 runs x (2 accuracies + kept_heads)
    pd.testing.assert_frame_equal(from_parquet, expected, check_dtype=False)
    assert list(from_csv.columns) == list(expected.columns)
    assert from_csv["value"].tolist() == pytest.approx(expected["value"].tolist())
    out = capsys.readouterr().out
    assert "4 runs, 12 measurements" in out and str(tmp_path / "table.parquet") in out  # whole, not wrapped
    assert not list(tmp_path.glob(".*.tmp"))


def test_default_output_lives_in_dir_and_is_not_collected_again(sweep: Path) -> None:
    for _ in range(2):
        with pytest.raises(SystemExit):
            main(["results", str(sweep)])
    assert len(pd.read_parquet(sweep / "results.parquet")) == 12


def test_long_table_has_canonical_columns_whatever_command_wrote_the_run(tmp_path: Path) -> None:
    make_run(tmp_path / "ft", {"command": "finetune", "finetune": {"model": "minilm", "task": "nli-synthetic",
                                                                   "seed": 3}},
             {"steps": 10, "final": {"eval": {"accuracy": 0.8, "n": 50}, "test": {"accuracy": 0.7, "n": 40}}})
    make_run(tmp_path / "p" / "full-model", {"model": "ft/model", "task": "nli-synthetic", "eval": {"batch_size": 8}},
             {"eval": {"id": {"accuracy": 0.9}}})
    make_run(tmp_path / "p" / "sparsity-0.50" / "seed-1",
             {"model": "ft/model", "task": "nli-synthetic", "prune": {"seed": 1, "sparsity": 0.5}},
             {"target_sparsity": 0.5, "seed": 1, "eval": {"id": {"accuracy": 0.6}, "hans": {"accuracy": 0.5}},
              "health": {"problems": []}})
    make_run(tmp_path / "d", {"command": "discover", "model": "lm", "task": "arith:ab", "seed": 0},
             {"eval_accuracy": 0.4, "test_accuracy": 0.3, "kept_percent_per_layer": {"0": 10.0},
              "history": [{"loss": 1.0}], "health": {"problems": ["degenerate"]}})
    make_run(tmp_path / "t", {"model": "lm", "task": "arith:ab", "runs": [{"seed": 4}], "train": {}},
             {"runs": [{"condition": "subnetwork", "seed": 4, "test_accuracy": 0.25, "curve": [[0, 1.0, 0.2]]}]})
    make_run(tmp_path / "a", {"command": "ablate", "model": "m", "task": {"task": "nli-synthetic"}},
             {"rows": [{"label": "None", "accuracy": {"id": 0.6, "hans": 0.55}}], "mask": [[1, 0], [0, 1]]})
    table = results_table(tmp_path)
    assert list(table.columns[:len(LONG_COLUMNS)]) == LONG_COLUMNS
    assert str(table["seed"].dtype) == "Int64" and str(table["value"].dtype) == "float64"
    accuracy = table[table.metric == "accuracy"].set_index(["run_dir", "split"])
    assert accuracy["value"].to_dict() == {
        ("a", "id"): 0.6, ("a", "hans"): 0.55, ("d", "eval"): 0.4, ("d", "test"): 0.3, ("ft", "eval"): 0.8,
        ("ft", "test"): 0.7, ("p/full-model", "id"): 0.9, ("p/sparsity-0.50/seed-1", "id"): 0.6,
        ("p/sparsity-0.50/seed-1", "hans"): 0.5, ("t", "test"): 0.25}
    first = table.drop_duplicates("run_dir").set_index("run_dir")
    assert first["command"].to_dict() == {"a": "ablate", "d": "discover", "ft": "finetune", "p/full-model": "prune",
                                          "p/sparsity-0.50/seed-1": "prune", "t": "transfer"}
    assert first["model"]["ft"] == "minilm" and first["task"]["a"] == "nli-synthetic"
    assert first["seed"].fillna(-1).to_dict() == {"a": -1, "d": 0, "ft": 3, "p/full-model": -1,
                                                  "p/sparsity-0.50/seed-1": 1, "t": 4}
    assert first["sparsity"]["p/full-model"] == 0.0 and first["sparsity"]["p/sparsity-0.50/seed-1"] == 0.5
    assert first["health"]["p/sparsity-0.50/seed-1"] == "ok" and first["health"]["d"] == "degenerate"
    mask = table[table.metric == "mask"]
    assert mask[["position", "value"]].values.tolist() == [["0,0", 1.0], ["0,1", 0.0], ["1,0", 0.0], ["1,1", 1.0]]
    assert "loss" not in set(table.metric) and "curve" not in " ".join(table.metric_path)  # traces: raw columns only
    assert table[(table.run_dir == "ft") & (table.metric == "steps")]["split"].isna().all()


def test_the_docs_pandas_snippet_runs(sweep: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """docs/results.md's snippet, exactly as written there, on a sweep in ``runs/cli/prune`` (where it reads)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    [snippet] = [b for b in blocks if "read_parquet" in b]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for run in sorted(sweep.rglob("metrics.json")):  # a prune-like sweep: seeds x sparsities
        seed, sparsity = run.parent.parent.name[4:], run.parent.name[2:]
        target = tmp_path / "runs" / "cli" / "prune" / f"sparsity-{sparsity}" / f"seed-{seed}"
        make_run(target, {"model": "m", "task": "nli-synthetic", "prune": {"seed": int(seed), "sparsity": float(sparsity)}},
                 {"target_sparsity": float(sparsity), "seed": int(seed),
                  "eval": {"id": {"accuracy": 0.8 - float(sparsity) / 10}, "hans": {"accuracy": 0.5}}})
    with pytest.raises(SystemExit) as done:
        main(["results", "runs/cli/prune"])
    assert done.value.code == 0
    capsys.readouterr()
    exec(compile(snippet, "docs/results.md", "exec"), {})
    out = capsys.readouterr().out
    assert "hans" in out and "mean" in out and "0.75" in out  # id at sparsity 0.5: 0.8 - 0.05


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
    table = pd.read_csv(tmp_path / "table.csv", keep_default_na=False)  # the long table: one row per number
    assert "health" in table.columns
    by_run = table.groupby("run_dir")["health"].unique().map(list).to_dict()
    assert by_run == {"bad": ["undecided,off-target"], "good": ["ok"], "old": [""]}
    assert "undecided,off-target" in capsys.readouterr().out


def test_circuit_runs_have_their_command_and_split(tmp_path: Path) -> None:
    """Edge pruning (the circuit job's config has no ``command``: its ``edge_prune`` keys show it), attribution and
    circuit-eval runs: every circuit metric and faithfulness number carries the split it was measured on; numbers
    of the run as a whole (kept edges, steps) none."""
    make_run(tmp_path / "ep" / "sparsity-0.900" / "seed-0",
             {"model": "m", "task": "circuit:ioi", "preset": "quick", "edge_prune": {"sparsity": 0.9, "seed": 0},
              "eval_split": "eval"},
             {"target_sparsity": 0.9, "seed": 0, "kept_edges": 11, "steps": 300,
              "eval": {"split": "eval", "logit_diff": 1.5, "kl": 0.2},
              "faithfulness": {"logit_diff": 0.55, "kl": 0.7}, "health": {"problems": ["undecided"]}})
    make_run(tmp_path / "eap", {"command": "circuit", "method": "eap", "model": "m", "task": "circuit:ioi",
                                "split": "train"},
             {"method": "eap", "pairs": 8, "top_edges": [{"edge": "a0.h1->logits", "score": 0.25}]})
    make_run(tmp_path / "faith", {"command": "circuit-eval", "model": "m", "task": "circuit:ioi", "split": "eval"},
             {"level": "edges", "items": 110, "pairs": 8, "cpr": 0.8, "cmd": 0.2})
    table = results_table(tmp_path)
    first = table.drop_duplicates("run_dir").set_index("run_dir")
    assert first["command"].to_dict() == {"eap": "circuit", "ep/sparsity-0.900/seed-0": "circuit",
                                          "faith": "circuit-eval"}
    split = table.set_index(["run_dir", "metric_path"])["split"].astype(object).where(table.split.notna().values, None)
    by_path = {(r, p): s for (r, p), s in split.items()}
    ep = "ep/sparsity-0.900/seed-0"
    assert by_path[(ep, "eval.logit_diff")] == "eval" and by_path[(ep, "eval.kl")] == "eval"
    assert by_path[(ep, "faithfulness.logit_diff")] == "eval" and by_path[(ep, "faithfulness.kl")] == "eval"
    assert by_path[(ep, "kept_edges")] is None and by_path[(ep, "steps")] is None
    assert by_path[("eap", "top_edges[0].score")] == "train" and by_path[("eap", "pairs")] is None
    assert by_path[("faith", "cpr")] == "eval" and by_path[("faith", "cmd")] == "eval"
    assert by_path[("faith", "items")] is None
    assert table[(table.run_dir == ep) & (table.metric_path == "faithfulness.kl")]["metric"].tolist() == [
        "faithfulness.kl"]
    assert table[table.metric_path == "top_edges[0].score"]["position"].tolist() == ["a0.h1->logits"]


def test_the_printed_summary_is_one_row_per_run_with_its_headline_numbers(tmp_path: Path, capsys) -> None:
    """``run_summary``: each run once, its identity and the numbers nearest the top of its metrics.json (the
    measured sparsity beside the target, under its own name); the command prints it, not the first raw rows."""
    from subnetlab.executor.results import run_summary

    make_run(tmp_path / "ep" / "s-0", {"model": "m", "task": "circuit:ioi", "edge_prune": {"sparsity": 0.9, "seed": 0},
                                       "eval_split": "eval"},
             {"target_sparsity": 0.9, "seed": 0, "kept_edges": 11, "sparsity": 0.91,
              "eval": {"split": "eval", "logit_diff": 1.5}, "faithfulness": {"logit_diff": 0.55},
              "final": {"eval": {"accuracy": 0.1}}})
    make_run(tmp_path / "prune" / "s-1", {"prune": {"sparsity": 0.5, "seed": 1}},
             {"eval": {"accuracy": 0.75}, "final": {"eval": {"accuracy": 0.7}}, "health": {"problems": []}})
    summary = run_summary(results_table(tmp_path)).set_index("run_dir")
    assert list(summary.index) == ["ep/s-0", "prune/s-1"]
    assert summary.loc["ep/s-0", "kept_edges"] == 11 and summary.loc["ep/s-0", "measured_sparsity"] == 0.91
    assert summary.loc["ep/s-0", "sparsity"] == 0.9 and summary.loc["ep/s-0", "eval.faithfulness.logit_diff"] == 0.55
    assert summary.loc["ep/s-0", "eval.accuracy"] == 0.1  # its only accuracy, however deep
    assert summary.loc["prune/s-1", "eval.accuracy"] == 0.75  # eval.accuracy before final.eval.accuracy
    assert summary.loc["prune/s-1", "health"] == "ok" and pd.isna(summary.loc["prune/s-1", "kept_edges"])
    with pytest.raises(SystemExit) as done:
        main(["results", str(tmp_path), "--out", str(tmp_path / "t")])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "2 runs" in out and "one row per run" in out and out.count("prune/s-1") == 1 and "0.75" in out


def test_runs_come_in_natural_order(tmp_path: Path) -> None:
    from subnetlab.executor.results import find_runs

    for name in ("steps-20/seed-0", "steps-5/seed-10", "steps-5/seed-2", "steps-10/seed-0"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "metrics.json").write_text("{}")
    assert [p.relative_to(tmp_path).as_posix() for p in find_runs(tmp_path)] == [
        "steps-5/seed-2", "steps-5/seed-10", "steps-10/seed-0", "steps-20/seed-0"]
