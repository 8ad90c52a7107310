"""EAP-IG's graph files, the MIB circuit track's format, read and written on subnetlab's graph.

The MIB benchmark (circuit track) takes circuits as the files of hannamw/EAP-IG's ``Graph``
(``src/eap/graph.py``): ``to_json`` / ``from_json`` and ``to_pt`` / ``from_pt``. EAP-IG's graph is
subnetlab's ``models.graph.Graph`` with **one embedding node** (``input``) and every head's query, key
and value read separately: grouped-query models are ungrouped there (TransformerLens's
``ungroup_grouped_query_attention``), which is ``Graph.ungrouped_kv`` (one key and value reader per query head),
so a grouped model's EAP-IG file is read and written on its ungrouped graph and has the layout of an ungrouped
model of as many heads (its ``cfg`` names no key/value heads). Names are the same (``input``, ``a0.h1``, ``m0``, ``logits``; edges
``a0.h1->a1.h0<q>``, ``input->m0``), and so are the indices: a subnetlab writer's index is EAP-IG's
*forward* index and a reader's its *backward* index, so edge ``(w, r)`` is the cell ``[w, r]`` of
EAP-IG's ``[n_forward, n_backward]`` score matrix.

Both of EAP-IG's layer layouts (``cfg.parallel_attn_mlp``) are read and written, with the same indices:
attention before the MLP (``false``: GPT-2, Llama) and attention beside it (``true``: GPT-NeoX /
Pythia's parallel residual), where a layer's MLP reads the layer's input and not its heads, so the edges
``a{l}.h{h}->m{l}`` do not exist (EAP-IG's ``prev_index`` of the MLP stops before its layer's heads, as
subnetlab's MLP reader block does). A file is read only on a graph of its own layout.

* JSON: ``{"cfg": {"n_layers", "n_heads", "parallel_attn_mlp", "d_model"}, "nodes": {name:
  {"in_graph"}}, "edges": {name: {"score", "in_graph"}}}``, edges in EAP-IG's insertion order.
  MIB's binary-circuit submissions leave ``score`` out; a file either has it on every edge or on none.
* ``.pt``: a ``torch.save`` of ``{"cfg", "src_nodes", "dst_nodes", "edges_scores" [F, B] float,
  "edges_in_graph" [F, B] bool, "nodes_in_graph" [F] bool}``. Read with ``torch.load(weights_only=True)``
  only: a file that needs more than tensors, lists, strings and numbers is refused.

``prune`` is EAP-IG's ``Graph.prune``: nodes without a kept incoming (``input`` always has one) or
outgoing edge are dropped, then edges missing an end, until nothing changes. MIB evaluates every
circuit after it (``evaluate_graph`` calls it).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.io import atomic_path, read_json, write_json
from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph

FAMILY = "eap-ig"  # the family of a graph read from a file alone (EAP-IG's config names none)
PT_KEYS = ("cfg", "src_nodes", "dst_nodes", "edges_scores", "edges_in_graph", "nodes_in_graph")


NONLINEAR_METHODS = ("exact",)  # attribution methods whose edge scores are not linear in the writer's output


# ------------------------------------------------------------------------------- the graph's correspondence
def joined_embeddings(circuit: Circuit, source: str = "scores", setting: str | None = None,
                      method: str | None = None) -> Circuit:
    """``circuit``'s scores on the graph with one embedding node (MIB's ``input``): an edge ``input->r`` scores
    the sum of ``tok_embeds->r`` and ``pos_embeds->r``, every other edge as it was.

    Exact for scores linear in the writer's output difference ``D_w`` (EAP's ``D_w . g_r``, EAP-IG's mean of such
    products over its passes, clean-corrupted): the input node's ``D`` is the sum of the two embeddings', and the
    reader gradients ``g_r`` do not depend on how the writers are counted. Refused for what is not such a sum:
    exact patching (``method``), signed scores (log-alphas: a sum of two gates' logits is no gate's) and circuits
    (two kept flags have no one flag)."""
    graph = circuit.graph
    if graph.num_embeddings == 1:
        return circuit
    why = ("no embedding nodes: the embeddings feed every reader and no edge out of them is scored"
           if graph.num_embeddings == 0 else
           f"scores of {method!r}, not linear in the writer's output" if method in NONLINEAR_METHODS else
           "signed scores (log-alphas or masks), which do not add up" if circuit.scores is not None and
           not circuit.absolute else "a circuit (kept edges), whose two embedding edges have no one flag"
           if circuit.scores is None else None)
    if why is not None:
        raise SubnetlabError(f"{source}: MIB / EAP-IG graphs have one embedding node ('input'); this graph has "
                             f"{graph.num_embeddings}, and its {why} cannot be joined into it (score the model "
                             "with one embedding node)", setting=setting)
    one = replace(graph, num_embeddings=1)
    embeddings = set(range(graph.num_embeddings))
    target = torch.tensor([one.edge_index(f"input->{graph.readers[r]}") if w in embeddings else
                           one.edge_index(graph.edge_names[e]) for e, (w, r) in enumerate(graph.edges)])
    scores = torch.zeros(one.num_edges, dtype=torch.float64).index_add_(0, target, circuit.scores.double())
    return Circuit(one, scores.to(circuit.scores.dtype), None, circuit.score_sign)


def check_mappable(graph: Graph, source: str = "graph", setting: str | None = None) -> None:
    """Refuse a graph EAP-IG's files cannot express one to one."""
    if graph.num_embeddings != 1:
        raise SubnetlabError(f"{source}: MIB / EAP-IG graphs have one embedding node ('input'); this graph has "
                             f"{graph.num_embeddings} (score the model with one embedding node)", setting=setting)
    if graph.group != 1 and not graph.ungrouped_kv:
        raise SubnetlabError(f"{source}: its key/value readers are per key/value head ({graph.num_kv_heads} for "
                             f"{graph.num_heads} heads); EAP-IG's graph has one per query head (it ungroups them), "
                             "which a sum over each group cannot be split back into (score the model with a key and "
                             "value reader per query head, kv_readers=query)", setting=setting)


