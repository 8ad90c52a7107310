"""A circuit on a model's computation graph: per-edge scores, the kept edges, and the rules that read them.

A ``Circuit`` is a ``Graph`` (``models.graph``) with, per edge, a ``score``
(what a method thinks of the edge) and ``in_graph`` (whether the circuit keeps
it), either of them absent where a file holds none. Every method writes one and
every consumer reads one (the EAP-IG library's ``Graph``), so the rules live
here once:

* **selection**: the top ``k`` edges by score, the edges at or above a
  threshold, the connected top ``k`` (every kept edge on a path of kept edges
  to the logits), EAP-IG's greedy selection from the logits (``greedy``), and
  MIB's pruning of what no longer connects (``pruned``); ties by an optional
  tie-break, then by edge order; and Edge
  Pruning's own final circuit (``threshold_choice``: a bisected threshold on
  the edges' deterministic masks, then on the nodes', then edges of removed
  writers dropped);
* **connectivity**: which writers reach the logits through kept edges (a reader
  is live with any writer that owns it, ``Graph.reader_owners``, the logits
  always), and which removed edges lie between live nodes;
* **files**: the graph's JSON with ``score`` / ``in_graph`` on each edge and the
  sign convention; a tensor file's metadata (``metadata()``) with the graph's
  shape, so a reader need not guess the embedding-node count.

Sign convention (``score_sign``): ``"absolute"`` ranks by magnitude (attribution
scores: a large negative effect is still an important edge, MIB's
``absolute=True``); ``"signed"`` ranks by value (log-alphas and mask values: a
very negative log-alpha is a gate trained shut, the least important edge).
Files without it are attribution-style, ``"absolute"``.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json, write_json
from subnetlab.models.graph import Graph

SCORE_SIGNS = ("absolute", "signed")
DEAD_START_ROUNDS = 8  # corrupted ablation: rounds of setting aside edges out of components with no kept input


# ------------------------------------------------------------------ rankings of any items (edges or nodes)
def edges_kept(sparsity: float, items: int) -> int:
    """Items kept at ``sparsity``: ``items - round(sparsity * items)``."""
    if not 0.0 <= sparsity <= 1.0:
        raise SubnetlabError(f"target sparsity {sparsity} is outside [0, 1]")
    return items - round(sparsity * items)


def ranking(scores: Tensor, tiebreak: Tensor | None = None, absolute: bool = False) -> Tensor:
    """Item indices best first: by score (its magnitude when ``absolute``), ties by ``tiebreak`` (higher first),
    then by index (lower first)."""
    flat = scores.detach().reshape(-1).cpu()
    if bool(torch.isnan(flat).any()):
        raise SubnetlabError(f"scores hold {int(torch.isnan(flat).sum())} NaN values; every item needs a score",
                             setting="scores")
    key = flat.abs() if absolute else flat
    if tiebreak is None:
        return torch.argsort(key, descending=True, stable=True)
    order = torch.argsort(tiebreak.detach().reshape(-1).cpu(), descending=True, stable=True)
    return order[torch.argsort(key[order], descending=True, stable=True)]


def top_k_mask(scores: Tensor, k: int, tiebreak: Tensor | None = None, absolute: bool = False) -> Tensor:
    """``[items]`` bool: the first ``k`` of ``ranking``."""
    keep = torch.zeros(scores.numel(), dtype=torch.bool)
    keep[ranking(scores, tiebreak, absolute)[:k]] = True
    return keep


def threshold_mask(scores: Tensor, threshold: float, absolute: bool = False) -> Tensor:
    """``[items]`` bool: the items whose score (its magnitude when ``absolute``) is at least ``threshold``."""
    flat = scores.detach().reshape(-1).cpu()
    return (flat.abs() if absolute else flat) >= threshold


THRESHOLD_TOLERANCE = 1e-5  # Edge Pruning's binary search stops when its interval is this narrow


def threshold_search(values: Tensor, sparsity: Tensor | float) -> float:
    """Edge Pruning's threshold for deterministic mask ``values`` meeting ``sparsity`` (src/eval/ioi.py:194-217).

    Bisection on ``[0, 1]``: at ``t`` the sparsity is ``1 - #(values > t) / n`` (float32, as
    ``get_edge_sparsity`` with a threshold set); above the target the threshold comes down, else it goes up,
    until the interval is narrower than 1e-5. The result is the **last midpoint tried**, as the authors' loop
    leaves it set on the model: its sparsity may lie on either side of ``sparsity`` (the two count levels
    around it), never further.
    """
    flat = values.detach().reshape(-1).cpu().float()
    target = torch.as_tensor(sparsity, dtype=torch.float32)
    low, high, threshold = 0.0, 1.0, 0.5
    while high - low > THRESHOLD_TOLERANCE:
        threshold = (low + high) / 2
        reached = 1 - (flat > threshold).to(flat.dtype).sum() / max(1, flat.numel())
        if reached > target:
            high = threshold
        else:
            low = threshold
    return threshold


@dataclass(frozen=True)
class ThresholdChoice:
    """Edge Pruning's final circuit: thresholded edges, thresholded nodes, edges of removed writers dropped."""

    edges: Tensor  # [edges] bool, kept
    nodes: Tensor | None  # [writers] bool, kept (None without node masks)
    edge_threshold: float
    node_threshold: float | None
    edge_sparsity: float  # of the thresholded edge masks alone (``get_edge_sparsity``)

    @property
    def sparsity(self) -> float:
        """Of the edges kept after removed writers' edges are dropped (``get_effective_edge_sparsity``)."""
        return 1.0 - float(self.edges.sum()) / self.edges.numel()


