"""From trained edge masks to a binary circuit with exactly the target number of edges.

Edge Pruning's own final circuit, a bisected threshold at the masks' own
sparsity with a node pass (``selection="threshold"``, the paper preset), is
``models.circuit.threshold_choice`` over ``tensors``' per-tensor masks. The
rules here meet the target exactly instead: keep the
``round((1 - target) * edges)`` edges with the largest deterministic mask (an
edge's mask times its writer's node mask, when nodes are masked), ties broken
by the summed log-alphas, then by edge order. Exact to one edge, whatever the
masks' spread. The rules themselves are the circuit's (``models.circuit``).

``greedy_repair`` then improves the binary circuit at its size: swap one kept
edge for one removed edge while an exactly evaluated loss falls
(``edge_pruning.repair.CircuitLoss``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.models.circuit import Circuit, edges_kept, top_k_mask
from subnetlab.models.graph import Graph


@dataclass(frozen=True)
class EdgeSelection:
    """A binary edge mask (1 = kept) and how undecided the masks were when it was taken."""

    edges: Tensor  # [edges] float 0/1
    undecided: int  # masks still undecided (``methods.decided``)
    num_masks: int  # masks trained (edges, plus nodes when masked)

    @property
    def sparsity(self) -> float:
        return 1.0 - float(self.edges.sum()) / self.edges.numel()


def select_top_edges(scores: Tensor, tiebreak: Tensor, sparsity: float) -> Tensor:
    """``[edges]`` 0/1: the ``round((1 - sparsity) * edges)`` best by ``scores``, then ``tiebreak``."""
    return top_k_mask(scores, edges_kept(sparsity, scores.numel()), tiebreak).float()


def select_connected_edges(graph: Graph, scores: Tensor, tiebreak: Tensor, sparsity: float,
                           corrupted: bool = False) -> Tensor:
    """Like ``select_top_edges``, but every kept edge lies on a path of kept edges to the logits
    (``Circuit.connected``; ``corrupted``: edges out of components with no kept input are set aside too)."""
    circuit = Circuit(graph, scores, score_sign="signed")
    return circuit.connected(edges_kept(sparsity, scores.numel()), tiebreak, corrupted).kept().float()



@dataclass(frozen=True)
class Repair:
    """What ``greedy_repair`` did: the circuit, its loss before and after, swaps made, circuits evaluated."""

    edges: Tensor  # [edges] bool
    loss_before: float
    loss_after: float
    swaps: int
    evaluations: int


def greedy_repair(keep: Tensor, loss: Callable[[Tensor], float], scores: Tensor, pool: int, depth: int = 2,
                  max_swaps: int = 100, tolerance: float = 1e-6) -> Repair:
    """Steepest descent by swaps at a fixed size.

    A move swaps ``d`` kept edges for ``d`` removed ones, drawn from the ``pool`` weakest kept and the ``pool``
    strongest removed edges (by ``scores``, higher is stronger; every edge when the graph is small). Each round
    evaluates every single swap and makes the best if it lowers ``loss`` by more than ``tolerance``; when none
    does, it tries the double swaps (a path of two edges, writer->m and m->logits, helps only when both come in
    together), and so on up to ``depth``. A descent stops when no move helps or after ``max_swaps`` moves; a
    round costs ``C(pool, d)^2`` evaluations at depth ``d``. Measured on 1-layer GPT-2s (8 and 13 edges): single
    swaps left a 4-edge circuit 0.319 below the optimum where double swaps reached it; triple swaps and random
    perturbations of the result still left a 5-edge circuit 0.027 below it, which restarts over training seeds
    (``EdgePruneConfig.restarts``, the best repaired circuit by ``loss``) closed."""
    if pool < 1:
        raise SubnetlabError(f"repair pool {pool} must be at least 1", setting="repair_pool")
    if depth < 1:
        raise SubnetlabError(f"repair depth {depth} must be at least 1", setting="repair_depth")
    start = keep.detach().reshape(-1).cpu().bool().clone()
    if start.numel() != scores.numel():
        raise SubnetlabError(f"{start.numel()} kept flags for {scores.numel()} edge scores")
    strength = scores.detach().reshape(-1).cpu().double()
    counter = {"evaluations": 0, "swaps": 0}

    def measured(circuit: Tensor) -> float:
        counter["evaluations"] += 1
        return float(loss(circuit))

    def descend(current: Tensor, value: float) -> tuple[Tensor, float]:
        for _ in range(max_swaps):
            kept, removed = torch.nonzero(current).flatten(), torch.nonzero(~current).flatten()
            weakest = kept[torch.argsort(strength[kept], stable=True)[:pool]].tolist()
            strongest = removed[torch.argsort(strength[removed], descending=True, stable=True)[:pool]].tolist()
            choice, best = None, value
            for d in range(1, depth + 1):
                for out_edges in itertools.combinations(weakest, d):
                    for in_edges in itertools.combinations(strongest, d):
                        trial = current.clone()
                        trial[list(out_edges)], trial[list(in_edges)] = False, True
                        trial_value = measured(trial)
                        if trial_value < best - tolerance:
                            best, choice = trial_value, trial
                if choice is not None:
                    break
            if choice is None:
                break
            current, value = choice, best
            counter["swaps"] += 1
        return current, value

    before = measured(start)
    best, best_value = descend(start, before)
    return Repair(best, before, best_value, counter["swaps"], counter["evaluations"])
