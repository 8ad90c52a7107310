"""The Circuit value: its files keep scores, sign and shape; selection and connectivity against hand computations."""

from __future__ import annotations

import json

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.io import save_tensors
from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph
from tests.conftest import tiny_model

# writers: input, a0.h0, m0, a1.h0, m1; readers: a0.h0<q/k/v>, m0, a1.h0<q/k/v>, m1, logits
SMALL = Graph("gpt2", 2, 1, 1, 1)


def _mask(graph: Graph, names: list[str]) -> torch.Tensor:
    mask = torch.zeros(graph.num_edges, dtype=torch.bool)
    mask[[graph.edge_index(n) for n in names]] = True
    return mask


def _names(graph: Graph, mask: torch.Tensor) -> set[str]:
    return {graph.edge_names[i] for i in torch.nonzero(mask).flatten().tolist()}


def test_a_saved_circuit_loads_with_its_scores_sign_and_shape(tmp_path):
    graph = Graph("llama", 2, 4, 2, 1)
    gen = torch.Generator().manual_seed(0)
    scores, kept = torch.randn(graph.num_edges, generator=gen), torch.rand(graph.num_edges, generator=gen) < 0.3
    Circuit(graph, scores, kept, score_sign="signed").save(tmp_path / "graph.json")
    loaded = Circuit.load(tmp_path / "graph.json")
    assert loaded.graph == graph and loaded.graph.num_embeddings == 1
    assert torch.equal(loaded.scores, scores) and torch.equal(loaded.in_graph, kept)
    assert loaded.score_sign == "signed" and not loaded.absolute
    written = json.loads((tmp_path / "graph.json").read_text())
    assert written["embedding_nodes"] == 1 and written["score_sign"] == "signed"


def test_a_graph_file_without_the_new_fields_still_loads(tmp_path):
    """Files written before the sign was recorded: attribution scores, ranked by magnitude; absent fields absent."""
    graph = Graph("gpt2", 2, 2, 2, 2)
    scores = [float(i % 5) - 2.0 for i in range(graph.num_edges)]
    graph.save(tmp_path / "old.json", scores=scores)
    loaded = Circuit.load(tmp_path / "old.json")
    assert loaded.graph == graph and loaded.score_sign == "absolute" and loaded.in_graph is None
    assert loaded.scores.tolist() == scores
    data = json.loads((tmp_path / "old.json").read_text())
    del data["edges"][3]["score"]
    (tmp_path / "partial.json").write_text(json.dumps(data))
    with pytest.raises(SubnetlabError, match="edge 3 has no 'score'"):
        Circuit.load(tmp_path / "partial.json")


def test_scores_files_record_their_graph_and_old_ones_are_inferred(tmp_path, one_thread):
    """An attribution scores file carries its graph's shape (no embedding-count guess); one without it gets the
    model's graph with as many edges, 2 embedding nodes tried first; a checkpoint's state names its graph."""
    from subnetlab.models.circuit_files import ATTRIBUTION_FORMAT, CHECKPOINT_FORMAT
    from subnetlab.runs.circuit_eval import read_scores

    adapter = tiny_model("gpt2", layers=2).adapter
    one, two = Graph.from_adapter(adapter, 1), Graph.from_adapter(adapter, 2)
    for graph in (one, two):
        scores = torch.randn(graph.num_edges, generator=torch.Generator().manual_seed(1))
        save_tensors(tmp_path / "old.safetensors", {"edges": scores}, {"format": ATTRIBUTION_FORMAT})
        level, read, found, absolute = read_scores(str(tmp_path / "old.safetensors"), adapter)
        assert (level, found, absolute) == ("edges", graph, True) and torch.equal(read, scores)
        save_tensors(tmp_path / "new.safetensors", {"edges": scores},
                     metadata={"format": ATTRIBUTION_FORMAT, **Circuit(graph, scores).metadata()})
        assert read_scores(str(tmp_path / "new.safetensors"), adapter)[2] == graph
        state = {"state": json.dumps({"format": CHECKPOINT_FORMAT, "graph": graph.shape()})}
        save_tensors(tmp_path / "checkpoint.safetensors", {"log_alpha_edges": scores}, metadata=state)
        level, read, found, absolute = read_scores(str(tmp_path / "checkpoint.safetensors"), adapter)
        assert (found, absolute) == (graph, False) and torch.equal(read, scores)
    # the recorded shape wins: scores of the two-node graph in a file that says one node are refused
    scores = torch.zeros(two.num_edges)
    save_tensors(tmp_path / "wrong.safetensors", {"edges": scores},
                 metadata={"format": ATTRIBUTION_FORMAT, **Circuit(one, torch.zeros(one.num_edges)).metadata()})
    with pytest.raises(SubnetlabError, match=f"{two.num_edges} edge scores, its graph has {one.num_edges}") as e:
        read_scores(str(tmp_path / "wrong.safetensors"), adapter)
    assert e.value.setting == "scores"


