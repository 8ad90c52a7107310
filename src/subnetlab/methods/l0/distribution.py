"""Hard-concrete gates for attention heads and MLPs (Louizos et al., 2018; CoFi, Xia et al., 2022).

One gate per head (``log_alpha_heads [L, H]``) and per MLP (``log_alpha_mlps [L]``).
A sample draws ``u ~ U(eps, 1 - eps)`` from the module's own seeded
``torch.Generator`` and computes::

    s = sigmoid((log u - log(1 - u) + log_alpha) / beta)
    z = clamp(s * (r - l) + l, 0, 1)

with ``l = -0.1, r = 1.1, beta = 2/3, eps = 1e-6`` (the Heuristic Core paper,
Appendix B, which writes the temperature as ``1/beta = 2/3``; the formula with a
division by ``beta = 2/3`` is the one Louizos et al. and CoFi use). The stretch
puts finite mass on exactly 0 and exactly 1, so gates end up closed or open.

Closed forms (used for the sparsity in the Lagrangian and checked in tests)::

    P(z = 0)   = sigmoid(beta * log(-l / r) - log_alpha)
    E[L0]      = 1 - P(z = 0)
    P(z = 1)   = sigmoid(log_alpha - beta * log((1 - l) / (r - 1)))

``HardConcreteMask`` is the distribution over a flat vector of items (edges,
nodes); ``HardConcreteGates`` is the same masks seen as a layers x heads grid
plus one gate per MLP, and is a ``source`` for ``subnetlab.intervene.apply_gates``:
calling it returns ``(heads, mlps)``. In training mode a call draws a fresh
sample (one per model forward, shared by the batch, as in the paper's code), in
eval mode it gives the deterministic masks. All of it is float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.methods.decided import UNDECIDED, count_undecided

LEFT, RIGHT = -0.1, 1.1  # stretch interval [l, r]
BETA = 2.0 / 3.0  # temperature
EPS = 1e-6  # u stays in [eps, 1 - eps]
DETERMINISTIC_FACTOR = 0.8  # CoFi's soft mask sigmoid(log_alpha / beta * 0.8)

_LOG_RATIO_ZERO = math.log(-LEFT / RIGHT)  # logit of where the stretched sample crosses 0
_LOG_RATIO_ONE = math.log((1.0 - LEFT) / (RIGHT - 1.0))  # ... and where it crosses 1


def stretch(u: Tensor, log_alpha: Tensor) -> Tensor:
    """``z`` for given uniform noise ``u`` (differentiable in ``log_alpha``)."""
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / BETA)
    return (s * (RIGHT - LEFT) + LEFT).clamp(0.0, 1.0)


def prob_closed(log_alpha: Tensor) -> Tensor:
    """``P(z = 0)`` per item."""
    return torch.sigmoid(BETA * _LOG_RATIO_ZERO - log_alpha)


def prob_open(log_alpha: Tensor) -> Tensor:
    """``P(z = 1)`` per item."""
    return torch.sigmoid(log_alpha - BETA * _LOG_RATIO_ONE)


def deterministic_group(log_alpha: Tensor, clamped: bool = False) -> Tensor:
    """Test-time masks of one group, as in CoFi, the Heuristic Core and Edge Pruning code.

    The expected number of closed masks ``round(sum P(z = 0))`` is set to 0 (smallest log-alphas first); the
    others get the soft value ``sigmoid(log_alpha / beta * 0.8)``. Thresholds are searched on these values.
    ``clamped``: count as Edge Pruning's ``l0.py`` does, ``size - sum(1 - clamp(P(z = 0), eps, 1 - eps))``
    in float32, which rounds differently when many masks sit at the clamp.
    """
    soft = torch.sigmoid(log_alpha / BETA * DETERMINISTIC_FACTOR).clone()
    if clamped:
        nonzeros = torch.sum(1 - prob_closed(log_alpha.float()).clamp(EPS, 1 - EPS))
        zeros = int(torch.round(log_alpha.numel() - nonzeros).item())
    else:
        zeros = int(torch.round(prob_closed(log_alpha).sum()).item())
    if zeros > 0:
        order = torch.argsort(soft, stable=True)
        soft[order[:zeros]] = 0.0
    return soft


class HardConcreteMask(nn.Module):
    """Learnable hard-concrete masks over a flat vector of ``size`` items (edges of a graph, its nodes, gates).

    ``init_log_alpha`` (default 10: every mask starts open with probability ~0.9998) plus ``init_std`` Gaussian
    noise from the module's seeded generator, so seeds start from slightly different points as in the papers'
    code. ``groups``: sizes of consecutive groups the deterministic rule counts closed masks in (default: the whole
    vector at once, Edge Pruning's ``deterministic_z_from_log_alpha``).
    """

    def __init__(self, size: int, *, seed: int = 0, init_log_alpha: float = 10.0, init_std: float = 0.01,
                 groups: Sequence[int] | None = None) -> None:
        super().__init__()
        if size < 1:
            raise SubnetlabError(f"masks need at least one item, got {size}")
        if init_std < 0:
            raise SubnetlabError(f"init_std {init_std} must be non-negative")
        self.size = int(size)
        self.groups = tuple(int(n) for n in groups) if groups is not None else (self.size,)
        if sum(self.groups) != self.size:
            raise SubnetlabError(f"mask groups of {sum(self.groups)} items for {self.size} masks")
        self.generator = torch.Generator().manual_seed(int(seed))
        self.log_alpha = nn.Parameter(self.initial_log_alpha(init_log_alpha, init_std).float())  # [size]
        self.last_sample: Tensor | None = None

    stretch = staticmethod(stretch)
    prob_closed = staticmethod(prob_closed)
    prob_open = staticmethod(prob_open)

    def initial_log_alpha(self, init_log_alpha: float, init_std: float) -> Tensor:
        """The starting log-alphas, drawn from ``self.generator``."""
        return init_log_alpha + init_std * torch.randn(self.size, generator=self.generator)

    # -- sampling -------------------------------------------------------------------
    def sample(self) -> Tensor:
        """One draw of every mask (differentiable in ``log_alpha``); remembered in ``last_sample``."""
        u = torch.rand((self.size,), generator=self.generator, dtype=torch.float32)  # drawn on the CPU generator
        u = (u * (1.0 - 2.0 * EPS) + EPS).to(self.log_alpha.device)  # U(eps, 1 - eps)
        self.last_sample = stretch(u, self.log_alpha)
        return self.last_sample

    def forward(self) -> Tensor:
        """A sample while training, the deterministic masks in eval mode."""
        return self.sample() if self.training else self.deterministic().to(self.log_alpha.device)

    # -- closed forms -----------------------------------------------------------------
    def expected_l0(self) -> Tensor:
        """``E[z != 0]`` per item (differentiable)."""
        return 1.0 - prob_closed(self.log_alpha)

    def expected_sparsity(self) -> Tensor:
        """``1 - E[kept items] / items`` (differentiable)."""
        return 1.0 - self.expected_l0().sum() / self.size

    def sample_sparsity(self) -> Tensor:
        """``1 - sum(z) / items`` of the last sample (the papers' released code uses this)."""
        if self.last_sample is None:
            raise SubnetlabError("no mask sample drawn yet")
        return 1.0 - self.last_sample.sum() / self.size

    @torch.no_grad()
    def deterministic(self) -> Tensor:
        """Test-time masks (on the CPU): ``deterministic_group`` over each group."""
        log_alpha = self.log_alpha.detach().cpu()
        if len(self.groups) == 1:
            return deterministic_group(log_alpha)
        return torch.cat([deterministic_group(part) for part in log_alpha.split(self.groups)])

    def undecided(self, bounds: tuple[float, float] = UNDECIDED) -> int:
        """Items whose probability of being kept is still undecided (``methods.decided``)."""
        return count_undecided(HardConcreteMask.expected_l0(self), bounds)

    # -- state ---------------------------------------------------------------------------
    def generator_state(self) -> Tensor:
        return self.generator.get_state()

    def set_generator_state(self, state: Tensor) -> None:
        self.generator.set_state(state.to(torch.uint8))


class HardConcreteGates(HardConcreteMask):
    """The masks of one model's heads ``[L, H]`` and MLPs ``[L]``: a ``HardConcreteMask`` over the prunable gates.

    The flat vector holds the heads row by row, then the MLPs when ``prune_mlps``; otherwise every MLP gate is
    fixed open and its log-alpha (``log_alpha_mlps``) is a constant buffer. The deterministic rule counts closed
    gates per layer's heads and per MLP, as CoFi and the Heuristic Core code do. ``log_alpha_heads`` and
    ``log_alpha_mlps`` are views of the one parameter.
    """

    def __init__(self, num_layers: int, num_heads: int, *, seed: int = 0, init_log_alpha: float = 10.0,
                 init_std: float = 0.01, prune_mlps: bool = True) -> None:
        if num_layers < 1 or num_heads < 1:
            raise SubnetlabError(f"gates need at least one layer and head, got {num_layers} x {num_heads}")
        self.num_layers, self.num_heads, self.prune_mlps = num_layers, num_heads, prune_mlps
        groups = [num_heads] * num_layers + ([1] * num_layers if prune_mlps else [])
        super().__init__(sum(groups), seed=seed, init_log_alpha=init_log_alpha, init_std=init_std, groups=groups)
        if not prune_mlps:
            self.register_buffer("fixed_mlps", self.mlp_start.float())
        del self.mlp_start

    def initial_log_alpha(self, init_log_alpha: float, init_std: float) -> Tensor:
        L, H = self.num_layers, self.num_heads
        heads = init_log_alpha + init_std * torch.randn(L, H, generator=self.generator)  # heads, then MLPs
        self.mlp_start = init_log_alpha + init_std * torch.randn(L, generator=self.generator)
        return torch.cat([heads.reshape(-1), self.mlp_start]) if self.prune_mlps else heads.reshape(-1)

    # -- the grid --------------------------------------------------------------------
    @property
    def num_gates(self) -> int:
        """Components that count for sparsity: every head and every MLP (a fixed MLP counts as kept)."""
        return self.num_layers * self.num_heads + self.num_layers

    @property
    def log_alpha_heads(self) -> Tensor:
        return self.log_alpha[: self.num_layers * self.num_heads].view(self.num_layers, self.num_heads)

    @property
    def log_alpha_mlps(self) -> Tensor:
        return self.log_alpha[self.num_layers * self.num_heads:] if self.prune_mlps else self.fixed_mlps

    def split(self, flat: Tensor) -> tuple[Tensor, Tensor]:
        """A flat vector over the prunable gates as ``(heads [L, H], mlps [L])``, fixed MLPs as 1."""
        heads = flat[: self.num_layers * self.num_heads].view(self.num_layers, self.num_heads)
        mlps = flat[self.num_layers * self.num_heads:] if self.prune_mlps else torch.ones(self.num_layers,
                                                                                          device=flat.device)
        return heads, mlps

    def sample(self) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """One draw of every gate, ``(heads [L, H], mlps [L])``; remembered in ``last_sample``."""
        return self.split(super().sample())

    def forward(self) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """A sample while training, the deterministic gates in eval mode."""
        if self.training:
            return self.sample()
        heads, mlps = self.deterministic()
        return heads.to(self.log_alpha.device), mlps.to(self.log_alpha.device)

    def expected_l0(self) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """``E[z != 0]`` per gate: ``(heads [L, H], mlps [L])`` (MLPs count 1 when not prunable)."""
        return self.split(super().expected_l0())

    def expected_sparsity(self) -> Tensor:
        """``1 - E[kept components] / components`` (differentiable; heads and MLPs count alike)."""
        heads, mlps = self.expected_l0()
        return 1.0 - (heads.sum() + mlps.sum()) / self.num_gates

    def sample_sparsity(self) -> Tensor:
        """``1 - sum(z) / components`` of the last sample (the paper's released code uses this)."""
        if self.last_sample is None:
            raise SubnetlabError("no gate sample drawn yet")
        heads, mlps = self.split(self.last_sample)
        return 1.0 - (heads.sum() + mlps.sum()) / self.num_gates

    def deterministic(self) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """Test-time gates (on the CPU) ``(heads [L, H], mlps [L])``: per layer's heads and per MLP."""
        return self.split(super().deterministic())

