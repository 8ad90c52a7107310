"""Random and bad subnetworks: exactly the good one's sizes; bad draws only from what pruning removed."""

from __future__ import annotations

import numpy as np
import torch

from subnetlab.methods.lottery.controls import bad_structured, bad_weights, controls, random_structured, random_weights
from subnetlab.methods.lottery.magnitude import global_magnitude_masks
from subnetlab.subnetwork import Subnetwork
from tests.conftest import tiny_model
from tests.unit.lottery_helpers import one_thread  # noqa: F401  (autouse fixture)


def _good_structured(adapter, kept_heads: int, kept_mlps: int, seed: int = 0) -> Subnetwork:
    g = torch.Generator().manual_seed(seed)
    heads = torch.zeros(adapter.num_layers * adapter.num_heads)
    heads[torch.randperm(heads.numel(), generator=g)[:kept_heads]] = 1
    mlps = torch.zeros(adapter.num_layers)
    mlps[torch.randperm(mlps.numel(), generator=g)[:kept_mlps]] = 1
    return Subnetwork.structured(adapter, heads.view(adapter.num_layers, -1), mlps, method="importance")


def test_structured_random_and_bad_sizes_and_pools():
    a = tiny_model("bert", layers=4, heads=8).adapter  # 32 heads, 4 MLPs
    good = _good_structured(a, kept_heads=12, kept_mlps=2)
    for seed in range(5):
        rnd = random_structured(good, a, seed)
        bad = bad_structured(good, a, seed)
        for sub in (rnd, bad):
            assert int(sub.heads.sum()) == 12 and int(sub.mlps.sum()) == 2
        # bad keeps only components that the good subnetwork removed
        assert ((bad.heads > 0) & (good.heads > 0)).sum() == 0
        assert ((bad.mlps > 0) & (good.mlps > 0)).sum() == 0
        assert bad.extra["bad_fill"] == "0" and bad.extra["control"] == "bad"
    # random draws differ by seed and are not always inside the removed pool
    draws = {tuple(random_structured(good, a, s).heads.flatten().tolist()) for s in range(5)}
    assert len(draws) > 1


def test_structured_bad_fills_with_least_important_when_too_few_were_removed():
    a = tiny_model("bert", layers=4, heads=8).adapter
    good = _good_structured(a, kept_heads=24, kept_mlps=3)  # removed: 8 heads, 1 MLP
    scores_h = torch.arange(32, dtype=torch.float32).flip(0).view(4, 8)  # higher index = less important
    scores_m = torch.tensor([0.4, 0.3, 0.2, 0.1])
    bad = bad_structured(good, a, seed=0, importance=(scores_h, scores_m))
    assert int(bad.heads.sum()) == 24 and int(bad.mlps.sum()) == 3
    removed = good.heads < 0.5
    assert (bad.heads[removed] == 1).all()  # every removed head is in
    kept_idx = torch.nonzero(good.heads.flatten() > 0.5).flatten()
    least = kept_idx[torch.argsort(scores_h.flatten()[kept_idx], stable=True)[:16]]
    assert (bad.heads.flatten()[least] == 1).all()
    assert bad.extra["bad_fill"] == str(16 + 2)


def test_weight_random_and_bad_match_per_matrix_counts():
    a = tiny_model("bert").adapter
    names = a.weight_matrices()
    total = sum(a.parameter(n).numel() for n in names)
    good = Subnetwork.from_weight_masks(a, global_magnitude_masks(a, names, int(0.65 * total)), method="magnitude")
    subs = controls(good, a, seed=3)
    assert set(subs) == {"good", "random", "bad"}
    for name in names:
        k = int(good.weights[name].sum())
        assert int(subs["random"].weights[name].sum()) == k
        assert int(subs["bad"].weights[name].sum()) == k
        # bad = the k smallest magnitudes of this matrix (independent: numpy stable sort)
        flat = a.parameter(name).detach().abs().flatten().numpy()
        expected = np.zeros(flat.size, dtype=bool)
        expected[np.argsort(flat, kind="stable")[:k]] = True
        assert np.array_equal(subs["bad"].weights[name].flatten().numpy().astype(bool), expected)
        # the matrix lost at least as many weights as it kept -> bad lies inside the removed ones
        if k <= flat.size - k:
            assert ((subs["bad"].weights[name] > 0) & (good.weights[name] > 0)).sum() == 0
    assert not all(torch.equal(subs["random"].weights[n], good.weights[n]) for n in names)
    assert random_weights(good, a, 3).weights[names[0]].equal(subs["random"].weights[names[0]])
    assert bad_weights(good, a).count() == good.count()


