"""EAP with mean ablation, NAP and NAP-IG (issue 50) against independent computations on tiny models."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import count_hooks
from subnetlab.intervene.activations import ComponentValues
from subnetlab.intervene.edges import WriterValues, apply_edges
from subnetlab.methods.attribution import attribute_batch, node_scores
from subnetlab.methods.attribution.scores import writer_grid
from subnetlab.models.graph import Graph
from tests.conftest import tiny_inputs, tiny_model

FAMILIES = ["gpt2", "llama"]


def _setup(family, layers=2, pad=0):
    m = tiny_model(family, layers=layers)
    m.model.double().eval()
    clean = tiny_inputs(family, batch=2, length=5, seed=0, pad=pad)
    corrupted = tiny_inputs(family, batch=2, length=5, seed=1, pad=pad)
    graph = Graph.from_adapter(m.adapter)
    answer, wrong = torch.tensor([5, 9]), torch.tensor([7, 4])

    def metric(logits, clean_logits):  # logit difference at the last real position (position 4), [B]
        last = logits[:, 4]
        return last.gather(1, answer[:, None])[:, 0] - last.gather(1, wrong[:, None])[:, 0]

    return m, graph, clean, corrupted, metric


def _means_by_hand(m, inputs) -> WriterValues:
    """Each writer's mean output over the real tokens of ``inputs``: plain hooks, sums over the masked positions."""
    a = m.adapter
    mask = inputs["attention_mask"].double()  # [B, P]
    got = {}

    def mean_of(x):  # [B or 1, P, ...] -> [...]
        x = x.double().expand(mask.shape[0], *x.shape[1:])
        return (x * mask.view(*mask.shape, *[1] * (x.dim() - 2))).sum((0, 1)) / mask.sum()

    handles = [mod.register_forward_hook(lambda _m, _a, out, i=i: got.__setitem__(("e", i), mean_of(out)))
               for i, mod in enumerate(a.embedding_modules())]
    for layer in range(a.num_layers):
        handles.append(a.head_output_module(layer).register_forward_pre_hook(
            lambda _m, args, layer=layer: got.__setitem__(
                ("h", layer), mean_of(args[0].view(*args[0].shape[:2], a.num_heads, a.head_dim)))))
        handles.append(a.mlp_output_module(layer).register_forward_hook(
            lambda _m, _a, out, layer=layer: got.__setitem__(("m", layer), mean_of(out))))
    try:
        with torch.no_grad():
            m.model(**inputs)
    finally:
        for h in handles:
            h.remove()
    L = a.num_layers
    return WriterValues([got[("e", i)] for i in range(len(a.embedding_modules()))],
                        ComponentValues([got[("h", l)] for l in range(L)], [got[("m", l)] for l in range(L)]))


@pytest.mark.parametrize("family", FAMILIES)
def test_eap_mean_is_eap_with_the_corrupted_outputs_set_to_the_measured_means(family, one_thread):
    """EAP (mean) = minus the gradient of the edge masks at every edge kept, each removed edge delivering its
    writer's mean output over the clean prompts' real tokens (computed here by plain hooks; padded prompts)."""
    m, graph, clean, corrupted, metric = _setup(family, pad=2)
    means = _means_by_hand(m, clean)
    scores = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap", means=means).double()
    assert count_hooks(m.model) == 0
    mask = torch.ones(graph.num_edges, dtype=torch.float64, requires_grad=True)
    with apply_edges(m.model, m.adapter, graph, mask, means):
        metric(m.model(**clean).logits, None).sum().backward()
    by_hand = -mask.grad
    scale = by_hand.abs().max()
    assert scale > 1e-3
    tol = 1e-9 if family == "gpt2" else 1e-5  # Llama's RMSNorm computes in float32
    assert ((scores - by_hand).abs() / scale).max() < tol
    # the corrupted prompts are not read, and mean ablation is not corrupted patching
    other = attribute_batch(m.model, m.adapter, graph, clean, tiny_inputs(family, 2, 5, seed=7, pad=2), metric,
                            method="eap", means=means).double()
    assert torch.equal(other, scores)
    patched = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap").double()
    assert ((patched - scores).abs() / scale).max() > 1e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_nap_is_the_sum_of_each_writers_outgoing_eap_scores(family, one_thread):
    """At the clean run a writer's output gradient is the sum of its readers' gradients, so NAP of a node equals
    the sum of its outgoing edges' EAP scores (embeddings, heads, MLPs), with corrupted patching and with mean
    ablation; NAP runs no reader hooks (a backward to the node outputs)."""
    m, graph, clean, corrupted, metric = _setup(family)
    tol = 1e-10 if family == "gpt2" else 1e-5
    for means in (None, _means_by_hand(m, clean)):
        eap = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap", means=means)
        nap = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="nap", means=means)
        assert nap.shape == (len(graph.writers),) and count_hooks(m.model) == 0
        summed, mine = node_scores(graph, eap), writer_grid(graph, nap)
        scale = float(nap.abs().max())
        assert scale > 1e-3
        for key in ("embeddings", "heads", "mlps"):
            assert (summed[key].double() - mine[key].double()).abs().max() / scale < tol, key


