"""circuit-eval's nulls (issue 51): random equal-size circuits, permuted pairs, every number under its ablation."""

from __future__ import annotations

import json
import math

import pytest
import torch

from subnetlab.cli import main

TASK = ["--task", "circuit:ioi", "--task-option", "n_train=2", "--task-option", "n_eval=8"]


# ------------------------------------------------------------------ the statistics, in closed form
def test_p_value_percentile_and_spread_in_closed_form():
    from subnetlab.analysis.random_circuits import null_comparison, p_value, percentile

    null = [0.1, 0.2, 0.3, 0.3, 0.5]
    assert p_value(null, 0.3) == pytest.approx(4 / 6)  # 0.3, 0.3, 0.5 at least as good: (1 + 3) / (5 + 1)
    assert p_value(null, 0.6) == pytest.approx(1 / 6)  # beats every draw: the smallest p five draws can show
    assert p_value(null, 0.05) == pytest.approx(1.0)
    assert p_value(null, 0.2, higher_is_better=False) == pytest.approx(3 / 6)  # CMD: 0.1 and 0.2 at most 0.2
    assert percentile(null, 0.3) == pytest.approx(60.0)  # 2 below, 2 equal (half each): 100 * 3 / 5
    assert percentile(null, 0.6) == 100.0 and percentile(null, 0.0) == 0.0
    stats = null_comparison(null, 0.3)
    assert stats["mean"] == pytest.approx(0.28) and stats["min"] == 0.1 and stats["max"] == 0.5
    assert stats["std"] == pytest.approx(math.sqrt(0.088 / 4))  # squared deviations .0324 .0064 .0004 .0004 .0484
    assert null_comparison([0.4], None) == {"mean": 0.4, "std": None, "min": 0.4, "max": 0.4, "method": None,
                                            "percentile": None, "p_value": None}


def test_random_null_on_a_hand_built_evaluator_is_reproducible_by_seed():
    """Items of weights 4, 3, 2, 1; m(C) = the kept weights' sum, so f of one item is its weight / 10. The method
    keeps the heaviest item (f 0.4); a random top-1 circuit is the item of each draw's highest random score."""
    from subnetlab.analysis.faithfulness import area
    from subnetlab.analysis.random_circuits import random_circuit_null, random_scores
    from subnetlab.models.circuit import top_k_mask

    w = torch.tensor([4.0, 3.0, 2.0, 1.0])

    def evaluate(keep):
        return {"m": float(w[keep].sum())}

    def run(draws, seed):
        return random_circuit_null(evaluate, 4, [0, 1, 4], lambda s, k: top_k_mask(s, k), draws=draws, seed=seed,
                                   metric="m", full=10.0, empty=0.0, method={"circuit": [0.0, 0.4, 1.0]},
                                   fractions=[0.0, 0.25, 1.0],
                                   areas=lambda x, f: (area(x, f), area(x, [abs(1 - v) for v in f])),
                                   method_areas={"circuit": (area([0, .25, 1], [0, .4, 1]), 0.0)})

    out = run(40, seed=3)
    picked = random_scores(40, 4, 3).argmax(dim=1)  # each draw's one item, read independently of top_k_mask
    expected = (w[picked] / 10).tolist()
    empty, one, full = out["sizes"]
    assert one["values"] == pytest.approx(expected)
    heaviest = int((picked == 0).sum())
    assert one["p_value"]["circuit"] == pytest.approx((1 + heaviest) / 41)
    assert one["percentile"]["circuit"] == pytest.approx(100 * (40 - heaviest + heaviest / 2) / 40)
    assert empty["values"] == [0.0] * 40 and full["values"] == [1.0] * 40  # size 0: empty; every item: the model
    assert full["p_value"]["circuit"] == 1.0 and out["exact_sizes"]
    assert out["mean_curve"]["cpr"] == pytest.approx(area([0, .25, 1], [0, sum(expected) / 40, 1]))
    assert run(40, seed=3) == out  # the seed makes the draw
    assert run(10, seed=3)["sizes"][1]["values"] == pytest.approx(expected[:10])  # the first draws of a longer run
    assert run(40, seed=4)["sizes"][1]["values"] != expected


