"""Overlap and super-survivors across seeds, against hand counts."""

from __future__ import annotations

import math

import pytest
import torch

from subnetlab.analysis.stability import (
    jaccard,
    pairwise_jaccard,
    pearson,
    stability_summary,
    super_survivors,
    survival_frequency,
)
from subnetlab.errors import SubnetlabError
from subnetlab.subnetwork import Subnetwork
from tests.conftest import tiny_model
from tests.unit.lottery_helpers import one_thread  # noqa: F401  (autouse fixture)


def _subs():
    a = tiny_model("bert").adapter  # 2 layers x 4 heads
    names = [["L0.H0", "L0.H1", "L1.H2", "L0.MLP"], ["L0.H0", "L1.H2", "L1.H3", "L0.MLP", "L1.MLP"],
             ["L0.H0", "L0.H1", "L1.H2", "L1.MLP"]]
    return [Subnetwork.from_names(a, n, seed=i, method="importance") for i, n in enumerate(names)]


def test_pairwise_jaccard_and_super_survivors():
    subs = _subs()
    pj = pairwise_jaccard(subs)
    assert pj[0, 1] == pytest.approx(2 / 4) and pj[0, 2] == 1.0 and pj[1, 2] == pytest.approx(2 / 4)
    assert torch.equal(pj, pj.T) and (pj.diagonal() == 1).all()
    freq, mlp_freq = survival_frequency(subs)
    assert freq[0, 1] == pytest.approx(2 / 3) and freq[1, 3] == pytest.approx(1 / 3) and freq[0, 0] == 1
    assert mlp_freq.tolist() == pytest.approx([2 / 3, 2 / 3])
    heads, mlps = super_survivors(subs)
    assert heads.nonzero().tolist() == [[0, 0], [1, 2]] and mlps.sum() == 0
    summary = stability_summary(subs)
    assert summary["super_survivor_heads"] == ["L0.H0", "L1.H2"]
    assert summary["mean_jaccard"] == pytest.approx((0.5 + 1 + 0.5) / 3)
    assert summary["heads_kept"] == [3, 3, 3]


def test_jaccard_pearson_and_bad_input():
    assert jaccard(torch.zeros(3), torch.zeros(3)) == 1.0
    assert pearson(torch.tensor([1.0, 2, 3]), torch.tensor([2.0, 4, 6])) == pytest.approx(1.0)
    assert math.isnan(pearson(torch.ones(3), torch.tensor([1.0, 2, 3])))
    with pytest.raises(SubnetlabError):
        stability_summary([])
