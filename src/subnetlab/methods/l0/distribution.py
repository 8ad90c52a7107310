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

The module is a ``source`` for ``subnetlab.intervene.apply_gates``: calling it
returns ``(heads, mlps)``; in training mode a fresh sample (one per model
forward, shared by the batch, as in the paper's code), in eval mode the
deterministic gates. All of it is float32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.methods.decided import count_undecided

LEFT, RIGHT = -0.1, 1.1  # stretch interval [l, r]
BETA = 2.0 / 3.0  # temperature
EPS = 1e-6  # u stays in [eps, 1 - eps]
DETERMINISTIC_FACTOR = 0.8  # CoFi's soft mask sigmoid(log_alpha / beta * 0.8)

_LOG_RATIO_ZERO = math.log(-LEFT / RIGHT)  # logit of where the stretched sample crosses 0
_LOG_RATIO_ONE = math.log((1.0 - LEFT) / (RIGHT - 1.0))  # ... and where it crosses 1


class HardConcreteGates(nn.Module):
    """Learnable hard-concrete gates ``[L, H]`` for heads and ``[L]`` for MLPs.

    ``init_log_alpha`` (default 10: every gate starts open with probability
    ~0.9998) plus ``init_std`` Gaussian noise drawn from the seeded generator, so
    different seeds start from slightly different points as in the paper's code.
    """

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        *,
        seed: int = 0,
        init_log_alpha: float = 10.0,
        init_std: float = 0.01,
        prune_mlps: bool = True,
    ) -> None:
        super().__init__()
        if num_layers < 1 or num_heads < 1:
            raise SubnetlabError(f"gates need at least one layer and head, got {num_layers} x {num_heads}")
        if init_std < 0:
            raise SubnetlabError(f"init_std {init_std} must be non-negative")
        self.num_layers, self.num_heads, self.prune_mlps = num_layers, num_heads, prune_mlps
        self.generator = torch.Generator().manual_seed(int(seed))
        heads = init_log_alpha + init_std * torch.randn(num_layers, num_heads, generator=self.generator)
        mlps = init_log_alpha + init_std * torch.randn(num_layers, generator=self.generator)
        self.log_alpha_heads = nn.Parameter(heads.float())  # [L, H]
        self.log_alpha_mlps = nn.Parameter(mlps.float(), requires_grad=prune_mlps)  # [L]
        self.last_sample: tuple[Tensor, Tensor] | None = None

    # -- sizes ----------------------------------------------------------------------
    @property
    def num_gates(self) -> int:
        """Components that count for sparsity: every head and every MLP (a fixed MLP counts as kept)."""
        return self.num_layers * self.num_heads + self.num_layers

    # -- sampling -------------------------------------------------------------------
    def _noise(self, shape: tuple[int, ...]) -> Tensor:
        u = torch.rand(shape, generator=self.generator, dtype=torch.float32)  # drawn on the CPU generator
        return (u * (1.0 - 2.0 * EPS) + EPS).to(self.log_alpha_heads.device)  # U(eps, 1 - eps)

    @staticmethod
    def stretch(u: Tensor, log_alpha: Tensor) -> Tensor:
        """``z`` for given uniform noise ``u`` (differentiable in ``log_alpha``)."""
        s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / BETA)
        return (s * (RIGHT - LEFT) + LEFT).clamp(0.0, 1.0)

    def sample(self) -> tuple[Tensor, Tensor]:
        """One draw of every gate, ``(heads [L, H], mlps [L])``; remembered in ``last_sample``."""
        heads = self.stretch(self._noise((self.num_layers, self.num_heads)), self.log_alpha_heads)
        if self.prune_mlps:
            mlps = self.stretch(self._noise((self.num_layers,)), self.log_alpha_mlps)
        else:
            mlps = torch.ones(self.num_layers, device=heads.device)
        self.last_sample = (heads, mlps)
        return heads, mlps

    def forward(self) -> tuple[Tensor, Tensor]:
        """A sample while training, the deterministic gates in eval mode."""
        if self.training:
            return self.sample()
        heads, mlps = self.deterministic()
        device = self.log_alpha_heads.device
        return heads.to(device), mlps.to(device)

    # -- closed forms -----------------------------------------------------------------
    @staticmethod
    def prob_closed(log_alpha: Tensor) -> Tensor:
        """``P(z = 0)`` per gate."""
        return torch.sigmoid(BETA * _LOG_RATIO_ZERO - log_alpha)

    @staticmethod
    def prob_open(log_alpha: Tensor) -> Tensor:
        """``P(z = 1)`` per gate."""
        return torch.sigmoid(log_alpha - BETA * _LOG_RATIO_ONE)

    def expected_l0(self) -> tuple[Tensor, Tensor]:
        """``E[z != 0]`` per gate: ``(heads [L, H], mlps [L])`` (MLPs count 1 when not prunable)."""
        heads = 1.0 - self.prob_closed(self.log_alpha_heads)
        mlps = (1.0 - self.prob_closed(self.log_alpha_mlps) if self.prune_mlps
                else torch.ones(self.num_layers, device=heads.device))
        return heads, mlps

    def expected_sparsity(self) -> Tensor:
        """``1 - E[kept components] / components`` (differentiable; heads and MLPs count alike)."""
        heads, mlps = self.expected_l0()
        return 1.0 - (heads.sum() + mlps.sum()) / self.num_gates

    def sample_sparsity(self) -> Tensor:
        """``1 - sum(z) / components`` of the last sample (the paper's released code uses this)."""
        if self.last_sample is None:
            raise SubnetlabError("no gate sample drawn yet")
        heads, mlps = self.last_sample
        return 1.0 - (heads.sum() + mlps.sum()) / self.num_gates

    # -- deterministic gates ------------------------------------------------------------
    @torch.no_grad()
    def deterministic(self) -> tuple[Tensor, Tensor]:
        """Test-time gates as in CoFi and the Heuristic Core code (on the CPU).

        Per group (a layer's heads; each MLP) the expected number of closed gates
        ``round(sum P(z = 0))`` is set to 0 (smallest log-alphas first); the others
        get the soft value ``sigmoid(log_alpha / beta * 0.8)``. The paper's
        threshold search runs on these values.
        """
        heads = torch.stack([_deterministic_group(row) for row in self.log_alpha_heads.detach().cpu()])
        if self.prune_mlps:
            mlps = torch.stack([_deterministic_group(a.view(1))[0] for a in self.log_alpha_mlps.detach().cpu()])
        else:
            mlps = torch.ones(self.num_layers)
        return heads, mlps

    # -- state ---------------------------------------------------------------------------
    def generator_state(self) -> Tensor:
        return self.generator.get_state()

    def set_generator_state(self, state: Tensor) -> None:
        self.generator.set_state(state.to(torch.uint8))


