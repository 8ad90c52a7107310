"""The findings table: verdict rules, each study's rows from small hand-made result files, missing keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from subnetlab.experiments.demo import verdicts as v
from subnetlab.experiments.demo.findings import render, write_findings
from subnetlab.experiments.heuristic_core import findings as hc
from subnetlab.experiments.subtask_induction import findings as si


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")


# -- rules ------------------------------------------------------------------------------------

def test_beyond_spread():
    assert v.beyond_spread(0.05, 0.03, 3)[0] == v.SHOWN
    assert v.beyond_spread(0.03, 0.03, 3)[0] == v.NOT_SHOWN  # equal is not beyond
    assert v.beyond_spread(-0.2, 0.01, 3)[0] == v.NOT_SHOWN
    assert v.beyond_spread(0.5, 0.0, 1)[0] == v.NOT_MEASURABLE
    assert v.beyond_spread(0.005, 0.001, 3, margin=0.01)[0] == v.NOT_SHOWN


def test_ahead_at_low_n():
    assert v.ahead_at_low_n({"10": (0.2, 0.1, 3), "30": (0.05, 0.1, 3)})[0] == v.SHOWN
    assert v.ahead_at_low_n({"10": (0.05, 0.1, 3), "30": (0.05, 0.1, 3)}) == (
        v.NOT_SHOWN, "ahead at every low N but within the seed spread")
    verdict, why = v.ahead_at_low_n({"10": (0.3, 0.1, 3), "30": (-0.01, 0.1, 3)})
    assert verdict == v.NOT_SHOWN and "N = 30" in why
    assert v.ahead_at_low_n({"10": (0.3, 0.1, 1)})[0] == v.NOT_MEASURABLE
    assert v.ahead_at_low_n({})[0] == v.NOT_MEASURABLE


def test_in_band_and_slugs():
    assert v.in_band(5.0, 3, 8)[0] == v.SHOWN and v.in_band(11.0, 3, 8)[0] == v.NOT_SHOWN
    assert v.slug("Shared heads: the core") == "shared-heads-the-core"
    assert v.slug("NLI: synthetic corpus -> HANS-style subcases") == "nli-synthetic-corpus---hans-style-subcases"
    assert v.slug("Does the subnetwork beat its controls at low N?") == "does-the-subnetwork-beat-its-controls-at-low-n"
    md = "# T\n\n## A\n\n### Core\n\n```\n## not a heading\n```\n\n## B\n\n### Core\n"
    assert v.headings(md) == [("T", "t"), ("A", "a"), ("Core", "core"), ("B", "b"), ("Core", "core-1")]


def test_section_link_relative_with_fallbacks(tmp_path):
    report = tmp_path / "study" / "report.md"
    _write(report, "# R\n\n## One\n\n### Sec\n\n## Two\n\n### Sec\n")
    assert v.section_link(report, "Sec", tmp_path) == "study/report.md#sec"
    assert v.section_link(report, "Sec", tmp_path, after="Two") == "study/report.md#sec-1"
    assert v.section_link(report, "Absent", tmp_path) == "study/report.md"
    assert v.section_link(tmp_path / "none" / "report.md", "Sec", tmp_path) == "none/report.md"


# -- Heuristic Core -------------------------------------------------------------------------

HC_REPORT = ("# The Heuristic Core\n\n## Setup\n\n## NLI: synthetic\n\n### Training\n\n### Subnetworks across seeds\n\n"
             "### Shared heads: the core\n\n### Ablating the core heads\n\n### Effective size over training\n")


def _hc_run(root: Path, **change) -> Path:
    out = root / "heuristic-core"
    summary = {
        "core": ["L0.H1", "L2.H3"], "core_size": 2, "spearman_rho": 0.7,
        "spread": {"50%": {"id_sd": 0.004, "id_range": 0.01, "ood_subcase_sd": 0.05, "ood_mean_sd": 0.02}},
        "ablation": {"core_id_drop": 0.002, "core_ood_drop": 0.08, "core_max_ood_drop": 0.2,
                     "other_id_drop": 0.001, "other_ood_drop": 0.005, "joint_ood_drop": 0.3},
        "effective_size": [{"step": 0, "id": 0.3, "ood": 0.3}, {"step": 100, "id": 0.3, "ood": 0.5}],
    }
    for key, value in change.items():
        if value is None:
            summary.pop(key)
        else:
            summary[key] = value
    _write(out / "metrics.json", {"studies": {"nli": summary}})
    _write(out / "config.json", {"settings": {"studies": [{"name": "nli", "title": "NLI: synthetic"}],
                                              "seeds": [0, 1, 2, 3], "effective_size": {"seeds": [0, 1]}}})
    _write(out / "nli" / "core" / "metrics.json", {"num_layers": 6, "num_heads": 12, "n_a": 4, "n_b": 4,
                                                    "expected_random_intersection": 0.2,
                                                    "p_random_intersection_at_least_core": 0.01})
    _write(out / "nli" / "effective_size" / "metrics.json", {
        "levels": [0.1, 0.3, 0.5, 0.7], "faithfulness": 0.03,
        "checkpoints": [{"step": 0, "ood_accuracy": 0.4}, {"step": 100, "ood_accuracy": 0.6}]})
    _write(out / "report.md", HC_REPORT)
    return out


def _by_claim(rows):
    return {r.claim: r for r in rows}


def test_heuristic_core_all_shown(tmp_path):
    rows = hc.findings(_hc_run(tmp_path), tmp_path)
    assert [r.verdict for r in rows] == [v.SHOWN] * 4
    core = rows[0]
    assert "2 of 72 heads in all 8 subnetworks" in core.this_run and "p = 0.01" in core.this_run
    assert core.link == "heuristic-core/report.md#shared-heads-the-core"
    assert rows[3].link == "heuristic-core/report.md#effective-size-over-training"
    assert "ID size 30.0 -> 30.0%, OOD size 30.0 -> 50.0%" in rows[3].this_run


def test_heuristic_core_not_shown_cases(tmp_path):
    rows = hc.findings(_hc_run(
        tmp_path,
        spread={"50%": {"id_sd": 0.01, "id_range": 0.02, "ood_subcase_sd": 0.015}},  # 1.5 <= 2 x 1.0 points
        ablation={"core_id_drop": 0.0, "core_ood_drop": 0.012, "core_max_ood_drop": 0.05,
                  "other_id_drop": 0.0, "other_ood_drop": 0.008},  # 1.2 - 0.8 = 0.4 points over other heads
        effective_size=[{"step": 0, "id": 0.3, "ood": 0.3}, {"step": 100, "id": 0.5, "ood": 0.5}],  # ID grew alike
    ), tmp_path)
    verdicts = [r.verdict for r in rows]
    assert verdicts == [v.SHOWN, v.NOT_SHOWN, v.NOT_SHOWN, v.NOT_SHOWN]


def test_heuristic_core_not_measurable_cases(tmp_path):
    out = _hc_run(tmp_path, core=[], core_size=0)
    _write(out / "nli" / "effective_size" / "metrics.json", {
        "levels": [0.1, 0.3], "faithfulness": 0.03,
        "checkpoints": [{"step": 0, "ood_accuracy": 0.4}, {"step": 100, "ood_accuracy": 0.41}]})
    rows = _by_claim(hc.findings(out, tmp_path))
    assert rows[hc.CLAIMS["core"][0]].verdict == v.NOT_SHOWN  # no head in every subnetwork
    assert rows[hc.CLAIMS["ablation"][0]].verdict == v.NOT_MEASURABLE  # no core to ablate
    es = rows[hc.CLAIMS["effective_size"][0]]
    assert es.verdict == v.NOT_MEASURABLE and "no generalisation" in es.rule


def test_heuristic_core_missing_keys_and_files(tmp_path):
    out = _hc_run(tmp_path, ablation={"core_id_drop": 0.0}, spread=None)
    (out / "nli" / "core" / "metrics.json").unlink()
    rows = hc.findings(out, tmp_path)
    assert [r.verdict for r in rows] == [v.NOT_MEASURABLE, v.NOT_MEASURABLE, v.NOT_MEASURABLE, v.SHOWN]
    assert "core/metrics.json does not exist" in rows[0].rule
    assert "no `spread`" in rows[1].rule
    assert "no `core_ood_drop`" in rows[2].rule
    assert all(r.this_run == "-" for r in rows[:3])
    # no run at all: four rows, not measurable, links to where the report would be
    empty = hc.findings(tmp_path / "nothing", tmp_path)
    assert len(empty) == 4 and {r.verdict for r in empty} == {v.NOT_MEASURABLE}
    assert empty[0].link == "nothing/report.md"


def test_heuristic_core_one_seed_is_not_measurable(tmp_path):
    out = _hc_run(tmp_path)
    cfg = json.loads((out / "config.json").read_text())
    cfg["settings"]["seeds"] = [0]
    _write(out / "config.json", cfg)
    assert hc.findings(out, tmp_path)[1].verdict == v.NOT_MEASURABLE


# -- Subtask Induction ------------------------------------------------------------------------

SI_REPORT = ("# Subtask Induction\n\n## Setup\n\n## Discovery: density per lambda\n\n## Transfer (Figure 3)\n\n"
             "## Does the subnetwork beat its controls at low N?\n")


def _cells(means: dict, sd: float = 0.02, n: int = 3) -> dict:
    return {"by_size": {s: {"mean": m, "sd": sd, "n": n, "min": m, "max": m} for s, m in means.items()}}


def _si_run(root: Path, summary: dict | None = None, discovery: dict | None = None) -> Path:
    out = root / "subtask-induction"
    summary = summary if summary is not None else {
        "subnetwork": _cells({"10": 0.9, "30": 0.95, "100": 1.0, "300": 1.0}),
        "scratch": _cells({"10": 0.5, "30": 0.6, "100": 0.7, "300": 1.0}),
        "random-matched": _cells({"10": 0.88, "30": 0.93, "100": 0.99, "300": 1.0}),  # ahead, within 4 points
        "random-released": _cells({"10": 0.95, "30": 0.9, "100": 0.9, "300": 1.0}),  # behind at N=10
    }
    discovery = discovery if discovery is not None else {"2": {"kept_percent": 6.3, "sweep": [
        {"kept_percent": 11.0}, {"kept_percent": 6.3}, {"kept_percent": 4.1}]}}
    _write(out / "metrics.json", {"summary": summary, "discovery": discovery})
    _write(out / "config.json", {"max_number": 100, "sizes": [10, 30, 100, 300], "seeds": [0, 1, 2]})
    _write(out / "report.md", SI_REPORT)
    return out


def test_subtask_induction_rows(tmp_path):
    rows = si.findings(_si_run(tmp_path), tmp_path)
    assert [r.verdict for r in rows] == [v.SHOWN, v.NOT_SHOWN, v.NOT_SHOWN, v.SHOWN]
    scratch = rows[0]
    assert "N=300" not in scratch.this_run  # above max_number: not a low N
    assert "N=10: 90.0 vs 50.0 (+40.0, spread 4.0, 3 seeds)" in scratch.this_run
    assert scratch.link == "subtask-induction/report.md#does-the-subnetwork-beat-its-controls-at-low-n"
    assert "within the seed spread" in rows[1].rule
    assert "not ahead at N = 10" in rows[2].rule
    assert rows[3].link == "subtask-induction/report.md#discovery-density-per-lambda"
    assert "2 layers: 6.30% (lambdas: 4.1-11.0%)" in rows[3].this_run


def test_subtask_induction_missing_and_out_of_band(tmp_path):
    summary = {"subnetwork": _cells({"10": 0.9}, n=1), "scratch": _cells({"10": 0.5}, n=1)}
    rows = si.findings(_si_run(tmp_path, summary=summary, discovery={"2": {"kept_percent": 12.5}}), tmp_path)
    assert rows[0].verdict == v.NOT_MEASURABLE  # one seed
    assert rows[1].verdict == v.NOT_MEASURABLE and "random-matched" in rows[1].rule  # condition not run
    assert rows[3].verdict == v.NOT_SHOWN and "outside [3, 8]" in rows[3].rule
    rows = si.findings(_si_run(tmp_path, discovery={"2": {"sweep": []}}), tmp_path)
    assert rows[3].verdict == v.NOT_MEASURABLE and "kept_percent" in rows[3].rule
    empty = si.findings(tmp_path / "absent", tmp_path)
    assert len(empty) == 4 and {r.verdict for r in empty} == {v.NOT_MEASURABLE}


# -- the table ----------------------------------------------------------------------------------

def test_findings_table_written_and_rendered(tmp_path):
    _hc_run(tmp_path)
    _si_run(tmp_path)
    path, rows = write_findings(tmp_path, ["heuristic-core", "subtask-induction"])
    assert path == tmp_path / "findings.md" and len(rows) == 8
    text = path.read_text(encoding="utf-8")
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 8  # header + one row per claim
    assert "[A small core of heads is shared" in text and "(heuristic-core/report.md#shared-heads-the-core)" in text
    assert "6 shown, 2 not shown, 0 not measurable at this scale, of 8 claims." in text
    saved = json.loads((tmp_path / "findings.json").read_text())
    assert [r["verdict"] for r in saved] == [r.verdict for r in rows]


def test_render_escapes_pipes():
    row = v.Finding("P", "a | b", "fig", "x", v.SHOWN, "r", "l.md")
    line = [line for line in render([row]).splitlines() if line.startswith("| P")][0]
    assert "a \\| b" in line and line.count(" | ") == 5


@pytest.mark.parametrize("bad", ["not json", "[]"])
def test_unreadable_results_are_not_measurable(tmp_path, bad):
    out = tmp_path / "heuristic-core"
    _write(out / "metrics.json", bad)
    rows = hc.findings(out, tmp_path)
    assert {r.verdict for r in rows} == {v.NOT_MEASURABLE}


def test_print_table_on_a_terminal_and_off(capsys):
    rows = [v.Finding("P", "claim one", "fig", "run", v.SHOWN, "rule", "a/report.md#x"),
            v.Finding("P", "claim two", "fig", "run", v.NOT_MEASURABLE, "why", "a/report.md")]
    from subnetlab.experiments.demo.findings import print_table

    print_table(rows, interactive=False)
    out = capsys.readouterr().out
    assert "[SHOWN] P: claim one" in out and "[NOT MEASURABLE AT THIS SCALE] P: claim two" in out
    print_table(rows, interactive=True)
    out = capsys.readouterr().out
    assert "Findings of the demo" in out and "claim" in out and "measurable" in out and "┃" in out  # cells wrap
