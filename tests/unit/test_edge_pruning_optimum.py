"""Edge Pruning against the exhaustive optimum on graphs small enough to score every subset of edges.

The optimum is computed here independently of the library's repair: every subset of the graph's edges applied with
``intervene.edges.apply_edges`` (removed edges patched from the corrupted prompt), its mean logit difference
turned into faithfulness ``f = (m(C) - m(empty)) / (m(N) - m(empty))``, the best subset of each size taken.

Measured (demo preset, 150 steps, connected selection; gap = optimum - pruned f at each kept-edge count 1..n-1):

* 8 edges (1 layer, 1 head, one embedding node), as trained (seed 0): 0, 0, 0, 0.319, 0, 0, 0;
  greedy repair and 3 restarts: 0 at every size.
* 13 edges (1 layer, 2 heads), as trained (seed 0): 0, 0, 0.049, 0.053, 0.296, 0.177, 0.173, 0.002, 0, 0, 0, 0;
  greedy repair alone (seed 0): 0, 0, 0.049, 0, 0.027, 0, 0, 0, 0, 0, 0, 0;
  greedy repair and 3 restarts: 0 at every size.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from subnetlab.intervene.edges import apply_edges, capture_writers
from subnetlab.methods.edge_pruning.config import preset_config
from subnetlab.methods.edge_pruning.train import prune_edges
from subnetlab.models.graph import Graph
from tests.conftest import tiny_model
from tests.unit.test_edge_pruning import _pairs

GOAL = 0.02


@torch.no_grad()
def exhaustive_faithfulness(m, graph, data) -> dict[tuple[int, ...], float]:
    """f of the logit difference for every subset of the graph's edges."""
    batch = data.batch_at(list(range(data.size)))
    values = capture_writers(m.model, m.adapter, {"input_ids": batch["corrupted_input_ids"]})
    rows = torch.arange(data.size)
    diffs = {}
    for bits in itertools.product((0, 1), repeat=graph.num_edges):
        with apply_edges(m.model, m.adapter, graph, torch.tensor(bits, dtype=torch.float), values):
            logits = m.model(input_ids=batch["input_ids"]).logits[:, -1]
        diffs[bits] = float((logits[rows, batch["answer_id"]] - logits[rows, batch["wrong_id"]]).mean())
    full, empty = diffs[(1,) * graph.num_edges], diffs[(0,) * graph.num_edges]
    return {bits: (d - empty) / (full - empty) for bits, d in diffs.items()}


@pytest.mark.parametrize("heads", [1, pytest.param(2, marks=pytest.mark.integration)], ids=["8-edges", "13-edges"])
def test_repaired_pruning_reaches_the_exhaustive_optimum_at_every_size(heads, one_thread):
    m = tiny_model("gpt2", layers=1, heads=heads)
    data = _pairs(m, n=32)
    graph = Graph.from_adapter(m.adapter, embedding_nodes=1)
    assert graph.num_edges == {1: 8, 2: 13}[heads]
    table = exhaustive_faithfulness(m, graph, data)
    n = graph.num_edges
    gaps = {}
    for kept in range(1, n):
        best = max(f for bits, f in table.items() if sum(bits) == kept)
        cfg = preset_config("demo", 1 - kept / n, seed=0, embedding_nodes=1, warmup_steps=100, total_steps=150,
                            repair="greedy", restarts=3)
        result = prune_edges(m.model, m.adapter, data, cfg)
        mine = tuple(int(x) for x in result.selection.edges.tolist())
        assert sum(mine) == kept
        gaps[kept] = best - table[mine]
        # the repair's own exact loss is minus this f (it measures the same circuit the same way)
        assert -min(result.repair["loss_repaired"]) == pytest.approx(table[mine], abs=1e-5)
    print(f"{n} edges, gap per kept-edge count:", {k: round(g, 3) for k, g in gaps.items()})
    assert max(gaps.values()) <= GOAL, gaps


def test_greedy_repair_makes_the_best_swap_until_none_helps():
    """A loss with a known optimum: the repair swaps until it reaches it, and double swaps cross a plateau."""
    from subnetlab.methods.edge_pruning.select import greedy_repair

    weights = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])

    def loss(keep):  # lower is better: keep the heaviest edges
        return -float(weights[keep].sum())

    start = torch.tensor([1, 1, 1, 0, 0, 0], dtype=torch.bool)
    fixed = greedy_repair(start, loss, torch.zeros(6), pool=6, depth=1)
    assert fixed.edges.tolist() == [False, False, False, True, True, True]
    assert (fixed.loss_before, fixed.loss_after) == (-3.0, -12.0)
    assert fixed.swaps == 3  # best swap first: 0->5, 1->4, 2->3

    def path_loss(keep):  # edges 2 and 3 only help together (a two-edge path); any single swap is no better
        return -(10.0 if bool(keep[2] and keep[3]) else 0.0) - 0.1 * float(keep[0])

    start = torch.tensor([1, 1, 0, 0], dtype=torch.bool)
    assert greedy_repair(start, path_loss, torch.zeros(4), pool=4, depth=1).edges.tolist() == start.tolist()
    crossed = greedy_repair(start, path_loss, torch.zeros(4), pool=4, depth=2)
    assert crossed.edges.tolist() == [False, False, True, True] and crossed.loss_after == -10.0