def test_a_pruning_rule_reports_the_realised_sizes():
    """MIB's top-n then pruning on random scores keeps at most n edges, and says how many."""
    from subnetlab.analysis.mib_faithfulness import top_n
    from subnetlab.analysis.random_circuits import random_circuit_null, random_scores
    from subnetlab.models.graph import Graph

    graph = Graph("gpt2", 2, 2, 2, 1)
    out = random_circuit_null(lambda keep: {"m": float(keep.sum())}, graph.num_edges, [3, 10], draws=5, seed=0,
                              select=lambda s, k: top_n(graph, s, k, absolute=False), metric="m",
                              full=float(graph.num_edges), empty=0.0, method={"signed": [0.1, 0.2]})
    scores = random_scores(5, graph.num_edges, 0)
    for j, k in enumerate([3, 10]):
        kept = [int(top_n(graph, scores[d], k, absolute=False).sum()) for d in range(5)]
        size = out["sizes"][j]
        assert size["realised"] == {"mean": sum(kept) / 5, "min": min(kept), "max": max(kept)}
        assert size["values"] == pytest.approx([n / graph.num_edges for n in kept]) and max(kept) <= k
    assert "mean_curve" not in out  # no fractions given: no areas


# ------------------------------------------------------------------ the command, on a tiny model
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import GPT2Config

    from subnetlab.models import build_model, get_adapter
    from subnetlab.models.graph import Graph
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    root = tmp_path_factory.mktemp("circuit-eval-nulls")
    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    model = build_model(config, head="causal-lm", seed=0).model.eval()
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    scores = torch.randn(graph.num_edges, generator=torch.Generator().manual_seed(0))
    graph.save(root / "graph.json", scores=scores.tolist())
    return root, model, adapter, tok, graph, scores


def _run(args, capsys):
    torch.set_num_threads(1)
    with pytest.raises(SystemExit) as e:
        main(args)
    captured = capsys.readouterr()
    assert e.value.code == 0, captured.err
    return captured, " ".join(captured.out.split())  # rich wraps lines at the console's width


def _eval(root, out, *args):
    return ["circuit-eval", "--model", str(root / "model"), *TASK, "--scores", str(root / "graph.json"), "--out",
            str(out), *args]


def _check_p_values(null):
    """Every size's p-value and percentile recomputed from the draws the file holds."""
    for size in null["sizes"]:
        n = len(size["values"])
        assert n == null["draws"]
        for curve, f in size["method"].items():
            at_least = sum(v >= f for v in size["values"])
            assert size["p_value"][curve] == pytest.approx((1 + at_least) / (n + 1))
            below, equal = sum(v < f for v in size["values"]), sum(v == f for v in size["values"])
            assert size["percentile"][curve] == pytest.approx(100 * (below + equal / 2) / n)


