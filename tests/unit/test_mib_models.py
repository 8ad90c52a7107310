"""MIB's models MIB-ready by default (issue 47, item 5): grouped-query models in EAP-IG's ungrouped graph, and
default scores with two embedding nodes joined into MIB's one.

Independent computations: EAP-IG's ``Graph.from_model`` transcribed (``tests.unit.test_mib.EapIgGraph``: a grouped
model's EAP-IG graph is that of an ungrouped one, ``n_heads`` key and value inputs per layer, TransformerLens's
``ungroup_grouped_query_attention``); the same model with its key/value heads repeated by hand into an ungrouped
model (``num_key_value_heads = num_attention_heads``), scored and intervened on in the plain multi-head path; the
grouped graph's scores (each key/value reader the sum of its query heads'); scoring with one embedding node directly.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.edges import apply_edges, capture_writers
from subnetlab.methods.attribution import attribute_batch
from subnetlab.models import get_adapter, mib_graph
from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph
from tests.conftest import VOCAB, tiny_inputs
from tests.unit.test_mib import EapIgGraph

ANSWER, WRONG = torch.tensor([5, 9]), torch.tensor([7, 4])


def _metric(logits, clean_logits):  # logit difference at the last position, [B]
    last = logits[:, -1]
    return last.gather(1, ANSWER[:, None])[:, 0] - last.gather(1, WRONG[:, None])[:, 0]


def _grouped(kind: str, layers: int = 2, heads: int = 4, kv: int = 2):
    """A tiny grouped-query model in float64 (Llama or Qwen2: Qwen2's biased q/k/v projections)."""
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                  hidden_size=8 * heads, intermediate_size=16 * heads, max_position_embeddings=64,
                  initializer_range=0.3)
    model = (LlamaForCausalLM(LlamaConfig(**common)) if kind == "llama" else Qwen2ForCausalLM(Qwen2Config(**common)))
    if kind == "qwen2":  # non-zero biases, so a bias repeated per query head is checked too
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.3)
    return model.double().eval()


def _ungrouped_by_hand(model):
    """The same model with each key/value head's weights copied for every query head of its group (the model
    EAP-IG's ungrouping computes): an ordinary multi-head model."""
    cfg = model.config
    H, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = cfg.hidden_size // H
    config = type(cfg)(**{**cfg.to_dict(), "num_key_value_heads": H})
    copy = type(model)(config).double().eval()
    state = model.state_dict()
    for key, value in list(state.items()):
        if key.endswith(("k_proj.weight", "v_proj.weight", "k_proj.bias", "v_proj.bias")):
            state[key] = value.reshape(kv, d, *value.shape[1:]).repeat_interleave(H // kv, 0).reshape(
                H * d, *value.shape[1:])
    copy.load_state_dict(state)
    return copy


def _kv_reader(graph: Graph, reader: str) -> str:
    """The grouped graph's reader of an ungrouped graph's reader (a query head's key/value: its key/value head's)."""
    if not reader.endswith(("<k>", "<v>")):
        return reader
    layer, head = reader[1:-3].split(".h")
    return f"a{layer}.kv{int(head) // graph.group}{reader[-3:]}"


# ------------------------------------------------------------------------------------------ the graph
@pytest.mark.parametrize("layers, heads, kv", [(2, 4, 2), (3, 6, 2), (2, 8, 1)])
def test_ungrouped_graph_is_eap_igs_from_model(layers, heads, kv):
    """Names, forward/backward indices and edge counts of a grouped model's ungrouped graph are EAP-IG's
    ``Graph.from_model`` of its ``n_layers`` x ``n_heads`` (transcribed), and its file order is EAP-IG's."""
    graph = Graph("llama", layers, heads, kv, 1, ungrouped_kv=True)
    eap = EapIgGraph(layers, heads)
    assert graph.num_edges == len(eap.edges) and sorted(graph.edge_names) == sorted(eap.edges)
    for name, (w, r) in zip(graph.edge_names, graph.edges):
        assert eap.edges[name] == (w, r), name
    assert [graph.edge_names[e] for e in mib_graph.edge_order(graph)] == list(eap.edges)
    assert len(graph.writers) == eap.n_forward and len(graph.readers) == eap.n_backward
    for r, owners in enumerate(graph.reader_owners):  # forward_to_backward: a head owns its own q, k and v inputs
        assert [bool(eap.forward_to_backward[w, r]) for w in range(eap.n_forward)] == \
            [w in owners for w in range(eap.n_forward)]
    grouped = Graph("llama", layers, heads, kv, 1)
    per_layer_extra = 2 * (heads - kv)  # key and value readers added per layer, each fed by every upstream writer
    upstream = [1 + l * (heads + 1) for l in range(layers)]
    assert graph.num_edges - grouped.num_edges == sum(per_layer_extra * u for u in upstream)
    assert graph.shape()["ungrouped_kv"] is True and Graph.from_shape(graph.shape()) == graph
    assert "ungrouped_kv" not in Graph("llama", layers, heads, heads, 1, ungrouped_kv=True).shape()


