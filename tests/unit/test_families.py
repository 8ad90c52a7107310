"""Gemma-2, OLMo-2 and GPT-NeoX (Pythia): gates and edges against independent computations, on tiny configs.

Gemma-2 and OLMo-2 normalise each block's output before adding it to the stream, so heads are gated at the
attention output projection's input (a closed gate = that head's slice of the projection's input zeroed by hand),
MLPs at the post-feedforward norm's output, and edge interventions are refused. GPT-NeoX runs attention and MLP
in parallel (``use_parallel_residual``) or in sequence; both are checked at the edge level.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Gemma2Config, GPTNeoXConfig, Olmo2Config

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.export import slice_subnetwork
from subnetlab.intervene import apply_gates, capture_activations, collect_means, count_hooks
from subnetlab.intervene.edges import apply_edges, capture_writers, check_edge_family, writer_means
from subnetlab.models import FAMILIES, build_model
from subnetlab.models.graph import Graph
from subnetlab.subnetwork import Subnetwork
from tests.conftest import VOCAB, output_of, tiny_inputs

NEW = ["gemma2", "olmo2", "neox-parallel", "neox-sequential"]


def _config(name: str, layers: int = 2, heads: int = 4, hidden: int = 32):
    common = dict(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, max_position_embeddings=64, initializer_range=0.3)
    if name == "gemma2":  # soft-capped attention and final logits, a sliding window shorter than the inputs
        return Gemma2Config(num_key_value_heads=heads // 2, head_dim=8, query_pre_attn_scalar=8, sliding_window=4,
                            attn_logit_softcapping=5.0, final_logit_softcapping=3.0, **common)
    if name == "olmo2":
        return Olmo2Config(num_key_value_heads=heads // 2, pad_token_id=1, bos_token_id=0, eos_token_id=0, **common)
    return GPTNeoXConfig(use_parallel_residual=name == "neox-parallel", rotary_pct=0.5, bos_token_id=0,
                         eos_token_id=0, **common)


def _model(name: str, **kwargs):
    # eager attention: Gemma-2's soft-capping of attention logits runs there
    return build_model(_config(name, **kwargs), head="causal-lm", seed=0, attn_implementation="eager")


def _inputs(seed: int = 0):
    return tiny_inputs("llama", seed=seed)


@pytest.fixture(params=NEW)
def name(request) -> str:
    return request.param


def test_each_family_is_found_and_listed(name, capsys):
    m = _model(name)
    expected = {"gemma2": "gemma2", "olmo2": "olmo2"}.get(name, "gpt_neox")
    assert m.adapter.family == expected
    assert (m.adapter.num_layers, m.adapter.num_heads) == (2, 4)
    assert m.adapter.num_kv_heads == (2 if name in ("gemma2", "olmo2") else 4)
    assert m.adapter.parallel_attn_mlp is (name == "neox-parallel")
    with pytest.raises(SystemExit) as done:
        main(["models"])
    assert done.value.code in (0, None)
    listing = capsys.readouterr().out
    assert expected in listing and expected in FAMILIES


def test_inspect_reads_a_saved_model(name, tmp_path, capsys):
    m = _model(name)
    m.model.save_pretrained(tmp_path / "model")
    with pytest.raises(SystemExit) as done:
        main(["inspect", "--model", str(tmp_path / "model")])
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert done.value.code in (0, None), out
    assert f"family {m.adapter.family}, 2 layers x 4 heads" in out
    assert "components: 8 heads + 2 MLPs" in out


def test_all_gates_open_is_the_model(name, one_thread):
    m = _model(name)
    x = _inputs()
    with torch.no_grad():
        plain = output_of(m.model, x)
        with apply_gates(m.model, m.adapter, torch.ones(2, 4), torch.ones(2)):
            gated = output_of(m.model, x)
    assert torch.equal(plain, gated)
    assert count_hooks(m.model) == 0


@pytest.mark.parametrize("layer, head", [(0, 1), (1, 2)])
def test_closed_head_is_the_head_removed_by_hand(name, layer, head, one_thread):
    m = _model(name)
    x = _inputs()
    d = m.adapter.head_dim
    heads = torch.ones(2, 4)
    heads[layer, head] = 0
    surgery = copy.deepcopy(m.model)
    block = surgery.base_model.layers[layer]
    out_proj = block.self_attn.o_proj if name in ("gemma2", "olmo2") else block.attention.dense
    with torch.no_grad():
        out_proj.weight[:, head * d:(head + 1) * d] = 0  # nn.Linear [out, in]: the columns that read the head
        expected = output_of(surgery, x)
        with apply_gates(m.model, m.adapter, heads, torch.ones(2)):
            gated = output_of(m.model, x)
        plain = output_of(m.model, x)
    assert (gated - expected).abs().max() <= 1e-5
    assert (gated - plain).abs().max() > 1e-3


def test_closed_mlp_is_the_mlp_removed_by_hand(name, one_thread):
    m = _model(name)
    x = _inputs()
    surgery = copy.deepcopy(m.model)
    block = surgery.base_model.layers[1]
    with torch.no_grad():
        if name in ("gemma2", "olmo2"):  # a zero MLP output: the post-feedforward RMSNorm of zero is zero
            block.mlp.down_proj.weight.zero_()
        else:
            block.mlp.dense_4h_to_h.weight.zero_()
            block.mlp.dense_4h_to_h.bias.zero_()
        expected = output_of(surgery, x)
        with apply_gates(m.model, m.adapter, torch.ones(2, 4), torch.tensor([1.0, 0.0])):
            gated = output_of(m.model, x)
        plain = output_of(m.model, x)
    assert (gated - expected).abs().max() <= 1e-5
    assert (gated - plain).abs().max() > 1e-3


def test_mean_ablated_mlp_writes_its_mean_contribution(name, one_thread):
    """Gemma-2 / OLMo-2: the MLP's writer is its normed output; the mean is that output's mean over tokens."""
    m = _model(name)
    x = _inputs()
    means = collect_means(m.model, m.adapter, [x])
    seen = []
    module = m.adapter.mlp_output_module(0)
    handle = module.register_forward_hook(lambda mod, a, out: seen.append(out.detach().clone()))
    with torch.no_grad():
        output_of(m.model, x)
    handle.remove()
    by_hand = seen[0].double().mean((0, 1)).float()  # no padding: every token counts
    assert (means.mlps[0] - by_hand).abs().max() <= 1e-5
    if name in ("gemma2", "olmo2"):
        assert type(module).__name__.endswith("RMSNorm")


def test_neox_head_parameters_are_the_rows_that_feed_the_head(one_thread):
    """GPT-NeoX fuses Q, K and V per head: perturbing head 2's slice changes head 2's output and no other."""
    m = _model("neox-parallel")
    a, x = m.adapter, _inputs()
    slices = [s for s in a.head_params(0, 2) if "query_key_value" in s.name]
    seen = []
    handle = a.head_output_module(0).register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    with torch.no_grad():
        output_of(m.model, x)
        for sl in slices:
            a.parameter(sl.name).narrow(sl.dim, sl.start, sl.stop - sl.start).add_(0.5)
        output_of(m.model, x)
    handle.remove()
    d = a.head_dim
    changed = [(seen[1][..., h * d:(h + 1) * d] - seen[0][..., h * d:(h + 1) * d]).abs().max().item() for h in range(4)]
    assert changed[2] > 1e-3 and max(changed[:2] + changed[3:]) == 0.0
    total = sum(a.parameter(n).numel() for n in ("gpt_neox.layers.0.attention.query_key_value.weight",
                                                 "gpt_neox.layers.0.attention.query_key_value.bias",
                                                 "gpt_neox.layers.0.attention.dense.weight"))
    assert a.params_per_head()[0].sum().item() == total


def _eap_ig_edge_count(layers: int, heads: int, parallel: bool) -> int:
    """EAP-IG's ``Graph.from_model`` rule (one input node, no grouped queries) enumerated edge by edge."""
    stream, edges = 1, 0
    for _ in range(layers):
        if parallel:
            edges += stream * (3 * heads + 1)
            stream += heads + 1
        else:
            edges += stream * 3 * heads
            stream += heads
            edges += stream
            stream += 1
    return edges + stream