def test_nap_ig_with_one_step_is_nap(one_thread):
    """NAP-IG's path runs alpha = 1/k, ..., 1 (the reference's node version): one step is the clean end, NAP."""
    m, graph, clean, corrupted, metric = _setup("gpt2")
    nap = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="nap")
    one = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="nap-ig", steps=1)
    assert torch.equal(nap, one)
    five = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="nap-ig", steps=5)
    assert (five - nap).abs().max() > 1e-2 * nap.abs().max()  # a real integral: the path moves the gradients


@pytest.mark.parametrize("family", FAMILIES)
def test_nap_ig_is_the_riemann_sum_by_retained_gradients(family, one_thread):
    """NAP-IG with k steps: at alpha = j/k (j = 1..k) the embeddings set to corrupted + alpha (clean - corrupted)
    by a plain hook, the gradient of each head's projection input and each MLP's output retained, times the real
    runs' differences, averaged over the k passes."""
    m, graph, clean, corrupted, metric = _setup(family)
    k = 3
    scores = writer_grid(graph, attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="nap-ig",
                                                steps=k))
    a, H, d = m.adapter, m.adapter.num_heads, m.adapter.head_dim
    modules = a.embedding_modules()

    def run(inputs, embeds=None, keep=False):
        seen, handles = {}, []
        if embeds is not None:
            handles += [mod.register_forward_hook(lambda _m, _a, out, t=t: t.clone()) for mod, t in zip(modules, embeds)]
        else:
            handles += [mod.register_forward_hook(lambda _m, _a, out, i=i: seen.__setitem__(("e", i), out.detach()))
                        for i, mod in enumerate(modules)]
        for layer in range(a.num_layers):
            def pre(_m, args, layer=layer):
                if keep:
                    args[0].retain_grad()
                seen[("z", layer)] = args[0]

            def post(_m, _a, out, layer=layer):
                if keep:
                    out.retain_grad()
                seen[("m", layer)] = out
            handles += [a.head_output_module(layer).register_forward_pre_hook(pre),
                        a.mlp_output_module(layer).register_forward_hook(post)]
        try:
            return m.model(**inputs).logits, seen
        finally:
            for h in handles:
                h.remove()

    with torch.no_grad():
        _, at_clean = run(clean)
        _, at_corrupted = run(corrupted)
    heads = torch.zeros(a.num_layers, H, dtype=torch.float64)
    mlps = torch.zeros(a.num_layers, dtype=torch.float64)
    for j in range(1, k + 1):
        alpha = j / k
        embeds = [at_corrupted[("e", i)] + alpha * (at_clean[("e", i)] - at_corrupted[("e", i)])
                  for i in range(len(modules))]
        logits, seen = run(clean, embeds, keep=True)
        metric(logits, None).sum().backward()
        for layer in range(a.num_layers):
            dz = (at_corrupted[("z", layer)] - at_clean[("z", layer)]).detach() * seen[("z", layer)].grad
            heads[layer] += dz.view(*dz.shape[:2], H, d).sum((0, 1, 3)) / k
            dm = (at_corrupted[("m", layer)] - at_clean[("m", layer)]).detach() * seen[("m", layer)].grad
            mlps[layer] += dm.sum() / k
    scale = max(float(heads.abs().max()), float(mlps.abs().max()))
    assert scale > 1e-3
    tol = 1e-9 if family == "gpt2" else 1e-5
    assert (scores["heads"].double() - heads).abs().max() / scale < tol
    assert (scores["mlps"].double() - mlps).abs().max() / scale < tol


