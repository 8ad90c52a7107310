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
    verdict, why = v.beyond_spread(-0.2, 0.01, 3)
    assert verdict == v.NOT_SHOWN and why.startswith("20.0 points behind") and "-" not in why
    assert v.beyond_spread(0.5, 0.0, 1)[0] == v.NOT_MEASURABLE
    assert v.beyond_spread(0.5, 0.0, 2)[0] == v.NOT_MEASURABLE  # two seeds: a spread is half their difference
    assert v.beyond_spread(0.005, 0.001, 3, margin=0.01)[0] == v.NOT_SHOWN


def test_changes_are_written_in_words_never_as_a_signed_drop():
    assert v.moves("OOD", 0.057) == "OOD rises 5.7 points"
    assert v.moves("OOD", -0.057) == "OOD falls 5.7 points"
    assert v.moves("ID", 0.0004) == "ID is unchanged"  # rounds to 0.0 points
    assert v.compare("the fall", "OOD", "ID", 0.04) == "the fall is 4.0 points larger on OOD than on ID"
    assert v.compare("the fall", "OOD", "ID", -0.06) == "the fall is 6.0 points smaller on OOD than on ID"


def test_trend_uses_every_point():
    assert v.trend([0.3, 0.5, 0.7]) == "rises"
    assert v.trend([0.3, 0.3, 0.5]) == "rises"  # flat then up: still never falling
    assert v.trend([0.3, 0.9, 0.5]) == "up and down"  # first vs last would say "rises"
    assert v.trend([0.7, 0.5, 0.5]) == "falls"
    assert v.trend([0.5, 0.5, 0.5]) == "flat" and v.trend([0.5]) == "flat"
    # a tolerance absorbs small dips (accuracy within the faithfulness threshold), not large ones
    assert v.trend([0.60, 0.58, 0.75], tolerance=0.03) == "rises"
    assert v.trend([0.60, 0.50, 0.75], tolerance=0.03) == "up and down"
    assert v.trend([0.60, 0.61, 0.62], tolerance=0.03) == "flat"


def test_capped_readings_are_bounds():
    assert v.Reading(0.5).text() == "50.0%"
    assert v.Reading(0.9, capped=2, seeds=2).text() == "> 90.0%"
    assert v.Reading(0.8, capped=1, seeds=2).text() == "> 80.0%, 1 of 2 seeds capped"


def test_size_bound_tells_measured_from_capped():
    from subnetlab.analysis.effective_size import effective_size, per_seed_effective_size, size_bound

    levels = [0.1, 0.3, 0.5, 0.7]
    # seed-mean: no level within 3 points of the model -> size 1.0 saved, but all we know is "above 90%"
    none = effective_size({lvl: [0.5, 0.5] for lvl in levels}, 0.9, 0.03).to_dict()
    assert none["size"] == 1.0 and size_bound(none, levels) == (pytest.approx(0.9), 1, 1)
    some = effective_size({0.1: [0.9], 0.3: [0.9], 0.5: [0.5], 0.7: [0.5]}, 0.9, 0.03).to_dict()
    assert size_bound(some, levels) == (pytest.approx(0.7), 0, 1)
    # per seed: seed 0 faithful up to 0.3 (size 0.7), seed 1 at no level (capped at 0.9)
    accs = {0.1: [0.9, 0.5], 0.3: [0.9, 0.5], 0.5: [0.5, 0.5], 0.7: [0.5, 0.5]}
    entry = {**effective_size(accs, 0.9, 0.03).to_dict(), "per_seed": per_seed_effective_size(accs, 0.9, 0.03)}
    assert entry["per_seed"]["mean_size"] == pytest.approx(0.85)  # what the report used to print
    assert size_bound(entry, levels) == (pytest.approx(0.8), 1, 2)


def test_not_behind_names_the_lead_against_the_paper():
    verdict, why = v.not_behind({"10": (-0.30, 0.04, 3), "100": (-0.05, 0.04, 3), "300": (0.01, 0.02, 3)}, "full")
    assert verdict == v.NOT_SHOWN
    assert why.startswith("full beats the subnetwork by 30.0 points at N = 10, beyond the seed spread 4.0")
    assert "also at N = 100" in why
    verdict, why = v.not_behind({"10": (-0.01, 0.04, 3), "100": (0.05, 0.04, 3)}, "full")
    assert verdict == v.SHOWN and "behind within it at N = 10" in why
    assert v.not_behind({"10": (0.1, 0.0, 2)}, "full")[0] == v.NOT_MEASURABLE
    assert v.not_behind({}, "full")[0] == v.NOT_MEASURABLE


