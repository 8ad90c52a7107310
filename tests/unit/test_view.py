"""subnetlab view's data: what each kind of run becomes on the page, the rankings, frequencies, the core, the
circuit-tracer export, and a page that needs nothing from the network."""

from __future__ import annotations

import json
import re

import pytest
import torch

from subnetlab.cli import main
from subnetlab.view.page import page_data
from subnetlab.view.runs import read_all, read_runs
from subnetlab.view.tracer import tracer_graph
from tests.unit.view_helpers import GRAPH, KEPT, circuit_run, prune_run


def test_one_run_ranks_its_kept_edges_first_then_by_score(tmp_path) -> None:
    circuit = circuit_run(tmp_path / "run", 0)
    data = page_data(read_all([tmp_path / "run"]), "t")
    assert data["mode"] == "single" and data["initial"] == KEPT
    order = data["runs"][0]["order"]
    assert sorted(order) == list(range(GRAPH.num_edges))
    kept = set(torch.nonzero(circuit.in_graph).flatten().tolist())
    assert set(order[:KEPT]) == kept
    scores = circuit.scores.tolist()  # signed: higher first within each part
    for part in (order[:KEPT], order[KEPT:]):
        assert all(scores[a] >= scores[b] for a, b in zip(part, part[1:]))
    assert data["runs"][0]["curve"]["points"] == [[KEPT, 0.25]]


def test_a_sweep_is_each_edges_frequency_over_its_runs(tmp_path) -> None:
    circuits = [circuit_run(tmp_path / "sweep" / "sparsity-0.900" / f"seed-{s}", s, kept=10 + 5 * s) for s in range(3)]
    data = page_data(read_all([tmp_path / "sweep"]), "t")
    assert data["mode"] == "seeds" and len(data["runs"]) == 3
    by_hand = [sum(bool(c.in_graph[e]) for c in circuits) / 3 for e in range(GRAPH.num_edges)]
    assert data["frequency"] == pytest.approx(by_hand, abs=1e-4)
    frequency = [data["frequency"][e] for e in data["order"]]
    assert frequency == sorted(frequency, reverse=True)
    assert data["curve"]["points"] == [[10, 0.25], [15, pytest.approx(0.35)], [20, pytest.approx(0.45)]]


def test_prune_runs_give_gates_per_seed_frequencies_and_the_core(tmp_path) -> None:
    heads = [torch.tensor([[1.0, 1.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]])]
    for seed, h in enumerate(heads):
        prune_run(tmp_path / "prune" / "sparsity-0.50" / f"seed-{seed}", h, torch.tensor([1.0, 0.0]), seed)
    (tmp_path / "prune" / "full-model").mkdir()  # a prune sweep's unpruned evaluation: no subnetwork, not a run
    (tmp_path / "prune" / "full-model" / "metrics.json").write_text("{}")
    data = page_data(read_all([tmp_path / "prune"]), "t")
    assert data["mode"] == "nodes"
    assert data["components"] == ["L0.H0", "L0.H1", "L1.H0", "L1.H1", "L0.MLP", "L1.MLP"]
    assert data["frequency"] == [1.0, 0.5, 0.0, 1.0, 1.0, 0.0]
    assert data["core"] == 3 and data["initial"] == 3
    assert set(data["order"][:3]) == {0, 3, 4}
    assert [r["gates"] for r in data["runs"]] == [[1, 1, 0, 1, 1, 0], [1, 0, 0, 1, 1, 0]]
    assert [r["seed"] for r in data["runs"]] == [0, 1]


def test_tracer_json_links_each_kept_writer_to_the_component_it_feeds(tmp_path) -> None:
    circuit = circuit_run(tmp_path / "run", 0)
    data = tracer_graph(circuit, "run")
    assert set(data) == {"metadata", "qParams", "nodes", "links"}
    ids = {n["node_id"] for n in data["nodes"]}
    assert len(ids) == len(data["nodes"])
    pairs: dict[tuple[int, object], float] = {}
    for i in torch.nonzero(circuit.in_graph).flatten().tolist():  # by hand: one link per (writer, component)
        w, r = GRAPH.edges[i]
        for owner in GRAPH.reader_owners[r] or ("logits",):
            pairs[(w, owner)] = pairs.get((w, owner), 0.0) + float(circuit.scores[i])
    assert len(data["links"]) == len(pairs)
    assert sorted(link["weight"] for link in data["links"]) == pytest.approx(sorted(pairs.values()))
    assert all(link["source"] in ids and link["target"] in ids for link in data["links"])
    assert sum(len(link["inputs"]) for link in data["links"]) == KEPT
    logits = [n for n in data["nodes"] if n["feature_type"] == "logit"]
    assert len(logits) == 1 and logits[0]["layer"] == str(GRAPH.num_layers + 1)


def test_the_page_is_self_contained_and_the_command_writes_it(tmp_path, capsys) -> None:
    circuit_run(tmp_path / "run", 0)
    page, tracer = tmp_path / "page.html", tmp_path / "tracer.json"
    with pytest.raises(SystemExit) as done:
        main(["view", str(tmp_path / "run"), "--out", str(page), "--tracer-json", str(tracer)])
    assert done.value.code in (0, None), capsys.readouterr().err
    text = page.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)  # nothing fetched: works from file://
    assert text.count("<script") == 5  # error catcher, d3, dagre, data, the page's script
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S).group(1))
    assert data["graph"]["edge_writer"] == [w for w, _ in GRAPH.edges]
    assert json.loads(tracer.read_text())["metadata"]["subnetlab"]["kept"] == KEPT


def test_a_circuit_subnetwork_file_and_a_graph_file_read_alike(tmp_path) -> None:
    from subnetlab.io import save_tensors

    circuit = circuit_run(tmp_path / "run", 0)
    save_tensors(tmp_path / "edges.safetensors", {"edges": circuit.in_graph.float()},
                 {"kind": "edges", "graph_shape": json.dumps(GRAPH.shape())})
    (from_file,) = read_runs(tmp_path / "edges.safetensors")
    assert torch.equal(from_file.circuit.in_graph, circuit.in_graph)


def test_a_circuit_eval_run_shows_its_curve_and_ranks_as_the_curve_did(tmp_path) -> None:
    from tests.unit.view_helpers import circuit_eval_run

    circuit_run(tmp_path / "run", 0)
    circuit_eval_run(tmp_path / "eval", tmp_path / "run" / "graph.json", [3, 30, 300], [0.1, 0.4, 1.0])
    (run,) = read_runs(tmp_path / "eval")
    assert run.circuit.in_graph is None  # the curve kept the top k by score alone
    data = page_data([[run]], "t")
    assert data["runs"][0]["curve"] == {"metric": "logit_diff", "points": [[3, 0.1], [30, 0.4], [300, 1.0]],
                                        "cpr": 0.61, "cmd": 0.42, "source": "faithfulness.json"}
    assert data["runs"][0]["order"] == torch.sort(run.circuit.scores, descending=True, stable=True).indices.tolist()


def test_runs_are_listed_with_their_numbers_read_as_numbers(tmp_path) -> None:
    for steps in (20, 5, 10):
        circuit_run(tmp_path / "sweep" / f"steps-{steps}" / "seed-0", steps)
    assert [run.label for run in read_runs(tmp_path / "sweep")] == ["steps-5/seed-0", "steps-10/seed-0",
                                                                   "steps-20/seed-0"]