def threshold_choice(graph: Graph, edge_values: Tensor, edge_sparsity: Tensor | float,
                     node_values: Tensor | None = None, node_sparsity: Tensor | float | None = None) -> ThresholdChoice:
    """Edge Pruning's final circuit from deterministic masks (src/eval/ioi.py:158-241, modeling_fpt2.py:997-1066).

    The edges above ``threshold_search(edge_values, edge_sparsity)``; with node masks, the writers above
    ``threshold_search(node_values, node_sparsity)``; then every edge out of a removed writer is dropped (the
    authors' ``get_edges`` keeps an edge only from an ``allowed_writer``). The embeddings, when the graph has no
    embedding nodes, are no writers and always feed every reader.
    """
    values = edge_values.detach().reshape(-1).cpu().float()
    if values.numel() != graph.num_edges:
        raise SubnetlabError(f"{values.numel()} edge masks for {graph.num_edges} edges")
    edge_threshold = threshold_search(values, edge_sparsity)
    edges = values > edge_threshold
    reached = 1.0 - float(edges.sum()) / edges.numel()
    if node_values is None:
        return ThresholdChoice(edges, None, edge_threshold, None, reached)
    nodes_flat = node_values.detach().reshape(-1).cpu().float()
    if nodes_flat.numel() != len(graph.writers):
        raise SubnetlabError(f"{nodes_flat.numel()} node masks for {len(graph.writers)} writers")
    if node_sparsity is None:
        raise SubnetlabError("node masks need a node sparsity to search a threshold for")
    node_threshold = threshold_search(nodes_flat, node_sparsity)
    nodes = nodes_flat > node_threshold
    writer_of = torch.tensor([w for w, _ in graph.edges], dtype=torch.long)
    return ThresholdChoice(edges & nodes[writer_of], nodes, edge_threshold, node_threshold, reached)


