"""The computation graph: counts against Edge Pruning's published figure and an independent enumeration."""

from __future__ import annotations

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import FAMILIES
from subnetlab.models.graph import Graph
from tests.conftest import tiny_model


def _brute_force_edges(layers: int, heads: int, kv: int, embeddings: int) -> set[tuple[str, str]]:
    """Every (writer, reader) pair with the writer upstream, from the rule stated in words (no block arithmetic)."""
    names = ["tok_embeds", "pos_embeds"] if embeddings == 2 else ["input"]
    writers = [(n, -1, "emb") for n in names]
    readers = []
    for l in range(layers):
        writers += [(f"a{l}.h{h}", l, "head") for h in range(heads)] + [(f"m{l}", l, "mlp")]
        kvname = (lambda g: f"a{l}.h{g}") if kv == heads else (lambda g: f"a{l}.kv{g}")
        readers += [(f"a{l}.h{h}<q>", l, "attn") for h in range(heads)]
        readers += [(f"{kvname(g)}<{x}>", l, "attn") for x in "kv" for g in range(kv)]
        readers.append((f"m{l}", l, "mlp"))
    readers.append(("logits", layers, "out"))
    pairs = set()
    for w, wl, wk in writers:
        for r, rl, rk in readers:
            if wk == "emb" or rl > wl or (wk == "head" and rk == "mlp" and rl == wl):
                pairs.add((w, r))
    return pairs


def _edge_pruning_count(layers: int, heads: int, embeddings: int) -> int:
    """``get_num_edges`` of Edge Pruning's modeling_fpt2.py, transcribed."""
    n = 0
    for l in range(layers):
        contribution = embeddings + l * (heads + 1)
        n += 3 * heads * contribution
        n += contribution + heads
    return n + embeddings + layers * (heads + 1)


def test_gpt2_small_has_edge_prunings_edge_counts():
    gpt2 = FAMILIES["gpt2"]
    assert Graph.for_family(gpt2, 12, 12).num_edges == 32_936 == _edge_pruning_count(12, 12, 2)
    assert Graph.for_family(gpt2, 12, 12, embedding_nodes=1).num_edges == 32_491 == _edge_pruning_count(12, 12, 1)


@pytest.mark.parametrize("layers,heads,kv,emb", [(3, 4, 4, 2), (2, 4, 2, 1), (4, 8, 2, 1), (1, 2, 1, 1)])
def test_edges_are_every_upstream_pair(layers, heads, kv, emb):
    family = FAMILIES["gpt2" if emb == 2 else "llama"]
    graph = Graph.for_family(family, layers, heads, kv)
    named = {(graph.writers[w], graph.readers[r]) for w, r in graph.edges}
    assert len(named) == len(graph.edges) == graph.num_edges
    assert named == _brute_force_edges(layers, heads, kv, emb)


def test_stated_counts_of_other_families():
    """BERT-base and RoBERTa-base have GPT-2 small's shape (two embedding nodes); Llama 3 8B groups 4 query heads."""
    assert Graph.for_family(FAMILIES["bert"], 12, 12).num_edges == 32_936
    assert Graph.for_family(FAMILIES["roberta"], 12, 12).num_edges == 32_936
    llama = Graph.for_family(FAMILIES["llama"], 32, 32, 8)
    assert llama.num_embeddings == 1 and llama.num_edges == 805_681
    assert "a0.kv1<k>" in llama.readers and "a0.h5<q>" in llama.readers


def test_graph_of_a_loaded_model_and_its_json(tmp_path):
    m = tiny_model("gpt2")
    graph = Graph.from_adapter(m.adapter)
    assert graph.writers[:3] == ("tok_embeds", "pos_embeds", "a0.h0") and graph.readers[-1] == "logits"
    assert graph.edge_names[0] == "tok_embeds->a0.h0<q>"
    assert graph.edges_from("a1.h3") == [graph.edge_index("a1.h3->m1"), graph.edge_index("a1.h3->logits")]
    keep = [i % 3 == 0 for i in range(graph.num_edges)]
    graph.save(tmp_path / "graph.json", in_graph=keep)
    assert Graph.load(tmp_path / "graph.json") == graph
    with pytest.raises(SubnetlabError, match="no edge"):
        graph.edge_index("m1->a0.h0<q>")  # downstream to upstream is not an edge


def test_graph_refuses_what_has_no_components():
    with pytest.raises(SubnetlabError, match="embedding"):
        Graph.for_family(FAMILIES["llama"], 2, 4, 2, embedding_nodes=2)
    with pytest.raises(SubnetlabError, match="no attention heads"):
        Graph.for_family(FAMILIES["resnet"], 2, 4)


def test_inspect_edges_prints_writers_readers_and_count(tmp_path, capsys):
    from subnetlab.cli import main

    tiny_model("llama", layers=2).model.save_pretrained(tmp_path / "llama")
    with pytest.raises(SystemExit) as done:
        main(["inspect", "--model", str(tmp_path / "llama"), "--edges"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    graph = Graph.for_family(FAMILIES["llama"], 2, 4, 2)
    assert f"edges: {graph.num_edges}" in out
    assert f"writers ({len(graph.writers)}): input a0.h0" in out and "a1.kv1<v> m1 logits" in out