def config(graph: Graph, d_model: int) -> dict[str, Any]:
    """EAP-IG's ``cfg`` of ``graph`` (what ``Graph.from_model`` needs)."""
    return {"n_layers": graph.num_layers, "n_heads": graph.num_heads,
            "parallel_attn_mlp": bool(graph.parallel_attn_mlp), "d_model": int(d_model)}


def node_names(graph: Graph) -> list[str]:
    """EAP-IG's ``nodes`` keys in its order: the writers, then ``logits``."""
    return list(graph.writers) + ["logits"]


def edge_order(graph: Graph) -> list[int]:
    """Edge indices in EAP-IG's insertion order (``Graph.from_model``). In sequence: per layer, every upstream node
    into each head's q, k, v, then (the heads now upstream) every upstream node into the MLP. In parallel: per
    layer, per upstream node its edges into each head's q, k, v and then into the MLP; the layer's heads and MLP
    join the upstream nodes together. At the end every node into the logits."""
    order: list[int] = []
    upstream = list(graph.embeddings)
    for layer in range(graph.num_layers):
        heads = [f"a{layer}.h{h}" for h in range(graph.num_heads)]
        if graph.parallel_attn_mlp:
            for w in upstream:
                order += [graph.edge_index(f"{w}->{h}<{x}>") for h in heads for x in "qkv"]
                order.append(graph.edge_index(f"{w}->m{layer}"))
            upstream += heads
        else:
            order += [graph.edge_index(f"{w}->{h}<{x}>") for w in upstream for h in heads for x in "qkv"]
            upstream += heads
            order += [graph.edge_index(f"{w}->m{layer}") for w in upstream]
        upstream.append(f"m{layer}")
    return order + [graph.edge_index(f"{w}->logits") for w in upstream]


