"""The heuristic core: which heads every subnetwork shares (Bhaskar et al., 2024, section 4).

Given subnetworks pruned with N seeds at each of two sparsities, this counts how
often every head is kept, tabulates the joint frequencies (Figure 5: cell
``(i, j)`` = number of heads kept by ``i`` of the subnetworks at sparsity A and
``j`` at sparsity B), takes the heads kept by all of them (the core), measures
the agreement of the two frequency vectors with Spearman's rho, and computes what
chance alone would give: the exact distribution of the intersection size of
independent random subnetworks that keep as many heads as the real ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import head_name
from subnetlab.subnetwork import Subnetwork


def _check_same(subnetworks: Sequence[Subnetwork], what: str = "subnetworks") -> None:
    if not subnetworks:
        raise SubnetlabError(f"no {what} given")
    first = subnetworks[0]
    for sub in subnetworks:
        if sub.kind != "structured":
            raise SubnetlabError(f"{what}: the core needs structured (head / MLP) subnetworks, got {sub.kind!r}")
        if sub.fingerprint != first.fingerprint or tuple(sub.heads.shape) != tuple(first.heads.shape):
            raise SubnetlabError(f"{what}: subnetworks come from different architectures "
                                 f"({first.fingerprint} vs {sub.fingerprint})")


def head_frequencies(subnetworks: Sequence[Subnetwork]) -> Tensor:
    """``[layers, heads]`` int64: in how many of ``subnetworks`` each head is kept."""
    _check_same(subnetworks)
    return torch.stack([(s.heads > 0.5).long() for s in subnetworks]).sum(0)


def mlp_frequencies(subnetworks: Sequence[Subnetwork]) -> Tensor:
    """``[layers]`` int64: in how many of ``subnetworks`` each MLP is kept."""
    _check_same(subnetworks)
    return torch.stack([(s.mlps > 0.5).long() for s in subnetworks]).sum(0)


def frequency_heatmap(freq_a: Tensor, n_a: int, freq_b: Tensor, n_b: int) -> Tensor:
    """``[n_a + 1, n_b + 1]`` int64: cell ``(i, j)`` counts heads kept ``i`` times at A and ``j`` at B."""
    if freq_a.shape != freq_b.shape:
        raise SubnetlabError(f"frequency maps have shapes {tuple(freq_a.shape)} and {tuple(freq_b.shape)}")
    if int(freq_a.max()) > n_a or int(freq_b.max()) > n_b or int(freq_a.min()) < 0 or int(freq_b.min()) < 0:
        raise SubnetlabError("a head frequency is outside [0, number of subnetworks]")
    grid = torch.zeros(n_a + 1, n_b + 1, dtype=torch.long)
    flat = freq_a.flatten() * (n_b + 1) + freq_b.flatten()
    grid.view(-1).index_add_(0, flat.long(), torch.ones_like(flat, dtype=torch.long))
    return grid


def core_heads(*groups: Sequence[Subnetwork]) -> list[str]:
    """Heads kept by every subnetwork of every group, as ``L4.H0`` names, layer by layer."""
    subs = [s for g in groups for s in g]
    freq = head_frequencies(subs)
    L, H = freq.shape
    return [head_name(l, h) for l in range(L) for h in range(H) if int(freq[l, h]) == len(subs)]


def spearman(freq_a: Tensor | np.ndarray, freq_b: Tensor | np.ndarray) -> tuple[float, float]:
    """Spearman's rho between two frequency maps (flattened) and its two-sided p-value.

    NaN for both when either map is constant (rank correlation is undefined then).
    """
    a = np.asarray(freq_a, dtype=float).ravel()
    b = np.asarray(freq_b, dtype=float).ravel()
    if a.shape != b.shape:
        raise SubnetlabError(f"frequency vectors have {a.size} and {b.size} entries")
    if a.size < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan"), float("nan")
    result = stats.spearmanr(a, b)
    return float(result.statistic), float(result.pvalue)


# -- chance level -----------------------------------------------------------------------

def expected_random_intersection(num_heads: int, kept: Sequence[int]) -> float:
    """Expected size of the intersection of independent random subnetworks.

    Subnetwork ``i`` keeps ``kept[i]`` of ``num_heads`` heads, chosen uniformly;
    a given head is in subnetwork ``i`` with probability ``kept[i] / num_heads``
    independently across subnetworks, so by linearity of expectation the
    intersection has ``num_heads * prod(kept[i] / num_heads)`` heads on average.
    """
    _check_kept(num_heads, kept)
    return num_heads * math.prod(k / num_heads for k in kept)


def expected_random_intersection_at(num_heads: int, sparsities: Sequence[float]) -> float:
    """The same with each subnetwork keeping a fraction ``1 - sparsity`` of the heads in expectation.

    The paper's figure: ``expected_random_intersection_at(144, [0.7] * 12)`` is 7.7e-5.
    """
    for s in sparsities:
        if not 0.0 <= s < 1.0:
            raise SubnetlabError(f"sparsity {s} is outside [0, 1)")
    return num_heads * math.prod(1.0 - s for s in sparsities)


def random_intersection_distribution(num_heads: int, kept: Sequence[int]) -> np.ndarray:
    """``[num_heads + 1]``: exact P(intersection of the random subnetworks has m heads).

    Adding one random ``k``-subset to an intersection of size ``m`` leaves a
    hypergeometric number of survivors (draw ``k`` of ``num_heads``, ``m`` of them
    marked), so the distribution is propagated one subnetwork at a time.
    """
    _check_kept(num_heads, kept)
    dist = np.zeros(num_heads + 1)
    dist[num_heads] = 1.0
    sizes = np.arange(num_heads + 1)
    for k in kept:
        nxt = np.zeros_like(dist)
        for m in np.nonzero(dist)[0]:
            nxt += dist[m] * stats.hypergeom.pmf(sizes, num_heads, m, k)
        dist = nxt
    return dist


def _check_kept(num_heads: int, kept: Sequence[int]) -> None:
    if num_heads < 1:
        raise SubnetlabError(f"number of heads {num_heads} must be positive")
    for k in kept:
        if not 0 <= int(k) <= num_heads:
            raise SubnetlabError(f"a subnetwork keeps {k} heads; the model has {num_heads}")


# -- the whole analysis -------------------------------------------------------------------

@dataclass
class CoreAnalysis:
    """Everything section 4 of the paper reports about shared heads, for two groups of subnetworks."""

    labels: tuple[str, str]  # e.g. ("50%", "70%")
    freq_a: Tensor  # [layers, heads] int
    freq_b: Tensor
    n_a: int
    n_b: int
    heatmap: Tensor  # [n_a + 1, n_b + 1]
    core: list[str]
    rho: float
    p_value: float
    expected_random: float  # heads expected in the intersection of random subnetworks
    p_random_at_least_core: float  # P(random intersection >= len(core))
    mlps_in_all: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "labels": list(self.labels), "n_a": self.n_a, "n_b": self.n_b,
            "num_layers": int(self.freq_a.shape[0]), "num_heads": int(self.freq_a.shape[1]),
            "core": self.core, "core_size": len(self.core), "mlps_in_all": self.mlps_in_all,
            "spearman_rho": self.rho, "spearman_p": self.p_value,
            "expected_random_intersection": self.expected_random,
            "p_random_intersection_at_least_core": self.p_random_at_least_core,
            "frequency_a": self.freq_a.tolist(), "frequency_b": self.freq_b.tolist(),
            "heatmap": self.heatmap.tolist(),
        }


def analyse_core(group_a: Sequence[Subnetwork], group_b: Sequence[Subnetwork],
                 labels: tuple[str, str] = ("A", "B")) -> CoreAnalysis:
    """Frequencies, heatmap, core, Spearman's rho and the random baseline for two groups of subnetworks."""
    _check_same(list(group_a) + list(group_b))
    freq_a, freq_b = head_frequencies(group_a), head_frequencies(group_b)
    n_a, n_b = len(group_a), len(group_b)
    rho, p = spearman(freq_a, freq_b)
    core = core_heads(group_a, group_b)
    num_heads = freq_a.numel()
    kept = [int((s.heads > 0.5).sum()) for s in [*group_a, *group_b]]
    dist = random_intersection_distribution(num_heads, kept)
    mlps = mlp_frequencies(list(group_a) + list(group_b))
    return CoreAnalysis(
        labels=labels, freq_a=freq_a, freq_b=freq_b, n_a=n_a, n_b=n_b,
        heatmap=frequency_heatmap(freq_a, n_a, freq_b, n_b), core=core, rho=rho, p_value=p,
        expected_random=expected_random_intersection(num_heads, kept),
        p_random_at_least_core=float(dist[len(core):].sum()),
        mlps_in_all=[f"L{l}.MLP" for l in range(mlps.numel()) if int(mlps[l]) == n_a + n_b],
    )
