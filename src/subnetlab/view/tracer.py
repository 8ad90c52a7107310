"""An edge circuit as circuit-tracer / Neuronpedia graph JSON (``metadata``, ``qParams``, ``nodes``, ``links``).

The schema is circuit-tracer's ``frontend/graph_models.py`` (``Metadata``, ``QParams``, ``Node``, ``Link``),
which Neuronpedia's attribution-graph pages read. Where it fits edge circuits:

* nodes: one per component (embeddings ``layer "E"``, heads and MLPs at their layer, the logits at
  ``num_layers + 1``), ``node_id`` ``"{layer}_{feature}_{ctx}"`` as the frontend parses it, ``clerp`` the
  component's name (``a3.h5``), ``feature_type`` ``"embedding"`` / ``"logit"`` as the frontend knows them
  and ``"attention head"`` / ``"mlp"`` for components it has no type for;
* links: one per kept (writer, reader node) pair, ``weight`` the edge's score.

Where it does not, and what is lost:

* positions: the frontend lays nodes out by token position (``ctx_idx``); an edge circuit spans all positions,
  so every node is at ``ctx_idx`` 0 and the page shows one column;
* Q / K / V: a link joins two nodes, not a node and one of its inputs, so a head's query, key and value edges
  from one writer become one link; its ``weight`` is their sum and ``inputs`` lists them with their scores
  (an extra field the frontend ignores);
* no prompt, tokens, transcoders, activations or influence exist for a component circuit: empty or null.
"""

from __future__ import annotations

from typing import Any

from subnetlab.models.circuit import Circuit

SCHEMA_VERSION = 1


def _node(graph: Any, writer: int | None) -> dict[str, Any]:
    """The node of ``writer`` (None: the logits)."""
    if writer is None:
        layer, feature, kind, name = str(graph.num_layers + 1), 0, "logit", "logits"
    else:
        node, name = graph.writer_nodes[writer], graph.writers[writer]
        if node.kind == "embedding":
            layer, feature, kind = "E", node.index, "embedding"
        elif node.kind == "head":
            layer, feature, kind = str(node.layer), node.index, "attention head"
        else:
            layer, feature, kind = str(node.layer), graph.num_heads, "mlp"
    node_id = f"{layer}_{feature}_0"
    return {"node_id": node_id, "feature": feature, "layer": layer, "ctx_idx": 0, "feature_type": kind,
            "token_prob": 0.0, "is_target_logit": writer is None, "run_idx": 0, "reverse_ctx_idx": 0,
            "jsNodeId": node_id, "clerp": name, "influence": None, "activation": None}


def tracer_graph(circuit: Circuit, slug: str) -> dict[str, Any]:
    """The circuit's kept edges (all scored edges when it keeps none) as circuit-tracer's graph JSON."""
    graph = circuit.graph
    kept = circuit.in_graph.tolist() if circuit.in_graph is not None else [True] * graph.num_edges
    scores = circuit.scores.tolist() if circuit.scores is not None else [1.0] * graph.num_edges
    nodes = [_node(graph, w) for w in range(len(graph.writers))] + [_node(graph, None)]
    ids = [n["node_id"] for n in nodes]
    links: dict[tuple[str, str], dict[str, Any]] = {}
    used: set[str] = set()
    for i, (w, r) in enumerate(graph.edges):
        if not kept[i]:
            continue
        owners = graph.reader_owners[r] or (None,)
        for owner in owners:
            target = ids[-1] if owner is None else ids[owner]
            link = links.setdefault((ids[w], target), {"source": ids[w], "target": target, "weight": 0.0, "inputs": []})
            link["weight"] += scores[i]
            link["inputs"].append({"edge": graph.edge_names[i], "input": graph.reader_kinds[r], "score": scores[i]})
            used.update((ids[w], target))
    return {
        "metadata": {"slug": slug, "scan": f"subnetlab:{graph.family}", "transcoder_list": [], "prompt_tokens": [],
                     "prompt": "", "node_threshold": None, "schema_version": SCHEMA_VERSION,
                     "subnetlab": {"graph_shape": graph.shape(), "score_sign": circuit.score_sign,
                                   "edges": graph.num_edges, "kept": int(sum(kept))}},
        "qParams": {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
        "nodes": [n for n in nodes if n["node_id"] in used],
        "links": list(links.values()),
    }


__all__ = ["SCHEMA_VERSION", "tracer_graph"]