def prune(graph: Graph, in_graph: Tensor) -> tuple[Tensor, Tensor]:
    """EAP-IG's ``Graph.prune``: ``(edges [E] bool, nodes [writers] bool)`` of the connected circuit."""
    edges = in_graph.detach().reshape(-1).cpu().bool().clone()
    writer_of = torch.tensor([w for w, _ in graph.edges], dtype=torch.long)
    reader_of = torch.tensor([r for _, r in graph.edges], dtype=torch.long)
    owns = torch.zeros(len(graph.writers), len(graph.readers), dtype=torch.bool)  # forward_to_backward
    for r, owners in enumerate(graph.reader_owners):
        for w in owners:
            owns[w, r] = True
    nodes = torch.zeros(len(graph.writers), dtype=torch.bool)
    while True:
        outgoing = torch.zeros_like(nodes).index_fill_(0, writer_of[edges], True)
        fed = torch.zeros(len(graph.readers), dtype=torch.bool).index_fill_(0, reader_of[edges], True)
        incoming = (owns & fed[None, :]).any(dim=1)
        incoming[: graph.num_embeddings] = True  # the input node is always treated as fed
        new_nodes = outgoing & incoming
        live_readers = (owns & new_nodes[:, None]).any(dim=0)
        live_readers[-1] = True  # the logits
        new_edges = edges & new_nodes[writer_of] & live_readers[reader_of]
        if torch.equal(new_nodes, nodes) and torch.equal(new_edges, edges):
            return edges, nodes
        nodes, edges = new_nodes, new_edges


# ------------------------------------------------------------------------------------------- writing
def to_dict(circuit: Circuit, d_model: int) -> dict[str, Any]:
    """``Graph.to_json``'s content: scores (0 where the circuit has none) and ``in_graph`` (pruned nodes)."""
    graph = circuit.graph
    check_mappable(graph)
    scores = circuit.scores.tolist() if circuit.scores is not None else [0.0] * graph.num_edges
    kept = circuit.in_graph if circuit.in_graph is not None else torch.zeros(graph.num_edges, dtype=torch.bool)
    _, nodes = prune(graph, kept)
    kept_list = kept.tolist()
    node_flags = nodes.tolist() + [True]  # the logits node is always in the graph
    return {"cfg": config(graph, d_model),
            "nodes": {name: {"in_graph": bool(node_flags[i])} for i, name in enumerate(node_names(graph))},
            "edges": {graph.edge_names[e]: {"score": float(scores[e]), "in_graph": bool(kept_list[e])}
                      for e in edge_order(graph)}}


def to_tensors(circuit: Circuit, d_model: int) -> dict[str, Any]:
    """``Graph.to_pt``'s content: ``[n_forward, n_backward]`` matrices, zero off the real edges."""
    graph = circuit.graph
    check_mappable(graph)
    F, B = len(graph.writers), len(graph.readers)
    index = matrix_index(graph)
    scores = torch.zeros(F * B)
    kept = torch.zeros(F * B, dtype=torch.bool)
    if circuit.scores is not None:
        scores[index] = circuit.scores.float()
    if circuit.in_graph is not None:
        kept[index] = circuit.in_graph
    _, nodes = prune(graph, kept[index])
    return {"cfg": config(graph, d_model), "src_nodes": list(graph.writers), "dst_nodes": list(graph.readers),
            "edges_scores": scores.reshape(F, B), "edges_in_graph": kept.reshape(F, B), "nodes_in_graph": nodes}


def save(circuit: Circuit, path: str | Path, d_model: int) -> None:
    """Write ``circuit`` as EAP-IG writes graphs: ``.pt`` by ``torch.save``, anything else as JSON."""
    if str(path).endswith(".pt"):
        data = to_tensors(circuit, d_model)
        with atomic_path(path) as tmp:
            torch.save(data, tmp)
    else:
        write_json(path, to_dict(circuit, d_model))


# ------------------------------------------------------------------------------------------- reading
def is_eap_json(data: Any) -> bool:
    """Whether parsed JSON is an EAP-IG graph (its keys) rather than a subnetlab graph (``format``)."""
    return isinstance(data, dict) and "format" not in data and ("cfg" in data or "nodes" in data)