def test_identified_needs_the_undecided_share_below_the_threshold():
    from subnetlab.runs.health import MAX_UNDECIDED_SHARE

    assert v.identified(v.SHOWN, "r", 0.0, MAX_UNDECIDED_SHARE)[0] == v.SHOWN
    verdict, why = v.identified(v.SHOWN, "r", 0.85, MAX_UNDECIDED_SHARE)
    assert verdict == v.SHOWN_WEAKLY and "85.0% of gates undecided" in why
    # runs.health calls a run undecided above the share: at it, still decided; just above, weakly identified
    assert v.identified(v.SHOWN, "r", MAX_UNDECIDED_SHARE, MAX_UNDECIDED_SHARE)[0] == v.SHOWN
    assert v.identified(v.SHOWN, "r", MAX_UNDECIDED_SHARE + 0.001, MAX_UNDECIDED_SHARE)[0] == v.SHOWN_WEAKLY
    assert v.identified(v.SHOWN, "r", None, MAX_UNDECIDED_SHARE)[0] == v.SHOWN_WEAKLY  # not saved: not checked
    assert v.identified(v.NOT_SHOWN, "r", 0.9, MAX_UNDECIDED_SHARE) == (v.NOT_SHOWN, "r")


def test_ahead_at_low_n():
    assert v.ahead_at_low_n({"10": (0.2, 0.1, 3), "30": (0.05, 0.1, 3)})[0] == v.SHOWN
    assert v.ahead_at_low_n({"10": (0.05, 0.1, 3), "30": (0.05, 0.1, 3)}) == (
        v.NOT_SHOWN, "ahead at every low N but within the seed spread")
    verdict, why = v.ahead_at_low_n({"10": (0.3, 0.1, 3), "30": (-0.01, 0.1, 3)})
    assert verdict == v.NOT_SHOWN and "N = 30" in why
    assert v.ahead_at_low_n({"10": (0.3, 0.1, 1)})[0] == v.NOT_MEASURABLE
    assert v.ahead_at_low_n({"10": (0.3, 0.1, 2)})[0] == v.NOT_MEASURABLE
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


def _size(size: float | None) -> dict:
    """A saved effective size (seed-mean aggregate); None: no level was faithful (saved as size 1.0)."""
    if size is None:
        return {"size": 1.0, "sparsity": 0.0, "level_sparsity": 0.0, "faithful_levels": []}
    return {"size": size, "sparsity": round(1 - size, 6), "level_sparsity": round(1 - size, 6),
            "faithful_levels": [round(1 - size, 6)]}


def _es(ood_sizes=(0.5, 0.7, 0.7), id_sizes=(0.3, 0.3, 0.3), ood_acc=(0.4, 0.5, 0.6), steps=(0, 50, 100)) -> dict:
    return {"levels": [0.1, 0.3, 0.5, 0.7], "faithfulness": 0.03, "checkpoints": [
        {"step": st, "id_accuracy": 0.95, "ood_accuracy": a, "effective_size": {"id": _size(i), "ood": _size(o)}}
        for st, a, i, o in zip(steps, ood_acc, id_sizes, ood_sizes)]}


def _hc_run(root: Path, es: dict | None = None, es_seeds=(0, 1, 2), **change) -> Path:
    out = root / "heuristic-core"
    summary = {
        "core": ["L0.H1", "L2.H3"], "core_size": 2, "spearman_rho": 0.7,
        "spread": {"50%": {"id_sd": 0.004, "id_range": 0.01, "ood_subcase_sd": 0.05, "ood_mean_sd": 0.02},
                   "70%": {"id_sd": 0.006, "id_range": 0.02, "ood_subcase_sd": 0.04, "ood_mean_sd": 0.02}},
        "ablation": {"core_id_drop": 0.002, "core_ood_drop": 0.08, "core_max_ood_drop": 0.2,
                     "other_id_drop": 0.001, "other_ood_drop": 0.005, "joint_ood_drop": 0.3},
        "undecided_share": {"50%": 0.02, "70%": 0.05},
        "effective_size": [{"step": 0, "id": 0.3, "ood": 0.5}, {"step": 100, "id": 0.3, "ood": 0.7}],
    }
    for key, value in change.items():
        if value is None:
            summary.pop(key)
        else:
            summary[key] = value
    _write(out / "metrics.json", {"studies": {"nli": summary}})
    _write(out / "config.json", {"settings": {"studies": [{"name": "nli", "title": "NLI: synthetic"}],
                                              "seeds": [0, 1, 2, 3], "effective_size": {"seeds": list(es_seeds)}}})
    _write(out / "nli" / "core" / "metrics.json", {"num_layers": 6, "num_heads": 12, "n_a": 4, "n_b": 4,
                                                    "expected_random_intersection": 0.2,
                                                    "p_random_intersection_at_least_core": 0.01})
    _write(out / "nli" / "effective_size" / "metrics.json", es if es is not None else _es())
    _write(out / "report.md", HC_REPORT)
    return out