def test_ungrouped_graph_files_round_trip(tmp_path):
    graph = Graph("llama", 2, 4, 2, 1, ungrouped_kv=True)
    scores = torch.randn(graph.num_edges, generator=torch.Generator().manual_seed(0))
    for name in ("g.json", "g.pt"):
        mib_graph.save(Circuit(graph, scores), tmp_path / name, d_model=32)
        back = mib_graph.load(tmp_path / name, graph)
        assert torch.equal(back.scores, scores) and back.graph == graph
    grouped = Graph("llama", 2, 4, 2, 1)
    with pytest.raises(SubnetlabError, match="kv_readers=query"):
        mib_graph.save(Circuit(grouped, torch.ones(grouped.num_edges)), tmp_path / "x.json", d_model=32)


# ------------------------------------------------------------------------------------------ scores
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("method", ["eap", "eap-ig"])
def test_grouped_scores_equal_the_model_ungrouped_by_hand(kind, method, one_thread):
    """EAP / EAP-IG on a grouped model's ungrouped graph: the scores of the same model with its key/value heads
    copied per query head (every edge, to float64 rounding), those of ``intervene.edges``'s expanded readers, and,
    summed over each group, the grouped graph's key/value readers' scores."""
    model = _grouped(kind)
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter, ungrouped_kv=True)
    clean, corrupted = tiny_inputs("llama", batch=2, length=5, seed=0), tiny_inputs("llama", batch=2, length=5, seed=1)
    scores = attribute_batch(model, adapter, graph, clean, corrupted, _metric, method=method, steps=3)
    assert graph.ungrouped_kv and graph.num_edges == len(EapIgGraph(2, 4).edges)
    assert all(m.self_attn.num_key_value_groups == 2 for m in model.model.layers)  # restored

    by_hand = _ungrouped_by_hand(model)
    hand_adapter = get_adapter(by_hand)
    hand_graph = Graph.from_adapter(hand_adapter)
    assert hand_graph.edge_names == graph.edge_names
    reference = attribute_batch(by_hand, hand_adapter, hand_graph, clean, corrupted, _metric, method=method, steps=3)
    scale = reference.abs().max()
    assert scale > 1e-2
    assert ((scores - reference).abs().max() / scale) < 1e-9

    expanded = attribute_batch(model, adapter, graph, clean, corrupted, _metric, method=method, steps=3,
                               expand_readers=True)
    assert ((scores - expanded).abs().max() / scale) < 1e-9

    grouped = Graph.from_adapter(adapter)
    grouped_scores = attribute_batch(model, adapter, grouped, clean, corrupted, _metric, method=method, steps=3)
    summed = torch.zeros_like(grouped_scores)
    for e, name in enumerate(graph.edge_names):
        writer, reader = name.split("->")
        summed[grouped.edge_index(f"{writer}->{_kv_reader(grouped, reader)}")] += scores[e]
    assert ((summed - grouped_scores).abs().max() / scale) < 1e-5  # RMSNorm computes in float32


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_grouped_edge_masks_equal_the_model_ungrouped_by_hand(kind, one_thread):
    """Edges cut on the grouped model's ungrouped graph (corrupted values): the logits of the same cuts on the
    model ungrouped by hand; every edge kept is the model; the attention's grouping restored on exit."""
    model = _grouped(kind)
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter, ungrouped_kv=True)
    by_hand = _ungrouped_by_hand(model)
    clean, corrupted = tiny_inputs("llama", batch=2, length=6, seed=2), tiny_inputs("llama", batch=2, length=6, seed=3)
    with torch.no_grad():
        full = model(**clean).logits
        values, hand_values = capture_writers(model, adapter, corrupted), capture_writers(by_hand, get_adapter(by_hand),
                                                                                         corrupted)
        for seed in range(3):
            mask = (torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(seed)) > 0.5).double()
            with apply_edges(model, adapter, graph, mask, values):
                cut = model(**clean).logits
            with apply_edges(by_hand, get_adapter(by_hand), Graph.from_adapter(get_adapter(by_hand)), mask,
                             hand_values):
                reference = by_hand(**clean).logits
            assert (cut - full).abs().max() > 1e-2
            assert torch.allclose(cut, reference, atol=1e-9)
        with apply_edges(model, adapter, graph, torch.ones(graph.num_edges, dtype=torch.float64), values) as edges:
            assert torch.allclose(model(**clean).logits, full, atol=1e-9)
            edges.enabled = False  # the full model inside the context: the projections give per-query-head copies
            assert torch.allclose(model(**clean).logits, full, atol=1e-9)
    assert all(m.self_attn.num_key_value_groups == 2 for m in model.model.layers)
    assert torch.equal(model(**clean).logits.detach(), full)


