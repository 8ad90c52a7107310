"""Faithfulness as MIB measures it: top-k circuits, f, CPR and CMD; node-level circuits on the same scale."""

from __future__ import annotations

import math

import pytest
import torch

from subnetlab.analysis.faithfulness import (
    CIRCUIT_SIZES,
    circuit_faithfulness,
    circuit_size,
    curve_from_masks,
    curve_from_scores,
    top_k,
)
from subnetlab.errors import SubnetlabError

N = 1000  # items of the toy curves: every size is a whole number of items


def toy(f, seen=None):
    """``evaluate`` of a toy model whose metric is 2 + 3 f(k / N) for the k items kept (m(empty) 2, m(N) 5)."""
    def evaluate(keep):
        if seen is not None:
            seen.append(keep.clone())
        return {"logit_diff": 2.0 + 3.0 * f(int(keep.sum()) / N), "kl": 4.0 * (1 - f(int(keep.sum()) / N))}
    return evaluate


def test_a_linear_curve_has_the_closed_form_areas():
    curve = curve_from_scores(torch.arange(N, dtype=torch.float), toy(lambda x: x))
    assert curve.fractions == CIRCUIT_SIZES and curve.counts == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
    assert curve.faithfulness["logit_diff"] == pytest.approx(CIRCUIT_SIZES, abs=1e-12)
    # f(x) = x on [0.001, 1]: the trapezoid rule is exact for a line
    assert curve.cpr == pytest.approx((1 - 0.001**2) / 2, abs=1e-12)  # 0.4999995
    assert curve.cmd == pytest.approx((1 - 0.001) - (1 - 0.001**2) / 2, abs=1e-12)  # 0.4990005
    assert curve.full == {"logit_diff": 5.0, "kl": 0.0} and curve.empty == {"logit_diff": 2.0, "kl": 4.0}
    assert curve.areas["kl"]["cpr"] == pytest.approx(curve.cpr, abs=1e-12)  # KL's f is 1 - KL(C) / KL(empty) = x


def test_overshooting_counts_toward_cmd_and_a_perfect_circuit_scores_0999():
    def g(x):  # rises to 1 at 20 %, overshoots to 1.6 at 50 %, back to 1 with every item: kinks on grid points
        return 5 * x if x <= 0.2 else 1 + 2 * (x - 0.2) if x <= 0.5 else 1.6 - 1.2 * (x - 0.5)

    curve = curve_from_scores(torch.arange(N, dtype=torch.float), toy(g))
    # each piece is a line, so the trapezoid rule gives the integrals exactly
    cpr = 2.5 * (0.2**2 - 0.001**2) + (0.3 + 0.3**2) + (0.5 * 1.6 - 0.6 * 0.5**2)  # 1.1399975
    cmd = ((0.2 - 0.001) - 2.5 * (0.2**2 - 0.001**2)) + 0.3**2 + (0.5 * 0.6 - 0.6 * 0.5**2)  # 0.3390025
    assert curve.cpr == pytest.approx(cpr, abs=1e-12) and curve.cmd == pytest.approx(cmd, abs=1e-12)
    perfect = curve_from_scores(torch.arange(N, dtype=torch.float), toy(lambda x: 1.0 if x > 0 else 0.0))
    assert perfect.cpr == pytest.approx(0.999, abs=1e-12) and perfect.cmd == pytest.approx(0.0, abs=1e-12)


def test_circuits_are_the_top_k_by_absolute_score_ties_to_the_lower_index():
    scores = torch.tensor([0.5, -3.0, 2.0, 0.0, -2.0, 1.0])
    assert top_k(scores, 3).tolist() == [False, True, True, False, True, False]  # |-3|, 2, |-2| (2 before -2)
    assert top_k(scores, 3, absolute=False).tolist() == [True, False, True, False, False, True]
    seen = []
    curve_from_scores(torch.randn(N, generator=torch.Generator().manual_seed(0)), toy(lambda x: x, seen))
    nested = seen[2:]  # after the full model and the empty circuit: each circuit contains the smaller ones
    assert all(bool((small <= big).all()) for small, big in zip(nested, nested[1:]))
    assert [circuit_size(s, 32491) for s in CIRCUIT_SIZES] == [int(s * 32491) for s in CIRCUIT_SIZES]  # MIB's sizes