def _by_claim(rows):
    return {r.claim: r for r in rows}


def _es_row(tmp_path, **kwargs):
    return _by_claim(hc.findings(_hc_run(tmp_path, **kwargs), tmp_path))[hc.CLAIMS["effective_size"][0]]


def test_heuristic_core_all_shown(tmp_path):
    rows = hc.findings(_hc_run(tmp_path), tmp_path)
    assert [r.verdict for r in rows] == [v.SHOWN] * 4
    core = rows[0]
    assert "2 of 72 heads in all 8 subnetworks" in core.this_run and "p = 0.01" in core.this_run
    assert "up to 5.0% of gates undecided" in core.this_run and "within 10.0%" in core.rule
    assert core.link == "heuristic-core/report.md#shared-heads-the-core"
    assert rows[3].link == "heuristic-core/report.md#effective-size-over-training"
    # every checkpoint, not first and last
    assert ("steps 0 / 50 / 100: OOD accuracy 40.0 / 50.0 / 60.0%; OOD size 50.0% / 70.0% / 70.0%; "
            "ID size 30.0% / 30.0% / 30.0%") in rows[3].this_run
    assert "at 50%" in rows[1].this_run and "at 70%" in rows[1].this_run  # every sparsity
    assert "one core head, on average: ID falls 0.2 points, OOD falls 8.0 points" in rows[2].this_run


def test_core_with_undecided_gates_is_weakly_identified(tmp_path):
    rows = hc.findings(_hc_run(tmp_path, undecided_share={"50%": 0.85, "70%": 0.40}), tmp_path)
    assert rows[0].verdict == v.SHOWN_WEAKLY and "85.0% of gates undecided" in rows[0].rule
    rows = hc.findings(_hc_run(tmp_path, undecided_share=None), tmp_path)  # an older report: not checked
    assert rows[0].verdict == v.SHOWN_WEAKLY and "no undecided-gate share" in rows[0].rule
    text = render(rows)
    assert "**shown**, weakly identified" in text and "4 shown (1 of them weakly identified)" in text


def test_ablation_rise_is_written_as_a_rise(tmp_path):
    ablation = {"core_id_drop": 0.003, "core_ood_drop": -0.057, "core_max_ood_drop": -0.01,
                "other_id_drop": 0.0, "other_ood_drop": 0.002, "joint_ood_drop": -0.1}
    row = hc.findings(_hc_run(tmp_path, ablation=ablation), tmp_path)[2]
    assert row.verdict == v.NOT_SHOWN
    assert "OOD rises 5.7 points" in row.this_run and "ID falls 0.3 points" in row.this_run
    assert "no core head lowers OOD; the smallest OOD change: OOD rises 1.0 points" in row.this_run
    assert "jointly: OOD rises 10.0 points" in row.this_run
    assert "the fall is 6.0 points smaller on OOD than on ID" in row.rule
    assert "-" not in row.this_run.replace("non-core", "") + row.rule.replace("non-core", "")  # no signed numbers


def test_effective_size_middle_checkpoint_decides(tmp_path):
    # first 50%, last 70%: a first-vs-last rule says "grows"; the middle checkpoint falls to 30%
    row = _es_row(tmp_path, es=_es(ood_sizes=(0.5, 0.3, 0.7)))
    assert row.verdict == v.NOT_SHOWN and "OOD size up and down" in row.rule
    assert "OOD size 50.0% / 30.0% / 70.0%" in row.this_run
    # the ID size moving by a level is not "flat"
    assert _es_row(tmp_path, es=_es(id_sizes=(0.3, 0.5, 0.5))).verdict == v.NOT_SHOWN
    # growth smaller than a level step (per-seed means move by fractions of a level) is not shown
    assert _es_row(tmp_path, es=_es(ood_sizes=(0.5, 0.55, 0.6))).verdict == v.NOT_SHOWN