# ------------------------------------------------------------------------------------------ two embedding nodes
@pytest.fixture(scope="module")
def gpt2():
    from tests.conftest import tiny_model

    m = tiny_model("gpt2")
    m.model.double().eval()
    return m


@pytest.mark.parametrize("method", ["eap", "eap-ig", "eap-ig-activations", "clean-corrupted"])
def test_two_embedding_nodes_joined_equal_scoring_with_one(gpt2, method, one_thread):
    """Scores on the default GPT-2 graph (token and position embeddings two writers), joined into MIB's one
    ``input``: the scores of the graph with one embedding node, computed directly (linear in the writer's output)."""
    clean, corrupted = tiny_inputs("gpt2", batch=2, length=5, seed=0), tiny_inputs("gpt2", batch=2, length=5, seed=1)
    two, one = Graph.from_adapter(gpt2.adapter), Graph.from_adapter(gpt2.adapter, embedding_nodes=1)
    assert two.num_embeddings == 2
    scores = attribute_batch(gpt2.model, gpt2.adapter, two, clean, corrupted, _metric, method=method, steps=2)
    direct = attribute_batch(gpt2.model, gpt2.adapter, one, clean, corrupted, _metric, method=method, steps=2)
    joined = mib_graph.joined_embeddings(Circuit(two, scores))
    assert joined.graph == one
    scale = direct.abs().max()
    assert scale > 1e-3 and ((joined.scores - direct).abs().max() / scale) < 1e-9


def test_what_cannot_be_joined_is_refused():
    two = Graph("gpt2", 2, 2, 2, 2)
    for circuit, method, why in ((Circuit(two, torch.ones(two.num_edges)), "exact", "not linear"),
                                 (Circuit(two, torch.ones(two.num_edges), score_sign="signed"), None, "signed"),
                                 (Circuit(two, None, torch.ones(two.num_edges, dtype=torch.bool)), None, "circuit")):
        with pytest.raises(SubnetlabError, match=why) as e:
            mib_graph.joined_embeddings(circuit, "f.json", "definition", method)
        assert e.value.setting == "definition"


# ------------------------------------------------------------------------------------------ the commands
TASK = ["--task", "circuit:ioi", "--task-option", "n_train=4", "--task-option", "n_eval=6"]


def _run(args, capsys):
    from subnetlab.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    captured = capsys.readouterr()
    assert e.value.code == 0, captured.err
    return captured


def _refused(args, capsys) -> str:
    from subnetlab.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert e.value.code == 2 and len(err) == 1, err
    return err[0]


