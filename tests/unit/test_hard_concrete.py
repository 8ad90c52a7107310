"""Hard-concrete gates: the sampler against its closed forms, determinism, and use as a gate source."""

from __future__ import annotations

import math

import pytest
import torch

from subnetlab.intervene import apply_gates
from subnetlab.methods.l0.distribution import BETA, EPS, LEFT, RIGHT, HardConcreteGates
from tests.conftest import tiny_inputs, tiny_model

ALPHAS = [-2.0, 0.0, 1.5, 4.0]
N = 40_000


def _closed_forms(log_alpha: float) -> tuple[float, float]:
    """P(z = 0) and P(z = 1) computed from the CDF of u, independently of the module."""
    def u_at(z: float) -> float:  # the u at which the stretched sample crosses z
        x = (z - LEFT) / (RIGHT - LEFT)
        return 1.0 / (1.0 + math.exp(-(BETA * math.log(x / (1.0 - x)) - log_alpha)))

    def prob_u_below(u: float) -> float:  # u ~ U(eps, 1 - eps)
        return min(1.0, max(0.0, (u - EPS) / (1.0 - 2.0 * EPS)))

    return prob_u_below(u_at(0.0)), 1.0 - prob_u_below(u_at(1.0))


@pytest.fixture(scope="module")
def draws() -> torch.Tensor:
    gates = HardConcreteGates(len(ALPHAS), N, seed=11, init_std=0.0)
    with torch.no_grad():
        gates.log_alpha_heads.copy_(torch.tensor(ALPHAS).unsqueeze(1).expand(-1, N))
    heads, _ = gates.sample()
    return heads.detach()  # [len(ALPHAS), N]


@pytest.mark.parametrize("row", range(len(ALPHAS)))
def test_sampler_matches_closed_form(draws: torch.Tensor, row: int) -> None:
    log_alpha = ALPHAS[row]
    p0, p1 = _closed_forms(log_alpha)
    z = draws[row]
    for empirical, expected in (((z == 0).float().mean(), p0), ((z == 1).float().mean(), p1)):
        sigma = math.sqrt(max(expected * (1 - expected), 1e-12) / N)
        assert abs(float(empirical) - expected) < 5 * sigma + 1e-4
    la = torch.tensor([log_alpha])
    # the module's closed forms agree with the independent computation
    assert float(HardConcreteGates.prob_closed(la)) == pytest.approx(p0, abs=1e-5)
    assert float(HardConcreteGates.prob_open(la)) == pytest.approx(p1, abs=1e-5)
    # E[L0] = 1 - sigmoid(beta log(-l/r) - log_alpha) is the probability of a non-zero gate
    l0 = 1.0 - 1.0 / (1.0 + math.exp(-(BETA * math.log(-LEFT / RIGHT) - log_alpha)))
    sigma = math.sqrt(l0 * (1 - l0) / N)
    assert abs(float((z > 0).float().mean()) - l0) < 5 * sigma + 1e-4
    assert float(z.min()) >= 0.0 and float(z.max()) <= 1.0


def test_expected_sparsity_counts_heads_and_mlps_alike() -> None:
    gates = HardConcreteGates(2, 3, seed=0, init_std=0.0)
    with torch.no_grad():
        gates.log_alpha_heads.copy_(torch.tensor([[-3.0, 0.0, 2.0], [5.0, -1.0, 1.0]]))
        gates.log_alpha_mlps.copy_(torch.tensor([0.5, -4.0]))
    values = [-3.0, 0.0, 2.0, 5.0, -1.0, 1.0, 0.5, -4.0]
    kept = sum(1.0 - 1.0 / (1.0 + math.exp(-(BETA * math.log(-LEFT / RIGHT) - a))) for a in values)
    assert float(gates.expected_sparsity().detach()) == pytest.approx(1.0 - kept / 8, abs=1e-6)
    fixed = HardConcreteGates(2, 3, seed=0, prune_mlps=False)
    heads, mlps = fixed.sample()
    assert torch.equal(mlps, torch.ones(2)) and fixed.num_gates == 8
    assert not fixed.log_alpha_mlps.requires_grad


