"""Exact patching, EAP-IG on activations, clean-corrupted and float64 scores against independent computations."""

from __future__ import annotations

import pytest
import torch

from subnetlab.intervene.edges import capture_writers
from subnetlab.methods.attribution import attribute, attribute_batch
from subnetlab.methods.attribution.exact import exact_batch
from subnetlab.models import build_model
from subnetlab.models.graph import Graph
from tests.conftest import VOCAB, tiny_config, tiny_inputs, tiny_model
from tests.unit.test_attribution import _metric_at, _setup, _shifted


@pytest.mark.parametrize("family,layers", [("gpt2", 1), ("gpt2", 2), ("llama", 2)])
def test_exact_patching_is_one_masked_edge_at_a_time(family, layers, one_thread):
    """Batched exact patching (several edges per forward through ``on_reader_input``) = the edge-masked model with
    that one edge removed and corrupted values, minus the clean metric, edge by edge."""
    m, graph, clean, corrupted, metric = _setup(family, layers=layers)
    scores = exact_batch(m.model, m.adapter, graph, clean, corrupted, metric, rows_per_forward=6)  # 3 edges a pass
    values = capture_writers(m.model, m.adapter, corrupted)
    with torch.no_grad():
        base = metric(m.model(**clean).logits, None).sum()
        by_hand = torch.stack([
            _metric_at(m, graph, clean, values, torch.ones(graph.num_edges).index_fill_(0, torch.tensor([e]), 0.0),
                       metric) - base for e in range(graph.num_edges)])
    assert scores.dtype == torch.float64
    assert by_hand.abs().max() > 1e-2
    assert ((scores - by_hand).abs() / by_hand.abs().max()).max() < 1e-9
    # the default chunking (every edge of this batch in few passes) gives the same
    assert torch.allclose(exact_batch(m.model, m.adapter, graph, clean, corrupted, metric), scores, atol=1e-12)