def test_effective_size_capped_value_is_never_a_rise(tmp_path):
    # the last OOD size is "100%" in the saved file: no tested level was faithful, so it is above 90%, not a rise
    row = _es_row(tmp_path, es=_es(ood_sizes=(0.5, 0.7, None)))
    assert row.verdict == v.NOT_MEASURABLE
    assert "OOD size 50.0% / 70.0% / > 90.0%" in row.this_run and "100.0" not in row.this_run
    assert "no tested level was faithful for OOD at step 100" in row.rule and "never counted as a rise" in row.rule


def test_effective_size_needs_three_seeds_three_checkpoints_and_steady_generalisation(tmp_path):
    row = _es_row(tmp_path, es_seeds=(0, 1))
    assert row.verdict == v.NOT_MEASURABLE and "fewer than 3" in row.rule
    assert "OOD size 50.0% / 70.0% / 70.0%" in row.this_run  # the numbers are still shown
    es = _es(ood_sizes=(0.5, 0.7), id_sizes=(0.3, 0.3), ood_acc=(0.4, 0.6), steps=(0, 100))
    assert "a trend needs three" in _es_row(tmp_path, es=es).rule
    row = _es_row(tmp_path, es=_es(ood_acc=(0.4, 0.8, 0.6)))  # OOD accuracy rises, then falls 20 points
    assert row.verdict == v.NOT_MEASURABLE and "OOD accuracy up and down" in row.rule
    row = _es_row(tmp_path, es=_es(ood_acc=(0.4, 0.41, 0.42)))
    assert row.verdict == v.NOT_MEASURABLE and "OOD accuracy flat" in row.rule
    # the run: two seeds, a middle checkpoint that falls, a last one capped: every reason is named
    row = _es_row(tmp_path, es_seeds=(0, 1), es=_es(ood_sizes=(0.5, 0.3, None)))
    assert row.verdict == v.NOT_MEASURABLE
    assert "fewer than 3" in row.rule and "OOD at step 100" in row.rule and "OOD size up and down" in row.rule


def test_heuristic_core_not_shown_cases(tmp_path):
    rows = hc.findings(_hc_run(
        tmp_path,
        spread={"50%": {"id_sd": 0.004, "id_range": 0.01, "ood_subcase_sd": 0.05},  # 5.0 > 1.0 here ...
                "70%": {"id_sd": 0.01, "id_range": 0.02, "ood_subcase_sd": 0.015}},  # ... 1.5 <= 2 x 1.0 points here
        ablation={"core_id_drop": 0.0, "core_ood_drop": 0.012, "core_max_ood_drop": 0.05,
                  "other_id_drop": 0.0, "other_ood_drop": 0.008},  # 1.2 - 0.8 = 0.4 points over other heads
        es=_es(id_sizes=(0.3, 0.5, 0.5))), tmp_path)  # ID grew too
    verdicts = [r.verdict for r in rows]
    assert verdicts == [v.SHOWN, v.NOT_SHOWN, v.NOT_SHOWN, v.NOT_SHOWN]
    assert "70%: 1.5 <= 2.0" in rows[1].rule


def test_heuristic_core_not_measurable_cases(tmp_path):
    out = _hc_run(tmp_path, core=[], core_size=0, es=_es(ood_acc=(0.4, 0.41, 0.40)))
    rows = _by_claim(hc.findings(out, tmp_path))
    assert rows[hc.CLAIMS["core"][0]].verdict == v.NOT_SHOWN  # no head in every subnetwork
    assert rows[hc.CLAIMS["ablation"][0]].verdict == v.NOT_MEASURABLE  # no core to ablate
    es = rows[hc.CLAIMS["effective_size"][0]]
    assert es.verdict == v.NOT_MEASURABLE and "no steady generalisation" in es.rule


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