def test_circuits_given_as_masks_use_their_own_sizes():
    masks = [torch.arange(N) < k for k in (500, 10, 1000)]
    curve = curve_from_masks(masks, toy(lambda x: x))
    assert curve.fractions == (0.01, 0.5, 1.0) and curve.counts == (10, 500, 1000)
    assert curve.cpr == pytest.approx((1 - 0.01**2) / 2, abs=1e-12)
    assert circuit_faithfulness(masks[0], toy(lambda x: x))["logit_diff"] == pytest.approx(0.5)
    with pytest.raises(SubnetlabError, match="other than 0 and 1"):
        curve_from_masks([torch.full((N,), 0.5), torch.ones(N)], toy(lambda x: x))


def test_a_metric_the_corruption_does_not_move_is_refused():
    with pytest.raises(SubnetlabError, match="faithfulness is undefined") as e:
        curve_from_scores(torch.ones(10), lambda keep: {"logit_diff": 1.0})
    assert e.value.setting == "metric"


# ------------------------------------------------------------ node level, on a tiny GPT-2
@pytest.fixture(scope="module")
def tiny():
    from transformers import GPT2Config

    from subnetlab.models import build_model, get_adapter
    from subnetlab.tasks import get_task
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    torch.set_num_threads(1)
    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    model = build_model(config, head="causal-lm", seed=0).model.eval()
    task = get_task("circuit:ioi", n_train=4, n_eval=6, seed=0).bind(tok)
    return model, get_adapter(model), task, tok


def _by_hand(model, batch, keep_heads, keep_mlps):
    """Mean logit difference with every removed head / MLP output replaced by its output on the corrupted
    prompt, written with plain hooks on GPT-2's modules (not subnetlab's gates)."""
    blocks = model.transformer.h
    captured = {}
    hooks = []
    try:
        for l, block in enumerate(blocks):
            hooks.append(block.attn.c_proj.register_forward_pre_hook(
                lambda m, a, l=l: captured.__setitem__(("head", l), a[0].detach().clone())))
            hooks.append(block.mlp.register_forward_hook(
                lambda m, a, o, l=l: captured.__setitem__(("mlp", l), o.detach().clone())))
        with torch.no_grad():
            model(input_ids=batch["corrupted_input_ids"], attention_mask=batch["attention_mask"])
    finally:
        for h in hooks:
            h.remove()
    d = model.config.n_embd // model.config.n_head

    def patch_heads(l):
        def pre(m, args):
            x = args[0].clone()
            for h in range(model.config.n_head):
                if not keep_heads[l][h]:
                    x[..., h * d:(h + 1) * d] = captured[("head", l)][..., h * d:(h + 1) * d]
            return (x,)
        return pre

    hooks = []
    try:
        for l, block in enumerate(blocks):
            hooks.append(block.attn.c_proj.register_forward_pre_hook(patch_heads(l)))
            if not keep_mlps[l]:
                hooks.append(block.mlp.register_forward_hook(lambda m, a, o, l=l: captured[("mlp", l)]))
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    finally:
        for h in hooks:
            h.remove()
    rows = torch.arange(len(batch["answer_id"]))
    last = logits[rows, batch["answer_index"]]
    return float((last[rows, batch["answer_id"]] - last[rows, batch["wrong_id"]]).mean())


