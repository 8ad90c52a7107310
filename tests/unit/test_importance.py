"""Importance criteria against finite differences, and the s-pruning loop's invariants."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates
from subnetlab.methods.lottery.importance import (
    classification_loss,
    gate_sensitivity,
    get_criterion,
    grad_x_activation,
    importance,
    normalize_layerwise,
)
from subnetlab.methods.lottery.importance_pruning import importance_prune, least_important
from tests.conftest import tiny_inputs, tiny_model
from tests.unit.lottery_helpers import one_thread  # noqa: F401  (autouse fixture)


def _batch(seed: int = 0, batch: int = 4, length: int = 6) -> dict:
    x = tiny_inputs("bert", batch=batch, length=length, seed=seed, pad=2)
    x["labels"] = torch.randint(0, 3, (batch,), generator=torch.Generator().manual_seed(seed))
    return x


def _losses(m, batch, heads, mlps) -> torch.Tensor:
    with torch.no_grad(), apply_gates(m.model, m.adapter, heads=heads, mlps=mlps):
        return classification_loss(m.model, batch).double()


def test_gate_sensitivity_equals_finite_difference_of_the_loss():
    m = tiny_model("bert", layers=2, heads=4)
    L, H = 2, 4
    batches = [_batch(0), _batch(1)]
    heads_keep = torch.ones(L, H)
    heads_keep[1, 2] = 0  # one head already pruned: importance is measured in the pruned model
    mlps_keep = torch.ones(L)
    got_h, got_m = importance(m.model, m.adapter, batches, criterion="sensitivity",
                              heads=heads_keep, mlps=mlps_keep, normalize=False)
    eps = 1e-3

    def fd(kind: str, l: int, h: int | None) -> float:
        per_example = []
        for b in batches:
            up_h, dn_h, up_m, dn_m = heads_keep.clone(), heads_keep.clone(), mlps_keep.clone(), mlps_keep.clone()
            if kind == "head":
                up_h[l, h] += eps
                dn_h[l, h] -= eps
            else:
                up_m[l] += eps
                dn_m[l] -= eps
            per_example.append(((_losses(m, b, up_h, up_m) - _losses(m, b, dn_h, dn_m)) / (2 * eps)).abs())
        return float(torch.cat(per_example).mean())

    for l in range(L):
        for h in range(H):
            if heads_keep[l, h] == 0:
                assert got_h[l, h] == 0
                continue
            assert got_h[l, h].item() == pytest.approx(fd("head", l, h), rel=2e-3, abs=1e-5)
        assert got_m[l].item() == pytest.approx(fd("mlp", l, None), rel=2e-3, abs=1e-5)


def test_taylor_weights_equals_derivative_of_scaling_the_components_weights():
    m = tiny_model("bert", layers=2, heads=4)
    a = m.adapter
    batch = _batch(2)
    got_h, got_m = importance(m.model, a, [batch], criterion="taylor", normalize=False)
    eps = 1e-3

    def loss_scaled(slices, t: float) -> float:
        saved = {}
        with torch.no_grad():
            for sl in slices:
                p = a.parameter(sl.name)
                saved.setdefault(sl.name, p.detach().clone())
                p.narrow(sl.dim, sl.start, sl.stop - sl.start).mul_(t)
            loss = float(classification_loss(m.model, batch).double().mean())
            for name, value in saved.items():
                a.parameter(name).copy_(value)
        return loss

    for slices, got in ((a.head_params(0, 1), got_h[0, 1]), (a.head_params(1, 3), got_h[1, 3]), (a.mlp_params(1), got_m[1])):
        derivative = (loss_scaled(slices, 1 + eps) - loss_scaled(slices, 1 - eps)) / (2 * eps)
        assert got.item() == pytest.approx(derivative ** 2, rel=5e-3, abs=1e-8)


def test_grad_x_activation_bounds_the_gate_sensitivity():
    """Per channel |a.g| summed >= |sum_c a.g| = |dL/dxi| (triangle inequality), example by example."""
    m = tiny_model("bert")
    batch = _batch(3)
    heads, mlps = torch.ones(2, 4), torch.ones(2)
    gs = gate_sensitivity(m.model, m.adapter, batch, classification_loss, heads, mlps)
    gx = grad_x_activation(m.model, m.adapter, batch, classification_loss, heads, mlps)
    assert (gx.heads >= gs.heads - 1e-6).all() and (gx.mlps >= gs.mlps - 1e-6).all()
    assert (gx.heads > gs.heads + 1e-6).any()


def test_layerwise_normalisation_and_criterion_lookup():
    scores = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    assert torch.allclose(normalize_layerwise(scores), torch.tensor([[0.6, 0.8], [1.0, 0.0]]))
    assert get_criterion("sensitivity") is gate_sensitivity
    with pytest.raises(SubnetlabError):
        get_criterion("nope")


def test_least_important_skips_pruned_and_breaks_ties_by_index():
    scores = torch.tensor([[0.5, 0.1], [0.1, 0.9]])
    keep = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert least_important(scores, keep, 2).tolist() == [2, 0]


def test_importance_prune_steps_and_threshold():
    m = tiny_model("bert", layers=4, heads=8)
    L, H = 4, 8
    batches = [_batch(s) for s in range(2)]
    probe = _batch(9, batch=16)
    with torch.no_grad():
        reference = m.model(**{k: v for k, v in probe.items() if k != "labels"}).logits.argmax(-1)

    def agreement() -> float:  # measured: how often the (gated) model agrees with the full model
        with torch.no_grad():
            pred = m.model(**{k: v for k, v in probe.items() if k != "labels"}).logits.argmax(-1)
        return float((pred == reference).float().mean())

    first_h, _ = importance(m.model, m.adapter, batches)
    result = importance_prune(m.model, m.adapter, batches, agreement, threshold=0.75, refine=True)
    joint = [s for s in result.history if s.phase == "joint"]
    per_step = int(0.1 * L * H)
    for i, s in enumerate(j for j in joint if j.accepted):
        assert s.removed == (i + 1) * (per_step + 1)  # 10% of all heads + one MLP per step
    assert result.metric >= 0.75 * result.full_metric
    assert all(s.accepted for s in joint[:-1])  # only the last step of a phase can be rejected
    sub = result.subnetwork
    if joint and joint[0].accepted:  # the first step removed exactly the least important heads
        first = least_important(first_h, torch.ones(L, H), per_step)
        assert (sub.heads.flatten()[first] == 0).all()
    # the model is left ungated, and the returned masks reproduce the reported metric
    assert agreement() == 1.0
    with apply_gates(m.model, m.adapter, *sub.gates()):
        assert agreement() == pytest.approx(result.metric)
    assert result.importance is not None and result.importance[0].shape == (L, H)


def test_per_batch_and_per_example_sensitivity_on_a_three_example_batch():
    """Per example: mean_x |g_x|; per batch (the authors' code): |mean_x g_x|; g_x from three separate backward passes."""
    m = tiny_model("bert", layers=2, heads=4)
    L, H = 2, 4
    batch = _batch(seed=3, batch=3)
    keep_h, keep_m = torch.ones(L, H), torch.ones(L)
    grads_h, grads_m = [], []
    for i in range(3):  # independent: one example at a time, its own gates and its own loss
        one = {k: v[i:i + 1] for k, v in batch.items()}
        gh, gm = keep_h.clone().requires_grad_(True), keep_m.clone().requires_grad_(True)
        with apply_gates(m.model, m.adapter, heads=gh, mlps=gm):
            loss = classification_loss(m.model, one).sum()
        dh, dm = torch.autograd.grad(loss, [gh, gm])
        grads_h.append(dh.double())
        grads_m.append(dm.double())
    gh, gm = torch.stack(grads_h), torch.stack(grads_m)  # [3, L, H], [3, L]
    per_ex_h, per_ex_m = importance(m.model, m.adapter, [batch], criterion="sensitivity", normalize=False)
    per_b_h, per_b_m = importance(m.model, m.adapter, [batch], criterion="sensitivity-per-batch", normalize=False)
    assert torch.allclose(per_ex_h.double(), gh.abs().mean(0), rtol=1e-4, atol=1e-7)
    assert torch.allclose(per_ex_m.double(), gm.abs().mean(0), rtol=1e-4, atol=1e-7)
    assert torch.allclose(per_b_h.double(), gh.mean(0).abs(), rtol=1e-4, atol=1e-7)
    assert torch.allclose(per_b_m.double(), gm.mean(0).abs(), rtol=1e-4, atol=1e-7)
    # the known difference: equal where the three gradients share a sign, strictly smaller where they do not
    same_sign = (gh > 0).all(0) | (gh < 0).all(0)
    assert (~same_sign).any()
    assert torch.allclose(per_b_h.double()[same_sign], per_ex_h.double()[same_sign], rtol=1e-4, atol=1e-7)
    assert (per_b_h.double()[~same_sign] < per_ex_h.double()[~same_sign] - 1e-9).all()
    # three copies of one example: every gradient agrees, so the two criteria coincide
    copies = {k: v[[1, 1, 1]] for k, v in batch.items()}
    c_ex, _ = importance(m.model, m.adapter, [copies], criterion="sensitivity", normalize=False)
    c_b, _ = importance(m.model, m.adapter, [copies], criterion="sensitivity-per-batch", normalize=False)
    assert torch.allclose(c_b, c_ex, rtol=1e-5, atol=1e-8)
    assert torch.allclose(c_b.double(), gh[1].abs(), rtol=1e-4, atol=1e-7)
    # two batches: per batch averages the batches' own |mean gradients|, not one pooled gradient
    other = _batch(seed=4, batch=3)
    b2_h, _ = importance(m.model, m.adapter, [other], criterion="sensitivity-per-batch", normalize=False)
    both_h, _ = importance(m.model, m.adapter, [batch, other], criterion="sensitivity-per-batch", normalize=False)
    assert torch.allclose(both_h, (per_b_h + b2_h) / 2, rtol=1e-5, atol=1e-8)
