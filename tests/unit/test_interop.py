"""subnetlab circuits inside TransformerLens 4 (TransformerBridge hooks) and nnsight equal subnetlab's own gated
model (skipped when the tool is absent: ``subnetlab[bench]``)."""

from __future__ import annotations

import copy

import pytest
import torch

from subnetlab.intervene import apply_gates, capture_activations
from subnetlab.intervene.edges import apply_edges, capture_writers
from subnetlab.models import build_model, get_adapter
from subnetlab.models.graph import Graph
from subnetlab.subnetwork import Subnetwork
from tests.conftest import tiny_config


def _model(family):
    config = tiny_config(family, layers=2)
    if family == "llama":
        config.num_key_value_heads = config.num_attention_heads
    return build_model(config, head="causal-lm", seed=0).model.eval()


def _data():
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(3, 90, (2, 6), generator=g)
    return clean, torch.randint(3, 90, (2, 6), generator=g)


def _circuits(adapter, graph):
    g = torch.Generator().manual_seed(1)
    edges = Subnetwork.from_edges(adapter, graph, (torch.rand(graph.num_edges, generator=g) < 0.5).float())
    heads = (torch.rand(adapter.num_layers, adapter.num_heads, generator=g) < 0.5).float()
    nodes = Subnetwork.structured(adapter, heads, torch.tensor([1.0, 0.0]))
    return edges, nodes


def _ours(model, adapter, sub, clean, corrupt, patch):
    inputs = {"input_ids": clean, "attention_mask": torch.ones_like(clean)}
    bad = {"input_ids": corrupt, "attention_mask": torch.ones_like(corrupt)}
    with torch.no_grad():
        if sub.kind == "edges":
            values = capture_writers(model, adapter, bad) if patch else None
            with apply_edges(model, adapter, sub.graph(), sub.edges, values):
                return model(**inputs).logits
        values = capture_activations(model, adapter, bad) if patch else None
        with apply_gates(model, adapter, sub.heads, sub.mlps, ablation=values):
            return model(**inputs).logits


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("embeddings", [1, 2])
def test_circuits_on_a_transformer_bridge_equal_subnetlabs(family, embeddings, tmp_path, one_thread):
    pytest.importorskip("transformer_lens", reason="TransformerLens 4.3 is not installed (subnetlab[bench])")
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoTokenizer

    from subnetlab.interop.transformer_lens import apply_subnetwork
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    if family == "llama" and embeddings == 2:
        pytest.skip("Llama has one embedding writer")
    model = _model(family)
    plain = copy.deepcopy(model)  # the bridge wraps its model's modules in place
    model.save_pretrained(tmp_path)
    gpt2_style_tokenizer().save_pretrained(tmp_path)
    bridge = TransformerBridge.boot_transformers(str(tmp_path), hf_model=model,
                                                 tokenizer=AutoTokenizer.from_pretrained(str(tmp_path))).eval()
    adapter = get_adapter(plain)
    clean, corrupt = _data()
    for sub in _circuits(adapter, Graph.from_adapter(adapter, embeddings)):
        for patch in (True, False):
            ours = _ours(plain, adapter, sub, clean, corrupt, patch)
            with torch.no_grad(), apply_subnetwork(bridge, sub, corrupt if patch else None):
                theirs = bridge(clean)
            full = plain(input_ids=clean).logits
            assert (ours - full).abs().max() > 1e-2  # the circuit changes the output
            assert (ours - theirs).abs().max() < 1e-4, (sub.kind, patch)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_circuits_inside_an_nnsight_trace_equal_subnetlabs(family, one_thread):
    nnsight = pytest.importorskip("nnsight", reason="nnsight is not installed (subnetlab[bench])")
    from subnetlab.interop.nnsight import apply_subnetwork

    model = _model(family)
    adapter = get_adapter(model)
    wrapped = nnsight.NNsight(model)
    clean, corrupt = _data()
    for sub in _circuits(adapter, Graph.from_adapter(adapter)):
        for patch in (True, False):
            ours = _ours(model, adapter, sub, clean, corrupt, patch)
            bad = {"input_ids": corrupt, "attention_mask": torch.ones_like(corrupt)}
            with torch.no_grad():
                values = None if not patch else (capture_writers(model, adapter, bad) if sub.kind == "edges"
                                                 else capture_activations(model, adapter, bad))
            with torch.no_grad(), apply_subnetwork(wrapped, sub, values=values):
                with wrapped.trace(input_ids=clean, attention_mask=torch.ones_like(clean)):
                    logits = wrapped.output.logits.save()
            assert (ours - logits).abs().max() < 1e-5, (sub.kind, patch)
            assert (ours - model(input_ids=clean).logits).abs().max() > 1e-2


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_nnsight_interop_takes_corrupted_tokens_as_transformer_lens_does(family, one_thread):
    """``apply_subnetwork(model, sub, corrupted_tokens)`` patches from the corrupted prompts: the same logits as the
    values captured on them by hand (no nnsight needed: a plain module is its own wrapper)."""
    from subnetlab.interop.nnsight import apply_subnetwork

    model = _model(family)
    adapter = get_adapter(model)
    clean, corrupt = _data()
    bad = {"input_ids": corrupt, "attention_mask": torch.ones_like(corrupt)}
    for sub in _circuits(adapter, Graph.from_adapter(adapter)):
        with torch.no_grad():
            values = capture_writers(model, adapter, bad) if sub.kind == "edges" else capture_activations(model, adapter, bad)
            with apply_subnetwork(model, sub, values=values):
                by_hand = model(input_ids=clean).logits
            with apply_subnetwork(model, sub, corrupt):
                by_tokens = model(input_ids=clean).logits
            assert torch.equal(by_hand, by_tokens), sub.kind
            assert (by_tokens - model(input_ids=clean).logits).abs().max() > 1e-2