def test_mean_ablation_is_refused_where_the_method_does_not_define_it(one_thread):
    m, graph, clean, corrupted, metric = _setup("gpt2", layers=1)
    means = _means_by_hand(m, clean)
    for method in ("eap-ig", "eap-ig-activations", "clean-corrupted", "exact", "nap-ig"):
        with pytest.raises(SubnetlabError, match="mean ablation is taken by eap and nap"):
            attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, means=means)
    assert count_hooks(m.model) == 0


def _node_patching_by_hand(m, clean, corrupted, metric):
    """Exact node patching: each head's slice of its projection input, and each MLP's output, set to the corrupted
    run's in the clean forward (everything downstream recomputed), the metric's change; ``[L, H]`` and ``[L]``."""
    a, H, d = m.adapter, m.adapter.num_heads, m.adapter.head_dim
    saved = {}
    handles = []
    for layer in range(a.num_layers):
        handles += [a.head_output_module(layer).register_forward_pre_hook(
                        lambda _m, args, layer=layer: saved.__setitem__(("z", layer), args[0].detach().clone())),
                    a.mlp_output_module(layer).register_forward_hook(
                        lambda _m, _a, out, layer=layer: saved.__setitem__(("m", layer), out.detach().clone()))]
    with torch.no_grad():
        m.model(**corrupted)
    for h in handles:
        h.remove()
    with torch.no_grad():
        base = metric(m.model(**clean).logits, None).sum()

    def patched(module, hook):
        handle = hook(module)
        try:
            with torch.no_grad():
                return float(metric(m.model(**clean).logits, None).sum() - base)
        finally:
            handle.remove()

    heads = torch.zeros(a.num_layers, H, dtype=torch.float64)
    mlps = torch.zeros(a.num_layers, dtype=torch.float64)
    for layer in range(a.num_layers):
        proj = a.head_output_module(layer)
        for h in range(H):
            def swap(_m, args, layer=layer, h=h):
                z = args[0].clone()
                z[..., h * d:(h + 1) * d] = saved[("z", layer)][..., h * d:(h + 1) * d]
                return (z, *args[1:])
            heads[layer, h] = patched(proj, lambda mod, f=swap: mod.register_forward_pre_hook(f))
        mlps[layer] = patched(a.mlp_output_module(layer), lambda mod, layer=layer: mod.register_forward_hook(
            lambda _m, _a, out: saved[("m", layer)]))
    return heads, mlps


def test_nap_approaches_exact_node_patching_as_the_corruption_shrinks(one_thread):
    """corrupted = clean + eps * noise in the token embedding: NAP's relative error against patching each head
    and MLP by hand falls with eps, first order (the error is second order in the change)."""
    from tests.unit.test_attribution_methods import _shared_embedding_pairs

    errors = []
    for eps in (1e-1, 1e-2, 1e-3):
        m, clean, corrupted = _shared_embedding_pairs(eps)
        graph = Graph.from_adapter(m.adapter)

        def metric(logits, _full):
            return logits[:, -1, 5] - logits[:, -1, 9]

        nap = writer_grid(graph, attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="nap"))
        heads, mlps = _node_patching_by_hand(m, clean, corrupted, metric)
        mine = torch.cat([nap["heads"].double().reshape(-1), nap["mlps"].double()])
        exact = torch.cat([heads.reshape(-1), mlps])
        errors.append(float((mine - exact).norm() / exact.norm()))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-2, errors  # measured 0.34, 0.065, 0.0058
    assert 3 < errors[-2] / errors[-1] < 30, errors  # first order in eps