def test_random_circuits_of_no_and_every_edge_are_the_empty_circuit_and_the_model(tiny, tmp_path, capsys):
    root, *_ = tiny
    printed = _run(_eval(root, tmp_path / "a", "--sizes", "0,50,100", "--random-circuits", "4", "--random-seed", "7"),
                   capsys)[1]
    result = json.loads((tmp_path / "a" / "faithfulness.json").read_text())
    null = result["random_circuits"]
    empty, half, full = null["sizes"]
    method = result["faithfulness"]["logit_diff"]
    assert empty["values"] == [method[0]] * 4  # nothing kept: the method's empty circuit exactly
    assert full["values"] == [1.0] * 4 and method[2] == 1.0  # every edge kept: the full model, f = 1
    assert full["p_value"]["circuit"] == 1.0 and empty["p_value"]["circuit"] == 1.0  # ties count against
    assert null["seed"] == 7 and null["draws"] == 4 and null["ablation"] == "corrupted" and null["exact_sizes"]
    assert half["count"] == result["counts"][1] and half["realised"]["min"] == half["realised"]["max"] == half["count"]
    _check_p_values(null)
    cpr = null["method_areas"]["circuit"]["cpr"]
    assert cpr == result["cpr"] and null["mean_curve"]["cpr"] == pytest.approx(
        0.25 * (method[0] + half["mean"]) + 0.25 * (half["mean"] + 1.0))  # trapezoids over 0, 0.5, 1
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert metrics["random_circuits"]["sizes"][1]["p_value"] == half["p_value"]
    assert "values" not in metrics["random_circuits"]["sizes"][1]  # the draws live in faithfulness.json
    assert "random circuits: 4 per size, seed 7" in printed and "random mean curve's CPR" in printed

    _run(_eval(root, tmp_path / "b", "--sizes", "0,50,100", "--random-circuits", "4", "--random-seed", "7"), capsys)
    again = json.loads((tmp_path / "b" / "faithfulness.json").read_text())["random_circuits"]
    assert again == null  # the seed recorded makes the draws
    assert json.loads((tmp_path / "b" / "config.json").read_text())["random_seed"] == 7
    _run(_eval(root, tmp_path / "c", "--sizes", "0,50,100", "--random-circuits", "4", "--random-seed", "8"), capsys)
    other = json.loads((tmp_path / "c" / "faithfulness.json").read_text())["random_circuits"]
    assert other["sizes"][1]["values"] != half["values"]


def test_greedy_random_circuits_are_connected_to_the_logits(tiny, tmp_path, capsys, monkeypatch):
    """Greedy selection's random circuits are its own walk from the logits on random scores: exact sizes, and
    every kept edge's writer reaches the logits through kept edges (models.circuit's connectivity)."""
    from subnetlab.models.circuit import Circuit

    root, _, _, _, graph, _ = tiny
    drawn = []
    greedy = Circuit.greedy

    def recording(self, k, tiebreak=None):
        circuit = greedy(self, k, tiebreak)
        drawn.append(circuit)
        return circuit

    monkeypatch.setattr(Circuit, "greedy", recording)
    _run(_eval(root, tmp_path / "g", "--sizes", "10,50", "--selection", "greedy", "--random-circuits", "3"), capsys)
    null = json.loads((tmp_path / "g" / "faithfulness.json").read_text())["random_circuits"]
    assert null["exact_sizes"] and "greedy" in null["rule"]
    assert len(drawn) == 2 + 3 * 2  # the method's two circuits, then three draws at each of two sizes
    for circuit in drawn[2:]:
        live = circuit.live_writers()
        assert all(graph.edges[e][0] in live for e in torch.nonzero(circuit.kept()).flatten().tolist())
    _check_p_values(null)


def test_node_circuit_files_get_random_node_circuits(tiny, tmp_path, capsys):
    from subnetlab.subnetwork import Subnetwork

    root, _, adapter, *_ = tiny
    Subnetwork.structured(adapter, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0.0, 1.0])).save(
        tmp_path / "sub.safetensors")
    printed = _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--circuit", str(tmp_path / "sub.safetensors"),
                    "--random-circuits", "5", "--out", str(tmp_path / "one")], capsys)[1]
    result = json.loads((tmp_path / "one" / "faithfulness.json").read_text())
    (size,) = result["random_circuits"]["sizes"]
    assert size["count"] == 3 and size["realised"]["max"] == 3  # 3 of the 6 heads and MLPs
    assert size["method"]["circuit"] == result["faithfulness"]["logit_diff"]
    _check_p_values(result["random_circuits"])
    assert "3 items: f" in printed and "percentile" in printed


