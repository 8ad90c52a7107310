"""Parity with TransformerLens 4.3's attribution patching (``subnetlab[bench]``; skipped without it).

On a tiny GPT-2 and a tiny Llama (key/value heads = query heads: TransformerLens refuses grouped-query
attention for edges), each wrapped in memory with ``TransformerBridge.boot_transformers``:

* ``enumerate_edges`` maps one to one onto subnetlab's graph with one embedding node, once TransformerLens's
  per-position edges are summed over positions (its ``embed`` is the token embedding, subnetlab's ``input`` the
  token plus position embeddings: the position embeddings are the same on both prompts of a pair, so their
  difference, and any edge score from them, is zero);
* ``attribution_patch`` edge and node scores equal subnetlab's EAP with the prompts' roles swapped:
  TransformerLens takes the gradient on the corrupted run and scores ``(a_clean - a_corrupt) . g`` (denoising),
  subnetlab's EAP the gradient on the clean run and ``(a_corrupt - a_clean) . g`` (noising); swapping which prompt
  is "clean" turns one into the other exactly;
* ``faithfulness`` of one fixed edge set equals subnetlab's ``circuit_faithfulness`` of it.

Run, in an environment with the extra (``pip install -e ".[bench]"``): ``python -m pytest -s tests/unit/test_transformer_lens_parity.py``
(``-s`` prints the largest differences).
"""

from __future__ import annotations

import copy

import pytest
import torch

ap = pytest.importorskip("transformer_lens.tools.analysis.attribution_patching",
                         reason="TransformerLens 4.3 is not installed (pip install 'subnetlab[bench]')")

from subnetlab.analysis.faithfulness import circuit_faithfulness  # noqa: E402
from subnetlab.intervene.edges import apply_edges, capture_writers  # noqa: E402
from subnetlab.methods.attribution import attribute_batch, node_scores  # noqa: E402
from subnetlab.models import build_model, get_adapter  # noqa: E402
from subnetlab.models.graph import Graph  # noqa: E402
from tests.conftest import tiny_config  # noqa: E402

READER = {"q_input": "<q>", "k_input": "<k>", "v_input": "<v>"}


def subnetlab_name(node) -> str:
    """A TransformerLens node as subnetlab names it (writer or reader)."""
    if node.kind == "embed":
        return "input"
    if node.kind == "attn_head_out":
        return f"a{node.layer}.h{node.head}"
    if node.kind in READER:
        return f"a{node.layer}.h{node.head}{READER[node.kind]}"
    if node.kind in ("mlp_out", "mlp_in"):
        return f"m{node.layer}"
    return "logits"


def bridged(family, tmp_path):
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoTokenizer

    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    config = tiny_config(family, layers=2)
    if family == "llama":
        config.num_key_value_heads = config.num_attention_heads
    model = build_model(config, head="causal-lm", seed=0).model.double().eval()
    plain = copy.deepcopy(model)  # the bridge wraps the model's modules in place; subnetlab measures its own copy
    model.save_pretrained(tmp_path)
    gpt2_style_tokenizer().save_pretrained(tmp_path)
    bridge = TransformerBridge.boot_transformers(str(tmp_path), hf_model=model,
                                                 tokenizer=AutoTokenizer.from_pretrained(str(tmp_path)))
    return plain, bridge.eval()


def pair_data(B=3, T=6):
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(3, 90, (B, T), generator=g)
    corrupt = clean.clone()
    corrupt[:, 1] = torch.randint(3, 90, (B,), generator=g)  # IOI-like: one token differs
    corrupt[:, 3] = torch.randint(3, 90, (B,), generator=g)
    return clean, corrupt


A, W = 5, 9  # answer and wrong-answer tokens


def metric_fn(logits):  # TransformerLens: one example's logits -> scalar
    return logits[0, -1, A] - logits[0, -1, W]