def test_exact_patching_of_chosen_edges_is_the_full_run_there_and_zero_elsewhere(one_thread):
    """``edges=`` patches only the chosen edges (any order, repeats once): their scores are the every-edge run's,
    bit for bit up to rounding, and every other score is 0; an index outside the graph is refused."""
    from subnetlab.errors import SubnetlabError

    m, graph, clean, corrupted, metric = _setup("llama", layers=2)
    full = exact_batch(m.model, m.adapter, graph, clean, corrupted, metric)
    chosen = [graph.num_edges - 1, 0, 7, 7, graph.num_edges // 2]
    part = exact_batch(m.model, m.adapter, graph, clean, corrupted, metric, edges=chosen, rows_per_forward=4)
    picked = torch.zeros(graph.num_edges, dtype=torch.bool)
    picked[chosen] = True
    assert torch.allclose(part[picked], full[picked], atol=1e-12) and full[picked].abs().max() > 0
    assert torch.all(part[~picked] == 0)
    with pytest.raises(SubnetlabError, match="edges"):
        exact_batch(m.model, m.adapter, graph, clean, corrupted, metric, edges=[graph.num_edges])

def _shared_embedding_pairs(eps: float, seed: int = 0):
    """A float64 2-layer GPT-2 whose tokens ``t + half`` embed as ``t``'s embedding plus ``eps`` times a fixed random
    vector: the corrupted prompt is the clean one plus ``eps`` noise in the embedding."""
    m = tiny_model("gpt2", layers=2)
    m.model.double().eval()
    half = VOCAB // 2
    g = torch.Generator().manual_seed(seed)
    wte = m.model.transformer.wte.weight
    noise = torch.randn(half, wte.shape[1], generator=g, dtype=torch.float64)
    with torch.no_grad():
        wte[half:2 * half] = wte[:half] + eps * noise
    ids = torch.randint(3, half, (2, 6), generator=torch.Generator().manual_seed(seed + 1))
    mask = torch.ones_like(ids)
    return m, {"input_ids": ids, "attention_mask": mask}, {"input_ids": ids + half, "attention_mask": mask}


def test_eap_approaches_exact_patching_as_the_corruption_shrinks(one_thread):
    """corrupted = clean + eps * noise in the token embedding: EAP's relative error against exact patching falls
    monotonically with eps (about linearly: the error is second order), and the correlation rises towards 1."""
    errors, correlations = [], []
    for eps in (1.0, 1e-1, 1e-2, 1e-3):
        m, clean, corrupted = _shared_embedding_pairs(eps)
        graph = Graph.from_adapter(m.adapter)
        metric = lambda logits, _full: logits[:, -1, 5] - logits[:, -1, 9]  # noqa: E731
        exact = exact_batch(m.model, m.adapter, graph, clean, corrupted, metric)
        eap = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap")
        assert exact.dtype == eap.dtype == torch.float64
        errors.append(float((eap - exact).norm() / exact.norm()))
        correlations.append(float(torch.corrcoef(torch.stack([eap, exact]))[0, 1]))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert all(a < b for a, b in zip(correlations, correlations[1:])), correlations
    assert errors[0] > 0.5 and errors[-1] < 1e-2, errors  # measured 1.73, 0.28, 0.035, 0.0037
    assert 3 < errors[-2] / errors[-1] < 30, errors  # first order in eps


def _linear_in_the_readers():
    """A float64 1-layer GPT-2 whose MLP is linear and whose layer norms are linear to 1e-12 (epsilon 1e12, weights
    scaled back by 1e6): everything downstream of the value, MLP and logits readers is linear, and the
    queries and keys go through the softmax."""
    config = tiny_config("gpt2", layers=1)
    config.activation_function, config.layer_norm_epsilon = "linear", 1e12
    m = build_model(config, head="causal-lm", seed=0)
    m.model.double().eval()
    with torch.no_grad():
        for name, p in m.model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.mul_(1e6)
    return m


def test_float64_eap_equals_exact_patching_where_the_metric_is_linear_in_the_reader(one_thread):
    """On a model linear downstream of a reader, patching that reader's input changes the metric by exactly the
    first-order term: EAP = exact patching to 1e-7 (relative to the largest score) on every value, MLP and logits
    edge, in float64 scores; the query/key edges (softmax) differ."""
    m = _linear_in_the_readers()
    graph = Graph.from_adapter(m.adapter)
    clean, corrupted = tiny_inputs("gpt2", batch=2, length=5, seed=0), tiny_inputs("gpt2", batch=2, length=5, seed=1)
    metric = lambda logits, _full: logits[:, -1, 5] - logits[:, -1, 9]  # noqa: E731
    eap = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap")
    exact = exact_batch(m.model, m.adapter, graph, clean, corrupted, metric)
    assert eap.dtype == torch.float64
    kinds = [graph.reader_kinds[r] for _, r in graph.edges]
    linear = torch.tensor([k in ("v", "mlp", "logits") for k in kinds])
    scale = exact.abs().max()
    assert scale > 1e-2
    assert float(((eap - exact)[linear]).abs().max() / scale) < 1e-7
    assert float(((eap - exact)[~linear]).abs().max() / scale) > 1e-4


def _node_output_hooks(adapter, replace):
    """Plain hooks (independent of the library's): ``replace(kind, layer, tensor)`` on embeddings, head outputs
    (the output projection's input) and MLP outputs, run first."""
    hs = [mod.register_forward_hook(lambda _m, _a, out: replace("embedding", -1, out), prepend=True)
          for mod in adapter.embedding_modules()]
    for l in range(adapter.num_layers):
        hs.append(adapter.head_output_module(l).register_forward_pre_hook(
            lambda _m, args, l=l: (lambda new: None if new is None else (new, *args[1:]))(replace("heads", l, args[0])),
            prepend=True))
        hs.append(adapter.mlp_output_module(l).register_forward_hook(
            lambda _m, _a, out, l=l: replace("mlp", l, out), prepend=True))
    return hs


def test_eap_ig_activations_is_the_reference_sum_by_mask_gradients(one_thread):
    """EAP-IG on activations = hannamw/EAP-IG's ``get_scores_ig_activations`` computed another way: for every node
    (embeddings, each layer's heads, each MLP) and alpha = j/k, j = 1..k, the clean run with that node's output set to
    alpha clean + (1 - alpha) corrupted (plain hooks), each edge's term minus the autograd gradient of its edge mask
    with values making every writer's delta (clean - corrupted); the mean over the (1 + 2L) k passes."""
    m, graph, clean, corrupted, metric = _setup("gpt2", layers=2)
    k, L = 3, m.adapter.num_layers
    scores = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap-ig-activations", steps=k)
    seen: dict = {}

    def recorder(run):
        def record(kind, layer, out):
            seen.setdefault((run, kind), []).append(out.detach().clone())
            return None
        return record

    for run, inputs in (("clean", clean), ("corrupted", corrupted)):
        hs = _node_output_hooks(m.adapter, recorder(run))
        with torch.no_grad():
            m.model(**inputs)
        for h in hs:
            h.remove()
    at_clean, at_corrupted = capture_writers(m.model, m.adapter, clean), capture_writers(m.model, m.adapter, corrupted)
    nodes = [("embedding", -1)] + [(kind, l) for l in range(L) for kind in ("heads", "mlp")]
    by_hand = torch.zeros(graph.num_edges, dtype=torch.float64)
    for kind, layer in nodes:
        for j in range(1, k + 1):
            alpha, count = j / k, {"n": 0}

            def replace(kd, l, out, kind=kind, layer=layer, alpha=alpha):
                if kd != kind or (kd != "embedding" and l != layer):
                    return None
                i = count["n"] if kd == "embedding" else l
                count["n"] += kd == "embedding"
                c, x = seen[("clean", kd)][i], seen[("corrupted", kd)][i]
                return alpha * c + (1 - alpha) * x

            hs = _node_output_hooks(m.adapter, replace)
            try:
                with torch.no_grad():
                    count["n"] = 0
                    here = capture_writers(m.model, m.adapter, clean)
                count["n"] = 0
                mask = torch.ones(graph.num_edges, dtype=torch.float64, requires_grad=True)
                _metric_at(m, graph, clean, _shifted(here, at_clean, at_corrupted), mask, metric).backward()
            finally:
                for h in hs:
                    h.remove()
            by_hand -= mask.grad
    by_hand /= len(nodes) * k
    scale = by_hand.abs().max()
    assert scale > 1e-3
    assert ((scores - by_hand).abs() / scale).max() < 1e-9


def test_eap_ig_activations_with_one_step_in_closed_form(one_thread):
    """One step (alpha = 1) leaves every pass the clean run with one node's gradient cut: edges into the logits get
    EAP's score exactly, edges into the last MLP 2L / (1 + 2L) of it (their own node's pass gives nothing)."""
    m, graph, clean, corrupted, metric = _setup("gpt2", layers=2)
    L = m.adapter.num_layers
    one = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap-ig-activations", steps=1)
    eap = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap")
    logits = torch.tensor([graph.readers[r] == "logits" for _, r in graph.edges])
    last_mlp = torch.tensor([graph.readers[r] == f"m{L - 1}" for _, r in graph.edges])
    scale = eap.abs().max()
    assert ((one - eap)[logits].abs() / scale).max() < 1e-12
    assert ((one - eap * 2 * L / (1 + 2 * L))[last_mlp].abs() / scale).max() < 1e-12
    assert ((one - eap)[~logits].abs() / scale).max() > 1e-3  # elsewhere a real difference


def test_clean_corrupted_is_the_mean_of_the_two_mask_gradients(one_thread):
    """clean-corrupted = 1/2 [(corrupted - clean) . grad at the clean run + the same at the corrupted run]: minus the
    edge-mask gradient on the clean prompt with corrupted values plus the one on the corrupted prompt with clean
    values (where a removed edge delivers the clean output)."""
    m, graph, clean, corrupted, metric = _setup("llama", layers=2)
    scores = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="clean-corrupted")
    grads = []
    for inputs, other in ((clean, corrupted), (corrupted, clean)):
        values = capture_writers(m.model, m.adapter, other)
        mask = torch.ones(graph.num_edges, dtype=torch.float64, requires_grad=True)
        _metric_at(m, graph, inputs, values, mask, metric).backward()
        grads.append(mask.grad)
    by_hand = (-grads[0] + grads[1]) / 2
    scale = by_hand.abs().max()
    assert scale > 1e-3
    assert ((scores - by_hand).abs() / scale).max() < 1e-5  # Llama's RMSNorm computes in float32
    eap = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap")
    assert ((scores - eap).abs() / scale).max() > 1e-3


@pytest.mark.parametrize("method", ["eap", "eap-ig", "eap-ig-activations", "clean-corrupted", "exact"])
def test_scores_are_in_the_model_precision(method, one_thread):
    """float64 models give float64 scores (edges and nodes), float32 models float32; the two agree to float32."""
    results = {}
    for dtype in (torch.float32, torch.float64):
        m = tiny_model("gpt2", layers=1)
        m.model.to(dtype).eval()
        c, x = tiny_inputs("gpt2", batch=2, length=5, seed=0), tiny_inputs("gpt2", batch=2, length=5, seed=1)
        batch = {"input_ids": c["input_ids"], "attention_mask": c["attention_mask"],
                 "corrupted_input_ids": x["input_ids"]}
        graph = Graph.from_adapter(m.adapter)
        result = attribute(m.model, m.adapter, graph, [batch], lambda logits, b, full: logits[:, -1, 5] - logits[:, -1, 9],
                           method=method, steps=2)
        assert result.edges.dtype == dtype and result.node_scores()["heads"].dtype == dtype
        results[dtype] = result.edges
    scale = results[torch.float64].abs().max()
    assert ((results[torch.float32].double() - results[torch.float64]).abs() / scale).max() < 1e-4
