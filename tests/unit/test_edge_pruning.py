"""Edge Pruning on tiny models: exact target, resume, and the circuit against an exhaustive search."""

from __future__ import annotations

import itertools

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import count_hooks
from subnetlab.methods.edge_pruning.config import EdgePruneConfig, preset_config
from subnetlab.methods.edge_pruning.data import paired_data
from subnetlab.methods.edge_pruning.evaluate import EdgeScorer, faithfulness
from subnetlab.methods.edge_pruning.select import select_top_edges
from subnetlab.methods.edge_pruning.train import prune_edges
from subnetlab.methods.hard_concrete.distribution import HardConcreteGates, HardConcreteMask
from subnetlab.models.graph import Graph
from tests.conftest import tiny_model


def _pairs(m, n: int = 64, length: int = 6, seed: int = 0):
    """Random prompts and their copies with token 2 replaced; answer / wrong: the model's top tokens on each."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 97, (n, length), generator=g)
    corrupted = ids.clone()
    corrupted[:, 2] = torch.randint(3, 97, (n,), generator=g)
    with torch.no_grad():
        clean_logits = m.model(input_ids=ids).logits[:, -1]
        corrupted_logits = m.model(input_ids=corrupted).logits[:, -1]
    return paired_data(ids, corrupted, answer=clean_logits.argmax(-1), wrong=corrupted_logits.argmax(-1))


def test_flat_masks_share_the_gates_distribution():
    masks = HardConcreteMask(5, seed=3, init_log_alpha=0.5)
    expected = 1 - torch.sigmoid(2 / 3 * torch.log(torch.tensor(0.1 / 1.1)) - masks.log_alpha)  # Louizos et al.
    assert torch.allclose(masks.expected_l0(), expected)
    again = HardConcreteMask(5, seed=3, init_log_alpha=0.5)
    assert torch.equal(masks.sample(), again.sample())  # seeded


def test_top_edges_meet_the_target_exactly():
    scores = torch.tensor([0.0, 0.9, 0.0, 0.5, 0.0, 0.7])
    tiebreak = torch.tensor([-1.0, 0.0, 2.0, 0.0, 1.0, 0.0])
    assert select_top_edges(scores, tiebreak, 0.5).tolist() == [0, 1, 0, 1, 0, 1]
    assert select_top_edges(scores, tiebreak, 1 / 6).tolist() == [0, 1, 1, 1, 1, 1]  # ties: larger log-alpha first


def test_pruning_reaches_the_target_and_resumes_bit_identically(tmp_path, one_thread):
    m = tiny_model("llama", layers=2)
    data = _pairs(m, n=32)
    cfg = preset_config("demo", 0.8, seed=2, batch_size=8, warmup_steps=20, total_steps=30, checkpoint_every=10)
    whole = prune_edges(m.model, m.adapter, data, cfg)
    assert count_hooks(m.model) == 0
    assert whole.selection.edges.sum() == round(0.2 * whole.graph.num_edges)

    class Killed(Exception):
        pass

    def kill(step):
        if step == 17:
            raise Killed

    with pytest.raises(Killed):
        prune_edges(m.model, m.adapter, data, cfg, run_dir=tmp_path, on_step=kill)
    resumed = prune_edges(m.model, m.adapter, data, cfg, run_dir=tmp_path)
    assert resumed.resumed_from == 10
    assert torch.equal(resumed.log_alpha_edges, whole.log_alpha_edges)
    assert torch.equal(resumed.log_alpha_nodes, whole.log_alpha_nodes)
    assert torch.equal(resumed.selection.edges, whole.selection.edges)
    other = preset_config("demo", 0.7, seed=2, batch_size=8, warmup_steps=20, total_steps=30)
    with pytest.raises(SubnetlabError, match="different edge pruning config"):
        prune_edges(m.model, m.adapter, data, other, run_dir=tmp_path)


def test_settings_are_checked():
    with pytest.raises(SubnetlabError, match="ablation"):
        EdgePruneConfig(ablation="resample")
    with pytest.raises(SubnetlabError, match="node masks"):
        EdgePruneConfig(node_masks=False, node_sparsity=0.5)
    with pytest.raises(SubnetlabError, match="sparsity"):
        EdgePruneConfig(sparsity=1.0)


# measured with the demo preset (seed 0) on the 8-edge model below: per kept-edge count, how far the pruned
# circuit's faithfulness (logit difference) falls below the best subset of that size found by exhaustive search
MEASURED_GAP = {1: 0.0, 2: 0.225, 3: 0.290, 4: 0.087, 5: 0.0, 6: 0.0, 7: 0.0}


def test_pruned_circuits_against_an_exhaustive_search(one_thread):
    """A 1-layer, 1-head GPT-2 with one embedding node has 8 edges: every subset is scored.

    Only 5 edges carry the corruption (token 2 reaches the last position through the key and value of the head);
    with 5 or more kept, pruning finds a circuit as faithful as the full model. Below that it misses the best
    subset by up to 0.29 in faithfulness (``MEASURED_GAP``): it keeps an edge into the MLP whose own edge to the
    logits it removed (a dead end), a choice hard-concrete gradients cannot undo once a mask saturates.
    """
    m = tiny_model("gpt2", layers=1, heads=1)
    data = _pairs(m, n=32)
    graph = Graph.from_adapter(m.adapter, embedding_nodes=1)
    assert graph.num_edges == 8
    scorer = EdgeScorer(m.model, m.adapter, graph, data)
    table = {bits: scorer(torch.tensor(bits, dtype=torch.float)) for bits in itertools.product((0, 1), repeat=8)}
    full, empty = scorer.full["logit_diff"], table[(0,) * 8]["logit_diff"]
    assert table[(1,) * 8]["kl"] <= 1e-9 and abs(table[(1,) * 8]["logit_diff"] - full) <= 1e-5
    for kept in range(1, 8):
        best = max(faithfulness(table[b]["logit_diff"], full, empty) for b in table if sum(b) == kept)
        result = prune_edges(m.model, m.adapter, data, preset_config("demo", 1 - kept / 8, seed=0, embedding_nodes=1, selection="topk",
                                                                            warmup_steps=100, total_steps=150))
        mine = tuple(int(x) for x in result.selection.edges.tolist())
        assert sum(mine) == kept
        gap = best - faithfulness(table[mine]["logit_diff"], full, empty)
        print(f"kept {kept}: faithfulness gap {gap:.3f}")
        assert gap <= MEASURED_GAP[kept] + 0.02, (kept, gap)
