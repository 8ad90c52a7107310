"""EAP, EAP-IG and node attribution patching against independent computations on tiny models."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import count_hooks
from subnetlab.intervene.activations import ComponentValues
from subnetlab.intervene.edges import WriterValues, apply_edges, capture_writers
from subnetlab.methods.attribution import attribute_batch, node_scores
from subnetlab.models.adapters import _get
from subnetlab.models.graph import Graph
from tests.conftest import tiny_inputs, tiny_model

FAMILIES = ["gpt2", "llama"]


def _setup(family, layers):
    m = tiny_model(family, layers=layers)
    m.model.double().eval()
    clean, corrupted = tiny_inputs(family, batch=2, length=5, seed=0), tiny_inputs(family, batch=2, length=5, seed=1)
    graph = Graph.from_adapter(m.adapter)
    answer, wrong = torch.tensor([5, 9]), torch.tensor([7, 4])

    def metric(logits, clean_logits):  # logit difference at the last position, [B]
        last = logits[:, -1]
        return last.gather(1, answer[:, None])[:, 0] - last.gather(1, wrong[:, None])[:, 0]

    return m, graph, clean, corrupted, metric


def _metric_at(m, graph, clean, values, mask, metric):
    with apply_edges(m.model, m.adapter, graph, mask, values):
        logits = m.model(**clean).logits
    return metric(logits, None).sum()


@pytest.mark.parametrize("family", FAMILIES)
def test_eap_is_the_finite_difference_of_patching_each_edge(family, one_thread):
    """EAP = d metric / d(1 - m_e) at every edge kept, with removed edges patched from the corrupted run: a central
    finite difference of the edge-masked model (float64; eps 1e-3 as Llama's RMSNorm computes in float32) on a
    1-layer model, every edge."""
    m, graph, clean, corrupted, metric = _setup(family, layers=1)
    scores = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap").double()
    assert count_hooks(m.model) == 0
    values = capture_writers(m.model, m.adapter, corrupted)
    eps = 1e-3
    by_hand = torch.zeros(graph.num_edges, dtype=torch.float64)
    with torch.no_grad():
        for e in range(graph.num_edges):
            lo, hi = torch.ones(graph.num_edges, dtype=torch.float64), torch.ones(graph.num_edges, dtype=torch.float64)
            lo[e], hi[e] = 1 - eps, 1 + eps
            by_hand[e] = (_metric_at(m, graph, clean, values, lo, metric)
                          - _metric_at(m, graph, clean, values, hi, metric)) / (2 * eps)
    scale = by_hand.abs().max()
    assert scale > 1e-3
    assert ((scores - by_hand).abs() / scale).max() < 1e-4


def _shifted(values: WriterValues, clean: WriterValues, corrupted: WriterValues) -> WriterValues:
    """``values - (clean - corrupted)`` for every writer (so a writer's delta is its clean-minus-corrupted)."""
    def f(a, c, x):
        return [ai - (ci - xi) for ai, ci, xi in zip(a, c, x)]

    return WriterValues(f(values.embeddings, clean.embeddings, corrupted.embeddings),
                        ComponentValues(f(values.components.heads, clean.components.heads, corrupted.components.heads),
                                        f(values.components.mlps, clean.components.mlps, corrupted.components.mlps)))


@pytest.mark.parametrize("family", FAMILIES)
def test_eap_ig_equals_the_integral_by_plain_autograd_on_a_fine_grid(family, one_thread):
    """EAP-IG with k = 200 against the same Riemann sum computed another way: at each alpha the embeddings are
    interpolated by a plain hook and each edge's term is minus the autograd gradient of the edge mask, with
    replacement values chosen so every writer's delta is its (clean - corrupted) output."""
    m, graph, clean, corrupted, metric = _setup(family, layers=2)
    k = 200
    scores = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap-ig", steps=k).double()
    base = m.model.base_model
    modules = [_get(base, p) for p in m.adapter.spec.embeddings]
    with torch.no_grad():
        at_clean, at_corrupted = capture_writers(m.model, m.adapter, clean), capture_writers(m.model, m.adapter, corrupted)
    by_hand = torch.zeros(graph.num_edges, dtype=torch.float64)
    for j in range(k):
        alpha = j / k
        targets = [x + alpha * (c - x) for c, x in zip(at_clean.embeddings, at_corrupted.embeddings)]
        handles = [mod.register_forward_hook(lambda _m, _a, out, t=t: t.expand_as(out).clone())
                   for mod, t in zip(modules, targets)]
        try:
            with torch.no_grad():
                here = capture_writers(m.model, m.adapter, clean)
            mask = torch.ones(graph.num_edges, dtype=torch.float64, requires_grad=True)
            _metric_at(m, graph, clean, _shifted(here, at_clean, at_corrupted), mask, metric).backward()
        finally:
            for h in handles:
                h.remove()
        by_hand -= mask.grad / k
    scale = by_hand.abs().max()
    assert scale > 1e-3
    assert ((scores - by_hand).abs() / scale).max() < 1e-6
    # EAP-IG with one step at the corrupted end differs from EAP at the clean end (a real integral here)
    eap = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap").double()
    assert ((eap - scores).abs() / scale).max() > 1e-3


@pytest.mark.parametrize("family", FAMILIES)
def test_node_scores_are_attribution_patching_of_head_and_mlp_outputs(family, one_thread):
    """Node scores (sum of a node's outgoing edge scores) = (z_corrupted - z_clean) . dm/dz on each head's
    attention output and on each MLP's output, by retained gradients of the plain model."""
    m, graph, clean, corrupted, metric = _setup(family, layers=2)
    nodes = node_scores(graph, attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric))
    a, H, d = m.adapter, m.adapter.num_heads, m.adapter.head_dim
    seen = {}

    def run(inputs, keep):
        handles = []
        for layer in range(a.num_layers):
            def pre(mod, args, layer=layer):
                z = args[0]
                if keep:
                    z.retain_grad()
                seen[("z", layer, keep)] = z
            def post(mod, args, out, layer=layer):
                if keep:
                    out.retain_grad()
                seen[("m", layer, keep)] = out
            handles += [a.head_output_module(layer).register_forward_pre_hook(pre),
                        a.mlp_output_module(layer).register_forward_hook(post)]
        try:
            return m.model(**inputs).logits
        finally:
            for h in handles:
                h.remove()

    with torch.no_grad():
        run(corrupted, False)
    metric(run(clean, True), None).sum().backward()
    for layer in range(a.num_layers):
        z, zc = seen[("z", layer, True)], seen[("z", layer, False)]
        heads = ((zc - z.detach()) * z.grad).view(*z.shape[:2], H, d).sum((0, 1, 3))
        mo, mc = seen[("m", layer, True)], seen[("m", layer, False)]
        mlp = ((mc - mo.detach()) * mo.grad).sum()
        scale = max(float(heads.abs().max()), 1e-3)
        assert torch.allclose(nodes["heads"][layer].double(), heads, atol=1e-5 * scale, rtol=1e-5)
        assert abs(float(nodes["mlps"][layer]) - float(mlp)) <= 1e-5 * max(abs(float(mlp)), 1.0)


def test_attribution_refuses_bad_settings(one_thread):
    m, graph, clean, corrupted, metric = _setup("gpt2", layers=1)
    with pytest.raises(SubnetlabError, match="choose one of"):
        attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="acdc")
    for steps in (0, 1001):  # a step count that would never finish is refused before any pass
        with pytest.raises(SubnetlabError, match="must be between 1 and 1000"):
            attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap-ig", steps=steps)
    assert all(p.requires_grad for p in m.model.parameters())


def test_warm_start_keeps_the_top_scores_and_is_bounded_by_the_cold_constant():
    from subnetlab.methods.attribution.warm_start import warm_start_log_alphas

    scores = torch.tensor([0.1, -5.0, 0.0, 2.0, -0.3, 1.0, 0.05, -0.2])
    alphas = warm_start_log_alphas(scores, sparsity=0.75, scale=3.0)  # keeps 2 of 8
    assert set(torch.nonzero(alphas > 0).flatten().tolist()) == {1, 3}
    assert float(alphas.abs().max()) <= 3.0 and float(alphas[1]) == 3.0
    order = scores.abs().argsort(descending=True)
    assert bool((alphas[order][:-1] >= alphas[order][1:]).all())  # monotone in |score|
    with pytest.raises(SubnetlabError, match="sparsity"):
        warm_start_log_alphas(scores, sparsity=1.0, scale=3.0)