def test_default_gpt2_scores_feed_circuit_eval_mib_without_rescoring(tmp_path, capsys, one_thread):
    """``circuit --method eap`` with its defaults (GPT-2: two embedding nodes) then ``circuit-eval --mib`` and a
    submission: MIB's graph, its CPR and CMD those of scores computed with one embedding node; the output says the
    embeddings were joined."""
    from transformers import GPT2Config

    from subnetlab.models import build_model, mib_submission
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    build_model(config, head="causal-lm", seed=0).model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    model = ["--model", str(tmp_path / "model"), *TASK, "--device", "cpu"]
    _run(["circuit", *model, "--method", "eap", "--out", str(tmp_path / "two")], capsys)
    _run(["circuit", *model, "--method", "eap", "--embedding-nodes", "1", "--out", str(tmp_path / "one")], capsys)
    results = {}
    for name in ("two", "one"):
        _run(["circuit-eval", *model, "--scores", str(tmp_path / name / "scores.safetensors"), "--mib",
              "--mib-submission", str(tmp_path / f"sub-{name}"), "--out", str(tmp_path / f"ev-{name}")], capsys)
        results[name] = json.loads((tmp_path / f"ev-{name}" / "faithfulness.json").read_text())
    assert "two embedding nodes" in results["two"]["mib_graph"] and "mib_graph" not in results["one"]
    assert results["two"]["items"] == results["one"]["items"] == len(EapIgGraph(2, 2).edges)
    assert results["two"]["cpr"] == pytest.approx(results["one"]["cpr"], abs=1e-6)
    assert results["two"]["cmd"] == pytest.approx(results["one"]["cmd"], abs=1e-6)
    files = {name: mib_graph.load(tmp_path / f"sub-{name}" / "ioi_model" / "importances.json") for name in results}
    assert torch.allclose(files["two"].scores, files["one"].scores, atol=1e-6)
    assert mib_submission.check(tmp_path / "sub-two", mib_names=False)[0]["folder"] == "ioi_model"
    # the graph.json beside the scores records the method and is joined the same way
    _run(["circuit-eval", *model, "--scores", str(tmp_path / "two" / "graph.json"), "--mib", "--out",
          str(tmp_path / "ev-json")], capsys)
    assert json.loads((tmp_path / "ev-json" / "metrics.json").read_text())["cpr"] == results["two"]["cpr"]


def test_default_grouped_scores_feed_circuit_eval_mib_and_a_submission(tmp_path, capsys, monkeypatch, one_thread):
    """A grouped-query Llama: ``circuit --method eap`` by default scores EAP-IG's graph (a key and value reader per
    query head) and says so; ``circuit-eval --mib --mib-submission`` measures and writes it; scores of the grouped
    graph (``--kv-readers kv``) are refused by ``circuit-eval --mib`` before the model loads, naming the flag."""
    from subnetlab.models import build_model, mib_submission
    from tests.unit.circuit_helpers import llama_style_tokenizer

    tok = llama_style_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         hidden_size=16, intermediate_size=32, max_position_embeddings=64, initializer_range=0.3)
    build_model(config, head="causal-lm", seed=0).model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    model = ["--model", str(tmp_path / "model"), *TASK, "--device", "cpu"]
    out = _run(["circuit", *model, "--method", "eap", "--out", str(tmp_path / "eap")], capsys)
    assert "one key and value reader per query head" in out.out
    assert json.loads((tmp_path / "eap" / "metrics.json").read_text())["kv_readers"] == "query"
    _run(["circuit-eval", *model, "--scores", str(tmp_path / "eap" / "scores.safetensors"), "--mib",
          "--mib-submission", str(tmp_path / "sub"), "--out", str(tmp_path / "ev")], capsys)
    result = json.loads((tmp_path / "ev" / "faithfulness.json").read_text())
    assert result["definition"] == "mib" and result["items"] == len(EapIgGraph(2, 4).edges)
    written = mib_graph.load(tmp_path / "sub" / "ioi_model" / "importances.json")
    assert sorted(written.graph.edge_names) == sorted(EapIgGraph(2, 4).edges)
    assert mib_submission.check(tmp_path / "sub", mib_names=False)[0]["folder"] == "ioi_model"

    _run(["circuit", *model, "--method", "eap", "--kv-readers", "kv", "--out", str(tmp_path / "kv")], capsys)
    import subnetlab.models

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the scores file was refused")

    monkeypatch.setattr(subnetlab.models, "load_model", no_load)
    err = _refused(["circuit-eval", *model, "--scores", str(tmp_path / "kv" / "scores.safetensors"), "--mib",
                    "--out", str(tmp_path / "ev-kv")], capsys)
    assert "--mib" in err and "per key/value head" in err and "kv_readers=query" in err
    assert not (tmp_path / "ev-kv").exists()


