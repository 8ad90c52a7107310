"""`subnetlab circuit`: an edge-pruning sweep on a tiny GPT-2 with a circuit task; its files; the edges file kind."""

from __future__ import annotations

import json

import pytest
import torch

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.models.graph import Graph
from subnetlab.subnetwork import Subnetwork
from tests.conftest import tiny_model

TASK = ["--task", "circuit:ioi", "--task-option", "n_train=16", "--task-option", "n_eval=8"]
FAST = ["--preset", "demo", "--set", "total_steps=12", "--set", "warmup_steps=8", "--set", "batch_size=8",
        "--set", "checkpoint_every=4"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import GPT2Config

    from subnetlab.models import build_model
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    root = tmp_path_factory.mktemp("circuit")
    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    build_model(config, head="causal-lm", seed=0).model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    return root


def _run(args, capsys, code=0):
    with pytest.raises(SystemExit) as e:
        main(args)
    captured = capsys.readouterr()
    assert e.value.code == code, captured.err
    return captured


def test_circuit_sweep_writes_graph_circuit_and_metrics(tiny, tmp_path, capsys, one_thread):
    out = tmp_path / "sweep"
    _run(["circuit", "--model", str(tiny / "model"), *TASK, "--method", "edge-pruning", "--sparsity", "0.9",
          "--seeds", "0,1", *FAST, "--out", str(out)], capsys)
    graph = Graph.load(out / "graph.json")
    assert graph.num_edges == Graph(graph.family, 2, 2, 2, 2).num_edges
    run = out / "sparsity-0.900" / "seed-1"
    metrics = json.loads((run / "metrics.json").read_text())
    sub = Subnetwork.load(run / "subnetwork.safetensors")
    assert sub.kind == "edges" and sub.count() == metrics["kept_edges"] == round(0.1 * graph.num_edges)
    assert sub.kept_names() == metrics["kept"]
    in_graph = [e["in_graph"] for e in json.loads((run / "graph.json").read_text())["edges"]]
    assert in_graph == (sub.edges > 0.5).tolist()
    assert (run / "circuit.png").stat().st_size > 0 and (run / "circuit.png").stat().st_mtime <= (run / "metrics.json").stat().st_mtime
    assert set(metrics["faithfulness"]) >= {"logit_diff", "kl"} and "health" in metrics
    assert metrics["health"]["kept"] == metrics["kept_edges"] and metrics["health"]["maskable"] == graph.num_edges
    # the circuit file is what circuit-eval measures
    _run(["circuit-eval", "--model", str(tiny / "model"), *TASK, "--circuit", str(run / "subnetwork.safetensors"),
          "--out", str(tmp_path / "eval")], capsys)
    measured = json.loads((tmp_path / "eval" / "faithfulness.json").read_text())
    assert measured["kept"] == metrics["kept_edges"]
    # a rerun skips the finished runs
    before = (run / "metrics.json").read_text()
    _run(["circuit", "--model", str(tiny / "model"), *TASK, "--sparsity", "0.9", "--seeds", "0,1", *FAST,
          "--out", str(out)], capsys)
    assert (run / "metrics.json").read_text() == before


def test_circuit_refuses_post_ln_models_and_other_methods(tiny, tmp_path, capsys):
    err = _run(["circuit", "--model", str(tiny / "model"), *TASK, "--method", "acdc", "--sparsity", "0.9",
                "--out", str(tmp_path / "a")], capsys, code=2).err
    assert err.startswith("error: --method")


def test_edge_circuit_file_round_trip_and_refused_on_another_model(tmp_path):
    m = tiny_model("gpt2", layers=2)
    graph = Graph.from_adapter(m.adapter)
    keep = torch.zeros(graph.num_edges)
    keep[graph.edge_index("a0.h1->a1.h2<k>")] = 1
    keep[graph.edge_index("a1.h2->logits")] = 1
    sub = Subnetwork.from_edges(m.adapter, graph, keep, method="manual", seed=3)
    sub.save(tmp_path / "c.safetensors")
    back = Subnetwork.load(tmp_path / "c.safetensors", m.adapter)
    assert back.kind == "edges" and back.graph() == graph and torch.equal(back.edges, keep)
    assert back.kept_names() == ["a0.h1->a1.h2<k>", "a1.h2->logits"]
    assert back.sparsity == 1 - 2 / graph.num_edges
    with pytest.raises(SubnetlabError, match="different architecture"):
        Subnetwork.load(tmp_path / "c.safetensors", tiny_model("gpt2", layers=3).adapter)
    with pytest.raises(SubnetlabError, match="different architecture"):
        Subnetwork.load(tmp_path / "c.safetensors", tiny_model("llama", layers=2).adapter)
    with pytest.raises(SubnetlabError, match="structured"):
        back.gates()


def test_kill_9_mid_training_then_rerun_equals_the_uninterrupted_sweep(tiny, tmp_path, capsys, one_thread):
    """SIGKILLed right after its second checkpoint (a real subprocess), the rerun resumes from it and ends with
    the uninterrupted sweep's results: every tensor bit-identical, every JSON result equal but timing fields."""
    from tests.kill_helpers import assert_same_results, run_killed

    args = ["circuit", "--model", str(tiny / "model"), *TASK, "--sparsity", "0.9", "--seeds", "0", *FAST]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    _run([*args, "--out", str(whole)], capsys)
    run_killed([*args, "--out", str(resumed)], f"{resumed}/*/checkpoint.safetensors#2")
    run = resumed / "sparsity-0.900" / "seed-0"
    assert (run / "checkpoint.safetensors").exists() and not (run / "metrics.json").exists()
    _run([*args, "--out", str(resumed)], capsys)
    assert json.loads((run / "metrics.json").read_text())["resumed_from"] == 8
    assert assert_same_results(whole, resumed) >= 4