def test_structured_bad_fill_random_samples_good_components_uniformly():
    a = tiny_model("bert", layers=4, heads=8).adapter
    good = _good_structured(a, kept_heads=24, kept_mlps=3)  # removed: 8 heads, 1 MLP -> 16 heads, 2 MLPs filled
    scores_h = torch.arange(32, dtype=torch.float32).flip(0).view(4, 8)
    scores_m = torch.tensor([0.4, 0.3, 0.2, 0.1])
    kept_idx = torch.nonzero(good.heads.flatten() > 0.5).flatten()
    least = set(kept_idx[torch.argsort(scores_h.flatten()[kept_idx], stable=True)[:16]].tolist())
    fills = []
    for seed in range(6):
        bad = bad_structured(good, a, seed, importance=(scores_h, scores_m), fill="random")
        assert int(bad.heads.sum()) == 24 and int(bad.mlps.sum()) == 3
        assert (bad.heads[good.heads < 0.5] == 1).all() and (bad.mlps[good.mlps < 0.5] == 1).all()
        assert bad.extra["bad_fill"] == "18" and bad.extra["bad_fill_rule"] == "random"
        # the filled heads are the kept ones it chose: the draw ignores the scores ...
        fills.append(frozenset(i for i in kept_idx.tolist() if bad.heads.flatten()[i] == 1))
        # ... and is the generator's permutation of the kept pool, replayed independently here
        g = torch.Generator().manual_seed(seed)
        removed_h = torch.nonzero(good.heads.flatten() < 0.5).flatten()
        assert removed_h.numel() < 24
        expected = kept_idx[torch.randperm(kept_idx.numel(), generator=g)[:16]]
        assert fills[-1] == frozenset(expected.tolist())
    assert len(set(fills)) > 1 and any(f != least for f in fills)
    # the least-important rule is still there by name, and is deterministic in the scores
    assert frozenset(i for i in kept_idx.tolist()
                     if bad_structured(good, a, 0, importance=(scores_h, scores_m), fill="least-important")
                     .heads.flatten()[i] == 1) == least


def test_weight_controls_global_scope():
    a = tiny_model("bert").adapter
    names = a.weight_matrices()
    total = sum(a.parameter(n).numel() for n in names)
    kept = total - int(0.4 * total)
    good = Subnetwork.from_weight_masks(a, global_magnitude_masks(a, names, int(0.4 * total)), method="magnitude")
    subs = controls(good, a, seed=1, scope="global")
    # random: exactly as many weights in total, and the same draw as one randperm over the concatenated matrices
    rnd = subs["random"]
    assert rnd.count() == good.count() == kept and rnd.extra["control_scope"] == "global"
    g = torch.Generator().manual_seed(1)
    flat = torch.zeros(total)
    flat[torch.randperm(total, generator=g)[:kept]] = 1
    assert torch.equal(torch.cat([rnd.weights[n].flatten().float() for n in names]), flat)
    # per-matrix counts are free to differ from the good subnetwork's
    assert any(int(rnd.weights[n].sum()) != int(good.weights[n].sum()) for n in names)
    # bad: the globally smallest magnitudes (numpy stable sort over the concatenation), the complement of good here
    mags = np.concatenate([a.parameter(n).detach().abs().flatten().numpy() for n in names])
    expected = np.zeros(total, dtype=bool)
    expected[np.argsort(mags, kind="stable")[:kept]] = True
    got = torch.cat([subs["bad"].weights[n].flatten() for n in names]).numpy().astype(bool)
    assert np.array_equal(got, expected)
    good_flat = torch.cat([good.weights[n].flatten() for n in names]).numpy().astype(bool)
    assert (got & good_flat).sum() == kept - (total - kept)  # kept > removed: overlap is exactly the excess


def test_control_options_refuse_unknown_names():
    import pytest

    from subnetlab.errors import SubnetlabError

    a = tiny_model("bert").adapter
    good = _good_structured(a, kept_heads=3, kept_mlps=1)
    with pytest.raises(SubnetlabError, match="control_scope"):
        controls(good, a, 0, scope="layer")
    with pytest.raises(SubnetlabError, match="bad_fill"):
        controls(good, a, 0, fill="best")