@pytest.mark.parametrize("layers, heads", [(2, 4), (6, 8), (32, 32)])
def test_parallel_graph_counts_match_an_enumeration_and_eap_ig(layers, heads):
    spec = FAMILIES["gpt_neox"]
    for parallel in (True, False):
        graph = Graph.for_family(spec, layers, heads, embedding_nodes=1, parallel_attn_mlp=parallel)
        assert graph.num_edges == _eap_ig_edge_count(layers, heads, parallel) == len(set(graph.edge_names))
    graph = Graph.for_family(spec, layers, heads, embedding_nodes=1, parallel_attn_mlp=True)
    within = {f"a{l}.h{h}->m{l}" for l in range(layers) for h in range(heads)}
    assert not within & set(graph.edge_names)
    assert "a0.h0->m1" in graph.edge_names and "m0->a1.h0<q>" in graph.edge_names
    assert Graph.from_dict(graph.to_dict()) == graph
    assert Graph.from_dict(Graph.for_family(spec, layers, heads, embedding_nodes=1).to_dict()).parallel_attn_mlp is False


EDGE_NEW = ["neox-parallel", "neox-sequential"]


def _values(kind, m, clean, corrupted):
    if kind == "zero":
        return None, None
    if kind == "mean":
        means = writer_means(m.model, m.adapter, [clean, corrupted])
        return means, means.components
    return capture_writers(m.model, m.adapter, corrupted), capture_activations(m.model, m.adapter, corrupted)


