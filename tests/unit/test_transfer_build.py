"""The starting weights of every transfer condition, and which of them training may change."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.subnetwork import Subnetwork
from subnetlab.transfer import (
    LMSplit,
    TrainSettings,
    build_transfer_model,
    embedding_names,
    fresh_copy,
    random_matched,
    random_released,
    train_model,
)
from tests.conftest import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trained():
    return tiny_model("gpt2", seed=7)


@pytest.fixture(scope="module")
def sub(trained):
    g = torch.Generator().manual_seed(0)
    adapter = trained.adapter
    masks = {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.1 for n in adapter.weight_matrices()}
    return Subnetwork.from_weight_masks(adapter, masks, method="continuous-sparsification")


def _data(n: int = 48, seed: int = 0) -> LMSplit:
    g = torch.Generator().manual_seed(seed)
    return LMSplit(torch.randint(3, 90, (n, 3), generator=g), torch.randint(0, 7, (n,), generator=g), torch.arange(7))


def _weights(tm) -> dict[str, torch.Tensor]:
    """Every weight as the forward pass sees it (masked ones through the parametrization)."""
    return {n: tm.effective_weight(n).clone() for n in _names(tm.model)}


def _names(model) -> list[str]:
    out = []
    for name, _ in model.named_parameters():
        if ".parametrizations." in name:
            prefix, _, rest = name.partition(".parametrizations.")
            name = f"{prefix}.{rest.split('.')[0]}"
        out.append(name)
    return out


def _train(tm, epochs: int = 2) -> None:
    train_model(tm.model, _data(), _data(16, 1), None, TrainSettings(epochs=epochs, lr=1e-2, batch_size=16), seed=0,
                keep_best=False)


def test_subnetwork_kept_weights_bit_identical_after_training_rest_changes(trained, sub):
    tm = build_transfer_model(trained.model, "subnetwork", seed=1, subnetwork=sub)
    _train(tm)
    for name, mask in sub.weights.items():
        w = tm.effective_weight(name)
        m = mask.bool()
        assert torch.equal(w[m], trained.model.get_parameter(name)[m])  # bit-identical
        assert not torch.equal(w[~m], fresh_copy(trained.model, 1).get_parameter(name)[~m])  # trained
    assert tm.transferred == sum(int(m.sum()) for m in sub.weights.values())
    assert tm.handle is not None and sorted(tm.frozen) == sorted(sub.weights)


def test_gradients_reach_only_new_weights(trained, sub):
    tm = build_transfer_model(trained.model, "subnetwork", seed=1, subnetwork=sub)
    data = _data()
    from subnetlab.transfer.train import last_logits, loss_on

    loss_on(last_logits(tm.model, data.input_ids), data.targets).backward()
    for name, mask in sub.weights.items():
        module_name, _, attr = name.rpartition(".")
        module = tm.model.get_submodule(module_name)
        grad = module.parametrizations[attr].original.grad
        assert torch.all(grad[mask.bool()] == 0) and grad[~mask.bool()].abs().sum() > 0
        assert not any(b.requires_grad for b in module.parametrizations[attr][0].buffers())


def test_subnetwork_and_scratch_share_weights_outside_only(trained, sub):
    s = _weights(build_transfer_model(trained.model, "subnetwork", seed=3, subnetwork=sub))
    z = _weights(build_transfer_model(trained.model, "scratch", seed=3))
    t = dict(trained.model.named_parameters())
    for name in z:
        if name in sub.weights:
            m = sub.weights[name].bool()
            assert torch.equal(s[name][~m], z[name][~m])  # same fresh init outside
            assert torch.equal(s[name][m], t[name][m]) and not torch.equal(z[name][m], t[name][m])
        else:
            assert torch.equal(s[name], z[name])  # reinit="all": embeddings, norms, biases fresh too
            if name.endswith("wte.weight"):
                assert not torch.equal(s[name], t[name])
    z_other = _weights(build_transfer_model(trained.model, "scratch", seed=4))
    assert any(not torch.equal(z[n], z_other[n]) for n in z)  # the seed matters


def test_reinit_masked_keeps_everything_outside_the_masked_matrices(trained, sub):
    tm = build_transfer_model(trained.model, "subnetwork", seed=3, subnetwork=sub, reinit="masked")
    w, t = _weights(tm), dict(trained.model.named_parameters())
    fresh = dict(fresh_copy(trained.model, 3).named_parameters())
    for name in w:
        if name in sub.weights:
            m = sub.weights[name].bool()
            assert torch.equal(w[name][m], t[name][m]) and torch.equal(w[name][~m], fresh[name][~m])
        else:
            assert torch.equal(w[name], t[name])
    assert all(p.requires_grad for p in tm.model.parameters())  # copied extras are trained


def test_no_freeze_copies_values_and_lets_them_train(trained, sub):
    tm = build_transfer_model(trained.model, "subnetwork", seed=1, subnetwork=sub, freeze=False)
    assert tm.handle is None and not tm.frozen
    name = sorted(sub.weights)[0]
    m = sub.weights[name].bool()
    assert torch.equal(tm.model.get_parameter(name)[m], trained.model.get_parameter(name)[m])
    _train(tm)
    assert not torch.equal(tm.model.get_parameter(name)[m], trained.model.get_parameter(name)[m])


def test_embeddings_condition_copies_and_freezes_embeddings(trained):
    tm = build_transfer_model(trained.model, "embeddings", seed=2)
    names = embedding_names(tm.model)
    assert sorted(names) == ["transformer.wpe.weight", "transformer.wte.weight"]
    _train(tm)
    fresh = dict(fresh_copy(trained.model, 2).named_parameters())
    for name, p in tm.model.named_parameters():
        if name in names:
            assert not p.requires_grad and torch.equal(p, trained.model.get_parameter(name))
    changed = [n for n, p in tm.model.named_parameters() if n not in names and not torch.equal(p, fresh[n])]
    assert changed  # everything else trains from a fresh start


def test_full_condition_is_the_trained_model_fine_tuned(trained):
    tm = build_transfer_model(trained.model, "full", seed=0)
    for name, p in tm.model.named_parameters():
        assert torch.equal(p, trained.model.get_parameter(name)) and p.requires_grad
    assert tm.model is not trained.model


def test_random_matched_condition_transfers_the_same_number(trained, sub):
    control = random_matched(sub, seed=0)
    tm = build_transfer_model(trained.model, "random-matched", seed=1, subnetwork=control)
    assert tm.transferred == build_transfer_model(trained.model, "subnetwork", seed=1, subnetwork=sub).transferred


def test_random_released_condition_draws_the_released_control_under_the_seed(trained, sub):
    tm = build_transfer_model(trained.model, "random-released", seed=4, subnetwork=sub, reinit="masked")
    control = random_released(sub, 4)
    total = sum(m.numel() for m in sub.weights.values())
    assert tm.transferred == total - sum(int(m.sum()) for m in sub.weights.values())  # n - k, not k
    w, t = _weights(tm), dict(trained.model.named_parameters())
    fresh = dict(fresh_copy(trained.model, 4).named_parameters())
    for name, mask in control.weights.items():
        m = mask.bool()
        assert torch.equal(w[name][m], t[name][m]) and torch.equal(w[name][~m], fresh[name][~m])
    assert sorted(tm.frozen) == sorted(sub.weights)


@pytest.mark.parametrize("reinit", ["masked", "all"])
def test_empty_mask_transfers_no_matrix_weight_and_copies_the_rest_under_reinit_masked(trained, sub, reinit):
    tm = build_transfer_model(trained.model, "empty-mask", seed=5, subnetwork=sub, reinit=reinit)
    assert tm.handle is None and not tm.frozen and tm.transferred == 0
    assert all(p.requires_grad for p in tm.model.parameters())
    w, t = _weights(tm), dict(trained.model.named_parameters())
    scratch = _weights(build_transfer_model(trained.model, "scratch", seed=5))
    for name in w:
        if name in sub.weights or reinit == "all":
            assert torch.equal(w[name], scratch[name])  # fresh, as scratch under the same seed
        else:
            assert torch.equal(w[name], t[name])  # embeddings, norms, biases, head: copied
    # the subnetwork condition under the same seed differs from it only in the transferred positions
    s = _weights(build_transfer_model(trained.model, "subnetwork", seed=5, subnetwork=sub, reinit=reinit))
    for name in w:
        m = sub.weights[name].bool() if name in sub.weights else torch.zeros_like(w[name], dtype=torch.bool)
        assert torch.equal(s[name][~m], w[name][~m])


def test_bad_input(trained, sub):
    with pytest.raises(SubnetlabError, match="condition"):
        build_transfer_model(trained.model, "lottery", seed=0, subnetwork=sub)
    with pytest.raises(SubnetlabError, match="reinit"):
        build_transfer_model(trained.model, "subnetwork", seed=0, subnetwork=sub, reinit="some")
    with pytest.raises(SubnetlabError, match="needs a subnetwork"):
        build_transfer_model(trained.model, "subnetwork", seed=0)
    other = tiny_model("gpt2", layers=3)
    with pytest.raises(SubnetlabError, match="fingerprint|does not fit"):
        build_transfer_model(other.model, "subnetwork", seed=0, subnetwork=sub)