def graph_of(cfg: Any, source: str, graph: Graph | None = None, setting: str | None = None) -> Graph:
    """The graph a ``cfg`` describes: ``graph`` (a model's, one embedding node) when it matches, else refused."""
    if not isinstance(cfg, dict):
        raise SubnetlabError(f"{source}: cfg: expected an object with n_layers and n_heads, got "
                             f"{type(cfg).__name__}", setting=setting)
    for key in ("n_layers", "n_heads", "d_model"):
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SubnetlabError(f"{source}: cfg.{key}: expected a positive integer, got {value!r}", setting=setting)
    parallel = cfg.get("parallel_attn_mlp", False)
    if not isinstance(parallel, bool):
        raise SubnetlabError(f"{source}: cfg.parallel_attn_mlp: expected true or false, got {parallel!r} (not a "
                             "bool)", setting=setting)
    if graph is None:
        return Graph(FAMILY, cfg["n_layers"], cfg["n_heads"], cfg["n_heads"], 1, parallel)
    check_mappable(graph, source, setting)
    if (graph.num_layers, graph.num_heads) != (cfg["n_layers"], cfg["n_heads"]):
        raise SubnetlabError(f"{source}: cfg: a graph of {cfg['n_layers']} layers x {cfg['n_heads']} heads, the "
                             f"model's has {graph.num_layers} x {graph.num_heads}; it belongs to another model",
                             setting=setting)
    if parallel != graph.parallel_attn_mlp:
        raise SubnetlabError(f"{source}: cfg.parallel_attn_mlp: the file's graph runs attention and MLP "
                             f"{_layout(parallel)}; the model's {_layout(graph.parallel_attn_mlp)}: it belongs to "
                             "another model", setting=setting)
    return graph


def _layout(parallel: bool) -> str:
    """How a layer's attention and MLP read the stream, in words."""
    return "in parallel (GPT-NeoX)" if parallel else "in sequence"


def from_dict(data: Any, source: str = "graph", graph: Graph | None = None, setting: str | None = None) -> Circuit:
    """The ``Circuit`` of an EAP-IG JSON graph, every field checked (the error names it)."""
    if not isinstance(data, dict):
        raise SubnetlabError(f"{source}: a JSON {type(data).__name__}, not an EAP-IG graph", setting=setting)
    for key in ("cfg", "nodes", "edges"):
        if key not in data:
            raise SubnetlabError(f"{source}: {key}: missing (an EAP-IG graph has cfg, nodes and edges)", setting=setting)
    graph = graph_of(data["cfg"], source, graph, setting)
    nodes, edges = data["nodes"], data["edges"]
    for key, value in (("nodes", nodes), ("edges", edges)):
        if not isinstance(value, dict):
            raise SubnetlabError(f"{source}: {key}: expected an object keyed by name, got {type(value).__name__}",
                                 setting=setting)
    known_nodes = set(node_names(graph))
    for name, node in nodes.items():
        field = f"nodes[{name!r}]"
        if name not in known_nodes:
            raise SubnetlabError(f"{source}: {field}: no such node in a {graph.num_layers} x {graph.num_heads} graph",
                                 setting=setting)
        if not isinstance(node, dict) or not isinstance(node.get("in_graph"), bool):
            raise SubnetlabError(f"{source}: {field}.in_graph: expected true or false", setting=setting)
        for extra in ("neurons", "neurons_scores", "score"):
            if extra in node:
                raise SubnetlabError(f"{source}: {field}.{extra}: a node- or neuron-level circuit; subnetlab reads "
                                     "edge-level MIB files", setting=setting)
    edge_names = set(graph.edge_names)  # once: a property that builds the list (O(edges) per call)
    unknown = next((name for name in edges if name not in edge_names), None)
    if unknown is not None:
        raise SubnetlabError(f"{source}: edges[{unknown!r}]: no such edge in a {graph.num_layers} x "
                             f"{graph.num_heads} graph (edges look like {graph.edge_names[0]!r})", setting=setting)
    missing = next((name for name in graph.edge_names if name not in edges), None)
    if missing is not None:
        raise SubnetlabError(f"{source}: edges[{missing!r}]: missing ({len(edges)} of {graph.num_edges} edges "
                             "given; every edge needs an entry)", setting=setting)
    scores, kept = [], []
    with_score = 0
    for name in graph.edge_names:
        edge, field = edges[name], f"edges[{name!r}]"
        if not isinstance(edge, dict) or not isinstance(edge.get("in_graph"), bool):
            raise SubnetlabError(f"{source}: {field}.in_graph: expected true or false", setting=setting)
        kept.append(edge["in_graph"])
        if "score" in edge:
            score = edge["score"]
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise SubnetlabError(f"{source}: {field}.score: expected a finite number, got {score!r}",
                                     setting=setting)
            with_score += 1
            scores.append(float(score))
        elif with_score:
            raise SubnetlabError(f"{source}: {field}.score: missing (every edge or none has a score)", setting=setting)
    if 0 < with_score < graph.num_edges:
        first = next(name for name in graph.edge_names if "score" not in edges[name])
        raise SubnetlabError(f"{source}: edges[{first!r}].score: missing (every edge or none has a score)",
                             setting=setting)
    return Circuit(graph, torch.tensor(scores, dtype=torch.float32) if with_score else None,
                   torch.tensor(kept, dtype=torch.bool))