def test_permuted_pairs_with_the_identity_reproduce_the_real_pairing(tiny, tmp_path, capsys, monkeypatch):
    from subnetlab.tasks.circuits.pairs import CircuitTask

    root, *_ = tiny
    monkeypatch.setattr(CircuitTask, "repairing", lambda self, split, seed, limit=None: list(range(len(self.pairs(split)))))
    printed = _run(_eval(root, tmp_path / "p", "--sizes", "10,50,100", "--permute-pairs"), capsys)[1]
    result = json.loads((tmp_path / "p" / "faithfulness.json").read_text())
    permuted = result["permuted_pairs"]
    assert permuted["moved"] == 0
    assert permuted["faithfulness"] == result["faithfulness"]["logit_diff"]  # exactly, not approximately
    assert permuted["cpr"] == result["cpr"] and permuted["cmd"] == result["cmd"]
    assert "permuted pairs (seed 0, 0 of 8 re-paired" in printed and "real pairing: CPR" in printed


def test_repairing_moves_each_pair_to_another_of_its_length(tiny):
    from subnetlab.tasks import get_task

    *_, tok, _, _ = tiny
    task = get_task("circuit:ioi", n_train=2, n_eval=24).bind(tok)
    order = task.repairing("eval", seed=5)
    assert sorted(order) == list(range(24)) and order == task.repairing("eval", seed=5)
    tokens = [len(tok(p.clean)["input_ids"]) for p in task.pairs("eval")]
    for i, j in enumerate(order):
        assert tokens[i] == tokens[j]
        assert (i != j) == (tokens.count(tokens[i]) > 1)  # a derangement within each length that has two pairs
    before = [p.corrupted for p in task.pairs("eval")]
    task.permute_corrupted("eval", order)
    after = task.pairs("eval")
    assert [p.corrupted for p in after] == [before[j] for j in order]
    assert task.repairing("eval", seed=5, limit=4)[4:] == list(range(4, 24))  # pairs past the limit stay


def test_every_number_names_its_ablation_and_ablations_side_by_side(tiny, tmp_path, capsys):
    root, *_ = tiny
    printed = _run(_eval(root, tmp_path / "both", "--sizes", "10,50,100", "--ablations", "corrupted,zero"), capsys)[1]
    _run(_eval(root, tmp_path / "zero", "--sizes", "10,50,100", "--ablation", "zero"), capsys)
    both = json.loads((tmp_path / "both" / "metrics.json").read_text())
    zero = json.loads((tmp_path / "zero" / "metrics.json").read_text())
    assert (both["ablation"], both["positions"], both["selection"], both["ranking"]) == (
        "corrupted", "all", "topn", "absolute")
    assert zero["ablation"] == "zero"
    side = both["ablations"]["by_ablation"]
    assert side["zero"]["cpr"] == zero["cpr"] and side["zero"]["cmd"] == zero["cmd"]  # as its own run
    assert side["corrupted"]["cpr"] == both["cpr"]
    worst = min(side, key=lambda a: side[a]["cpr"])
    assert both["ablations"]["worst_cpr"] == {"ablation": worst, "cpr": side[worst]["cpr"]}
    assert "ablation corrupted, selection topn" in printed and "ablation zero: CPR" in printed
    assert "measured under ablation corrupted" in printed and "absolute ranking" in printed


def test_mib_random_circuits_are_pruned_as_mib_prunes_and_say_their_size(tiny, tmp_path, capsys):
    from subnetlab.models.graph import Graph

    root, _, adapter, *_ = tiny
    one = Graph.from_adapter(adapter, embedding_nodes=1)
    scores = torch.randn(one.num_edges, generator=torch.Generator().manual_seed(1))
    one.save(tmp_path / "one.json", scores=scores.tolist())
    printed = _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--scores", str(tmp_path / "one.json"),
                    "--mib", "--random-circuits", "3", "--out", str(tmp_path / "mib")], capsys)[1]
    result = json.loads((tmp_path / "mib" / "faithfulness.json").read_text())
    null = result["random_circuits"]
    assert [s["count"] for s in null["sizes"]] == result["counts"]
    assert all(s["realised"]["max"] <= s["count"] for s in null["sizes"])
    assert not null["exact_sizes"] and "pruning" in null["rule"]  # some random edges do not connect: dropped
    for name in ("signed", "absolute"):
        assert [s["method"][name] for s in null["sizes"]] == result[name]["faithfulness"]["logit_diff"]
        assert null["method_areas"][name]["cpr"] == result[name]["area_under"]
    _check_p_values(null)
    assert "(signed ranking) vs the random mean curve's CPR" in printed and "items signed: f" in printed


