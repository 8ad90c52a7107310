"""End to end on the real MiniLM: `subnetlab finetune` on the synthetic corpus, then `subnetlab evaluate` on real HANS."""

from __future__ import annotations

import json

import pytest

from subnetlab.cli import main
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.integration


def test_finetune_then_evaluate_minilm(tmp_path, capsys):
    hans = SHARED_DATA / "hans" / "hans_subset_val.tsv"
    if not hans.exists():
        pytest.skip("../shared/data is absent")
    run = tmp_path / "ft"
    args = ["finetune", "--model", "minilm", "--task", "nli-synthetic", "--task-option", "n_train=96",
            "--task-option", "n_eval=32", "--task-option", "hans_per_subcase=1", "--eval-data", f"hans={hans}",
            "--eval-limit", "60", "--batch-size", "16", "--max-steps", "4", "--save-every", "2", "--eval-every", "2",
            "--lr", "5e-5", "--out", str(run)]
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code == 0
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 2, 4]
    assert set(lines[-1]["splits"]) == {"id", "hans-synthetic", "hans"}
    assert len(lines[-1]["splits"]["hans"]["subcases"]) == 30
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2", "step-4"]
    stamp = (run / "metrics.json").stat().st_mtime_ns
    with pytest.raises(SystemExit) as again:  # finished: the rerun skips the work
        main(args)
    assert again.value.code == 0 and (run / "metrics.json").stat().st_mtime_ns == stamp
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--model", str(run / "model"), "--task", "hans", "--data", str(hans), "--limit", "90", "--out", str(tmp_path / "ev")])
    assert done.value.code == 0
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["hans"]["n"] == 90 and len(metrics["hans"]["heuristics"]) == 3
