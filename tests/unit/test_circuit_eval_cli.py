"""`subnetlab circuit-eval`: the curve a command writes is the library's, for edge scores, node scores and circuits."""

from __future__ import annotations

import json

import pytest
import torch

from subnetlab.cli import main
from subnetlab.io import save_tensors

TASK = ["--task", "circuit:ioi", "--task-option", "n_train=2", "--task-option", "n_eval=6"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import GPT2Config

    from subnetlab.models import build_model, get_adapter
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    root = tmp_path_factory.mktemp("circuit-eval")
    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    model = build_model(config, head="causal-lm", seed=0).model.eval()
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    return root, model, get_adapter(model), tok


def _run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    captured = capsys.readouterr()
    assert e.value.code == 0, captured.err
    return captured


def test_node_scores_edge_scores_and_circuits(tiny, tmp_path, capsys, one_thread):
    from subnetlab.analysis.circuit_evaluation import edge_evaluator, node_evaluator
    from subnetlab.analysis.faithfulness import curve_from_scores
    from subnetlab.models.graph import Graph
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.tasks import get_task

    root, model, adapter, tok = tiny
    task = get_task("circuit:ioi", n_train=2, n_eval=6).bind(tok)
    heads, mlps = torch.tensor([[0.9, -0.1], [0.2, 0.8]]), torch.tensor([0.05, -0.7])
    save_tensors(tmp_path / "nodes.safetensors", {"heads": heads, "mlps": mlps}, {"format": "subnetlab.attribution/1"})
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--scores", str(tmp_path / "nodes.safetensors"),
          "--out", str(tmp_path / "nodes")], capsys)
    written = json.loads((tmp_path / "nodes" / "faithfulness.json").read_text())
    nodes = node_evaluator(model, adapter, task, tok, "eval")
    from subnetlab.analysis.circuit_evaluation import node_vector

    expected = curve_from_scores(node_vector(heads, mlps), nodes, empty=nodes.corrupted_run)
    assert written["level"] == "nodes" and written["cpr"] == pytest.approx(expected.cpr, abs=1e-6)
    assert written["faithfulness"]["logit_diff"] == pytest.approx(list(expected.faithfulness["logit_diff"]), abs=1e-6)
    assert json.loads((tmp_path / "nodes" / "metrics.json").read_text())["cmd"] == pytest.approx(expected.cmd, abs=1e-6)

    graph = Graph.from_adapter(adapter)
    scores = torch.randn(graph.num_edges, generator=torch.Generator().manual_seed(0))
    graph.save(tmp_path / "graph.json", scores=scores.tolist())
    out = _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--scores", str(tmp_path / "graph.json"),
                "--sizes", "10,50,100", "--out", str(tmp_path / "edges")], capsys).out
    assert "CPR" in out and (tmp_path / "edges" / "faithfulness.png").stat().st_size > 0
    written = json.loads((tmp_path / "edges" / "faithfulness.json").read_text())
    edges = edge_evaluator(model, adapter, graph, task, tok, "eval")
    expected = curve_from_scores(scores, edges, sizes=(0.1, 0.5, 1.0))
    assert written["level"] == "edges" and written["counts"] == [graph.num_edges // 10, graph.num_edges // 2, graph.num_edges]
    assert written["cpr"] == pytest.approx(expected.cpr, abs=1e-6) and written["cmd"] == pytest.approx(expected.cmd, abs=1e-6)

    kept = scores.abs() >= scores.abs().sort(descending=True).values[graph.num_edges // 2 - 1]  # the top half
    Subnetwork.from_edges(adapter, graph, kept.float()).save(tmp_path / "edges.safetensors")
    save_tensors(tmp_path / "alphas.safetensors", {"log_alpha_edges": scores},
                 {"state": json.dumps({"format": "subnetlab.prune-checkpoint/1"})})  # a checkpoint's log-alphas
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--circuit", str(tmp_path / "edges.safetensors"),
          "--out", str(tmp_path / "edge-circuit")], capsys)
    circuit = json.loads((tmp_path / "edge-circuit" / "faithfulness.json").read_text())
    assert circuit["level"] == "edges" and circuit["kept"] == graph.num_edges // 2
    assert circuit["faithfulness"]["logit_diff"] == pytest.approx(expected.faithfulness["logit_diff"][1], abs=1e-6)
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--scores", str(tmp_path / "alphas.safetensors"),
          "--sizes", "10,50,100", "--out", str(tmp_path / "alphas")], capsys)
    signed = curve_from_scores(scores, edges, sizes=(0.1, 0.5, 1.0), absolute=False)  # log-alphas rank by sign
    assert json.loads((tmp_path / "alphas" / "metrics.json").read_text())["cpr"] == pytest.approx(signed.cpr, abs=1e-6)
    assert signed.cpr != pytest.approx(expected.cpr, abs=1e-6)  # the scores have both signs: the two rankings differ

    Subnetwork.structured(adapter, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0.0, 1.0])).save(tmp_path / "sub.safetensors")
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--circuit", str(tmp_path / "sub.safetensors"),
          "--out", str(tmp_path / "one")], capsys)
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    keep = torch.tensor([1, 0, 0, 0, 1, 1], dtype=torch.bool)
    m, full = nodes(keep)["logit_diff"], nodes(torch.ones(6, dtype=torch.bool))["logit_diff"]
    empty = nodes.corrupted_run["logit_diff"]
    assert one["kept"] == 3 and one["faithfulness"]["logit_diff"] == pytest.approx((m - empty) / (full - empty), abs=1e-6)


def test_heuristic_core_pruning_runs_on_a_circuit_task(tiny, tmp_path, capsys, one_thread):
    """prune binds the circuit task to the checkpoint's tokenizer before its checks; the gates it learns score
    on circuit-eval's node scale."""
    root, *_ = tiny
    _run(["prune", "--model", str(root / "model"), *TASK[:2], "--task-option", "n_train=8", "--task-option", "n_eval=4",
          "--sparsity", "0.5", "--seeds", "0", "--preset", "demo", "--set", "batch_size=4", "--set", "total_steps=6", "--set", "warmup_steps=2",
          "--out", str(tmp_path / "prune")], capsys)
    seed = tmp_path / "prune" / "sparsity-0.50" / "seed-0"  # the gates' log-alphas are node scores; the mask a circuit
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--scores", str(seed / "checkpoint.safetensors"),
          "--out", str(tmp_path / "ev")], capsys)
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--circuit", str(seed / "subnetwork.safetensors"),
          "--out", str(tmp_path / "one")], capsys)
    assert json.loads((tmp_path / "one" / "metrics.json").read_text())["kept"] == 3
    written = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert written["level"] == "nodes" and written["items"] == 6