def test_heuristic_core_few_seeds_are_not_measurable(tmp_path):
    for seeds in ([0], [0, 1]):
        out = _hc_run(tmp_path)
        cfg = json.loads((out / "config.json").read_text())
        cfg["settings"]["seeds"] = seeds
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
        "empty-mask": _cells({"10": 0.6, "30": 0.7, "100": 0.8, "300": 1.0}),
        "random-matched": _cells({"10": 0.88, "30": 0.93, "100": 0.99, "300": 1.0}),  # ahead, within 4 points
        "random-released": _cells({"10": 0.95, "30": 0.9, "100": 0.9, "300": 1.0}),  # behind at N=10
        "full": _cells({"10": 0.91, "30": 0.95, "100": 0.99, "300": 1.0}),  # level within the spread
    }
    discovery = discovery if discovery is not None else {"2": {"kept_percent": 6.3, "sweep": [
        {"kept_percent": 11.0}, {"kept_percent": 6.3}, {"kept_percent": 4.1}]}}
    _write(out / "metrics.json", {"summary": summary, "discovery": discovery})
    _write(out / "config.json", {"max_number": 100, "sizes": [10, 30, 100, 300], "seeds": [0, 1, 2]})
    _write(out / "report.md", SI_REPORT)
    return out


SI_CLAIMS = ["scratch", "empty-mask", "random-matched", "random-released", "level", "full", "computes", "density"]


def test_subtask_induction_rows(tmp_path):
    rows = dict(zip(SI_CLAIMS, si.findings(_si_run(tmp_path), tmp_path)))
    assert {k: r.verdict for k, r in rows.items()} == {
        "scratch": v.SHOWN, "empty-mask": v.SHOWN, "random-matched": v.NOT_SHOWN, "random-released": v.NOT_SHOWN,
        "level": v.SHOWN, "full": v.SHOWN, "computes": v.NOT_MEASURABLE, "density": v.SHOWN}
    assert "no search controls in this run" in rows["computes"].rule  # the fixture ran none
    scratch = rows["scratch"]
    assert "N=300" not in scratch.this_run.split(";")[0]  # above max_number: not a low N
    assert "N=10: 90.0 vs 50.0 (40.0 ahead, spread 4.0, 3 seeds)" in scratch.this_run
    assert "peaks at 100.0% (N=100)" in scratch.this_run and "near-perfect" in scratch.this_run
    assert "against the empty mask too" in scratch.rule
    assert scratch.link == "subtask-induction/report.md#does-the-subnetwork-beat-its-controls-at-low-n"
    assert "within the seed spread" in rows["random-matched"].rule
    assert "not ahead at N = 10" in rows["random-released"].rule
    assert "N=10: 90.0 vs 91.0 (1.0 behind" in rows["full"].this_run and "N=300" in rows["full"].this_run  # every N
    assert rows["full"].link == "subtask-induction/report.md#transfer-figure-3"
    assert rows["density"].link == "subtask-induction/report.md#discovery-density-per-lambda"
    assert "2 layers: 6.30% (lambdas: 4.1-11.0%)" in rows["density"].this_run


def test_subtask_induction_against_the_paper(tmp_path):
    """The issue's run: the subnetwork never passes 65%, the empty mask does as well, full is 30 points ahead."""
    summary = {
        "subnetwork": _cells({"10": 0.55, "100": 0.60, "300": 0.643}),
        "scratch": _cells({"10": 0.45, "100": 0.50, "300": 0.55}),
        "empty-mask": _cells({"10": 0.54, "100": 0.59, "300": 0.62}),
        "full": _cells({"10": 0.85, "100": 0.88, "300": 0.90}),
    }
    rows = dict(zip(SI_CLAIMS, si.findings(_si_run(tmp_path, summary=summary), tmp_path)))
    scratch = rows["scratch"]
    assert scratch.verdict == v.NOT_SHOWN and "copied embeddings" in scratch.rule
    assert "ahead at every low N" in scratch.rule  # it does beat scratch; the empty mask explains it as well
    assert "this run's subnetwork peaks at 64.3% (N=300), never passes 65%; the paper's is near-perfect" in scratch.this_run
    assert rows["empty-mask"].verdict == v.NOT_SHOWN
    level = rows["level"]
    assert level.verdict == v.NOT_SHOWN and "below 95% at every low N (highest 60.0% at N=100)" in level.rule
    full = rows["full"]
    assert full.verdict == v.NOT_SHOWN
    assert full.rule.startswith("full beats the subnetwork by 30.0 points at N = 10, beyond the seed spread 4.0")
    assert "N=300: 64.3 vs 90.0 (25.7 behind" in full.this_run
    # without the empty-mask runs "beats scratch" cannot be decided
    summary.pop("empty-mask")
    rows = dict(zip(SI_CLAIMS, si.findings(_si_run(tmp_path, summary=summary), tmp_path)))
    assert rows["scratch"].verdict == v.NOT_MEASURABLE and "no empty-mask runs" in rows["scratch"].rule