def from_tensors(data: Any, source: str = "graph", graph: Graph | None = None, setting: str | None = None) -> Circuit:
    """The ``Circuit`` of a loaded EAP-IG ``.pt`` graph, every field checked (the error names it)."""
    if not isinstance(data, dict):
        raise SubnetlabError(f"{source}: a {type(data).__name__}, not an EAP-IG graph (a dict)", setting=setting)
    missing = next((key for key in PT_KEYS if key not in data), None)
    if missing is not None:
        raise SubnetlabError(f"{source}: {missing}: missing (an EAP-IG .pt graph has {', '.join(PT_KEYS)})",
                             setting=setting)
    graph = graph_of(data["cfg"], source, graph, setting)
    for key, names in (("src_nodes", list(graph.writers)), ("dst_nodes", list(graph.readers))):
        if not isinstance(data[key], (list, tuple)) or list(data[key]) != names:
            raise SubnetlabError(f"{source}: {key}: not the {len(names)} names of a {graph.num_layers} x "
                                 f"{graph.num_heads} graph in EAP-IG's order", setting=setting)
    F, B = len(graph.writers), len(graph.readers)
    for key, shape in (("edges_scores", (F, B)), ("edges_in_graph", (F, B)), ("nodes_in_graph", (F,))):
        value = data[key]
        if not isinstance(value, Tensor) or tuple(value.shape) != shape:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise SubnetlabError(f"{source}: {key}: expected a tensor of shape {list(shape)}, got {got}",
                                 setting=setting)
    if not data["edges_scores"].is_floating_point() or not bool(torch.isfinite(data["edges_scores"]).all()):
        raise SubnetlabError(f"{source}: edges_scores: expected finite floating-point scores", setting=setting)
    if data["edges_in_graph"].dtype != torch.bool:
        raise SubnetlabError(f"{source}: edges_in_graph: expected a bool tensor, got {data['edges_in_graph'].dtype}",
                             setting=setting)
    index = matrix_index(graph)
    return Circuit(graph, data["edges_scores"].reshape(-1)[index].float(), data["edges_in_graph"].reshape(-1)[index])


def load(path: str | Path, graph: Graph | None = None, setting: str | None = None) -> Circuit:
    """An EAP-IG graph file (``.pt``, else JSON) as a ``Circuit`` on ``graph`` (or the file's own graph)."""
    source = str(path)
    if not Path(path).is_file():
        raise SubnetlabError(f"{source}: no such file", setting=setting)
    if source.endswith(".pt"):
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises many kinds; every one means "not readable safely"
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SubnetlabError(f"{source}: not a weights-only torch file, refused unread ({reason[:160]})",
                                 setting=setting) from None
        return from_tensors(data, source, graph, setting)
    try:
        data = read_json(path)
    except SubnetlabError as e:
        raise SubnetlabError(str(e), setting=setting) from None
    return from_dict(data, source, graph, setting)


def matrix_index(graph: Graph) -> Tensor:
    """Per edge, its flat index ``w * n_backward + r`` in EAP-IG's ``[n_forward, n_backward]`` matrices (the order
    its top-n sorts in)."""
    B = len(graph.readers)
    return torch.tensor([w * B + r for w, r in graph.edges], dtype=torch.long)


def describe(circuit: Circuit) -> str:
    """One line: the graph's size and what the file holds."""
    kept = "no in_graph" if circuit.in_graph is None else f"{int(circuit.in_graph.sum())} edges in_graph"
    return (f"{circuit.graph.num_layers} x {circuit.graph.num_heads} graph, {circuit.graph.num_edges} edges, "
            f"{'scores' if circuit.scores is not None else 'no scores'}, {kept}")


__all__ = ["FAMILY", "check_mappable", "config", "describe", "edge_order", "from_dict", "from_tensors", "graph_of",
           "is_eap_json", "joined_embeddings", "load", "matrix_index", "node_names", "prune", "save", "to_dict", "to_tensors"]