def test_mean_ablation_averages_the_clean_prompts_measured_on(tiny, tmp_path, capsys):
    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.faithfulness import curve_from_scores
    from subnetlab.intervene.edges import writer_means
    from subnetlab.tasks import get_task
    from subnetlab.tasks.circuits.pairs import clean_inputs

    root, model, adapter, tok, graph, scores = tiny
    _run(_eval(root, tmp_path / "mean", "--sizes", "10,50,100", "--ablation", "mean", "--limit", "5"), capsys)
    written = json.loads((tmp_path / "mean" / "metrics.json").read_text())
    task = get_task("circuit:ioi", n_train=2, n_eval=8).bind(tok)
    means = writer_means(model, adapter, [clean_inputs(b) for b in task.pair_batches(tok, "eval", 2, 5)])
    evaluate = edge_evaluator(model, adapter, graph, task, tok, "eval", limit=5, ablation=means)
    expected = curve_from_scores(scores, evaluate, sizes=(0.1, 0.5, 1.0), empty=evaluate.corrupted_run)
    assert written["ablation"] == "mean" and written["cpr"] == pytest.approx(expected.cpr, abs=1e-6)
    corrupted = edge_evaluator(model, adapter, graph, task, tok, "eval", limit=5)
    other = curve_from_scores(scores, corrupted, sizes=(0.1, 0.5, 1.0), empty=corrupted.corrupted_run)
    assert abs(other.cpr - expected.cpr) > 1e-3  # the mean is not the corrupted run


def test_pruned_circuit_files_get_pruned_random_circuits(tiny, tmp_path, capsys):
    """Circuit files whose circuits are all pruned to what connects (models.circuit's pruned()) get random circuits
    drawn at their size, then pruned by the same rule, with the realised sizes said."""
    from subnetlab.models.circuit import Circuit

    root, _, _, _, graph, scores = tiny
    ranked = Circuit(graph, scores)
    paths = []
    for k in (10, 40):
        circuit = ranked.greedy(k).pruned()
        path = tmp_path / f"c{k}.json"
        graph.save(path, in_graph=circuit.kept().tolist())
        paths += ["--circuit", str(path)]
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, *paths, "--random-circuits", "4",
          "--out", str(tmp_path / "files")], capsys)
    result = json.loads((tmp_path / "files" / "faithfulness.json").read_text())
    null = result["random_circuits"]
    assert "pruned" in null["rule"]
    assert [s["count"] for s in null["sizes"]] == result["counts"]
    assert all(s["realised"]["max"] <= s["count"] for s in null["sizes"])
    _check_p_values(null)


def test_the_api_measures_the_nulls_as_the_command_does(tiny, tmp_path, capsys):
    import subnetlab as sl

    root, *_ = tiny
    _run(_eval(root, tmp_path / "cli", "--sizes", "10,100", "--random-circuits", "3", "--random-seed", "2",
               "--permute-pairs", "--permute-seed", "1", "--ablations", "zero"), capsys)
    got = sl.circuit_eval(str(root / "model"), "circuit:ioi", tmp_path / "api", scores=root / "graph.json",
                          task_options={"n_train": 2, "n_eval": 8}, sizes=[0.1, 1.0], random_circuits=3,
                          random_seed=2, permute_pairs=True, permute_seed=1, ablations=["zero"])
    cli = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    for key in ("random_circuits", "permuted_pairs", "ablations", "ablation", "selection", "ranking", "cpr"):
        assert got["summary"][key] == cli[key], key
    assert got["result"]["random_circuits"]["sizes"][0]["values"] == json.loads(
        (tmp_path / "cli" / "faithfulness.json").read_text())["random_circuits"]["sizes"][0]["values"]