# -------------------------------------------------------------------------------------- the value
@dataclass(frozen=True, eq=False)
class Circuit:
    """A graph with per-edge ``scores`` ``[edges]`` and ``in_graph`` ``[edges]`` bool (each optional)."""

    graph: Graph
    scores: Tensor | None = None
    in_graph: Tensor | None = None
    score_sign: str = "absolute"

    def __post_init__(self) -> None:
        if self.score_sign not in SCORE_SIGNS:
            raise SubnetlabError(f"score sign {self.score_sign!r}: choose one of {', '.join(SCORE_SIGNS)}")
        for name in ("scores", "in_graph"):
            values = getattr(self, name)
            if values is None:
                continue
            flat = torch.as_tensor(values).detach().reshape(-1).cpu()
            if flat.numel() != self.graph.num_edges:
                raise SubnetlabError(f"{name}: {flat.numel()} edge values; the graph has {self.graph.num_edges} edges")
            if name == "in_graph" and flat.dtype != torch.bool:
                flat = flat > 0.5
            object.__setattr__(self, name, flat)

    @property
    def absolute(self) -> bool:
        return self.score_sign == "absolute"

    def kept(self) -> Tensor:
        """``in_graph``, required."""
        if self.in_graph is None:
            raise SubnetlabError("the circuit has no in_graph: select its edges first")
        return self.in_graph

    def _scores(self) -> Tensor:
        if self.scores is None:
            raise SubnetlabError("the circuit has no edge scores to select by", setting="scores")
        return self.scores

    # -- selection ----------------------------------------------------------------------------------
    def ranking(self, tiebreak: Tensor | None = None) -> Tensor:
        """Edge indices best first (module docstring)."""
        return ranking(self._scores(), tiebreak, self.absolute)

    def top_k(self, k: int, tiebreak: Tensor | None = None) -> "Circuit":
        """This circuit keeping its ``k`` best edges."""
        return replace(self, in_graph=top_k_mask(self._scores(), k, tiebreak, self.absolute))

    def threshold(self, value: float) -> "Circuit":
        """This circuit keeping the edges scoring at least ``value``."""
        return replace(self, in_graph=threshold_mask(self._scores(), value, self.absolute))

    def connected(self, k: int, tiebreak: Tensor | None = None, corrupted: bool = False) -> "Circuit":
        """This circuit keeping ``k`` edges, best first among those on a path of kept edges to the logits.

        An edge into a component none of whose outgoing edges is kept changes nothing the logits read (its
        reader's output is replaced downstream), so a top-k circuit can spend edges on dead ends. Here edges
        are taken best first among those whose reader is the logits or a component already connected; taking
        an edge connects its writer and makes the edges into that writer eligible.

        ``corrupted``: removed edges deliver the corrupted prompt's outputs, so a component none of whose
        inputs is kept computes exactly its corrupted output and its outgoing edges change nothing either
        (a dead start). Edges out of such components are then set aside and the count refilled, for a few
        rounds (a component that gains an input in a later round gets its edges back). When fewer useful edges
        exist than ``k``, the best remaining fill the count, so the size is always exact.
        """
        graph = self.graph
        order = self.ranking(tiebreak)
        n = order.numel()
        rank = torch.empty(n, dtype=torch.long)
        rank[order] = torch.arange(n)
        rank_list, order_list = rank.tolist(), order.tolist()
        inputs = graph.writer_inputs
        reader_of = [r for _, r in graph.edges]
        writer_of = [w for w, _ in graph.edges]
        embeddings = set(range(graph.num_embeddings))
        set_aside: set[int] = set()
        chosen = _best_first_from_logits(graph, rank_list, k, set_aside)
        for _ in range(DEAD_START_ROUNDS if corrupted else 0):
            fed = {reader_of[e] for e in chosen}
            starts = {e for e in chosen if writer_of[e] not in embeddings
                      and not any(r in fed for r in inputs[writer_of[e]])}
            fed_writers = {w for w in range(len(graph.writers)) if any(r in fed for r in inputs[w])}
            set_aside = (set_aside | starts) - {e for e in set_aside if writer_of[e] in fed_writers}
            if not starts:
                break
            chosen = _best_first_from_logits(graph, rank_list, k, set_aside)
        keep = torch.zeros(n, dtype=torch.bool)
        keep[list(chosen)] = True
        taken = len(chosen)
        for e in order_list:  # fewer useful edges than k: fill the count
            if taken >= k:
                break
            if not keep[e]:
                keep[e] = True
                taken += 1
        return replace(self, in_graph=keep)

    def greedy(self, k: int, tiebreak: Tensor | None = None) -> "Circuit":
        """EAP-IG's ``Graph.apply_greedy(k, absolute, prune=False)`` (hannamw/EAP-IG, src/eap/graph.py): from the
        logits up, repeatedly keep the best-scoring edge whose reader belongs to a node already in the circuit
        (the logits always are); keeping an edge puts its writer in the circuit, which makes the edges into it
        candidates. ``greedy(k).pruned()`` is its default ``prune=True``.

        Ties go to the tie-break, then to the lower edge index (EAP-IG's go to its sort and merge order)."""
        if not 0 <= k <= self.graph.num_edges:
            raise SubnetlabError(f"greedy selection of {k} edges: the graph has {self.graph.num_edges}", setting="edges")
        order = self.ranking(tiebreak)
        rank = torch.empty(order.numel(), dtype=torch.long)
        rank[order] = torch.arange(order.numel())
        keep = torch.zeros(order.numel(), dtype=torch.bool)
        keep[list(_best_first_from_logits(self.graph, rank.tolist(), k, set()))] = True
        return replace(self, in_graph=keep)

    def pruned(self) -> "Circuit":
        """EAP-IG's ``Graph.prune`` (MIB's step after selection): repeatedly drop the nodes with no kept outgoing
        edge or no kept incoming edge, then the edges out of or into a dropped node, until nothing changes.

        A node is a writer; its incoming edges are the edges into its readers (``Graph.reader_owners``); the
        embedding nodes count as having input, the logits are always kept. In a graph without embedding nodes
        (Edge Pruning's default) the embeddings feed every reader and are never cut, so every node has input."""
        graph, keep = self.graph, self.kept().clone()
        owners = graph.reader_owners
        writer_of = [w for w, _ in graph.edges]
        reader_of = [r for _, r in graph.edges]
        writers = len(graph.writers)
        while True:
            has_out = [False] * writers
            has_in = [w < graph.num_embeddings or graph.num_embeddings == 0 for w in range(writers)]
            for e in torch.nonzero(keep).flatten().tolist():
                has_out[writer_of[e]] = True
                for node in owners[reader_of[e]]:
                    has_in[node] = True
            alive = [has_out[w] and has_in[w] for w in range(writers)]
            new = torch.tensor([alive[writer_of[e]] and (not owners[reader_of[e]] or
                                                          any(alive[o] for o in owners[reader_of[e]]))
                                for e in range(graph.num_edges)], dtype=torch.bool) & keep
            if torch.equal(new, keep):
                return replace(self, in_graph=keep)
            keep = new

    # -- connectivity ---------------------------------------------------------------------------------
    def live_writers(self) -> frozenset[int]:
        """Writers with a path of kept edges to the logits, and the embeddings (which cannot be removed)."""
        graph, kept = self.graph, self.kept().tolist()
        into: dict[int, list[int]] = {}
        for i, (w, r) in enumerate(graph.edges):
            if kept[i]:
                into.setdefault(w, []).append(r)
        live: set[int] = set(range(graph.num_embeddings))
        for w in reversed(range(len(graph.writers))):  # every reader of a writer belongs to a later writer
            if w not in live and any(_reader_live(graph, r, live) for r in into.get(w, [])):
                live.add(w)
        return frozenset(live)

    def closure_edges(self) -> tuple[int, ...]:
        """Removed edges from a live writer into a live reader: what the node-level closure adds."""
        graph, kept = self.graph, self.kept().tolist()
        live = self.live_writers()
        return tuple(i for i, (w, r) in enumerate(graph.edges)
                     if not kept[i] and w in live and _reader_live(graph, r, live))

    # -- files ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The graph's JSON with per-edge ``score`` / ``in_graph`` and, with scores, their ``score_sign``."""
        data = self.graph.to_dict(None if self.scores is None else self.scores.tolist(),
                                  None if self.in_graph is None else self.in_graph.tolist())
        if self.scores is not None:
            data["score_sign"] = self.score_sign
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "graph", setting: str | None = None) -> "Circuit":
        if not isinstance(data, dict):
            raise SubnetlabError(f"{source}: a JSON {type(data).__name__}, not a graph (an object with format, "
                                 "shape and edges)", setting=setting)
        graph = Graph.from_dict(data, source)
        edges = data.get("edges") or []
        scores = _per_edge(edges, "score", graph.num_edges, source, setting)
        in_graph = _per_edge(edges, "in_graph", graph.num_edges, source, setting)
        return cls(graph, None if scores is None else torch.tensor(scores),
                   None if in_graph is None else torch.tensor([bool(v) for v in in_graph], dtype=torch.bool),
                   str(data.get("score_sign", "absolute")))

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path, setting: str | None = None) -> "Circuit":
        try:
            data = read_json(path)
        except SubnetlabError as e:
            raise SubnetlabError(str(e), setting=setting) from None
        return cls.from_dict(data, str(path), setting)

    def metadata(self) -> dict[str, str]:
        """What a tensor file of these scores records beside them: the graph's shape and the sign convention."""
        return {"graph_shape": json.dumps(self.graph.shape(), sort_keys=True), "score_sign": self.score_sign}

    @classmethod
    def from_tensor(cls, scores: Tensor, adapter: Any, metadata: dict[str, str], source: str,
                    score_sign: str = "absolute", setting: str = "scores") -> "Circuit":
        """Edge scores of a tensor file on ``adapter``'s model: the graph from the file's ``metadata()`` (checked
        against the model), or, in files that do not record it, the model's graph with 2, else 1, embedding
        nodes that has as many edges as there are scores. The file's ``score_sign`` wins over ``score_sign``."""
        count = scores.numel()
        if "graph_shape" in metadata:
            try:
                shape = json.loads(metadata["graph_shape"])
            except json.JSONDecodeError as e:
                raise SubnetlabError(f"{source}: graph shape unreadable ({e})", setting=setting) from None
            except RecursionError:
                raise SubnetlabError(f"{source}: graph shape unreadable (JSON nested too deep)", setting=setting) from None
            graph = Graph.from_shape(shape, source)
            check_model_graph(graph, adapter, source, setting)
            if count != graph.num_edges:
                raise SubnetlabError(f"{source}: {count} edge scores, its graph has {graph.num_edges} edges",
                                     setting=setting)
        else:
            graph = _graph_with_edges(adapter, count, source, setting)
        return cls(graph, scores.float(), None, metadata.get("score_sign", score_sign))


