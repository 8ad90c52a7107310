"""Edge masks on unmodified models, against independent computations (GPT-2 and Llama with grouped queries)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates, capture_activations, count_hooks
from subnetlab.intervene.edges import apply_edges, capture_writers, writer_means
from subnetlab.models.graph import Graph
from tests.conftest import output_of, tiny_inputs, tiny_model

EDGE_FAMILIES = ["gpt2", "llama"]


def _values(kind, m, clean, corrupted):
    """The writer values and the node-level gates' values of the same ablation."""
    if kind == "zero":
        return None, None
    if kind == "mean":
        means = writer_means(m.model, m.adapter, [clean, corrupted])
        return means, means.components
    return capture_writers(m.model, m.adapter, corrupted), capture_activations(m.model, m.adapter, corrupted)


@pytest.fixture(params=EDGE_FAMILIES)
def edge_family(request):
    return request.param


@pytest.mark.parametrize("kind", ["corrupted", "mean", "zero"])
def test_every_edge_kept_is_the_model(edge_family, kind, one_thread):
    m = tiny_model(edge_family, layers=2)
    clean, corrupted = tiny_inputs(edge_family, seed=0), tiny_inputs(edge_family, seed=1)
    graph = Graph.from_adapter(m.adapter)
    values, _ = _values(kind, m, clean, corrupted)
    with torch.no_grad():
        plain = output_of(m.model, clean)
        with apply_edges(m.model, m.adapter, graph, torch.ones(graph.num_edges), values):
            edged = output_of(m.model, clean)
    assert count_hooks(m.model) == 0
    assert (plain - edged).abs().max() <= 1e-5


@pytest.mark.parametrize("kind", ["corrupted", "mean", "zero"])
@pytest.mark.parametrize("node", ["a0.h1", "m0", "a1.h3"])
def test_all_outgoing_edges_removed_is_node_ablation(edge_family, kind, node, one_thread):
    m = tiny_model(edge_family, layers=2)
    clean, corrupted = tiny_inputs(edge_family, seed=0), tiny_inputs(edge_family, seed=1)
    graph = Graph.from_adapter(m.adapter)
    values, component_values = _values(kind, m, clean, corrupted)
    mask = torch.ones(graph.num_edges)
    mask[graph.edges_from(node)] = 0
    heads, mlps = torch.ones(2, m.adapter.num_heads), torch.ones(2)
    if node.startswith("m"):
        mlps[int(node[1:])] = 0
    else:
        layer, head = node[1:].split(".h")
        heads[int(layer), int(head)] = 0
    with torch.no_grad():
        with apply_gates(m.model, m.adapter, heads, mlps, ablation=component_values):
            gated = output_of(m.model, clean)
        with apply_edges(m.model, m.adapter, graph, mask, values):
            edged = output_of(m.model, clean)
        plain = output_of(m.model, clean)
    assert (gated - edged).abs().max() <= 1e-5
    assert (gated - plain).abs().max() > 1e-3  # the ablation really changes the output


def _gpt2_by_hand(model, ids: torch.Tensor, ids_k: torch.Tensor, drop_head_to_logits: int | None) -> torch.Tensor:
    """A 1-layer GPT-2 computed from its weights. Head 2's key reads the residual built from ``ids_k``'s token
    embedding (the edge tok_embeds -> a0.h2<k> cut, corrupted); ``drop_head_to_logits``: that head's output is left
    out of the logits' input (the edge a0.hX -> logits cut, zero)."""
    t, block = model.transformer, model.transformer.h[0]
    H, D = model.config.n_head, model.config.n_embd
    d, P = D // H, ids.shape[1]
    pos = t.wpe.weight[:P]
    resid = t.wte.weight[ids] + pos  # [B, P, D]
    resid_k = t.wte.weight[ids_k] + pos
    ln = lambda x, mod: F.layer_norm(x, (D,), mod.weight, mod.bias, mod.eps)  # noqa: E731
    W, b = block.attn.c_attn.weight, block.attn.c_attn.bias  # [D, 3D], [3D]
    x, xk = ln(resid, block.ln_1), ln(resid_k, block.ln_1)
    causal = torch.tril(torch.ones(P, P, dtype=torch.bool))
    heads = []
    for h in range(H):
        cols = lambda part: slice(part * D + h * d, part * D + (h + 1) * d)  # noqa: E731
        q = x @ W[:, cols(0)] + b[cols(0)]
        k = (xk if h == 2 else x) @ W[:, cols(1)] + b[cols(1)]
        v = x @ W[:, cols(2)] + b[cols(2)]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        heads.append(torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v)  # [B, P, d]
    Wo = block.attn.c_proj.weight  # [D, D], rows = head slices
    outs = [heads[h] @ Wo[h * d:(h + 1) * d] for h in range(H)]
    mid = resid + sum(outs) + block.attn.c_proj.bias
    mlp = block.mlp.c_proj(F.gelu(block.mlp.c_fc(ln(mid, block.ln_2)), approximate="tanh"))
    final = mid + mlp
    if drop_head_to_logits is not None:
        final = final - outs[drop_head_to_logits]
    return model.lm_head(ln(final, t.ln_f))


