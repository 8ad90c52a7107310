"""The reader gradients of the model's own backward (``reader_gradients``) equal those of the expanded readers.

``attribute_batch`` takes every reader's gradient from one plain backward; ``expand_readers=True`` takes them from
``intervene.edges``'s per-reader copies of the stream (each reader its own input, differentiated on its own), an
independent computation of the same quantity. GPT-2 (fused QKV), Llama (grouped-query attention, separate
projections), GPT-NeoX with parallel and sequential residuals (QKV fused per head)."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import count_hooks
from subnetlab.methods.attribution import attribute_batch
from subnetlab.methods.attribution import scores as scores_module
from subnetlab.models.graph import Graph
from tests.conftest import tiny_inputs, tiny_model
from tests.unit.test_families import _model

FAMILIES = ["gpt2", "llama", "neox-parallel", "neox-sequential"]
GRADIENT_METHODS = ["eap", "eap-ig", "eap-ig-activations", "clean-corrupted"]


def _setup(family: str, dtype: torch.dtype = torch.float32):
    m = tiny_model(family, layers=2) if family in ("gpt2", "llama") else _model(family)
    m.model.to(dtype).eval()
    clean, corrupted = tiny_inputs("llama", batch=2, length=5, seed=0), tiny_inputs("llama", batch=2, length=5, seed=1)
    answer, wrong = torch.tensor([5, 9]), torch.tensor([7, 4])

    def metric(logits, clean_logits):  # logit difference at the last position less the clean one, [B]
        last, base = logits[:, -1], clean_logits[:, -1]
        return (last.gather(1, answer[:, None]) - last.gather(1, wrong[:, None]))[:, 0] - base[:, 5]

    return m, Graph.from_adapter(m.adapter), clean, corrupted, metric


@pytest.mark.parametrize("method", GRADIENT_METHODS)
@pytest.mark.parametrize("family", FAMILIES)
def test_plain_backward_scores_equal_the_expanded_readers_in_float32(family, method, one_thread):
    m, graph, clean, corrupted, metric = _setup(family)
    fast = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=3)
    assert count_hooks(m.model) == 0
    expanded = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=3,
                               expand_readers=True)
    assert fast.dtype == expanded.dtype == torch.float32
    scale = float(expanded.abs().max())
    assert scale > 0.1  # the metric depends on the edges
    torch.testing.assert_close(fast, expanded, rtol=1e-5, atol=2e-6 * scale)


@pytest.mark.parametrize("family", ["gpt2", "neox-parallel"])
def test_plain_backward_scores_equal_the_expanded_readers_in_float64(family, one_thread):
    """In float64 the two paths agree to 1e-12 (Llama's RMSNorm computes in float32, so it is left to float32)."""
    m, graph, clean, corrupted, metric = _setup(family, torch.float64)
    for method in ("eap", "eap-ig"):
        fast = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=2)
        expanded = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=2,
                                   expand_readers=True)
        assert fast.dtype == torch.float64
        torch.testing.assert_close(fast, expanded, rtol=1e-10, atol=1e-12 * float(expanded.abs().max()))


def test_the_default_path_does_not_expand_the_readers_and_leaves_no_hooks(monkeypatch, one_thread):
    """Only ``expand_readers`` goes through ``intervene.edges``; a failing metric leaves no hook behind."""
    m, graph, clean, corrupted, metric = _setup("gpt2")
    flags = [p.requires_grad for p in m.model.parameters()]
    calls = []
    real = scores_module.apply_edges
    monkeypatch.setattr(scores_module, "apply_edges", lambda *a, **k: calls.append(1) or real(*a, **k))
    for method in GRADIENT_METHODS:
        attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=2)
    assert calls == []
    attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method="eap", expand_readers=True)
    assert calls == [1]

    def failing(logits, clean_logits):
        raise RuntimeError("metric failed")

    with pytest.raises(RuntimeError, match="metric failed"):
        attribute_batch(m.model, m.adapter, graph, clean, corrupted, failing, method="eap")
    assert count_hooks(m.model) == 0
    assert [p.requires_grad for p in m.model.parameters()] == flags


@pytest.mark.parametrize("embedding_nodes", [0, 2])
def test_plain_backward_scores_equal_the_expanded_readers_with_padding_and_other_embedding_writers(embedding_nodes,
                                                                                                 one_thread):
    """No embedding writer (the embeddings in every reader's input) and token and position embeddings as two
    writers; right-padded rows."""
    m = tiny_model("gpt2", layers=2)
    m.model.eval()
    clean, corrupted = (tiny_inputs("gpt2", batch=3, length=5, seed=s, pad=2) for s in (0, 1))
    graph = Graph.from_adapter(m.adapter, embedding_nodes=embedding_nodes)

    def metric(logits, clean_logits):
        return logits[:, 2, 5] - logits[:, 2, 9]

    for method in ("eap", "eap-ig"):
        fast = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=3)
        expanded = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=3,
                                   expand_readers=True)
        scale = float(expanded.abs().max())
        assert scale > 0.1
        torch.testing.assert_close(fast, expanded, rtol=1e-5, atol=2e-6 * scale)


def test_a_graph_of_another_model_is_refused(one_thread):
    m, _, clean, corrupted, metric = _setup("gpt2")
    other = Graph.from_adapter(tiny_model("gpt2", layers=1).adapter)
    with pytest.raises(SubnetlabError, match="the graph is of a gpt2 model 1 x 4"):
        attribute_batch(m.model, m.adapter, other, clean, corrupted, metric, method="eap")
    assert count_hooks(m.model) == 0