def check_model_graph(graph: Graph, adapter: Any, source: str, setting: str | None = None) -> None:
    """Refuse ``graph`` unless it is the graph of ``adapter``'s model (with its own embedding-node count and
    key/value readers: per query head or per key/value head)."""
    mine = Graph.from_adapter(adapter, embedding_nodes=graph.num_embeddings, ungrouped_kv=graph.ungrouped_kv)
    if graph.shape() != mine.shape():
        raise SubnetlabError(f"{source}: a graph of {graph.shape()}, the model's is {mine.shape()}; it belongs to "
                             "another model", setting=setting)


def _graph_with_edges(adapter: Any, count: int, source: str, setting: str) -> Graph:
    for nodes in (2, 1):
        try:
            graph = Graph.from_adapter(adapter, embedding_nodes=nodes)
        except SubnetlabError:
            continue
        if graph.num_edges == count:
            return graph
    raise SubnetlabError(f"{source}: {count} edge scores, the model's graph has "
                         f"{Graph.from_adapter(adapter).num_edges}", setting=setting)


def _per_edge(edges: list[dict[str, Any]], field: str, count: int, source: str,
              setting: str | None) -> list[float] | None:
    """Every edge's ``field`` as numbers, None when no edge has it; refused when only some have it."""
    values = [e.get(field) for e in edges]
    if len(values) == count and all(v is None for v in values) or not values:
        return None
    bad = next((i for i, v in enumerate(values) if v is None or isinstance(v, str)), len(values))
    if bad < count:
        raise SubnetlabError(f"{source}: edge {bad} has no {field!r} (every edge needs one)", setting=setting)
    for i, v in enumerate(values):
        if not isinstance(v, (int, float)) or not math.isfinite(v) or field == "in_graph" and v not in (0, 1):
            wanted = "true or false" if field == "in_graph" else "a finite number"
            raise SubnetlabError(f"{source}: edge {i} has {field} {v!r}; expected {wanted}", setting=setting)
    return [float(v) for v in values]


def _reader_live(graph: Graph, reader: int, live: set[int] | frozenset[int]) -> bool:
    """A reader is live when any writer owning it is (the logits, owned by none, always)."""
    owners = graph.reader_owners[reader]
    return not owners or any(w in live for w in owners)


def _best_first_from_logits(graph: Graph, rank: list[int], keep: int, set_aside: set[int]) -> set[int]:
    """Best-first from the logits: an edge is eligible once its reader's component is connected."""
    feeds = graph.reader_owners
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


__all__ = ["Circuit", "SCORE_SIGNS", "ThresholdChoice", "check_model_graph", "edges_kept", "ranking", "threshold_choice",
           "threshold_mask", "threshold_search", "top_k_mask"]