@pytest.mark.parametrize("edge_name", EDGE_NEW)
@pytest.mark.parametrize("kind", ["corrupted", "mean", "zero"])
def test_neox_every_edge_kept_is_the_model(edge_name, kind, one_thread):
    m = _model(edge_name)
    clean, corrupted = _inputs(0), _inputs(1)
    graph = Graph.from_adapter(m.adapter)
    assert graph.parallel_attn_mlp is (edge_name == "neox-parallel")
    values, _ = _values(kind, m, clean, corrupted)
    with torch.no_grad():
        plain = output_of(m.model, clean)
        with apply_edges(m.model, m.adapter, graph, torch.ones(graph.num_edges), values):
            edged = output_of(m.model, clean)
    assert count_hooks(m.model) == 0
    assert (plain - edged).abs().max() <= 1e-5


@pytest.mark.parametrize("edge_name", EDGE_NEW)
@pytest.mark.parametrize("kind", ["corrupted", "mean", "zero"])
@pytest.mark.parametrize("node", ["a0.h1", "m0", "a1.h3", "m1"])
def test_neox_outgoing_edges_cut_is_node_ablation(edge_name, kind, node, one_thread):
    m = _model(edge_name)
    clean, corrupted = _inputs(0), _inputs(1)
    graph = Graph.from_adapter(m.adapter)
    values, component_values = _values(kind, m, clean, corrupted)
    mask = torch.ones(graph.num_edges)
    mask[graph.edges_from(node)] = 0
    heads, mlps = torch.ones(2, 4), torch.ones(2)
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
    assert (gated - plain).abs().max() > 1e-3


