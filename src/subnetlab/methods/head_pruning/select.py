"""From trained gates to a binary subnetwork: top-k by log-alpha, or the paper's threshold.

``topk`` (the default) removes the ``round(target * components)`` prunable
components with the smallest log-alpha, so the subnetwork's sparsity is the
target exactly (to the nearest whole component). ``threshold`` is the paper's
way (Appendix B): keep the components whose deterministic gate exceeds a
threshold chosen on the grid ``0, 0.05, ..., 1`` to come closest to the target
(the paper reports 0.5 for 50% and 0.35 for 70%). Both are computed for every
run and recorded side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.methods.l0.distribution import HardConcreteGates

THRESHOLD_STRIDE = 0.05


@dataclass(frozen=True)
class GateSelection:
    """A binary mask ``heads [L, H]``, ``mlps [L]`` (1 = kept) and how it was chosen."""

    method: str
    heads: Tensor
    mlps: Tensor
    threshold: float | None = None
    undecided: int | None = None  # prunable gates still undecided when it was chosen (``HardConcreteMask.undecided``)
    num_gates: int | None = None  # prunable gates in all
    expected_sparsity: float | None = None  # the gates' expected sparsity when it was chosen (top-k meets the target
    #                                         whatever the gates learnt: this says whether training got there)

    @property
    def sparsity(self) -> float:
        return 1.0 - float(self.heads.sum() + self.mlps.sum()) / (self.heads.numel() + self.mlps.numel())


def select_topk(gates: HardConcreteGates, sparsity: float) -> GateSelection:
    """Keep all but the ``round(sparsity * components)`` prunable gates with the smallest log-alpha."""
    if not 0.0 <= sparsity < 1.0:
        raise SubnetlabError(f"target sparsity {sparsity} is outside [0, 1)")
    scores = gates.log_alpha.detach().cpu()  # the prunable gates: heads row by row, then MLPs
    remove = round(sparsity * gates.num_gates)
    if remove > scores.numel():
        raise SubnetlabError(f"sparsity {sparsity} needs {remove} components removed, only {scores.numel()} are prunable")
    keep = torch.ones(scores.numel())
    keep[torch.argsort(scores, stable=True)[:remove]] = 0.0
    heads, mlps = gates.split(keep)
    return GateSelection("topk", heads, mlps)


def select_threshold(gates: HardConcreteGates, sparsity: float, stride: float = THRESHOLD_STRIDE) -> GateSelection:
    """Keep deterministic gates above the grid threshold whose sparsity is closest to the target.

    Ties go to the smaller threshold. The grid is ``0, stride, ..., 1``.
    """
    det_heads, det_mlps = (g.detach().cpu() for g in gates.deterministic())  # selections live on the CPU
    steps = int(round(1.0 / stride))
    best: GateSelection | None = None
    for i in range(steps + 1):
        threshold = round(i * stride, 10)
        sel = GateSelection("threshold", (det_heads > threshold).float(), (det_mlps > threshold).float(), threshold)
        if best is None or abs(sel.sparsity - sparsity) < abs(best.sparsity - sparsity) - 1e-12:
            best = sel
    assert best is not None
    return best


def select(gates: HardConcreteGates, sparsity: float, method: str) -> GateSelection:
    if method == "topk":
        return select_topk(gates, sparsity)
    if method == "threshold":
        return select_threshold(gates, sparsity)
    raise SubnetlabError(f"selection {method!r}: expected topk or threshold")