@pytest.mark.parametrize("absolute", [True, False])
@pytest.mark.parametrize("with_tiebreak", [True, False])
def test_top_k_and_threshold_equal_a_sort_by_hand(absolute, with_tiebreak):
    graph = Graph("gpt2", 2, 2, 2, 2)
    gen = torch.Generator().manual_seed(3)
    scores = (torch.randint(-3, 4, (graph.num_edges,), generator=gen) / 2).float()  # many ties, both signs
    tiebreak = torch.randint(0, 3, (graph.num_edges,), generator=gen).float() if with_tiebreak else None
    circuit = Circuit(graph, scores, score_sign="absolute" if absolute else "signed")
    key = [abs(s) if absolute else s for s in scores.tolist()]
    tb = tiebreak.tolist() if tiebreak is not None else [0.0] * graph.num_edges
    by_hand = sorted(range(graph.num_edges), key=lambda i: (-key[i], -tb[i], i))
    assert circuit.ranking(tiebreak).tolist() == by_hand
    for k in (0, 1, 5, graph.num_edges // 3, graph.num_edges):
        kept = circuit.top_k(k, tiebreak).kept()
        assert set(torch.nonzero(kept).flatten().tolist()) == set(by_hand[:k])
    for t in (-1.0, 0.0, 0.5, 1.5):
        kept = circuit.threshold(t).kept()
        assert set(torch.nonzero(kept).flatten().tolist()) == {i for i in range(graph.num_edges) if key[i] >= t}


def test_readers_belong_to_the_nodes_that_compute_from_them():
    llama = Graph("llama", 1, 4, 2, 1)
    owners = {llama.readers[r]: {llama.writers[w] for w in ws} for r, ws in enumerate(llama.reader_owners)}
    assert owners["a0.h1<q>"] == {"a0.h1"} and owners["a0.kv1<k>"] == {"a0.h2", "a0.h3"}
    assert owners["a0.kv0<v>"] == {"a0.h0", "a0.h1"} and owners["m0"] == {"m0"} and owners["logits"] == set()
    assert [llama.readers[r] for r in llama.writer_inputs[llama.writer_index("a0.h3")]] == [
        "a0.h3<q>", "a0.kv1<k>", "a0.kv1<v>"]


def test_live_writers_and_the_closure_on_a_small_graph():
    """m1 reads kept edges but feeds nothing kept: it is dead, and so is every edge into it."""
    kept = _mask(SMALL, ["input->a0.h0<q>", "a0.h0->m0", "m0->a1.h0<v>", "a1.h0->logits", "a0.h0->m1",
                         "input->m1"])
    circuit = Circuit(SMALL, in_graph=kept)
    assert {SMALL.writers[w] for w in circuit.live_writers()} == {"input", "a0.h0", "m0", "a1.h0"}
    closure = {SMALL.edge_names[i] for i in circuit.closure_edges()}
    assert closure == {
        "input->a0.h0<k>", "input->a0.h0<v>", "input->m0", "input->a1.h0<q>", "input->a1.h0<k>",
        "input->a1.h0<v>", "input->logits", "a0.h0->a1.h0<q>", "a0.h0->a1.h0<k>", "a0.h0->a1.h0<v>",
        "a0.h0->logits", "m0->a1.h0<q>", "m0->a1.h0<k>", "m0->logits"}


def test_the_connected_selection_drops_an_edge_into_a_node_with_no_path_to_the_logits():
    scores = torch.zeros(SMALL.num_edges)
    for name, value in (("a0.h0->m1", 0.9), ("a1.h0->logits", 0.8), ("input->a1.h0<q>", 0.7), ("m1->logits", 0.05)):
        scores[SMALL.edge_index(name)] = value
    circuit = Circuit(SMALL, scores, score_sign="signed")
    assert _names(SMALL, circuit.top_k(3).kept()) == {"a0.h0->m1", "a1.h0->logits", "input->a1.h0<q>"}
    connected = circuit.connected(3)
    # from the logits: a1.h0->logits (0.8) connects a1.h0, then its query edge (0.7); m1 is not yet connected, so
    # a0.h0->m1 (0.9) waits and the best remaining eligible edge is m1->logits (0.05)
    assert _names(SMALL, connected.kept()) == {"a1.h0->logits", "input->a1.h0<q>", "m1->logits"}
    live = connected.live_writers()
    assert all(SMALL.edges[i][0] in live for i in torch.nonzero(connected.kept()).flatten().tolist())


def test_a_circuit_refuses_values_of_the_wrong_length_and_an_unknown_sign():
    with pytest.raises(SubnetlabError, match="edge values"):
        Circuit(SMALL, in_graph=torch.ones(3))
    with pytest.raises(SubnetlabError, match="score sign"):
        Circuit(SMALL, torch.zeros(SMALL.num_edges), score_sign="magnitude")
    with pytest.raises(SubnetlabError, match="no edge scores"):
        Circuit(SMALL).top_k(1)


def test_circuit_eval_writes_its_config_before_the_work(tmp_path, monkeypatch, one_thread):
    from transformers import GPT2Config

    import subnetlab.analysis.circuit_evaluation as evaluation
    from subnetlab.models import build_model
    from subnetlab.runs.circuit_eval import CircuitEvalJobConfig, circuit_eval_run
    from subnetlab.tasks.spec import TaskSpec
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32)
    build_model(config, head="causal-lm", seed=0).model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    save_tensors(tmp_path / "nodes.safetensors", {"heads": torch.ones(2, 2), "mlps": torch.ones(2)},
                 {"format": "subnetlab.attribution/1"})

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluation, "node_evaluator", interrupted)
    job = CircuitEvalJobConfig(str(tmp_path / "model"), TaskSpec("circuit:ioi", {"n_train": 2, "n_eval": 4}),
                               scores=str(tmp_path / "nodes.safetensors"))
    with pytest.raises(KeyboardInterrupt):
        circuit_eval_run(job, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["command"] == "circuit-eval" and written["level"] == "nodes"
    assert not (tmp_path / "out" / "metrics.json").exists()
