"""Subtask Induction end to end at the smallest size: the reproduction, `discover`, `transfer`, bad input."""

from __future__ import annotations

import json

import pytest
import torch

from subnetlab.cli import main

pytestmark = pytest.mark.integration

TINY = {  # the demo preset shrunk to seconds: numbers 0..19, a few rows, 2 epochs everywhere
    # cs_lr 0.2: six mask steps at 1e-3 leave every mask closed (from -0.1), and transfer refuses an empty subnetwork
    "max_number": "20", "base_train": "300", "base_epochs": "2", "cs_samples": "300", "cs_epochs": "2", "cs_lr": "0.2",
    "lambdas": "[1.0e-7]", "sizes": "[0, 10]", "seeds": "[0]", "transfer_epochs": "2", "transfer_min_steps": "0",
    "backend": "local",
    "n_eval": "40", "n_test": "40",
    # every condition and the secondary table (the demo itself runs Figure 3's controls only)
    "conditions": "[subnetwork, random-matched, random-released, complement-matched, empty-mask, scratch, full]",
    "secondary_reinit": "all",
}


def _cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        main(args)
    return int(done.value.code)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("si") / "demo"
    sets = [x for k, v in TINY.items() for x in ("--set", f"{k}={v}")]
    threads = torch.get_num_threads()
    assert _cli(["reproduce", "subtask-induction", "--preset", "demo", "--out", str(out), *sets]) == 0
    assert torch.get_num_threads() == threads  # the in-process jobs restore the caller's threads
    return out, sets


def test_reproduction_writes_report_figure_and_table3(demo):
    out, _ = demo
    report = (out / "report.md").read_text()
    assert "Figure 1" in report and "Table 3" in report and "(demo preset)" in report
    assert (out / "figure3.png").stat().st_size > 1000
    metrics = json.loads((out / "metrics.json").read_text())
    conditions = {r["condition"] for r in metrics["runs"]}
    assert conditions == {"subnetwork", "random-matched", "random-released", "complement-matched", "empty-mask",
                          "scratch", "full"}
    labels = {r["label"] for r in metrics["runs"]}
    assert labels == conditions | {"subnetwork, reinit all", "random-matched, reinit all"}  # reinit masked leads
    assert {r["reinit"] for r in metrics["runs"] if r["label"] in conditions} == {"masked"}
    assert len(metrics["runs"]) == 9 * 2
    # the demo's search controls: the chosen lambda with seeds 0-2, on random weights and shuffled labels alike
    controls = json.loads((out / "L2" / "discover" / "controls" / "metrics.json").read_text())["targets"]["selected"]
    assert {k: controls[k]["seeds"] for k in ("real", "random-weights", "shuffled-labels")} == {
        "real": [0, 1, 2], "random-weights": [0, 1, 2], "shuffled-labels": [0, 1, 2]}
    assert "Search controls (2 layers, lambda 1e-07)" in report
    discovery = metrics["discovery"]["2"]
    kept = discovery["kept_percent"]
    assert 0.0 <= kept <= 100.0 and f"{kept:.2f}" in report
    assert [row["l0_lambda"] for row in discovery["sweep"]] == [1e-7]  # density per lambda, in the report too
    assert "Discovery: density per lambda" in report and "reinit `all`" in report
    assert "_sample_mask_randomly" in report and "math/ablate.py" in report  # the code notes name their files
    # the k-controls transfer exactly as many weights as the subnetwork; the released one n - k; none the empty mask
    transferred = {r["condition"]: r["transferred"] for r in metrics["runs"] if r["size"] == 0}
    assert transferred["random-matched"] == transferred["subnetwork"] == transferred["complement-matched"]
    assert transferred["random-released"] == discovery["masked_total"] - transferred["subnetwork"]
    assert transferred["scratch"] == transferred["empty-mask"] == 0


