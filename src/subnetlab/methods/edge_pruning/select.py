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


def _reader_owner(graph) -> list[list[int]]:
    """Per writer, the readers whose inputs it computes from (a key/value reader serves its group's heads)."""
    owners: list[list[int]] = [[] for _ in graph.writers]
    for r, nodes in enumerate(reader_nodes(graph)):
        for node in nodes:
            owners[node].append(r)
    return owners


def select_connected_edges(graph, scores: Tensor, tiebreak: Tensor, sparsity: float,
                           corrupted: bool = False) -> Tensor:
    """Like ``select_top_edges``, but every kept edge lies on a path of kept edges to the logits.

    An edge into a component none of whose outgoing edges is kept changes nothing the logits read (its
    reader's output is replaced downstream), so a top-k circuit can spend edges on dead ends. Here edges
    are taken best first among those whose reader is the logits or a component already connected; taking
    an edge connects its writer and makes the edges into that writer eligible.

    ``corrupted``: removed edges deliver the corrupted prompt's outputs, so a component none of whose
    inputs is kept computes exactly its corrupted output and its outgoing edges change nothing either
    (a dead start). Edges out of such components are then set aside and the count refilled, for a few
    rounds (a component that gains an input in a later round gets its edges back). When fewer useful edges
    exist than the target keeps, the best remaining fill the count, so the size is always exact.
    """
    n = scores.numel()
    keep = n - round(sparsity * n)
    order = torch.argsort(tiebreak.cpu(), descending=True, stable=True)
    order = order[torch.argsort(scores.cpu()[order], descending=True, stable=True)]
    rank = torch.empty(n, dtype=torch.long)
    rank[order] = torch.arange(n)
    rank_list, order_list = rank.tolist(), order.tolist()
    feeds = reader_nodes(graph)
    owners = _reader_owner(graph)
    reader_of = [r for _, r in graph.edges]
    writer_of = [w for w, _ in graph.edges]
    embeddings = set(range(graph.num_embeddings))
    set_aside: set[int] = set()
    chosen = _backward(graph, feeds, rank_list, keep, set_aside)
    for _ in range(8 if corrupted else 0):
        fed = {reader_of[e] for e in chosen}
        starts = {e for e in chosen if writer_of[e] not in embeddings
                  and not any(r in fed for r in owners[writer_of[e]])}
        live_writers = {w for w in range(len(graph.writers)) if any(r in fed for r in owners[w])}
        set_aside = (set_aside | starts) - {e for e in set_aside if writer_of[e] in live_writers}
        if not starts:
            break
        chosen = _backward(graph, feeds, rank_list, keep, set_aside)
    mask = torch.zeros(n)
    mask[list(chosen)] = 1.0
    taken = len(chosen)
    for e in order_list:  # fewer useful edges than the target keeps: fill the count
        if taken >= keep:
            break
        if mask[e] == 0:
            mask[e] = 1.0
            taken += 1
    return mask


def _backward(graph, feeds: list[list[int]], rank: list[int], keep: int, set_aside: set[int]) -> set[int]:
    """Best-first from the logits: an edge is eligible once its reader's component is connected."""
    import heapq

    waiting: dict[int, list[int]] = {}
    heap: list[tuple[int, int]] = []
    for e, (w, r) in enumerate(graph.edges):
        if e in set_aside:
            continue
        if not feeds[r]:
            heap.append((rank[e], e))
        for node in feeds[r]:
            waiting.setdefault(node, []).append(e)
    heapq.heapify(heap)
    chosen: set[int] = set()
    pushed, connected = {e for _, e in heap}, set()
    while heap and len(chosen) < keep:
        _, e = heapq.heappop(heap)
        chosen.add(e)
        w = graph.edges[e][0]
        if w not in connected:
            connected.add(w)
            for other in waiting.get(w, []):
                if other not in pushed:
                    pushed.add(other)
                    heapq.heappush(heap, (rank[other], other))
    return chosen
