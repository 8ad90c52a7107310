"""Greedy selection (EAP-IG's ``apply_greedy``) and MIB's pruning (EAP-IG's ``Graph.prune``) on a hand-worked graph.

The 1-layer, 1-head GPT-2 with one embedding node has 8 edges (index: name, score)::

    0 input->a0.h0<q>  +0.9     4 a0.h0->m0      +0.6
    1 input->a0.h0<k>  +0.1     5 input->logits  +0.2
    2 input->a0.h0<v>  -0.8     6 a0.h0->logits  +0.3
    3 input->m0        +0.7     7 m0->logits     -0.5

Greedy by |score| from the logits: the candidates are the edges into the logits (0.2, 0.3, 0.5): m0->logits puts
m0 in the circuit, so input->m0 (0.7) and a0.h0->m0 (0.6) become candidates; input->m0 is next, then a0.h0->m0,
which makes the head's q/k/v edges candidates; input->a0.h0<q> (0.9) is fourth. By signed score: a0.h0->logits
(+0.3), then input->a0.h0<q> (+0.9).
"""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import FAMILIES
from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph

SCORES = {"input->a0.h0<q>": 0.9, "input->a0.h0<k>": 0.1, "input->a0.h0<v>": -0.8, "input->m0": 0.7,
          "a0.h0->m0": 0.6, "input->logits": 0.2, "a0.h0->logits": 0.3, "m0->logits": -0.5}


def small_circuit(sign: str = "absolute") -> Circuit:
    graph = Graph.for_family(FAMILIES["gpt2"], 1, 1, embedding_nodes=1)
    scores = torch.zeros(graph.num_edges)
    for name, value in SCORES.items():
        scores[graph.edge_index(name)] = value
    return Circuit(graph, scores, score_sign=sign)


def names(circuit: Circuit) -> set[str]:
    return {circuit.graph.edge_names[i] for i in torch.nonzero(circuit.kept()).flatten().tolist()}


def test_greedy_follows_the_logits_up_as_worked_by_hand():
    c = small_circuit()
    assert names(c.greedy(1)) == {"m0->logits"}
    assert names(c.greedy(4)) == {"m0->logits", "input->m0", "a0.h0->m0", "input->a0.h0<q>"}
    assert names(c.top_k(4)) == {"input->a0.h0<q>", "input->a0.h0<v>", "input->m0", "a0.h0->m0"}  # not greedy's
    assert names(small_circuit("signed").greedy(2)) == {"a0.h0->logits", "input->a0.h0<q>"}
    assert c.greedy(8).kept().all() and not c.greedy(0).kept().any()
    with pytest.raises(SubnetlabError, match="greedy selection of 9 edges"):
        c.greedy(9)


def test_pruning_drops_what_no_longer_connects_as_worked_by_hand():
    c = small_circuit()
    # greedy(3) keeps a0.h0->m0 but none of the head's inputs: the head goes, and its edge with it
    assert names(c.greedy(3).pruned()) == {"m0->logits", "input->m0"}
    assert names(c.greedy(4).pruned()) == names(c.greedy(4))  # connected already
    # top-3 feeds the head and m0, neither of which reaches the logits: nothing is left
    assert names(c.top_k(3).pruned()) == set()
    # without embedding nodes the embeddings feed every reader: a head with no kept input still has one
    graph = Graph.for_family(FAMILIES["gpt2"], 1, 1, embedding_nodes=0)
    keep = torch.tensor([name in ("a0.h0->m0", "m0->logits") for name in graph.edge_names])
    assert names(Circuit(graph, None, keep).pruned()) == {"a0.h0->m0", "m0->logits"}


def test_greedy_is_the_connected_selection_without_its_corrupted_rounds():
    """Both take edges best first among those whose reader's node is already connected to the logits."""
    graph = Graph.for_family(FAMILIES["gpt2"], 2, 2, embedding_nodes=2)
    scores = torch.randn(graph.num_edges, generator=torch.Generator().manual_seed(0))
    c = Circuit(graph, scores)
    for k in (1, 5, 17, graph.num_edges // 2):
        assert torch.equal(c.greedy(k).kept(), c.connected(k).kept())