@pytest.mark.parametrize("edge,hand", [("tok_embeds->a0.h2<k>", dict(corrupt_key=True)),
                                       ("a0.h1->logits", dict(drop=1))])
def test_one_removed_edge_by_hand_on_a_one_layer_model(edge, hand, one_thread):
    m = tiny_model("gpt2", layers=1)
    m.model.config.activation_function = "gelu_new"
    clean, corrupted = tiny_inputs("gpt2", seed=0), tiny_inputs("gpt2", seed=1)
    graph = Graph.from_adapter(m.adapter)
    mask = torch.ones(graph.num_edges)
    mask[graph.edge_index(edge)] = 0
    values = capture_writers(m.model, m.adapter, corrupted) if hand.get("corrupt_key") else None
    with torch.no_grad():
        with apply_edges(m.model, m.adapter, graph, mask, values):
            edged = output_of(m.model, clean)
        ids = clean["input_ids"]
        expected = _gpt2_by_hand(m.model, ids, corrupted["input_ids"] if hand.get("corrupt_key") else ids,
                                 hand.get("drop"))
        unchanged = _gpt2_by_hand(m.model, ids, ids, None)
    assert (unchanged - m.model(**clean).logits).abs().max() <= 1e-5  # the hand computation is GPT-2
    assert (edged - expected).abs().max() <= 1e-5
    assert (edged - unchanged).abs().max() > 1e-3


def _projections(m, inputs, graph, mask, values):
    """The query and key projections' outputs of layer 1 under the edge mask."""
    seen = {}
    block = m.adapter.layers()[1]
    with torch.no_grad(), apply_edges(m.model, m.adapter, graph, mask, values):
        if m.adapter.spec.key is None:
            hs = [block.attn.c_attn.register_forward_hook(lambda mod, a, out: seen.update(qkv=out))]
        else:
            hs = [block.self_attn.q_proj.register_forward_hook(lambda mod, a, out: seen.update(q=out)),
                  block.self_attn.k_proj.register_forward_hook(lambda mod, a, out: seen.update(k=out))]
        try:
            m.model(**inputs)
        finally:
            for h in hs:
                h.remove()
    if "qkv" in seen:
        D = m.adapter.hidden_size
        return seen["qkv"][..., :D], seen["qkv"][..., D:2 * D]
    return seen["q"], seen["k"]


def test_query_key_and_value_readers_get_their_own_inputs(edge_family, one_thread):
    m = tiny_model(edge_family, layers=2)
    clean, corrupted = tiny_inputs(edge_family, seed=0), tiny_inputs(edge_family, seed=1)
    graph = Graph.from_adapter(m.adapter)
    values = capture_writers(m.model, m.adapter, corrupted)
    key = "a1.h1<k>" if graph.group == 1 else "a1.kv1<k>"
    mask = torch.ones(graph.num_edges)
    mask[graph.edge_index(f"a0.h0->{key}")] = 0
    q_full, k_full = _projections(m, clean, graph, torch.ones(graph.num_edges), values)
    q_cut, k_cut = _projections(m, clean, graph, mask, values)
    d = m.adapter.head_dim
    assert (q_cut - q_full).abs().max() <= 1e-6  # no query reads the cut edge
    assert (k_cut[..., d:2 * d] - k_full[..., d:2 * d]).abs().max() > 1e-3  # key/value head 1's key does
    k_cut[..., d:2 * d] = k_full[..., d:2 * d]
    assert (k_cut - k_full).abs().max() <= 1e-6  # and no other key


def test_post_ln_families_are_refused():
    m = tiny_model("bert")
    graph = Graph.from_adapter(m.adapter)
    assert graph.num_edges > 0  # the graph is defined; the intervention is not
    with pytest.raises(SubnetlabError, match="post-LN"):
        apply_edges(m.model, m.adapter, graph, torch.ones(graph.num_edges))


def test_hard_concrete_source_and_gradients_reach_the_mask(one_thread):
    m = tiny_model("llama", layers=2)
    graph = Graph.from_adapter(m.adapter)
    clean = tiny_inputs("llama")
    logits = torch.zeros(graph.num_edges, requires_grad=True)
    for p in m.model.parameters():
        p.requires_grad_(False)
    with apply_edges(m.model, m.adapter, graph, source=lambda: torch.sigmoid(logits)):
        output_of(m.model, clean).sum().backward()
    assert logits.grad is not None and bool((logits.grad != 0).all())


def test_means_over_several_batches_are_the_means_of_their_union(one_thread):
    """``collect_means`` summed a scalar token count with a helper that padded per-position sums (it failed on a
    second batch); the means of two batches are those of the two stacked into one."""
    m = tiny_model("gpt2", layers=2)
    a, b = tiny_inputs("gpt2", seed=0), tiny_inputs("gpt2", seed=1)
    both = {k: torch.cat([a[k], b[k]]) for k in a}
    split, joined = writer_means(m.model, m.adapter, [a, b]), writer_means(m.model, m.adapter, [both])
    for x, y in zip(split.embeddings + split.components.heads + split.components.mlps,
                    joined.embeddings + joined.components.heads + joined.components.mlps):
        assert (x - y).abs().max() <= 1e-6
