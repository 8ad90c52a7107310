"""From trained edge masks to a binary circuit with exactly the target number of edges.

Edge Pruning's own final circuit, a bisected threshold at the masks' own
sparsity with a node pass (``selection="threshold"``, the paper preset), is
``models.circuit.threshold_choice`` over ``tensors``' per-tensor masks. The
rules here meet the target exactly instead: keep the
``round((1 - target) * edges)`` edges with the largest deterministic mask (an
edge's mask times its writer's node mask, when nodes are masked), ties broken
by the summed log-alphas, then by edge order. Exact to one edge, whatever the
masks' spread. The rules themselves are the circuit's (``models.circuit``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

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