def test_parallel_mlp_does_not_read_its_own_layers_heads(one_thread):
    """Cutting every edge into m0 (zero ablation) equals the MLP reading a stream without the embeddings, by hand:
    with parallel attention and MLP, the only writer upstream of m0 is the embedding."""
    m = _model("neox-parallel")
    clean = _inputs(0)
    graph = Graph.from_adapter(m.adapter)
    assert [graph.writers[w] for w in range(graph.reader_blocks[1].writers)] == ["input"]
    mask = torch.ones(graph.num_edges)
    mask[graph.edges_into("m0")] = 0
    surgery = copy.deepcopy(m.model)
    norm = surgery.base_model.layers[0].post_attention_layernorm
    handle = norm.register_forward_pre_hook(lambda mod, args: (torch.zeros_like(args[0]),))
    with torch.no_grad():
        expected = output_of(surgery, clean)
        with apply_edges(m.model, m.adapter, graph, mask, None):
            edged = output_of(m.model, clean)
    handle.remove()
    assert (edged - expected).abs().max() <= 1e-5
    assert (edged - output_of(m.model, clean)).abs().max() > 1e-3


@pytest.mark.parametrize("blocked", ["olmo2"])  # Gemma-2's edges are EAP-IG's (tests/unit/test_mib_models.py)
def test_block_norm_families_refuse_edges_in_one_line(blocked, tmp_path, capsys):
    m = _model(blocked)
    graph = Graph.from_adapter(m.adapter)  # the graph still counts
    assert graph.num_edges == Graph.for_family(FAMILIES["llama"], 2, 4, 2).num_edges
    with pytest.raises(SubnetlabError, match="normalise each attention block's output"):
        check_edge_family(m.adapter)
    with pytest.raises(SubnetlabError, match="normalise each attention block's output"):
        apply_edges(m.model, m.adapter, graph, torch.ones(graph.num_edges))
    m.model.save_pretrained(tmp_path / "model")
    with pytest.raises(SystemExit) as done:
        main(["inspect", "--model", str(tmp_path / "model"), "--edges"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert done.value.code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: --edges: {blocked} models normalise each attention block's output")


def test_gemma2_soft_capping_is_active_and_gates_keep_it():
    """The tiny Gemma-2 caps its logits at 3: the gated model's logits stay inside the cap."""
    m = _model("gemma2")
    heads = torch.ones(2, 4)
    heads[0, 0] = 0
    with torch.no_grad():
        with apply_gates(m.model, m.adapter, heads, torch.ones(2)):
            gated = output_of(m.model, _inputs())
    assert gated.abs().max() < 3.0
    assert gated.abs().max() > 1.0  # the cap is reached for, so it shapes the output


def _pruned(m):
    heads, mlps = torch.ones(3, 4), torch.ones(3)
    heads[0, 1], heads[1, :], heads[2, 3], mlps[1] = 0, 0, 0, 0
    return Subnetwork.structured(m.adapter, heads, mlps, ablation="mean")


@pytest.mark.parametrize("sliced", ["gemma2", "neox-parallel", "neox-sequential"])
def test_sliced_model_computes_what_the_gated_model_computes(sliced, one_thread):
    """Physical removal (GPT-NeoX's per-head fused Q/K/V rows; Gemma-2's MLP folded after its norm) = the gates."""
    m = _model(sliced, layers=3)
    x = _inputs()
    values = collect_means(m.model, m.adapter, [x, _inputs(1)])
    sub = _pruned(m)
    small = slice_subnetwork(m.model, m.adapter, sub, values).model
    with torch.no_grad():
        with apply_gates(m.model, m.adapter, *sub.gates(), ablation=values):
            gated = output_of(m.model, x)
        assert (output_of(small, x) - gated).abs().max() <= 1e-5
        assert (output_of(m.model, x) - gated).abs().max() > 1e-3
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in m.model.parameters())


def test_olmo2_refuses_slicing_out_some_heads(one_thread):
    m = _model("olmo2", layers=3)
    with pytest.raises(SubnetlabError, match="q_norm, k_norm"):
        slice_subnetwork(m.model, m.adapter, _pruned(m), None)
