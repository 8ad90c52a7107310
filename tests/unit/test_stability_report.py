"""report.stability: the Markdown of a stability record, its numbers as recorded."""

from __future__ import annotations

import torch

from subnetlab.analysis.stability import mask_stability
from subnetlab.report.stability import bootstrap_line, stability_report


def test_stability_report_tables_read_the_record():
    masks = [torch.tensor([1, 1, 0, 0.]), torch.tensor([1, 0, 1, 0.]), torch.tensor([1, 1, 1, 0.])]
    stab = mask_stability(masks, ["e0", "e1", "e2", "e3"], [0.5, 0.7, 0.9], seed=0)
    stab.update(runs=["steps-5/seed-0", "steps-5/seed-1", "steps-10/seed-0"], mean_jaccard_across_steps=2 / 3)
    text = stability_report({"0.500": {"score": "attribution", "stability": stab}}, "eap-ig")
    assert "### Target sparsity 0.500" in text
    assert "| mean pairwise Jaccard (min) | 0.556 (0.333) |" in text  # (1/3 + 2/3 + 2/3) / 3, min 1/3
    assert "| kept by every circuit / by any | 1 / 3 |" in text
    assert "| mean Jaccard across steps alone | 0.667 |" in text
    assert "| steps-5/seed-1 | 0.333 | 1.000 | 0.667 |" in text  # a row of the pairwise matrix
    assert "| e0 | 1.000 |" in text and "| e1 | 0.667 |" in text and "e3" not in text
    # three scores: their mean and range, never called an interval; from five on, the bootstrap interval
    assert "faithfulness, mean over 3 seeds (range; too few values for an interval) | 0.700 [0.500, 0.900] |" in text
    stab5 = mask_stability(masks * 2, ["e0", "e1", "e2", "e3"], [0.5, 0.7, 0.9, 0.6, 0.8, 0.7], seed=0)
    text = stability_report({"0.500": {"score": "attribution", "stability": stab5}}, "eap-ig")
    assert "faithfulness, mean over 6 seeds (95% bootstrap) | 0.700 [" in text


def test_bootstrap_line():
    boot = {"pairs": 10, "resamples": 100, "seed": 2, "level": 0.9, "estimate": {"cpr": 0.5, "cmd": 0.25},
            "interval": {"cpr": [0.4, 0.6], "cmd": [0.2, 0.3]}, "undefined": {"cpr": 1, "cmd": 0}}
    assert bootstrap_line(boot) == ("90% percentile bootstrap over 10 pairs (100 resamples, seed 2): CPR 0.500 "
                                    "[0.400, 0.600]; CMD 0.250 [0.200, 0.300] (1 undefined draws left out)")


def test_results_lists_the_stability_and_bootstrap_rows(tmp_path, capsys):
    import json

    import pytest

    from subnetlab.cli import main

    stab = mask_stability([torch.tensor([1, 1, 0.]), torch.tensor([0, 1, 1.])] * 3, ["a", "b", "c"],
                          [0.4, 0.6, 0.45, 0.55, 0.5, 0.5], seed=1)
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "metrics.json").write_text(json.dumps(
        {"command": "circuit", "controls": [], "targets": {"0.500": {"score": "logit_diff", "stability": stab}}}))
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "metrics.json").write_text(json.dumps(
        {"definition": "mib", "cpr": 0.5, "cmd": 0.2, "bootstrap": {"estimate": {"cpr": 0.5, "cmd": 0.2},
                                                                   "interval": {"cpr": [0.25, 0.75], "cmd": [0.1, 0.3]}}}))
    with pytest.raises(SystemExit) as done:
        main(["results", str(tmp_path)])
    out = capsys.readouterr().out
    assert done.value.code in (0, None)
    rows = {(r[0], r[1]): r[2] for r in (line.strip("│ ").split("│") for line in out.splitlines() if "│" in line)
            for r in [[c.strip() for c in r]] if len(r) == 3}
    assert rows[("sweep", "targets.0.500.stability.mean_jaccard")] == "0.6"  # 6 of 15 pairs equal, 9 at 1 / 3 ({a,b} vs {b,c})
    assert rows[("sweep", "targets.0.500.stability.kept_in_every")] == "1"
    low, high = (float(x) for x in rows[("sweep", "targets.0.500.stability.score.bootstrap_95")].split(".."))
    assert 0.4 <= low <= high <= 0.6
    assert rows[("eval", "bootstrap.interval.cpr")] == "0.25..0.75"