def test_node_circuits_keep_all_is_the_model_and_one_size_matches_a_hand_computation(tiny):
    from subnetlab.analysis.circuit_evaluation import node_evaluator, node_gates, node_names, node_vector

    model, adapter, task, tok = tiny
    evaluate = node_evaluator(model, adapter, task, tok, "eval", batch_size=4)
    batch = task.pair_batch(tok, "eval", list(range(6)))
    everything = evaluate(torch.ones(6, dtype=torch.bool))
    full = _by_hand(model, batch, [[1, 1], [1, 1]], [1, 1])
    assert everything["logit_diff"] == pytest.approx(full, abs=1e-5) and abs(everything["kl"]) < 1e-6
    nothing = evaluate(torch.zeros(6, dtype=torch.bool))
    empty = _by_hand(model, batch, [[0, 0], [0, 0]], [0, 0])
    assert nothing["logit_diff"] == pytest.approx(empty, abs=1e-5)

    heads = torch.tensor([[0.9, -0.1], [0.2, 0.8]])  # scores: L0.H0 0.9, L1.H1 0.8, L1.MLP -0.7 are the top 3
    mlps = torch.tensor([0.05, -0.7])
    scores = node_vector(heads, mlps)
    assert node_names(adapter) == ["L0.H0", "L0.H1", "L0.MLP", "L1.H0", "L1.H1", "L1.MLP"]
    assert [h.tolist() for h in node_gates(top_k(scores, 3), adapter)] == [[[1.0, 0.0], [0.0, 1.0]], [0.0, 1.0]]
    curve = curve_from_scores(scores, evaluate)
    assert curve.counts == (0, 0, 0, 0, 0, 0, 0, 1, 3, 6)
    half = _by_hand(model, batch, [[1, 0], [0, 1]], [0, 1])
    f = curve.faithfulness["logit_diff"]
    assert f[8] == pytest.approx((half - empty) / (full - empty), abs=1e-4)
    assert f[9] == pytest.approx(1.0, abs=1e-9) and f[0] == pytest.approx(0.0, abs=1e-9)
    assert math.isfinite(curve.cpr) and curve.cmd >= 0


def test_edge_circuits_share_the_node_scale(tiny):
    """Every edge kept = the model; every edge out of a node cut = that node removed (patched from the corrupted
    prompt); the node and edge curves of the same ranking then agree wherever they keep the same computation."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator, node_evaluator
    from subnetlab.models.graph import Graph

    model, adapter, task, tok = tiny
    graph = Graph.from_adapter(adapter)
    edges = edge_evaluator(model, adapter, graph, task, tok, "eval", batch_size=4)
    nodes = node_evaluator(model, adapter, task, tok, "eval", batch_size=4)
    batch = task.pair_batch(tok, "eval", list(range(6)))
    everything = edges(torch.ones(graph.num_edges, dtype=torch.bool))
    assert everything["logit_diff"] == pytest.approx(_by_hand(model, batch, [[1, 1], [1, 1]], [1, 1]), abs=1e-5)
    assert abs(everything["kl"]) < 1e-6
    for writer, node in (("a0.h1", 1), ("m0", 2), ("a1.h0", 3)):
        keep = torch.ones(graph.num_edges, dtype=torch.bool)
        keep[graph.edges_from(writer)] = False
        node_keep = torch.ones(6, dtype=torch.bool)
        node_keep[node] = False
        by_edges, by_nodes = edges(keep), nodes(node_keep)
        assert by_edges == pytest.approx(by_nodes, abs=1e-5)
    # no edge kept: every reader, the logits included, sees the corrupted run = the model on the corrupted prompt
    with torch.no_grad():
        corrupted = model(input_ids=batch["corrupted_input_ids"], attention_mask=batch["attention_mask"]).logits
    rows = torch.arange(6)
    last = corrupted[rows, batch["answer_index"]]
    by_hand = float((last[rows, batch["answer_id"]] - last[rows, batch["wrong_id"]]).mean())
    assert edges(torch.zeros(graph.num_edges, dtype=torch.bool))["logit_diff"] == pytest.approx(by_hand, abs=1e-5)
    assert edges.corrupted_run["logit_diff"] == pytest.approx(by_hand, abs=1e-5) == nodes.corrupted_run["logit_diff"]
    # the node curve on the edge scale; IOI's two prompts end in the same token, and the logits read only that
    # position, so no node kept (clean embeddings, every component corrupted) is the corrupted run there too
    scaled = curve_from_scores(torch.arange(6, dtype=torch.float), nodes, empty=nodes.corrupted_run)
    assert nodes(torch.zeros(6, dtype=torch.bool))["logit_diff"] == pytest.approx(by_hand, abs=1e-5)
    assert scaled.faithfulness["logit_diff"][0] == pytest.approx(0.0, abs=1e-5)
    assert scaled.faithfulness["logit_diff"][-1] == pytest.approx(1.0)