def test_subtask_induction_missing_and_out_of_band(tmp_path):
    summary = {"subnetwork": _cells({"10": 0.9}, n=1), "scratch": _cells({"10": 0.5}, n=1)}
    rows = dict(zip(SI_CLAIMS, si.findings(
        _si_run(tmp_path, summary=summary, discovery={"2": {"kept_percent": 12.5}}), tmp_path)))
    assert rows["scratch"].verdict == v.NOT_MEASURABLE  # one seed
    assert rows["random-matched"].verdict == v.NOT_MEASURABLE and "random-matched" in rows["random-matched"].rule
    assert rows["full"].verdict == v.NOT_MEASURABLE and "`full`" in rows["full"].rule  # condition not run
    assert rows["density"].verdict == v.NOT_SHOWN and "outside [3, 8]" in rows["density"].rule
    rows = si.findings(_si_run(tmp_path, discovery={"2": {"sweep": []}}), tmp_path)
    assert rows[-1].verdict == v.NOT_MEASURABLE and "kept_percent" in rows[-1].rule
    empty = si.findings(tmp_path / "absent", tmp_path)
    assert len(empty) == len(SI_CLAIMS) and {r.verdict for r in empty} == {v.NOT_MEASURABLE}


# -- the table ----------------------------------------------------------------------------------

def test_findings_table_written_and_rendered(tmp_path):
    _hc_run(tmp_path)
    _si_run(tmp_path)
    path, rows = write_findings(tmp_path, ["heuristic-core", "subtask-induction"])
    assert path == tmp_path / "findings.md" and len(rows) == 4 + 8
    text = path.read_text(encoding="utf-8")
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 12  # header + one row per claim
    assert "[A small core of heads is shared" in text and "(heuristic-core/report.md#shared-heads-the-core)" in text
    assert "9 shown, 2 not shown, 1 not measurable at this scale, of 12 claims." in text
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


def _circuits_run(root: Path, *, key_kept=True, edge=(0.80, 0.15), node=(0.60, 0.35), rand=(0.30, 0.70)) -> Path:
    """A circuits run's saved results with constructed numbers (``experiments/circuits``' file layout)."""
    run = root / "circuits"
    key = "a0.h1->a1.h2<k>"
    _write(run / "head_scores.json", {"previous_token_head": {"layer": 0, "head": 1, "score": 0.9},
                                      "induction_heads": [{"layer": 1, "head": 2, "score": 0.8}]})
    # full 4.0, corrupted 0.0: key cut leaves 1.0 (25%), query 3.8 (95%), value 3.9 (97.5%)
    _write(run / "mechanism.json", {"full": {"logit_diff": 4.0}, "corrupted": {"logit_diff": 0.0}, "key_edges": [key],
                                    "cut": {"all 1 k edges": {"logit_diff": 1.0}, "all 1 q edges": {"logit_diff": 3.8},
                                            "all 1 v edges": {"logit_diff": 3.9}}})
    _write(run / "curves.json", {
        "curves": {"edge-pruning": {"items": 110, "cpr": edge[0], "cmd": edge[1]},
                   "node-pruning": {"items": 10, "cpr": node[0], "cmd": node[1]},
                   "random-edges": {"items": 110, "cpr": rand[0], "cmd": rand[1]}},
        "key_edges_kept": [{"sparsity": 0.9, "kept": 12, "faithfulness": {"logit_diff": 0.7}, "key_edges": {key: True}},
                           {"sparsity": 0.95, "kept": 6, "faithfulness": {"logit_diff": 0.6},
                            "key_edges": {key: key_kept}},
                           {"sparsity": 0.99, "kept": 1, "faithfulness": {"logit_diff": 0.1},
                            "key_edges": {key: False}}]})
    (run / "report.md").write_text("# r\n\n## 3. The circuit task and the mechanism's edges\n\n## 4. Faithfulness of the "
                                   "circuit methods (MIB: CPR higher is better, CMD lower is better)\n", encoding="utf-8")
    return run


