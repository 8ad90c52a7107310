"""Random-matched and complement-matched controls keep exactly the subnetwork's count in every matrix."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.subnetwork import Subnetwork
from subnetlab.transfer import complement_matched, kept_counts, random_matched, random_released
from tests.conftest import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _subnetwork(adapter, fraction: float, seed: int = 0) -> Subnetwork:
    g = torch.Generator().manual_seed(seed)
    masks = {}
    for i, n in enumerate(adapter.weight_matrices()):
        # different densities per matrix, so a control that balances counts across matrices would fail
        p = fraction * (i + 1) / len(adapter.weight_matrices())
        masks[n] = torch.rand(adapter.parameter(n).shape, generator=g) < p
    return Subnetwork.from_weight_masks(adapter, masks, method="continuous-sparsification")


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


def test_random_matched_keeps_exact_count_per_matrix(gpt2):
    sub = _subnetwork(gpt2.adapter, 0.3)
    control = random_matched(sub, seed=3)
    assert sorted(control.weights) == sorted(sub.weights)
    for name, mask in sub.weights.items():
        assert int(control.weights[name].sum()) == int(mask.sum())
        assert control.weights[name].shape == mask.shape
        assert set(control.weights[name].unique().tolist()) <= {0, 1}
    assert kept_counts(control) == kept_counts(sub)
    assert control.fingerprint == sub.fingerprint and control.method == "random-matched"
    # not the subnetwork itself, and reproducible from its seed
    assert any(not torch.equal(control.weights[n], sub.weights[n]) for n in sub.weights)
    again = random_matched(sub, seed=3)
    assert all(torch.equal(again.weights[n], control.weights[n]) for n in sub.weights)
    other = random_matched(sub, seed=4)
    assert any(not torch.equal(other.weights[n], control.weights[n]) for n in sub.weights)


def test_random_matched_positions_are_spread_over_the_matrix(gpt2):
    sub = _subnetwork(gpt2.adapter, 0.3)
    name = gpt2.adapter.weight_matrices()[-1]
    hits = torch.zeros(sub.weights[name].shape)
    for seed in range(40):
        hits += random_matched(sub, seed).weights[name].float()
    frac = float(sub.weights[name].float().mean())
    assert float(hits.mean()) == pytest.approx(40 * frac)
    assert int((hits > 0).sum()) > 0.9 * hits.numel()  # every region gets drawn


def test_random_released_keeps_all_but_the_subnetworks_count_per_matrix(gpt2):
    """The released code's control (NeuroSurgeon's _sample_mask_randomly as math/transfer.py uses it): ones
    everywhere but k random positions, so n - k kept; positions uniform, the seed reproduces it."""
    sub = _subnetwork(gpt2.adapter, 0.3)
    control = random_released(sub, seed=5)
    assert sorted(control.weights) == sorted(sub.weights) and control.method == "random-released"
    for name, mask in sub.weights.items():
        n, k = mask.numel(), int(mask.sum())
        assert int(control.weights[name].sum()) == n - k and control.weights[name].shape == mask.shape
        assert set(control.weights[name].unique().tolist()) <= {0, 1}
    # by hand: the dropped positions of the released control are a random-k draw of the same generator
    dropped = random_matched(sub, seed=5)
    assert all(torch.equal(control.weights[n], 1 - dropped.weights[n]) for n in sub.weights)
    assert all(torch.equal(random_released(sub, seed=5).weights[n], control.weights[n]) for n in sub.weights)
    name = gpt2.adapter.weight_matrices()[-1]
    hits = sum(random_released(sub, s).weights[name].float() for s in range(40))
    assert float(hits.mean()) == pytest.approx(40 * (1 - float(sub.weights[name].float().mean())))
    assert int((hits < 40).sum()) > 0.5 * hits.numel()  # the dropped k land everywhere, not on a fixed block


def test_complement_matched_draws_only_outside(gpt2):
    sub = _subnetwork(gpt2.adapter, 0.4)
    control = complement_matched(sub, seed=0)
    for name, mask in sub.weights.items():
        c = control.weights[name]
        assert int(c.sum()) == int(mask.sum())
        assert int((c.bool() & mask.bool()).sum()) == 0
    assert control.method == "complement-matched"


def test_complement_impossible_when_subnetwork_keeps_more_than_half(gpt2):
    adapter = gpt2.adapter
    masks = {n: torch.ones(adapter.parameter(n).shape) for n in adapter.weight_matrices()}
    masks[adapter.weight_matrices()[0]].view(-1)[:5] = 0
    sub = Subnetwork.from_weight_masks(adapter, masks)
    with pytest.raises(SubnetlabError, match="outside"):
        complement_matched(sub, seed=0)


def test_structured_subnetwork_refused(gpt2):
    sub = Subnetwork.from_names(gpt2.adapter, ["L0.H1"])
    with pytest.raises(SubnetlabError, match="weight-level"):
        kept_counts(sub)