def test_init_float32_and_gradients() -> None:
    gates = HardConcreteGates(3, 4, seed=5, init_log_alpha=10.0, init_std=0.01)
    assert gates.log_alpha_heads.dtype == torch.float32 and gates.log_alpha_mlps.dtype == torch.float32
    assert (gates.log_alpha_heads - 10.0).abs().max() < 0.1
    with torch.no_grad():
        gates.log_alpha_heads.fill_(0.5)
    heads, mlps = gates.sample()
    assert heads.dtype == torch.float32
    (heads.sum() + gates.expected_sparsity()).backward()
    heads_grad = gates.log_alpha.grad[: 3 * 4]  # the heads: the first L * H entries of the one parameter
    assert heads_grad is not None and heads_grad.abs().sum() > 0


def test_same_seed_same_draws_and_generator_state_roundtrip() -> None:
    a, b, c = HardConcreteGates(2, 4, seed=3), HardConcreteGates(2, 4, seed=3), HardConcreteGates(2, 4, seed=4)
    assert torch.equal(a.log_alpha_heads, b.log_alpha_heads)
    assert not torch.equal(a.log_alpha_heads, c.log_alpha_heads)
    state = a.generator_state()
    first = a.sample()[0].detach()
    assert torch.equal(first, b.sample()[0].detach())
    a.set_generator_state(state)
    assert torch.equal(a.sample()[0].detach(), first)


def test_deterministic_gates_follow_cofi() -> None:
    gates = HardConcreteGates(2, 4, seed=0, init_std=0.0)
    la = torch.tensor([[-5.0, -4.0, 3.0, 6.0], [2.0, 2.5, 3.0, 8.0]])
    with torch.no_grad():
        gates.log_alpha_heads.copy_(la)
        gates.log_alpha_mlps.copy_(torch.tensor([-6.0, 7.0]))
    heads, mlps = gates.deterministic()
    p_closed = 1.0 / (1.0 + torch.exp(-(BETA * math.log(-LEFT / RIGHT) - la)))
    for layer in range(2):
        zeros = int(torch.round(p_closed[layer].sum()))
        soft = torch.sigmoid(la[layer] / BETA * 0.8)
        expected = soft.clone()
        expected[torch.argsort(soft)[:zeros]] = 0.0
        assert torch.allclose(heads[layer], expected)
    assert float(mlps[0]) == 0.0 and float(mlps[1]) == pytest.approx(float(torch.sigmoid(torch.tensor(7.0 / BETA * 0.8))))
    gates.eval()
    assert torch.equal(gates()[0], heads)


def test_source_samples_once_per_forward() -> None:
    m = tiny_model("bert")
    x = tiny_inputs("bert")
    gates = HardConcreteGates(m.adapter.num_layers, m.adapter.num_heads, seed=1, init_std=0.0)
    with torch.no_grad():
        gates.log_alpha_heads.fill_(0.0)
        gates.log_alpha_mlps.fill_(1.0)
    calls = []
    gates.register_forward_hook(lambda *_: calls.append(1))
    with apply_gates(m.model, m.adapter, source=gates) as ctl:
        out = m.model(**x).logits
        assert len(calls) == 1
        heads, mlps = gates.split(gates.last_sample)  # the flat draw as (heads, mlps)
        ctl.source = None
        ctl.set(heads.detach(), mlps.detach())
        again = m.model(**x).logits
    assert torch.equal(out, again)  # the sample drawn in the forward is the one applied


def test_undecided_gates_closed_form() -> None:
    """P(z != 0) = sigmoid(log_alpha - beta * log(-l / r)) (Louizos et al., eq. 12); a gate is undecided between 5%
    and 95%. Log-alphas 2 (0.97), -5 (0.03) and 0, -3 (0.83, 0.20) give two undecided gates of four."""

    gates = HardConcreteGates(1, 3, seed=0, prune_mlps=True)
    with torch.no_grad():
        gates.log_alpha_heads.copy_(torch.tensor([[2.0, -5.0, 0.0]]))
        gates.log_alpha_mlps.copy_(torch.tensor([-3.0]))
    p_open = [1 / (1 + math.exp(-(la - BETA * math.log(-LEFT / RIGHT)))) for la in (2.0, -5.0, 0.0, -3.0)]
    assert [round(p, 2) for p in p_open] == [0.97, 0.03, 0.83, 0.2]
    assert gates.undecided() == sum(0.05 < p < 0.95 for p in p_open) == 2
    assert gates.undecided((0.01, 0.99)) == 4
