"""The findings rules as pure functions of the numbers a report shows: one basis for a verdict and its table, no
"shown" from one run of a distribution, unconverged inputs not measurable, curves compared over the same items,
no tracker references in what the reports are written from."""

from __future__ import annotations

import re
from pathlib import Path

import subnetlab
from subnetlab.experiments.circuits.findings import more_faithful
from subnetlab.experiments.demo import verdicts as v
from subnetlab.experiments.lottery.findings import close_to, far_below, no_preference
from subnetlab.experiments.subtask_induction.findings import converged_or, density_row, improving_flags
from subnetlab.experiments.subtask_induction.report import still_improving


def test_one_run_of_a_distribution_is_not_measurable():
    verdict, why = v.too_few_runs(1, "seed")
    assert verdict == v.NOT_MEASURABLE and why.startswith("one run: not measurable (1 seed, fewer than 3")
    assert v.too_few_runs(2, "seed")[1].startswith("2 runs: not measurable (2 seeds")
    assert v.too_few_runs(3) is None


def test_unconverged_inputs_are_not_measurable():
    assert v.unconverged([False, False], "runs") is None
    assert v.unconverged([], "runs") is None
    verdict, why = v.unconverged([True, False, True], "runs")
    assert verdict == v.NOT_MEASURABLE and "2 of 3 runs unconverged" in why


def test_lottery_preference_is_judged_on_the_tables_shares():
    # the demo's table: super-survivors' raw maps 53.3% heterogeneous, all heads 35.4% (17.9 points more)
    verdict, why = no_preference({"raw": (53.3, 35.4), "normed": (24.3, 46.4)})
    assert verdict == v.NOT_SHOWN and "raw attention (17.9 points)" in why and "normed" not in why.split("in ")[1]
    assert no_preference({"raw": (45.4, 35.4), "normed": (24.3, 46.4)})[0] == v.SHOWN  # 10.0 points: at the margin
    assert no_preference({})[0] == v.NOT_MEASURABLE


def test_lottery_gaps_need_three_re_fine_tuning_seeds():
    # the demo's m-pruning (random 38.0, bad 65.5 points below good) from one seed
    verdict, why = far_below(38.0, 65.5, 1, epochs=1.0)
    assert verdict == v.NOT_MEASURABLE and why.startswith("one run: not measurable") and why.endswith("the paper 3")
    assert far_below(38.0, 65.5, 3)[0] == v.SHOWN
    assert far_below(9.0, 65.5, 3)[0] == v.NOT_SHOWN
    assert close_to(6.5, 11.0, 1)[0] == v.NOT_MEASURABLE
    assert close_to(2.0, 4.0, 3)[0] == v.SHOWN and close_to(6.5, 4.0, 3)[0] == v.NOT_SHOWN


def test_faithfulness_areas_compared_only_over_the_same_items():
    areas = {"edge-pruning": (110, 0.86, 0.14), "node-pruning": (10, 0.65, 0.35), "random-edges": (110, 0.05, 0.94)}
    verdict, why = more_faithful(areas, seeds=1)
    assert verdict == v.NOT_MEASURABLE and why.startswith("one run: not measurable")
    assert "node pruning's curve is over 10 items against 110: not compared" in why
    verdict, why = more_faithful(areas, seeds=3)  # enough seeds, but node areas are on another size axis
    assert verdict == v.NOT_MEASURABLE and why.startswith("curves compared only over the same items")
    same = {"edge-pruning": (110, 0.86, 0.14), "random-edges": (110, 0.05, 0.94)}
    assert more_faithful(same, seeds=3)[0] == v.SHOWN
    verdict, why = more_faithful({**same, "random-edges": (110, 0.90, 0.94)}, seeds=3)
    assert verdict == v.NOT_SHOWN and why.endswith("not ahead on CPR vs random edges")


def test_a_transfer_run_still_improving_makes_its_comparison_not_measurable():
    # 1,000 sequences over 10 rows: 100 epochs; a best epoch in the last 20% (index 80 or later) is still improving
    late, early = ({"label": "subnetwork", "size": 10, "sequences": 1000, "train_rows": 10, "best_epoch": b}
                   for b in (80, 78))
    assert still_improving(late) and not still_improving(early)
    scratch = {**early, "label": "scratch"}
    assert improving_flags([late, early, scratch], ("subnetwork", "scratch")) == [True, False, False]
    assert improving_flags([late, early], ("subnetwork",), ["100"]) == []  # another N
    verdict, why = converged_or((v.SHOWN, "ahead at every low N"), [True, False, False])
    assert verdict == v.NOT_MEASURABLE and "1 of 3 transfer runs compared unconverged" in why
    assert why.endswith("otherwise: shown (ahead at every low N)")
    assert converged_or((v.SHOWN, "x"), [False, False]) == (v.SHOWN, "x")


