"""`subnetlab export` of an edge circuit: the small model computes what the edge-masked model computes.

Independent computation: ``apply_edges`` on the full model with the circuit's edge mask and the same ablation
values (mean or zero). A node-level closure is compared with the gated model of its kept nodes.
"""

from __future__ import annotations

import json

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.export import PRUNING_FILE, export_subnetwork
from subnetlab.export.edges import live_nodes, node_circuit
from subnetlab.intervene import apply_gates
from subnetlab.intervene.edges import apply_edges, writer_means
from subnetlab.models import load_model
from subnetlab.models.graph import Graph
from subnetlab.subnetwork import Subnetwork
from tests.conftest import output_of, tiny_inputs, tiny_model

TOL = 1e-5


def _node_circuit_as_edges(graph: Graph, removed: list[str]) -> torch.Tensor:
    """Every outgoing edge of ``removed`` cut, and (to show they do not matter) some edges into them too."""
    mask = torch.ones(graph.num_edges)
    for node in removed:
        mask[graph.edges_from(node)] = 0
    mask[graph.edges_into("a1.h1<q>")] = 0  # a1.h1 is removed: what its query reads has no effect
    mask[graph.edge_index("a0.h0->m1")] = 0  # m1 is removed
    return mask


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_an_edge_circuit_that_is_a_node_circuit_exports_to_the_edge_masked_model(family, ablation, tmp_path, one_thread):
    m = tiny_model(family, layers=2)
    graph = Graph.from_adapter(m.adapter)
    x, other = tiny_inputs(family, seed=0), tiny_inputs(family, seed=1)
    removed = ["a0.h1", "a1.h1", "m1"] + (["a0.h2", "a0.h3"] if family == "llama" else [])
    mask = _node_circuit_as_edges(graph, removed)
    sub = Subnetwork.from_edges(m.adapter, graph, mask, method="edge-pruning", ablation=ablation)
    values = writer_means(m.model, m.adapter, [x, other]) if ablation == "mean" else None
    with torch.no_grad():
        with apply_edges(m.model, m.adapter, graph, mask, values):
            edged = output_of(m.model, x)
        plain = output_of(m.model, x)
    result = export_subnetwork(m, sub, tmp_path / "small", None if values is None else values.components)
    small = load_model(str(tmp_path / "small"), head="causal-lm")
    with torch.no_grad():
        out = output_of(small.model, x)
    assert (out - edged).abs().max() <= TOL
    assert (edged - plain).abs().max() > 1e-3  # the circuit really differs from the model
    kept_heads = [len(layer.heads) for layer in result.plan.layers]
    assert kept_heads == ([3, 3] if family == "gpt2" else [1, 3]) and [l.mlp for l in result.plan.layers] == [True, False]
    record = json.loads((tmp_path / "small" / PRUNING_FILE).read_text())
    assert any("edge circuit" in n for n in record["notes"]) and not any("closure" in n for n in record["notes"])


def test_a_node_reaching_the_logits_only_through_removed_nodes_is_removed():
    graph = Graph("gpt2", 2, 2, 2, 2)
    mask = torch.zeros(graph.num_edges)
    for name in ("tok_embeds->a1.h0<q>", "pos_embeds->a1.h0<q>", "a0.h0->m0", "a1.h0->logits"):
        mask[graph.edge_index(name)] = 1  # a0.h0 feeds only m0, which reaches nothing
    assert live_nodes(graph, mask) == {"tok_embeds", "pos_embeds", "a1.h0"}


