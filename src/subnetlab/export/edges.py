"""Exporting an edge circuit: the heads and MLPs it leaves without effect on the logits are removed physically.

An edge circuit is a smaller standard model only when it is a node circuit in
disguise. Removing every outgoing edge of a node equals ablating the node with
the same ablation values (tests/unit/test_edges.py), so:

* a node is **live** when it has a kept edge into a live reader (the logits are
  always live; a head's query reader is live with its head, a key/value reader
  with any query head of its group, an MLP's reader with its MLP). Found from
  the top down, since a reader lies downstream of its writers. The embeddings
  cannot be removed and count as live. Every other node only reaches the logits
  through removed edges or through nodes that do not: it is removed (ablated),
  and the structured export slices it away and folds its ablation value
  (``Circuit.live_writers``).
* the circuit is **exactly** that node circuit when every edge from a live
  writer into a live reader is kept. Otherwise some kept node reads only part of
  the residual stream, which no standard transformer can: its reader sees the
  sum of everything upstream. Such a circuit is refused, naming the missing
  edges, unless the caller asks for its node-level closure (every edge among
  the live nodes kept, ``Circuit.closure_edges``), which the record's notes
  state differs from the circuit.

Ablation: mean and zero values are fixed and fold into biases (mean: a file of
the components' mean activations, ``ComponentValues``). Corrupted-prompt
ablation replaces a removed edge with the writer's output on each prompt's own
counterfactual, which has no fixed value to fold.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph
from subnetlab.subnetwork.subnetwork import Subnetwork

SHOWN = 5  # missing edges named in the refusal


@dataclass(frozen=True)
class NodeCircuit:
    """The node circuit of an edge circuit: head and MLP masks, the edges the closure adds, the notes."""

    heads: Tensor  # [layers, heads] 1 = kept
    mlps: Tensor  # [layers]
    missing: tuple[str, ...]  # edges between live nodes the circuit removed (empty: the circuit is a node circuit)
    notes: tuple[str, ...]


def live_nodes(graph: Graph, kept: Tensor) -> set[str]:
    """Writers with a path of kept edges to the logits, and the embeddings (see the module docstring)."""
    return {graph.writers[w] for w in Circuit(graph, in_graph=kept).live_writers()}


def node_circuit(subnetwork: Subnetwork, closure: bool = False) -> NodeCircuit:
    """The heads and MLPs an edge circuit keeps; refused when it is no node circuit, unless ``closure``."""
    if subnetwork.kind != "edges":
        raise SubnetlabError("subnetwork: not an edge circuit", setting="subnetwork")
    circuit = subnetwork.circuit()
    graph, kept = circuit.graph, subnetwork.edges
    live = circuit.live_writers()
    missing = [graph.edge_names[i] for i in circuit.closure_edges()]
    heads = torch.tensor([[float(graph.head_writer(l, h) in live) for h in range(graph.num_heads)]
                          for l in range(graph.num_layers)])
    mlps = torch.tensor([float(graph.mlp_writer(l) in live) for l in range(graph.num_layers)])
    removed = int((heads == 0).sum() + (mlps == 0).sum())
    notes = [f"edge circuit: {int(kept.sum())} of {graph.num_edges} edges; heads and MLPs removed: {removed} (they "
             "reach the logits only through removed edges)"]
    if missing:
        example = ", ".join(missing[:SHOWN]) + (f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else "")
        if not closure:
            raise SubnetlabError(
                f"edges_as_nodes is off and the edge circuit removes {len(missing)} edge(s) between nodes it keeps "
                f"({example}); a standard transformer's reader sees the whole residual stream, so this circuit is no "
                "smaller standard model. Turn it on to export the node-level closure instead: every edge among the "
                "kept nodes kept, a model that differs from the circuit", setting="edges_as_nodes")
        notes.append(f"node-level closure: the exported model keeps every edge among the kept nodes, "
                     f"{int(kept.sum()) + len(missing)} edges where the circuit keeps {int(kept.sum())} (added: "
                     f"{example}); it differs from the circuit")
    return NodeCircuit(heads, mlps, tuple(missing), tuple(notes))


def check_edge_ablation(subnetwork: Subnetwork, named: str | None) -> str | None:
    """A note when the ablation exported (``"zero"``, a mean-activations file, None: none named) differs from the
    circuit's; refused when none is named and the circuit's corrupted-prompt ablation has no fixed value to fold."""
    found = subnetwork.ablation or "corrupted"
    if named is None:
        if found == "corrupted":
            raise SubnetlabError(
                "ablation: the edge circuit was found with corrupted-prompt ablation, whose removed edges carry each "
                "prompt's own counterfactual value, not a fixed value a bias can hold; name a file of mean activations "
                "or zero to export the circuit under that ablation instead", setting="ablation")
        return None
    kind = "zero" if named == "zero" else "mean"
    if kind != found:
        return f"ablation: the circuit was found with {found} ablation; the export folds {kind} values"
    return None


def structured_of(adapter, subnetwork: Subnetwork, circuit: NodeCircuit) -> Subnetwork:
    """The structured subnetwork of ``circuit`` on ``adapter``'s model (the edge circuit checked against it)."""
    try:
        subnetwork.check(adapter)
    except SubnetlabError as e:
        raise SubnetlabError(f"subnetwork: {e}", setting="subnetwork") from None
    return Subnetwork.structured(adapter, circuit.heads, circuit.mlps, method=subnetwork.method,
                                 seed=subnetwork.seed, target_sparsity=subnetwork.target_sparsity,
                                 ablation=subnetwork.ablation)


__all__ = ["NodeCircuit", "check_edge_ablation", "live_nodes", "node_circuit", "structured_of"]