def test_rerun_skips_finished_work(demo):
    out, sets = demo
    before = (out / "report.md").read_text()
    finished = [out / "L2" / "base" / "metrics.json", out / "L2" / "discover" / "lambda_1e-07" / "metrics.json",
                out / "L2" / "transfer" / "scratch" / "n10_s0" / "metrics.json"]
    stamps = [p.stat().st_mtime_ns for p in finished]
    assert _cli(["reproduce", "subtask-induction", "--preset", "demo", "--out", str(out), *sets]) == 0
    assert [p.stat().st_mtime_ns for p in finished] == stamps  # nothing retrained
    sweep = json.loads((out / "sweep.json").read_text())
    assert {j["status"] for j in sweep["jobs"]} == {"skipped"}
    assert (out / "report.md").read_text() == before
    changed = [*sets, "--set", "transfer_epochs=3"]
    assert _cli(["reproduce", "subtask-induction", "--preset", "demo", "--out", str(out), *changed]) == 2


def test_discover_and_transfer_commands(demo, tmp_path, capsys):
    out, _ = demo
    model = out / "L2" / "base" / "model"
    common = ["--task-option", "n_eval=40", "--task-option", "n_test=40"]
    assert _cli(["discover", "--model", str(model), "--task", "arith:ab", "--out", str(tmp_path / "d"), "--epochs", "2",
                 "--samples", "300", "--batch-size", "100", "--lambdas", "1e-7,1e-8", "--lr", "0.2", *common]) == 0
    printed = capsys.readouterr().out
    assert "selected lambda" in printed and "parameters kept" in printed
    found = json.loads((tmp_path / "d" / "metrics.json").read_text())
    assert len(found["sweep"]) == 2 and (tmp_path / "d" / "subnetwork.safetensors").is_file()
    assert _cli(["transfer", "--model", str(model), "--subnetwork", str(tmp_path / "d" / "subnetwork.safetensors"),
                 "--task", "arith:a^2+ab", "--condition", "subnetwork,random-matched,scratch", "--disambiguation", "0,10",
                 "--seeds", "0-1", "--epochs", "2", "--out", str(tmp_path / "t"), *common]) == 0
    result = json.loads((tmp_path / "t" / "metrics.json").read_text())
    assert len(result["runs"]) == 3 * 2 * 2
    assert set(result["summary"]) == {"subnetwork", "random-matched", "scratch"}
    assert (tmp_path / "t" / "figure3.png").is_file()
    # --stack 2: both seeds of a size in one job, trained together
    assert _cli(["transfer", "--model", str(model), "--subnetwork", str(tmp_path / "d" / "subnetwork.safetensors"),
                 "--task", "arith:a^2+ab", "--condition", "random-matched", "--disambiguation", "10", "--seeds", "0-1",
                 "--epochs", "2", "--stack", "2", "--out", str(tmp_path / "ts"), *common]) == 0
    stacked = json.loads((tmp_path / "ts" / "random-matched" / "n10" / "metrics.json").read_text())
    assert [r["seed"] for r in stacked["runs"]] == [0, 1]
    capsys.readouterr()
    bad = [
        (["--condition", "lottery"], "--condition 'lottery'"),
        (["--condition", "subnetwork"], "needs --subnetwork"),
        (["--condition", "scratch", "--reinit", "some"], "--reinit 'some'"),
        (["--condition", "scratch", "--disambiguation", "ten"], "--disambiguation"),
        (["--condition", "subnetwork", "--subnetwork", str(tmp_path / "missing.safetensors")], "missing.safetensors: no such file"),
    ]
    for args, fragment in bad:
        code = _cli(["transfer", "--model", str(model), "--task", "arith:a^2+ab", "--out", str(tmp_path / "bad"),
                     "--disambiguation", "0,10", *common, *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
    code = _cli(["discover", "--model", str(tmp_path / "nowhere"), "--task", "arith:ab", "--out", str(tmp_path / "bad2")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: ") and "nowhere" in err[-1]
