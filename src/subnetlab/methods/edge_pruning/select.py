"""From trained edge masks to a binary circuit with exactly the target number of edges.

Edge Pruning binary-searches a threshold on the deterministic masks until the
edge sparsity meets the target; its limit is the top-k below: keep the
``round((1 - target) * edges)`` edges with the largest deterministic mask (an
edge's mask times its writer's node mask, when nodes are masked), ties broken
by the summed log-alphas, then by edge order. Exact to one edge, whatever the
masks' spread.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError


@dataclass(frozen=True)
class EdgeSelection:
    """A binary edge mask (1 = kept) and how undecided the masks were when it was taken."""

    edges: Tensor  # [edges] float 0/1
    undecided: int  # masks still undecided (``methods.decided``)
    masks: int  # masks trained (edges, plus nodes when masked)

    @property
    def sparsity(self) -> float:
        return 1.0 - float(self.edges.sum()) / self.edges.numel()


def select_top_edges(scores: Tensor, tiebreak: Tensor, sparsity: float) -> Tensor:
    """``[edges]`` 0/1: the ``round((1 - sparsity) * edges)`` best by ``scores``, then ``tiebreak``."""
    if not 0.0 <= sparsity <= 1.0:
        raise SubnetlabError(f"target sparsity {sparsity} is outside [0, 1]")
    n = scores.numel()
    keep = n - round(sparsity * n)
    order = torch.argsort(tiebreak.cpu(), descending=True, stable=True)
    order = order[torch.argsort(scores.cpu()[order], descending=True, stable=True)]
    mask = torch.zeros(n)
    mask[order[:keep]] = 1.0
    return mask


def reader_nodes(graph) -> list[list[int]]:
    """Per reader, the writer nodes whose output it feeds (none for the logits; a key/value head's group)."""
    out: list[list[int]] = []
    for name in graph.readers:
        if name == "logits":
            out.append([])
            continue
        node = name.split("<")[0]
        if ".kv" in node:
            layer, g = node[1:].split(".kv")
            out.append([graph.head_writer(int(layer), int(g) * graph.group + i) for i in range(graph.group)])
        else:
            out.append([graph.writer_index(node)])
    return out


def select_connected_edges(graph, scores: Tensor, tiebreak: Tensor, sparsity: float) -> Tensor:
    """Like ``select_top_edges``, but every kept edge reaches the logits through kept edges.

    An edge into a component none of whose outgoing edges is kept changes nothing the logits read (its
    reader's output is replaced downstream), so a top-k circuit can spend edges on dead ends. Here edges
    are taken best first among those whose reader is the logits or a component already connected; taking
    an edge connects its writer and makes the edges into that writer eligible. When fewer connected edges
    exist than the target keeps, the best remaining fill the count, so the size is always exact.
    """
    import heapq

    n = scores.numel()
    keep = n - round(sparsity * n)
    order = torch.argsort(tiebreak.cpu(), descending=True, stable=True)
    order = order[torch.argsort(scores.cpu()[order], descending=True, stable=True)]
    rank = torch.empty(n, dtype=torch.long)
    rank[order] = torch.arange(n)
    rank_list = rank.tolist()
    feeds = reader_nodes(graph)
    waiting: dict[int, list[int]] = {}
    heap: list[tuple[int, int]] = []
    for e, (w, r) in enumerate(graph.edges):
        if not feeds[r]:
            heap.append((rank_list[e], e))
        for node in feeds[r]:
            waiting.setdefault(node, []).append(e)
    heapq.heapify(heap)
    chosen = torch.zeros(n)
    pushed, connected = set(e for _, e in heap), set()
    taken = 0
    while heap and taken < keep:
        _, e = heapq.heappop(heap)
        chosen[e] = 1.0
        taken += 1
        w = graph.edges[e][0]
        if w not in connected:
            connected.add(w)
            for other in waiting.get(w, []):
                if other not in pushed:
                    pushed.add(other)
                    heapq.heappush(heap, (rank_list[other], other))
    for e in order.tolist():  # fewer connected edges than the target keeps: fill the count
        if taken >= keep:
            break
        if chosen[e] == 0:
            chosen[e] = 1.0
            taken += 1
    return chosen
