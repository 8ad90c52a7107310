"""Each health diagnosis on constructed numbers, against its definition in ``subnetlab.runs.health``."""

from __future__ import annotations

import pytest
import torch

from subnetlab.methods.decided import count_undecided
from subnetlab.runs import health as h


def test_healthy_numbers_have_no_problem() -> None:
    got = h.judge(kept=40, maskable=78, undecided=3, gates=78, expected_sparsity=0.49, target_sparsity=0.5,
                  objective=[5, 4, 3, 2, 1, 1, 1, 1, 1, 1])
    assert got.ok and got.problems == () and got.messages() == []
    assert got.undecided_share == pytest.approx(3 / 78)


@pytest.mark.parametrize("kept, degenerate", [(0, True), (1, False), (77, False), (78, True)])
def test_degenerate_is_keeping_nothing_or_everything(kept: int, degenerate: bool) -> None:
    got = h.judge(kept=kept, maskable=78)
    assert ("degenerate" in got.problems) == degenerate
    assert got.empty == (kept == 0)
    if degenerate:
        assert ("keeps nothing" if kept == 0 else "keeps everything") in got.messages()[0]


def test_undecided_share_against_the_threshold() -> None:
    gates = 100
    at = round(h.MAX_UNDECIDED_SHARE * gates)
    assert "undecided" not in h.judge(undecided=at, gates=gates).problems  # "more than" the share
    over = h.judge(undecided=at + 1, gates=gates)
    assert over.problems == ("undecided",)
    assert f"{at + 1} of {gates} gates" in over.messages()[0]
    assert h.judge(undecided=10, gates=10).problems == ("undecided",)  # the Llama run of issue 26: 10 of 10


def test_undecided_message_names_what_to_raise_on_its_one_line() -> None:
    advice = "total_steps (now 300) or lr (now 0.1)"
    got = h.judge(undecided=9, gates=10, undecided_advice=advice)
    (message,) = got.messages()
    assert message.startswith("undecided: 9 of 10 gates (90%)") and message.endswith("; raise " + advice)
    assert "\n" not in message and "another seed" not in message
    assert h.read_health({"health": got.to_dict()}) == got  # the advice travels through metrics.json
    assert h.judge(undecided=9, gates=10).messages()[0].endswith("another seed may select other units")  # none given
    assert h.judge(undecided=0, gates=10, undecided_advice=advice).messages() == []  # decided: no advice printed


def test_count_undecided_is_strictly_between_the_bounds() -> None:
    p = torch.tensor([0.0, 0.05, 0.0501, 0.5, 0.9499, 0.95, 1.0])
    assert count_undecided(p) == 3


def test_off_target_is_the_expected_sparsity_missing_the_target() -> None:
    issue = h.judge(expected_sparsity=0.047, target_sparsity=0.5)  # issue 26's BERT run after 40 steps
    assert issue.problems == ("off-target",)
    assert "0.047" in issue.messages()[0] and "0.500" in issue.messages()[0]
    inside = h.judge(expected_sparsity=0.5 - h.TARGET_TOLERANCE + 1e-6, target_sparsity=0.5)
    assert inside.ok
    assert h.judge(expected_sparsity=0.5 + h.TARGET_TOLERANCE + 1e-3, target_sparsity=0.5).problems == ("off-target",)


def test_off_target_message_fits_the_selection() -> None:
    """A top-k selection forces the target onto the gates; the threshold selection forces nothing (issue 50)."""
    forced = h.judge(expected_sparsity=0.8, target_sparsity=0.95, selection="topk")
    assert "forced the target" in forced.messages()[0]
    kept = h.judge(expected_sparsity=0.8, target_sparsity=0.95, selection=h.THRESHOLD)
    assert kept.problems == ("off-target",)
    assert "forced" not in kept.messages()[0] and "forces no target" in kept.messages()[0]
    assert h.read_health({"health": kept.to_dict()}) == kept  # the selection survives metrics.json


def test_final_fall_closed_form() -> None:
    values = [10.0] * 16 + [4.0, 4.0, 2.0, 2.0]  # 20 values: the last 4 are the stretch; halves 4 and 2
    assert h.final_fall(values) == pytest.approx((4.0 - 2.0) / 4.0)
    assert h.final_fall([3.0, 2.0, 1.0]) is None  # fewer values than a stretch needs
    assert h.final_fall([1.0, float("nan"), 1.0, 1.0, 1.0]) == 0.0  # non-finite values are skipped
    n = 50  # a stretch of ceil(0.2 * 50) = 10 values
    ramp = [float(n - i) for i in range(n)]  # falls by 1 a value: first half of the stretch averages 8, second 3
    assert h.final_fall(ramp) == pytest.approx((8.0 - 3.0) / 8.0)


def test_unconverged_when_still_falling() -> None:
    assert h.judge(objective=[10.0] * 16 + [4.0, 4.0, 2.0, 2.0]).problems == ("unconverged",)
    assert h.judge(objective=[10.0, 5.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]).ok  # fell, then flat
    assert h.judge(objective=[1.0, 2.0, 3.0, 4.0, 5.0]).ok  # rising is not "still falling"
    assert h.judge(objective=[1.0, 1.0]).objective_fall is None
    noise = [3e-7, -1e-7, 2e-7, 1e-7, -2e-7, 1e-8]  # a KL at float noise (issue 26's tiny BERT): nothing to lose
    assert h.final_fall(noise) is None and h.judge(objective=noise).ok


def test_missing_numbers_skip_their_check() -> None:
    got = h.judge()
    assert got.ok and got.to_dict()["problems"] == []
    assert h.judge(kept=0, maskable=0).ok  # nothing maskable: no claim either way


