"""Heuristic-core analysis on hand-built subnetworks with answers worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from subnetlab.analysis.core import (
    analyse_core,
    core_heads,
    expected_random_intersection,
    expected_random_intersection_at,
    frequency_heatmap,
    head_frequencies,
    random_intersection_distribution,
    spearman,
)
from subnetlab.errors import SubnetlabError
from subnetlab.subnetwork import Subnetwork


def sub(heads: list[list[int]], mlps: list[int] | None = None, fp: str = "fp") -> Subnetwork:
    h = torch.tensor(heads, dtype=torch.float32)
    m = torch.tensor(mlps if mlps is not None else [1] * h.shape[0], dtype=torch.float32)
    return Subnetwork("structured", "bert", fp, heads=h, mlps=m)


GROUP_A = [sub([[1, 1, 0], [0, 1, 0]]), sub([[1, 0, 1], [0, 1, 0]], [1, 0])]
GROUP_B = [sub([[1, 0, 0], [0, 1, 0]]), sub([[1, 0, 0], [0, 1, 0]]), sub([[1, 0, 0], [1, 1, 0]])]


def test_frequencies_core_and_heatmap_match_hand_counts():
    fa, fb = head_frequencies(GROUP_A), head_frequencies(GROUP_B)
    assert fa.tolist() == [[2, 1, 1], [0, 2, 0]]
    assert fb.tolist() == [[3, 0, 0], [1, 3, 0]]
    assert core_heads(GROUP_A, GROUP_B) == ["L0.H0", "L1.H1"]
    grid = frequency_heatmap(fa, 2, fb, 3)
    # head pairs (freq_a, freq_b): (2,3) (1,0) (1,0) (0,1) (2,3) (0,0)
    expected = torch.zeros(3, 4, dtype=torch.long)
    expected[2, 3], expected[1, 0], expected[0, 1], expected[0, 0] = 2, 2, 1, 1
    assert torch.equal(grid, expected)
    assert int(grid.sum()) == 6


def test_analyse_core_bundles_everything():
    result = analyse_core(GROUP_A, GROUP_B, labels=("50%", "70%"))
    assert result.core == ["L0.H0", "L1.H1"]
    assert result.mlps_in_all == ["L0.MLP"]  # L1.MLP dropped by one subnetwork of A
    # kept heads: 3, 3 (A) and 2, 2, 3 (B) of 6
    assert result.expected_random == pytest.approx(6 * (3 / 6) ** 3 * (2 / 6) ** 2)
    d = result.to_dict()
    assert d["core_size"] == 2 and d["heatmap"][2][3] == 2
    assert 0.0 <= d["p_random_intersection_at_least_core"] <= 1.0


def test_mixed_architectures_are_refused():
    with pytest.raises(SubnetlabError, match="different architectures"):
        head_frequencies([GROUP_A[0], sub([[1, 1, 0], [0, 1, 0]], fp="other")])
    with pytest.raises(SubnetlabError):
        head_frequencies([])


def test_spearman_matches_scipy_and_rank_pearson():
    a = np.array([3, 0, 12, 7, 7, 1, 5, 9, 2, 11], dtype=float)
    b = np.array([2, 1, 12, 5, 8, 0, 6, 6, 3, 10], dtype=float)
    rho, p = spearman(torch.tensor(a), torch.tensor(b))
    ref = stats.spearmanr(a, b)
    assert rho == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)
    # independent: Pearson correlation of average ranks
    ra, rb = stats.rankdata(a), stats.rankdata(b)
    assert rho == pytest.approx(np.corrcoef(ra, rb)[0, 1])
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40])[0] == pytest.approx(1.0)
    assert all(np.isnan(spearman([1, 1, 1, 1], [1, 2, 3, 4])))


def test_paper_figure_for_random_subnetworks_of_bert_base():
    # 12 random 70%-sparsity subnetworks of BERT-base (144 heads): 7.7e-5 heads expected in common
    value = expected_random_intersection_at(144, [0.7] * 12)
    assert f"{value:.1e}" == "7.7e-05"


def test_exact_random_intersection_matches_simulation():
    n, kept = 8, [5, 4, 6]
    g = torch.Generator().manual_seed(0)
    draws = 20000
    sizes = np.empty(draws, dtype=int)
    for t in range(draws):
        inter = torch.ones(n, dtype=torch.bool)
        for k in kept:
            member = torch.zeros(n, dtype=torch.bool)
            member[torch.randperm(n, generator=g)[:k]] = True
            inter &= member
        sizes[t] = int(inter.sum())
    exact = expected_random_intersection(n, kept)
    assert exact == pytest.approx(n * (5 / 8) * (4 / 8) * (6 / 8))
    assert abs(sizes.mean() - exact) < 4 * sizes.std() / np.sqrt(draws)
    dist = random_intersection_distribution(n, kept)
    assert dist.sum() == pytest.approx(1.0)
    assert (dist * np.arange(n + 1)).sum() == pytest.approx(exact)
    empirical = np.bincount(sizes, minlength=n + 1) / draws
    assert 0.5 * np.abs(dist - empirical).sum() < 0.02


def test_bad_kept_counts_are_named():
    with pytest.raises(SubnetlabError, match="keeps 9 heads"):
        expected_random_intersection(8, [9])