def test_demo_findings_carry_the_circuits_rows(tmp_path):
    _circuits_run(tmp_path)
    path, rows = write_findings(tmp_path, ["circuits"])
    assert [r.paper for r in rows] == ["Induction heads (Olsson et al.)", "Edge Pruning", "Edge Pruning", "Edge Pruning"]
    mech, found, computes, cpr = rows
    assert mech.verdict == v.SHOWN and "25% / 95% / 98%" in mech.this_run
    # the sparsest circuit with f >= 0.5 is the 95% one (the 99% one is not faithful): it keeps the key edge, but
    # without the search controls nobody knows whether the search would find as much where nothing was learned
    assert found.this_run.startswith("at sparsity 0.95 (6 edges, f = 0.60): 1 of 1")
    assert computes.verdict == found.verdict == v.NOT_MEASURABLE and "controls/metrics.json does not exist" in computes.rule
    # a claim about methods from the study's one seed, and node pruning's curve over other items: not measurable
    assert cpr.verdict == v.NOT_MEASURABLE and cpr.rule.startswith("one run: not measurable")
    assert "node pruning's curve is over 10 items against 110: not compared" in cpr.rule
    assert cpr.this_run == ("CPR / CMD: edge pruning 0.80 / 0.15 (110 items), node pruning 0.60 / 0.35 (10 items), "
                            "random edges 0.30 / 0.70 (110 items)")
    text = path.read_text()
    assert "| Edge Pruning | [Edge pruning's circuit keeps the previous-token head -> induction head key edge]" \
           "(circuits/report.md#4-faithfulness-of-the-circuit-methods-mib-cpr-higher-is-better-cmd-lower-is-better)" in text
    assert "1 shown, 0 not shown, 3 not measurable at this scale, of 4 claims." in text


def test_demo_circuits_rows_claim_no_more_than_the_numbers(tmp_path):
    # the key edge dropped by the sparsest faithful circuit; node pruning's CMD below edge pruning's
    _circuits_run(tmp_path, key_kept=False, edge=(0.80, 0.40))
    _, (_, found, _, cpr) = write_findings(tmp_path, ["circuits"])
    assert found.verdict == v.NOT_SHOWN and "0 of 1 key edges kept" in found.this_run
    assert cpr.verdict == v.NOT_MEASURABLE  # one seed, whatever the order
    # no curves at all: not measurable, naming the file, never an error
    (tmp_path / "circuits" / "curves.json").unlink()
    _, (mech, found, _, cpr) = write_findings(tmp_path, ["circuits"])
    assert mech.verdict == v.SHOWN
    assert found.verdict == cpr.verdict == v.NOT_MEASURABLE and "curves.json does not exist" in cpr.rule


def test_effective_size_skipped_by_the_tour_names_the_command_that_measures_it(tmp_path):
    out = _hc_run(tmp_path)
    config = json.loads((out / "config.json").read_text())
    config["settings"]["effective_size"] = None
    _write(out / "config.json", config)
    row = _by_claim(hc.findings(out, tmp_path))[hc.CLAIMS["effective_size"][0]]
    assert row.verdict == v.NOT_MEASURABLE
    assert "not run in this demo" in row.this_run
    assert "`subnetlab reproduce heuristic-core` with its demo preset (the default) measures it" in row.rule


def _retrained(score: float) -> dict:
    return {"final": {"id": {"accuracy": score}, "hans-synthetic": {"accuracy": 0.5}}}


def _lottery_run(root: Path, m=(0.99, 0.62, 0.33), s=(0.97, 0.95, 0.93), seeds=(0, 1, 2), mean_jaccard=0.32,
                 super_heads=("L0.H9", "L1.H1"), retrain_seeds=3) -> Path:
    out = root / "lottery"
    retrain = {}
    for method, scores in (("magnitude", m), ("importance", s)):
        for control, score in zip(("good", "random", "bad"), scores):
            for seed in range(retrain_seeds):
                retrain[f"{method}-{control}-seed{seed}"] = _retrained(score)
    result = {"retrain": retrain,
              "prune": {"importance-seed0": {"metric_name": "accuracy", "split": "id"}},
              "stability": {"seeds": list(seeds), "mean_jaccard": mean_jaccard, "heads_kept": [26, 33, 23],
                            "super_survivor_heads": list(super_heads)}}
    _write(out / "metrics.json", {"tasks": {"nli-synthetic": result}})
    _write(out / "config.json", {"pattern_counting": "per-map", "epochs": 1.0})
    _write(out / "report.md", "# Lottery\n\n## nli-synthetic: pruning and re-fine-tuning\n\n"
                              "## nli-synthetic: stability across fine-tuning seeds\n\n"
                              "## nli-synthetic: attention pattern types\n")
    return out