def test_a_partial_edge_circuit_is_refused_and_exports_its_closure_when_asked(tmp_path, one_thread):
    m = tiny_model("gpt2", layers=2)
    graph = Graph.from_adapter(m.adapter)
    x = tiny_inputs("gpt2", seed=0)
    mask = _node_circuit_as_edges(graph, ["a0.h1", "a1.h1", "m1"])
    mask[graph.edge_index("a0.h0->a1.h0<k>")] = 0  # a kept node's key no longer reads a kept node
    sub = Subnetwork.from_edges(m.adapter, graph, mask, ablation="zero")
    with pytest.raises(SubnetlabError, match="removes 1 edge.*a0.h0->a1.h0<k>.*whole residual stream") as e:
        export_subnetwork(m, sub, tmp_path / "refused", None)
    assert e.value.setting == "edges_as_nodes" and not (tmp_path / "refused").exists()
    result = export_subnetwork(m, sub, tmp_path / "closure", None, edges_as_nodes=True)
    assert any("node-level closure" in n and "differs from the circuit" in n for n in result.notes)
    closed = node_circuit(sub, closure=True)
    with torch.no_grad(), apply_gates(m.model, m.adapter, closed.heads, closed.mlps):
        gated = output_of(m.model, x)
    small = load_model(str(tmp_path / "closure"), head="causal-lm")
    with torch.no_grad():
        assert (output_of(small.model, x) - gated).abs().max() <= TOL


def test_corrupted_prompt_ablation_has_nothing_to_fold(tmp_path, one_thread):
    from subnetlab.export import ExportSettings, export_files

    m = tiny_model("gpt2", layers=2)
    m.model.save_pretrained(tmp_path / "lm")
    graph = Graph.from_adapter(m.adapter)
    Subnetwork.from_edges(m.adapter, graph, torch.ones(graph.num_edges), ablation="corrupted").save(tmp_path / "c.safetensors")
    with pytest.raises(SubnetlabError, match="corrupted-prompt ablation.*not a fixed value") as e:
        export_files(ExportSettings(str(tmp_path / "lm"), str(tmp_path / "c.safetensors"), str(tmp_path / "out")))
    assert e.value.setting == "ablation"


def test_the_export_command_takes_an_edge_circuit_and_notes_the_closure(tmp_path, capsys, one_thread):
    from transformers import GPT2Config, GPT2LMHeadModel

    from subnetlab.cli import main
    from subnetlab.models import get_adapter
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2))
    lm.save_pretrained(tmp_path / "lm")
    tok.save_pretrained(tmp_path / "lm")
    adapter = get_adapter(lm)
    graph = Graph.from_adapter(adapter)
    mask = torch.ones(graph.num_edges)
    mask[graph.edges_from("a1.h1")] = 0
    mask[graph.edge_index("a0.h0->a1.h0<v>")] = 0
    Subnetwork.from_edges(adapter, graph, mask, ablation="zero").save(tmp_path / "c.safetensors")
    argv = ["export", "--model", str(tmp_path / "lm"), "--subnetwork", str(tmp_path / "c.safetensors")]
    with pytest.raises(SystemExit) as done:
        main([*argv, "--out", str(tmp_path / "refused")])
    assert done.value.code == 2 and "--edges-as-nodes is off" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main([*argv, "--out", str(tmp_path / "small"), "--edges-as-nodes"])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "heads per layer: 2 1 (of 2)" in printed
    assert "note: node-level closure" in printed and "a0.h0->a1.h0<v>" in printed


def test_an_embedding_edge_cut_into_a_kept_node_is_no_node_circuit():
    """The embeddings cannot be removed, so every edge from them into a kept node must stay."""
    graph = Graph("gpt2", 2, 2, 2, 2)
    mask = torch.ones(graph.num_edges)
    mask[graph.edge_index("pos_embeds->a0.h0<q>")] = 0
    mask[graph.edges_from("a1.h1")] = 0
    mask[graph.edge_index("tok_embeds->a1.h1<v>")] = 0  # into a removed node: no matter
    sub = Subnetwork("edges", "gpt2", "", edges=mask, graph_shape=graph.shape(), ablation="zero")
    with pytest.raises(SubnetlabError, match=r"removes 1 edge\(s\).*\(pos_embeds->a0.h0<q>\)"):
        node_circuit(sub)
    closed = node_circuit(sub, closure=True)
    assert closed.missing == ("pos_embeds->a0.h0<q>",) and closed.heads.tolist() == [[1, 1], [1, 0]]