def _deterministic_group(log_alpha: Tensor) -> Tensor:
    soft = torch.sigmoid(log_alpha / BETA * DETERMINISTIC_FACTOR).clone()
    zeros = int(torch.round(HardConcreteGates.prob_closed(log_alpha).sum()).item())
    if zeros > 0:
        order = torch.argsort(soft, stable=True)
        soft[order[:zeros]] = 0.0
    return soft


class HardConcreteMask(nn.Module):
    """Learnable hard-concrete masks over a flat vector of ``size`` items (edges of a graph, its nodes).

    The same distribution, constants, initialisation and deterministic rule as
    ``HardConcreteGates`` (whose static ``stretch`` / ``prob_closed`` /
    ``prob_open`` it calls), for masks that are not a layers x heads grid. In
    training mode a call draws one sample per forward; in eval mode it gives
    the deterministic masks, computed over the whole vector at once (Edge
    Pruning's ``deterministic_z_from_log_alpha``).
    """

    def __init__(self, size: int, *, seed: int = 0, init_log_alpha: float = 10.0, init_std: float = 0.01) -> None:
        super().__init__()
        if size < 1:
            raise SubnetlabError(f"masks need at least one item, got {size}")
        if init_std < 0:
            raise SubnetlabError(f"init_std {init_std} must be non-negative")
        self.size = int(size)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.log_alpha = nn.Parameter((init_log_alpha + init_std * torch.randn(size, generator=self.generator)).float())
        self.last_sample: Tensor | None = None

    def sample(self) -> Tensor:
        u = torch.rand((self.size,), generator=self.generator, dtype=torch.float32)
        u = (u * (1.0 - 2.0 * EPS) + EPS).to(self.log_alpha.device)
        self.last_sample = HardConcreteGates.stretch(u, self.log_alpha)
        return self.last_sample

    def forward(self) -> Tensor:
        return self.sample() if self.training else self.deterministic().to(self.log_alpha.device)

    def expected_l0(self) -> Tensor:
        """``E[z != 0]`` per item (differentiable)."""
        return 1.0 - HardConcreteGates.prob_closed(self.log_alpha)

    def expected_sparsity(self) -> Tensor:
        return 1.0 - self.expected_l0().sum() / self.size

    def sample_sparsity(self) -> Tensor:
        if self.last_sample is None:
            raise SubnetlabError("no mask sample drawn yet")
        return 1.0 - self.last_sample.sum() / self.size

    @torch.no_grad()
    def deterministic(self) -> Tensor:
        return _deterministic_group(self.log_alpha.detach().cpu())

    def undecided(self) -> int:
        """Items whose probability of being kept is still undecided (``methods.decided``)."""
        return count_undecided(self.expected_l0())

    def generator_state(self) -> Tensor:
        return self.generator.get_state()

    def set_generator_state(self, state: Tensor) -> None:
        self.generator.set_state(state.to(torch.uint8))