def test_a_density_from_unconverged_mask_training_is_not_measurable():
    discovery = {"2": {"kept_percent": 4.1, "health": {"problems": ["unconverged"]}}}
    text, verdict, why = density_row(discovery)
    assert verdict == v.NOT_MEASURABLE and "4.10%" in text and "unconverged" in why
    discovery["2"]["health"] = {"problems": []}
    assert density_row(discovery)[1] == v.SHOWN


def test_no_tracker_references_in_what_reports_are_written_from():
    root = Path(subnetlab.__file__).parent
    hits = [f"{path.relative_to(root)}:{i}" for folder in ("experiments", "report")
            for path in sorted((root / folder).rglob("*.py"))
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"\b[Ii]ssue:? \d+|\(issue\b", line)]
    assert not hits, hits


def test_a_mask_computes_only_when_it_beats_every_search_control_beyond_the_spread():
    import statistics

    real, far, near = [0.90, 0.92, 0.94], [0.10, 0.12, 0.14], [0.86, 0.90, 0.94]
    text, verdict, why = v.beats_controls(real, {"random-weights": far, "shuffled-labels": far}, what="accuracy",
                                          scale=100.0, unit="%")
    assert verdict == v.SHOWN and why.startswith("beats random-weights, shuffled-labels beyond the seed spread")
    # the row carries the numbers: the means, the s.d.s and the gap against the summed spread, computed here
    gap = 100 * (statistics.fmean(real) - statistics.fmean(far))
    spread = 100 * (statistics.stdev(real) + statistics.stdev(far))
    assert f"real 92.0% (s.d. {100 * statistics.stdev(real):.1f}%, 3 seeds)" in text
    assert f"random-weights 12.0% (s.d. 2.0%, 3 seeds): real {gap:.1f} points ahead, spread {spread:.1f} points" in text
    # 0.92 - 0.90 = 0.02 is within 0.02 + 0.04: the shuffled-labels control is not beaten
    verdict, why = v.beats_controls(real, {"random-weights": far, "shuffled-labels": near})[1:]
    assert verdict == v.NOT_SHOWN and why.startswith("not beyond the seed spread of shuffled-labels;")
    assert v.beats_controls(real[:2], {"random-weights": far[:2]})[1] == v.NOT_MEASURABLE  # two seeds: no spread
    assert v.beats_controls(real, {"random-weights": far[:2]})[1] == v.NOT_MEASURABLE  # nor on the control's side
    assert v.beats_controls(real, {})[1] == v.NOT_MEASURABLE


def _comparison(real, **controls):
    """A controls comparison as runs.controls writes it: one target, per kind the scores and densities by seed."""
    kinds = {"real": real, **{k.replace("_", "-"): c for k, c in controls.items()}}
    return {"command": "x", "controls": [k for k in kinds if k != "real"],
            "targets": {"0.900": {"score": "logit_diff", **{k: {"seeds": list(range(len(s))), "score": s,
                                                               "density": [0.1] * len(s)} for k, s in kinds.items()}}}}


def test_control_rows_read_the_comparison_and_gate_the_found_circuit_row():
    from subnetlab.experiments.circuits.findings import controls_row, gated
    from subnetlab.experiments.subtask_induction.findings import computes_row

    beaten = _comparison([5.0, 5.5, 6.0], random_weights=[0.0, 0.1, 0.2], shuffled_labels=[1.0, 1.2, 1.4])
    text, verdict, _ = controls_row(beaten)
    assert verdict == v.SHOWN and "logit difference at target sparsity 0.9: real 5.50" in text
    assert "(edges kept: real 10%, random-weights 10%, shuffled-labels 10%)" in text
    close = _comparison([5.0, 5.5, 6.0], random_weights=[0.0, 0.1, 0.2], shuffled_labels=[4.5, 5.0, 5.5])
    row = ("3 of 4 key edges kept", v.SHOWN, "keeps a key edge")
    assert gated(row, controls_row(beaten))[1] == v.SHOWN
    assert gated(row, controls_row(close))[1] == v.NOT_SHOWN and "shuffled-labels" in gated(row, controls_row(close))[2]
    assert gated(row, None)[1] == v.NOT_MEASURABLE  # no controls: the circuit is not shown to compute the task
    assert gated(("x", v.NOT_SHOWN, "y"), controls_row(beaten)) == ("x", v.NOT_SHOWN, "y")
    accurate = _comparison([0.9, 0.95, 1.0], random_weights=[0.1, 0.15, 0.2], shuffled_labels=[0.1, 0.2, 0.3])
    fitted = _comparison([0.9, 0.95, 1.0], random_weights=[0.1, 0.15, 0.2], shuffled_labels=[0.92, 0.92, 0.92])
    assert computes_row({"2": accurate})[1] == v.SHOWN
    text, verdict, _ = computes_row({"2": accurate, "4": fitted})  # shown only when shown at every depth
    assert verdict == v.NOT_SHOWN and text.startswith("2 layers, test accuracy: real 95.0% (s.d. 5.0%, 3 seeds)")