def _heterogeneous(shares: dict[str, tuple[float, float]]):
    """``report.pattern_shares`` stand-in: per attention kind (super-survivors', all heads') heterogeneous share."""
    return lambda r, counting: {("finetuned", kind, group): {"heterogeneous": value}
                                for kind, pair in shares.items()
                                for group, value in zip(("super-survivors", "all heads"), pair)}


def test_lottery_rows_claim_no_more_than_the_numbers(tmp_path, monkeypatch):
    from subnetlab.experiments.lottery import findings as lot
    from subnetlab.experiments.lottery import report

    monkeypatch.setattr(report, "super_survivor_correlations", lambda r, counting: {"raw": 0.015, "normed": -0.1})
    monkeypatch.setattr(report, "pattern_shares", _heterogeneous({"raw": (0.40, 0.354), "normed": (0.30, 0.46)}))
    _lottery_run(tmp_path)
    _, rows = write_findings(tmp_path, ["lottery"])
    m, s, stability, patterns = rows
    assert {r.paper for r in rows} == {lot.PAPER}
    assert m.verdict == v.SHOWN and "random 37.0 and bad 66.0 points below good" in m.this_run
    assert "mean of 3 seeds" in m.this_run and "(means of 3 seeds)" in m.rule
    assert m.rule.endswith("re-fine-tuned for 1 epoch(s), the paper 3")
    assert m.link == "lottery/report.md#nli-synthetic-pruning-and-re-fine-tuning"
    assert s.verdict == v.SHOWN and "random 2.0 and bad 4.0 points below good" in s.this_run
    assert stability.verdict == v.SHOWN and "2 super-survivor heads in all 3 seeds" in stability.this_run
    assert patterns.verdict == v.SHOWN and "raw 40.0% vs 35.4%; normed 30.0% vs 46.0%" in patterns.this_run
    assert "raw 0.015, normed -0.100" in patterns.this_run  # the paper's statistic, shown beside; not the basis
    assert patterns.link == "lottery/report.md#nli-synthetic-attention-pattern-types"


def test_lottery_rows_not_shown_and_not_measurable(tmp_path, monkeypatch):
    from subnetlab.experiments.lottery import report

    monkeypatch.setattr(report, "super_survivor_correlations", lambda r, counting: {"raw": 0.17, "normed": -0.125})
    # the demo's table: super-survivors' raw maps 53.3% heterogeneous against 35.4% for all heads, though |r| < 0.2
    monkeypatch.setattr(report, "pattern_shares", _heterogeneous({"raw": (0.533, 0.354), "normed": (0.243, 0.464)}))
    # the demo's run: s-pruning's random and bad 13.7 and 30.4 points behind; bad m-subnetwork only 9 points behind
    _lottery_run(tmp_path, m=(0.99, 0.62, 0.90), s=(0.967, 0.83, 0.663), mean_jaccard=0.6)
    m, s, stability, patterns = write_findings(tmp_path, ["lottery"])[1]
    assert m.verdict == s.verdict == stability.verdict == patterns.verdict == v.NOT_SHOWN
    assert "bad 9.0 points below good" in m.this_run and "random 13.7 and bad 30.4" in s.this_run
    assert "in raw attention (17.9 points)" in patterns.rule
    _lottery_run(tmp_path, retrain_seeds=1)  # one re-fine-tuning seed: one run of a distribution
    m, s = write_findings(tmp_path, ["lottery"])[1][:2]
    assert m.verdict == s.verdict == v.NOT_MEASURABLE and m.rule.startswith("one run: not measurable")
    _lottery_run(tmp_path, seeds=(0, 1), super_heads=())
    monkeypatch.undo()
    _, (_, _, stability, patterns) = write_findings(tmp_path, ["lottery"])
    assert stability.verdict == patterns.verdict == v.NOT_MEASURABLE
    assert "fewer than 3" in stability.rule and "no super-survivors" in patterns.this_run
    (tmp_path / "lottery" / "metrics.json").unlink()  # no results: every row not measurable, never an error
    assert {r.verdict for r in write_findings(tmp_path, ["lottery"])[1]} == {v.NOT_MEASURABLE}