def test_round_trip_through_metrics() -> None:
    got = h.judge(kept=0, maskable=10, undecided=9, gates=10, expected_sparsity=0.1, target_sparsity=0.5,
                  objective=[8.0, 8.0, 4.0, 4.0])
    assert got.problems == ("degenerate", "undecided", "off-target", "unconverged")
    entry = got.to_dict()
    assert entry["thresholds"]["max_undecided_share"] == h.MAX_UNDECIDED_SHARE
    assert len(entry["messages"]) == 4
    assert h.read_health({"health": entry}) == got
    assert h.read_health({"eval": {}}) is None


@pytest.mark.parametrize(("accuracy", "n", "at_chance"), [
    (0.425, 40, True),   # 3 labels: z = (0.425 - 1/3) / sqrt(2/9 / 40) = 1.23 (the demo's never-trained model)
    (0.47, 40, True),    # z = 1.83
    (0.49, 40, False),   # z = 2.10
    (0.40, 400, False),  # z = 2.83: the same accuracy over more rows is above chance
])
def test_at_chance_is_within_two_binomial_standard_errors_of_uniform_guessing(accuracy, n, at_chance) -> None:
    z = (accuracy - 1 / 3) / (1 / 3 * 2 / 3 / n) ** 0.5
    scores = {"hans": {"accuracy": 1.0, "n": 8, "labels": {"non-entailment": 1.0}},  # one label: no chance level
              "id": {"accuracy": accuracy, "n": n, "labels": {"e": 0.0, "n": 0.0, "c": 1.0}}}
    chance = h.chance_level(scores)
    assert chance is not None and chance["split"] == "id" and chance["labels"] == 3
    assert chance["z"] == pytest.approx(z) and chance["chance"] == pytest.approx(1 / 3)
    got = h.judge(chance=chance)
    assert ("at-chance" in got.problems) == at_chance
    assert h.read_health({"health": got.to_dict()}) == got


def test_no_chance_level_without_labelled_splits() -> None:
    assert h.chance_level({"eval": {"accuracy": 0.01, "n": 100}}) is None  # a language-model task
    assert h.chance_level({}) is None and h.judge(chance=None).ok


def test_select_best_passes_over_a_degenerate_lambda() -> None:
    from subnetlab.methods.continuous_sparsification import LambdaChoice
    from subnetlab.runs.transfer import degenerate_passed_over, select_best

    def run(lam: float, acc: float, kept: int) -> dict:
        return {"l0_lambda": lam, "eval_accuracy": acc, "kept_percent": kept, "kept": kept, "masked_total": 100}

    sweep = [run(1e-7, 0.54, 0), run(1e-8, 0.54, 12), run(1e-9, 0.55, 100)]  # empty, healthy, everything
    assert select_best(sweep) is sweep[1]  # the sparsest rule alone would pick the empty one
    assert select_best(sweep, LambdaChoice("best-accuracy")) is sweep[1]  # ... and this one the full one
    assert degenerate_passed_over(sweep) == [sweep[0], sweep[2]]
    assert select_best(sweep, LambdaChoice("lambda", l0_lambda=1e-7)) is sweep[0]  # named by the user: kept, reported
    assert degenerate_passed_over(sweep, LambdaChoice("lambda", l0_lambda=1e-7)) == []
    empty = [run(1e-7, 0.5, 0), run(1e-8, 0.5, 0)]
    assert select_best(empty) is empty[0] and degenerate_passed_over(empty) == []  # none healthy: the rule decides


def test_plateau_stopping_record_decides_unconverged() -> None:
    from subnetlab.optim import Plateau, stopping_record

    falling = [10.0] * 16 + [4.0, 4.0, 2.0, 2.0]  # the objective's fall alone would say unconverged
    plateau = stopping_record(Plateau(3, 0.01), cap=20, epochs_run=12, monitor="held_out_objective", stopped_epoch=11)
    assert plateau["reason"] == "plateau at epoch 11"
    assert h.stopping_verdict(plateau) is True and h.judge(objective=falling, stopping=plateau).ok
    capped = stopping_record(Plateau(3, 0.01), cap=20, epochs_run=20, monitor="held_out_objective")
    got = h.judge(objective=[1.0] * 20, stopping=capped)  # flat objective, but the held-out value still improved
    assert capped["reason"] == "cap reached" and got.problems == ("unconverged",)
    assert "cap of 20 epochs was reached" in got.messages()[0]
    assert h.read_health({"health": got.to_dict()}) == got
    fixed = stopping_record(None, cap=20, epochs_run=20, monitor="x")
    assert h.stopping_verdict(fixed) is None  # fixed epochs: the objective's fall judges
    assert h.judge(objective=falling, stopping=fixed).problems == ("unconverged",)
    assert h.judge(objective=[1.0] * 20, stopping=fixed).ok


def test_transfer_runs_still_improving_read_the_stopping_reason() -> None:
    from subnetlab.experiments.subtask_induction.report import still_improving

    late = {"best_epoch": 95, "sequences": 100 * 10, "train_rows": 10}  # best in the last 20%: fixed-epoch rule
    assert still_improving(late)
    assert still_improving({**late, "stopping": {"rule": "fixed", "reason": "cap reached"}})
    assert not still_improving({**late, "stopping": {"rule": "plateau", "reason": "plateau at epoch 99"}})
    early = {"best_epoch": 10, "sequences": 100 * 10, "train_rows": 10}
    assert not still_improving(early)
    assert still_improving({**early, "stopping": {"rule": "plateau", "reason": "cap reached"}})