def metric_rows(logits, _clean_logits):  # subnetlab: [B]
    return logits[:, -1, A] - logits[:, -1, W]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_transformer_lens_edges_scores_and_faithfulness_equal_subnetlab(family, tmp_path, one_thread):
    model, bridge = bridged(family, tmp_path)
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter, embedding_nodes=1)
    clean, corrupt = pair_data()
    mask = torch.ones_like(clean)

    result = ap.attribution_patch(bridge, clean, corrupt, metric_fn, ap.EdgeAttributionConfig(granularity="edge"))
    theirs = torch.zeros(graph.num_edges, dtype=torch.float64)
    names = set()
    for (writer, reader), score in result.edge_scores.items():
        name = f"{subnetlab_name(writer)}->{subnetlab_name(reader)}"
        names.add(name)
        theirs[graph.edge_index(name)] += score  # summed over positions
    assert names == set(graph.edge_names)  # one to one (per position on their side)
    positions = clean.shape[1]
    assert len(result.edge_scores) == graph.num_edges * positions

    # subnetlab EAP, denoising: "clean" = their corrupt prompt, "corrupted" = their clean prompt
    ours = attribute_batch(model, adapter, graph, {"input_ids": corrupt, "attention_mask": mask},
                           {"input_ids": clean, "attention_mask": mask}, metric_rows).double() / clean.shape[0]
    floor = 1e-9 * float(theirs.abs().max())
    rel = (ours - theirs).abs() / theirs.abs().clamp(min=floor)
    print(f"\n{family}: {graph.num_edges} edges ({len(result.edge_scores)} per-position TransformerLens edges); "
          f"largest relative difference over all edges {float(rel.max()):.3g} "
          f"(edge {graph.edge_names[int(rel.argmax())]}), largest absolute {float((ours - theirs).abs().max()):.3g} "
          f"of max |score| {float(theirs.abs().max()):.3g}")
    assert float(rel.max()) < 1e-4

    nodes = ap.attribution_patch(bridge, clean, corrupt, metric_fn, ap.EdgeAttributionConfig(granularity="node"))
    their_nodes: dict[str, float] = {}
    for node, score in nodes.node_scores.items():
        their_nodes[subnetlab_name(node)] = their_nodes.get(subnetlab_name(node), 0.0) + score
    mine = node_scores(graph, ours)
    our_nodes = {"input": float(mine["embeddings"][0])}
    for layer in range(graph.num_layers):
        our_nodes[f"m{layer}"] = float(mine["mlps"][layer])
        for h in range(graph.num_heads):
            our_nodes[f"a{layer}.h{h}"] = float(mine["heads"][layer, h])
    assert set(their_nodes) == set(our_nodes)
    node_rel = max(abs(our_nodes[k] - their_nodes[k]) / max(abs(their_nodes[k]), floor) for k in our_nodes)
    print(f"{family}: {len(our_nodes)} nodes; largest relative difference of node scores {node_rel:.3g}")
    assert node_rel < 1e-4

    # one fixed edge set: every edge whose index is divisible by 3, for the first pair
    keep = torch.zeros(graph.num_edges, dtype=torch.bool)
    keep[::3] = True
    circuit = [(w, r) for (w, r) in result.edge_scores if keep[graph.edge_index(
        f"{subnetlab_name(w)}->{subnetlab_name(r)}")]]
    tl = ap.faithfulness(bridge, clean[:1], corrupt[:1], metric_fn, circuit)
    values = capture_writers(model, adapter, {"input_ids": corrupt[:1], "attention_mask": mask[:1]})

    def evaluate(k):
        with torch.no_grad(), apply_edges(model, adapter, graph, k.double(), values):
            logits = model(input_ids=clean[:1], attention_mask=mask[:1]).logits
        return {"logit_diff": float(metric_rows(logits, None)[0])}

    f = circuit_faithfulness(keep, evaluate)["logit_diff"]
    print(f"{family}: faithfulness of {int(keep.sum())} edges: TransformerLens {tl.recovered:.10f}, subnetlab {f:.10f}")
    assert abs(f - tl.recovered) < 1e-6  # float64 models; Llama's RMSNorm computes in float32