# ------------------------------------------------------------------------------------------ Gemma-2
def _gemma2():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8,
                          sliding_window=4, attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
                          max_position_embeddings=64, initializer_range=0.1, attn_implementation="eager")
    return Gemma2ForCausalLM(config).double().eval()


def _eap_ig_outputs(model, inputs):
    """EAP-IG's writer outputs on Gemma-2 by plain hooks (TransformerLens's): ``hook_embed`` (the embedding times
    sqrt(hidden), folded into W_E there; here the first layer's input), each head's ``hook_result`` (its slice of o_proj's input times its slice
    of o_proj, before ``post_attention_layernorm``), ``hook_mlp_out`` (after ``post_feedforward_layernorm``); and
    each layer's attention output before its norm (``attn{l}``, o_proj's output)."""
    seen, handles = {}, []
    H, d = model.config.num_attention_heads, model.config.head_dim
    handles.append(model.model.layers[0].register_forward_pre_hook(  # the stream as it starts: the scaled embedding
        lambda m, a, k: seen.__setitem__("input", (a[0] if a else k["hidden_states"]).clone()), with_kwargs=True))
    for l, layer in enumerate(model.model.layers):
        def heads(m, a, l=l):
            z = a[0].view(*a[0].shape[:-1], H, d)
            w = m.weight.t().reshape(H, d, -1)
            for h in range(H):
                seen[f"a{l}.h{h}"] = z[..., h, :] @ w[h]
        handles.append(layer.self_attn.o_proj.register_forward_pre_hook(heads))
        handles.append(layer.self_attn.o_proj.register_forward_hook(
            lambda m, a, out, l=l: seen.__setitem__(f"attn{l}", out)))
        handles.append(layer.post_feedforward_layernorm.register_forward_hook(
            lambda m, a, out, l=l: seen.__setitem__(f"m{l}", out)))
    with torch.no_grad():
        model(**inputs)
    for h in handles:
        h.remove()
    return seen


def _patched_by_hand(model, clean, delta, reader):
    """The clean run with ``delta`` added to ``reader``'s input only, by hooks written here: a query/key/value
    reader re-projects its head's columns from the norm of its own input; an MLP / the logits get it at their
    norm's input."""
    handles = []
    if reader == "logits":
        handles.append(model.model.norm.register_forward_pre_hook(lambda m, a: (a[0] + delta,)))
    elif reader.startswith("m"):
        layer = model.model.layers[int(reader[1:])]
        handles.append(layer.pre_feedforward_layernorm.register_forward_pre_hook(lambda m, a: (a[0] + delta,)))
    else:
        head, kind = reader[:-3], reader[-2]
        l, rest = head[1:].split(".")
        layer = model.model.layers[int(l)]
        index = int(rest[2:] if rest.startswith("kv") else rest[1:])
        d = model.config.head_dim
        stash = {}
        handles.append(layer.input_layernorm.register_forward_pre_hook(lambda m, a: stash.__setitem__("x", a[0])))
        proj = {"q": layer.self_attn.q_proj, "k": layer.self_attn.k_proj, "v": layer.self_attn.v_proj}[kind]

        def replace(m, a, out):
            mine = torch.nn.functional.linear(layer.input_layernorm(stash["x"] + delta), m.weight, m.bias)
            out = out.clone()
            out[..., index * d:(index + 1) * d] = mine[..., index * d:(index + 1) * d]
            return out
        handles.append(proj.register_forward_hook(replace))
    try:
        with torch.no_grad():
            return model(**clean).logits
    finally:
        for h in handles:
            h.remove()


def _cut_by_hand(model, clean, outputs, diff, writer, reader):
    """EAP-IG's ``evaluate_graph`` on Gemma-2 with one edge cut: an embedding or MLP writer's difference added to
    the reader's input; a head's seen through its layer's ``post_attention_layernorm``: ``post(A + d_h) -
    post(A)``, ``A`` the layer's attention output (before the norm) in the clean run."""
    if writer.startswith("a"):
        layer = model.model.layers[int(writer[1:].split(".")[0])]
        attention = outputs[f"attn{writer[1:].split('.')[0]}"]
        with torch.no_grad():
            delta = layer.post_attention_layernorm(attention + diff[writer]) - layer.post_attention_layernorm(attention)
    else:
        delta = diff[writer]
    return _patched_by_hand(model, clean, delta, reader)


