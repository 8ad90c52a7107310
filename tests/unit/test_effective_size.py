"""Effective size on stub accuracy curves whose answers are known by construction."""

from __future__ import annotations

import math

import pytest

from subnetlab.analysis.effective_size import (
    compare_heads,
    data_accuracy,
    effective_size,
    generalization_onset,
    level_grid,
)
from subnetlab.errors import SubnetlabError
from subnetlab.methods.l0.schedule import parse_levels


def stub_curve(model: float, drop_after: float, seeds: int = 3) -> dict[float, list[float]]:
    """Seed accuracies that stay within 1 point of ``model`` up to ``drop_after``, then fall 10 points."""
    curve = {}
    for level in level_grid():
        base = model - 0.01 if level <= drop_after + 1e-9 else model - 0.10 - level / 10
        curve[level] = [base + d for d in (-0.005, 0.0, 0.005)[:seeds]]
    return curve


def test_grid_is_the_papers_5_percent_resolution():
    assert level_grid() == [round(0.05 * i, 4) for i in range(1, 15)]
    assert list(parse_levels("0.05:0.70:0.05")) == pytest.approx(level_grid())
    with pytest.raises(SubnetlabError):
        level_grid(0.5, 0.4)


@pytest.mark.parametrize("drop_after", [0.05, 0.35, 0.70])
def test_effective_size_on_a_stub_curve(drop_after):
    result = effective_size(stub_curve(0.80, drop_after), model_accuracy=0.80, faithfulness=0.03)
    assert result.sparsity == pytest.approx(drop_after)
    assert result.size == pytest.approx(1 - drop_after)
    assert result.mean_accuracy[0.05] == pytest.approx(0.79)


def test_nothing_faithful_means_the_full_model():
    curve = {0.05: [0.5, 0.52], 0.1: [0.4, 0.41]}
    result = effective_size(curve, model_accuracy=0.80)
    assert result.sparsity == 0.0 and result.size == 1.0 and result.faithful == []


def test_highest_faithful_level_wins_even_past_a_gap_and_faithfulness_is_two_sided():
    curve = {0.1: [0.79], 0.2: [0.70], 0.3: [0.785], 0.4: [0.90]}
    result = effective_size(curve, model_accuracy=0.80)
    assert result.faithful == [0.1, 0.3]  # 0.4 is 10 points *above* the model: not faithful
    assert result.sparsity == 0.3
    assert effective_size(curve, 0.80, faithfulness=0.10).sparsity == 0.4


def test_mean_over_seeds_decides_not_any_single_seed():
    curve = {0.5: [0.76, 0.80, 0.80]}  # mean 0.7867: within 3 points of 0.80 though one seed is not
    assert effective_size(curve, 0.80).sparsity == 0.5
    curve = {0.5: [0.70, 0.80, 0.80]}  # mean 0.7667: not faithful although two seeds are
    assert effective_size(curve, 0.80).sparsity == 0.0


def test_data_accuracy_mix():
    assert data_accuracy(0.8, 0.4, "mixed") == pytest.approx(0.6)
    assert data_accuracy(0.8, 0.4, "ood") == 0.4
    with pytest.raises(SubnetlabError, match="on: 'both' is not one of") as refused:
        data_accuracy(0.8, 0.4, "both")
    assert refused.value.setting == "on"


def test_generalization_onset():
    flat_then_rise = [0.10, 0.12, 0.09, 0.10, 0.30, 0.55, 0.60]
    # lowest point before the peak is index 2 (0.09); 20% of the 0.51 rise is first covered at index 4
    assert generalization_onset(flat_then_rise) == 3
    assert generalization_onset([0.2, 0.2, 0.205, 0.2]) is None
    assert generalization_onset([0.1]) is None


def test_compare_heads():
    out = compare_heads(["L2.H5", "L0.H1", "L10.H3"], ["L10.H3", "L2.H5", "L4.H0"])
    assert out["core_in_before"] == ["L2.H5", "L10.H3"]
    assert out["core_missing_before"] == ["L4.H0"]
    assert out["fraction_of_core_present"] == pytest.approx(2 / 3)
    assert math.isnan(compare_heads(["L0.H0"], [])["fraction_of_core_present"])


# -- the early stop and the warm start ---------------------------------------------------------------

def test_settled_needs_consecutive_unfaithful_levels():
    from subnetlab.analysis.effective_size import settled

    assert not settled([0.80, 0.79, 0.70, 0.80, 0.70], 0.80)  # one unfaithful level at a time never settles
    assert settled([0.80, 0.70, 0.60], 0.80)
    assert settled([0.90, 0.70], 0.80)  # 10 points *above* the model is unfaithful too
    assert not settled([0.80, 0.70, 0.60], 0.80, consecutive=3)
    assert settled([0.70], 0.80, consecutive=1)
    assert not settled([], 0.80)
    with pytest.raises(SubnetlabError) as refused:
        settled([0.8], 0.8, consecutive=0)
    assert refused.value.setting == "consecutive"


