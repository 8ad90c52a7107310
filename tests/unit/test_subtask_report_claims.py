"""The Subtask Induction report and its findings rows from constructed transfer runs: this run's own level beside the
paper's, the full-model row in words, the empty-mask control deciding "beats scratch"."""

from __future__ import annotations

import json

from subnetlab.experiments.demo import verdicts as v
from subnetlab.experiments.subtask_induction import findings as si
from subnetlab.experiments.subtask_induction.report import write_report
from subnetlab.experiments.subtask_induction.reproduce import PRESETS, Settings

# mean test accuracy per condition and N (three seeds at mean - 0.01, mean, mean + 0.01: s.d. 0.01)
MEANS = {"subnetwork": {10: 0.55, 100: 0.60, 300: 0.643}, "scratch": {10: 0.45, 100: 0.50, 300: 0.55},
         "empty-mask": {10: 0.54, 100: 0.59, 300: 0.62}, "full": {10: 0.85, 100: 0.88, 300: 0.90},
         "random-matched": {10: 0.50, 100: 0.55, 300: 0.60}, "random-released": {10: 0.48, 100: 0.52, 300: 0.58}}


def _runs() -> list[dict]:
    return [{"condition": c, "label": c, "size": n, "seed": seed, "layers": 2, "test_accuracy": m + 0.01 * (seed - 1),
             "sequences": 100 * (100 + n), "train_rows": 100 + n, "best_epoch": 50, "seconds": 1.0, "cpu_seconds": 1.0}
            for c, by in MEANS.items() for n, m in by.items() for seed in range(3)]


def test_report_and_findings_quote_this_runs_level_and_the_rows_against_the_paper(tmp_path):
    settings = Settings.from_preset(PRESETS, "demo")
    discovered = {2: {"sweep": [], "l0_lambda": 3e-6, "full_model_test_accuracy": 1.0, "eval_accuracy": 1.0,
                      "test_accuracy": 1.0, "kept_percent": 6.3, "kept_percent_per_layer": {"0": 6.0, "1": 6.6},
                      "selection": "sparsest"}}
    report = write_report(tmp_path, settings, {2: {"test_accuracy": 1.0}}, discovered, _runs())
    (tmp_path / "config.json").write_text(json.dumps(settings.to_dict()), encoding="utf-8")
    text = report.read_text(encoding="utf-8")
    assert "this run's best mean: 64.3% at N=300" in text
    assert "full beats the subnetwork by 30.0 points at N=10 (beyond the seed spread)" in text
    assert "`empty-mask` transfers no matrix weight" in text
    rows = {r.claim: r for r in si.findings(tmp_path, tmp_path)}
    scratch = rows[si.CONTROLS["scratch"][0]]
    assert scratch.verdict == v.NOT_SHOWN and "copied embeddings" in scratch.rule
    assert "never passes 65%" in scratch.this_run
    full = rows[si.FULL[0]]
    assert full.verdict == v.NOT_SHOWN and full.rule.startswith("full beats the subnetwork by 30.0 points at N = 10")
    assert full.link == "report.md#transfer-figure-3"