def test_gemma2_edges_are_eap_igs_through_its_norms_after_each_block(one_thread):
    """Gemma-2's edges as EAP-IG defines them (module doc of ``intervene.edges``): cutting one edge (corrupted
    values) is EAP-IG's ``evaluate_graph`` written here with plain hooks (a head's difference before
    ``post_attention_layernorm`` seen through it, an MLP's after ``post_feedforward_layernorm``, the input times
    sqrt(hidden)); every edge kept is the model, every edge cut the corrupted run; EAP's scores are EAP-IG's
    ``get_scores_eap`` (``D . g``: the derivative of adding ``eps D`` to the reader's input, a central finite
    difference by hand; RMSNorm computes in float32), on the grouped graph and on MIB's ungrouped one; training
    masks through the norms is refused."""
    model = _gemma2()
    adapter = get_adapter(model)
    clean, corrupted = tiny_inputs("llama", batch=2, length=6, seed=0), tiny_inputs("llama", batch=2, length=6, seed=1)
    graph = Graph.from_adapter(adapter)
    values = capture_writers(model, adapter, corrupted)
    outputs = _eap_ig_outputs(model, clean)
    diff = {k: v - outputs[k] for k, v in _eap_ig_outputs(model, corrupted).items()}
    with torch.no_grad():
        full = model(**clean).logits
        with apply_edges(model, adapter, graph, torch.ones(graph.num_edges, dtype=torch.float64), values):
            assert torch.allclose(model(**clean).logits, full, atol=1e-10)
        with apply_edges(model, adapter, graph, torch.zeros(graph.num_edges, dtype=torch.float64), values):
            assert torch.allclose(model(**clean).logits, model(**corrupted).logits, atol=1e-6)
        for edge in ("input->a1.kv1<k>", "a0.h1->m0", "a0.h3->a1.h0<q>", "a0.h2->a1.kv0<v>", "m0->logits",
                     "input->m1", "m1->logits", "a1.h2->logits"):
            writer, reader = edge.split("->")
            mask = torch.ones(graph.num_edges, dtype=torch.float64)
            mask[graph.edge_index(edge)] = 0
            with apply_edges(model, adapter, graph, mask, values):
                cut = model(**clean).logits
            reference = _cut_by_hand(model, clean, outputs, diff, writer, reader)
            assert (reference - full).abs().max() > 1e-4, edge
            assert torch.allclose(cut, reference, atol=1e-9), edge

    for g in (graph, Graph.from_adapter(adapter, embedding_nodes=1, ungrouped_kv=True)):
        scores = attribute_batch(model, adapter, g, clean, corrupted, _metric, method="eap").double()
        picked = torch.randperm(g.num_edges, generator=torch.Generator().manual_seed(0))[:12].tolist()
        picked += [g.edge_index("a0.h1->m0"), g.edge_index("a1.h2->logits")]
        eps = 1e-3
        for e in picked:
            writer, reader = g.edge_names[e].split("->")
            if g.ungrouped_kv and reader.endswith(("<k>", "<v>")):
                continue  # the by-hand patch re-projects a key/value head, which an ungrouped reader is not
            by_hand = (_metric(_patched_by_hand(model, clean, eps * diff[writer], reader), None).sum()
                       - _metric(_patched_by_hand(model, clean, -eps * diff[writer], reader), None).sum()) / (2 * eps)
            assert float(scores[e]) == pytest.approx(float(by_hand), abs=2e-4 * float(scores.abs().max())), \
                g.edge_names[e]
    with pytest.raises(SubnetlabError, match="evaluated, not trained"):
        attribute_batch(model, adapter, graph, clean, corrupted, _metric, method="eap", expand_readers=True)


def test_gemma2_edge_masks_are_not_trained():
    """Edge Pruning on Gemma-2 is refused when the sweep is planned (its masks' gradient would not follow the norm
    a cut head edge passes), naming the method; Llama's are trained as before."""
    from subnetlab.intervene.edges import check_trainable_edges

    with pytest.raises(SubnetlabError, match="not trained by Edge Pruning") as e:
        check_trainable_edges(get_adapter(_gemma2()))
    assert e.value.setting == "method"
    check_trainable_edges(get_adapter(_grouped("llama")))