def test_stop_rule_waits_for_every_chosen_data():
    from subnetlab.analysis.effective_size import StopRule

    model = (0.90, 0.50)
    climbed = [(0.90, 0.50), (0.70, 0.50), (0.60, 0.51)]  # ID has left the threshold for good, OOD has not
    assert StopRule(on=("id",)).should_stop(climbed, model)
    assert not StopRule(on=("id", "ood")).should_stop(climbed, model)
    assert StopRule(on=("id", "ood")).should_stop(climbed + [(0.5, 0.40), (0.5, 0.30)], model)
    assert not StopRule(on=("id",), consecutive=0).should_stop(climbed, model)  # 0: climb every level
    # mixed is the mean of the two: (0.6 + 0.51) / 2 = 0.555 against 0.70
    assert StopRule(on=("mixed",)).unfaithful_on(climbed[2], model) == ["mixed"]
    assert StopRule(on=("id", "ood")).unfaithful_on(climbed[0], model) == []
    for bad, setting in (({"on": ("both",)}, "on"), ({"faithfulness": -0.1}, "faithfulness"),
                         ({"consecutive": -1}, "consecutive"), ({"on": ()}, "on")):
        with pytest.raises(SubnetlabError) as refused:
            StopRule(**bad)
        assert refused.value.setting == setting


def test_the_early_stop_finds_the_effective_size_of_a_curve_that_does_not_come_back():
    from subnetlab.analysis.effective_size import StopRule

    for drop_after in (0.05, 0.35, 0.60, 0.70):
        curve = {lvl: sum(accs) / len(accs) for lvl, accs in stub_curve(0.80, drop_after).items()}
        climbed, rule = [], StopRule(on=("id",))
        for lvl in sorted(curve):
            climbed.append((curve[lvl], 0.0))
            if rule.should_stop(climbed, (0.80, 0.0)):
                break
        reached = dict(list(sorted(curve.items()))[: len(climbed)])
        assert effective_size({k: [v] for k, v in reached.items()}, 0.80).sparsity == pytest.approx(drop_after)
        assert len(reached) == min(14, round(drop_after / 0.05) + 2)  # the answer and two levels above it


def test_warm_start_index():
    from subnetlab.analysis.effective_size import warm_start_index

    grid = level_grid()
    assert grid[warm_start_index(grid, 0.50)] == 0.40  # two levels below the previous answer
    assert warm_start_index(grid, 0.10) == 0 and warm_start_index(grid, 0.05) == 0
    assert warm_start_index(grid, 0.0) == 0  # nothing was faithful: from the bottom
    assert grid[warm_start_index(grid, 0.52)] == 0.40  # between grid points: the one under it
    assert grid[warm_start_index(grid, 0.70, below=0)] == 0.70


def test_comes_back_reports_what_the_early_stop_would_miss():
    from subnetlab.analysis.effective_size import comes_back

    monotone = {0.1: 0.80, 0.2: 0.79, 0.3: 0.70, 0.4: 0.60, 0.5: 0.55}
    out = comes_back(monotone, 0.80)
    assert out["stops_after"] == 0.4 and out["faithful_again"] == []
    assert out["sparsity_with_stop"] == out["sparsity_without_stop"] == 0.2
    back = {0.1: 0.80, 0.2: 0.70, 0.3: 0.70, 0.4: 0.79, 0.5: 0.60}
    out = comes_back(back, 0.80)
    assert out["stops_after"] == 0.3 and out["faithful_again"] == [0.4]
    assert (out["sparsity_with_stop"], out["sparsity_without_stop"]) == (0.1, 0.4)
    assert comes_back({0.1: 0.8, 0.2: 0.7, 0.3: 0.8}, 0.80)["stops_after"] is None


def test_one_sided_faithfulness_and_per_seed_sizes() -> None:
    """By hand: model 0.80, threshold 0.03. Two seeds per level:
    0.2: (0.85, 0.87) mean 0.86 -> two-sided unfaithful (better by 6 points), one-sided faithful;
    0.4: (0.79, 0.70) mean 0.745 -> unfaithful either way; seed 0 alone is faithful (0.79);
    0.6: (0.60, 0.60) -> unfaithful."""
    from subnetlab.analysis.effective_size import effective_size as es
    from subnetlab.analysis.effective_size import per_seed_effective_size

    accs = {0.2: [0.85, 0.87], 0.4: [0.79, 0.70], 0.6: [0.60, 0.60]}
    assert es(accs, 0.80, 0.03, sides="two").sparsity == 0.0  # nothing within 3 points either side
    assert es(accs, 0.80, 0.03, sides="one").sparsity == 0.2
    per = per_seed_effective_size(accs, 0.80, 0.03, sides="one")
    assert per["sparsities"] == [0.4, 0.2] and per["sizes"] == [0.6, 0.8]
    assert per["mean_size"] == pytest.approx(0.7)  # the mean of the seeds' sizes, not the size of the mean curve (0.8)
    assert per_seed_effective_size(accs, 0.80, 0.03, sides="two")["sparsities"] == [0.4, 0.0]
    with pytest.raises(SubnetlabError, match="sides"):
        es(accs, 0.8, 0.03, sides="three")
    with pytest.raises(SubnetlabError, match="same seeds"):
        per_seed_effective_size({0.2: [0.8], 0.4: [0.8, 0.8]}, 0.8)
