"""MIB's numbers and files: each compared with a literal re-implementation of the reference's source.

The references: hannamw/EAP-IG ``src/eap/graph.py`` (``from_model``, ``_forward_index``, ``_backward_index``,
``apply_topn``, ``prune``, ``from_json``, ``from_pt``) and hannamw/MIB-circuit-track
``MIB_circuit_track/evaluation.py`` (``evaluate_area_under_curve``) with ``print_results.py`` (CPR from
``abs-False``, CMD from ``abs-True``). The helpers below transcribe them on plain matrices, without
subnetlab's code, and the tests compare.
"""

from __future__ import annotations

import json

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph
from tests.precision import faithfulness_tolerance

PERCENTAGES = (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)


# ------------------------------------------------------------- EAP-IG's graph, transcribed
class EapIgGraph:
    """``Graph.from_model``: names, matrix cells, edges in insertion order, for both values of ``parallel_attn_mlp``."""

    def __init__(self, n_layers: int, n_heads: int, parallel_attn_mlp: bool = False) -> None:
        self.n_layers, self.n_heads, self.parallel_attn_mlp = n_layers, n_heads, parallel_attn_mlp
        self.n_forward = 1 + n_layers * (n_heads + 1)
        self.n_backward = n_layers * (3 * n_heads + 1) + 1
        self.forward_to_backward = torch.zeros(self.n_forward, self.n_backward).bool()
        self.real = torch.zeros(self.n_forward, self.n_backward).bool()
        self.edges: dict[str, tuple[int, int]] = {}
        residual = ["input"]
        for layer in range(n_layers):
            attn = [f"a{layer}.h{h}" for h in range(n_heads)]
            for a in attn:
                for letter in "qkv":
                    self.forward_to_backward[self.fwd(a), self.bwd(a, letter)] = True
            self.forward_to_backward[self.fwd(f"m{layer}"), self.bwd(f"m{layer}")] = True
            if parallel_attn_mlp:
                for node in residual:
                    for a in attn:
                        for letter in "qkv":
                            self.add(f"{node}->{a}<{letter}>", self.fwd(node), self.bwd(a, letter))
                    self.add(f"{node}->m{layer}", self.fwd(node), self.bwd(f"m{layer}"))
                residual += attn
                residual.append(f"m{layer}")
                continue
            for node in residual:
                for a in attn:
                    for letter in "qkv":
                        self.add(f"{node}->{a}<{letter}>", self.fwd(node), self.bwd(a, letter))
            residual += attn
            for node in residual:
                self.add(f"{node}->m{layer}", self.fwd(node), self.bwd(f"m{layer}"))
            residual.append(f"m{layer}")
        for node in residual:
            self.add(f"{node}->logits", self.fwd(node), self.n_backward - 1)

    def add(self, name: str, f: int, b: int) -> None:
        self.edges[name] = (f, b)
        self.real[f, b] = True

    def fwd(self, name: str) -> int:
        if name == "input":
            return 0
        if name[0] == "m":
            return 1 + int(name[1:]) * (self.n_heads + 1) + self.n_heads
        layer, head = name.split(".")
        return 1 + int(layer[1:]) * (self.n_heads + 1) + int(head[1:])

    def bwd(self, name: str, qkv: str | None = None) -> int:
        if name[0] == "m":
            return int(name[1:]) * (3 * self.n_heads + 1) + 3 * self.n_heads
        layer, head = name.split(".")
        return int(layer[1:]) * (3 * self.n_heads + 1) + "qkv".index(qkv) * self.n_heads + int(head[1:])

    def prev_index(self, name: str) -> int:
        """``Graph.prev_index``: the forward index before which every node feeds ``name``'s input."""
        if name == "logits":
            return self.n_forward
        layer = int(name[1:].split(".")[0])
        if name[0] == "m" and not self.parallel_attn_mlp:
            return 1 + layer * (self.n_heads + 1) + self.n_heads
        return 1 + layer * (self.n_heads + 1)

    def prune(self, in_graph: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``Graph.prune`` (the version with the fixed loop condition, 55a2be2)."""
        in_graph = in_graph.clone()
        nodes = torch.zeros(self.n_forward).bool()
        same = False
        while not same:
            outgoing = in_graph.any(dim=1)
            ingoing = torch.einsum("b,fb->f", in_graph.any(dim=0).float(), self.forward_to_backward.float()) > 0
            ingoing[0] = True
            old_nodes = nodes.clone()
            nodes[:] = outgoing & ingoing
            backward = nodes.float() @ self.forward_to_backward.float()
            backward[-1] = 1
            remask = torch.einsum("f,b->fb", nodes.float(), backward) > 0
            old_edges = in_graph.clone()
            in_graph *= remask
            same = bool(torch.all(old_nodes == nodes) and torch.all(old_edges == in_graph))
        return in_graph, nodes

    def apply_topn(self, scores: torch.Tensor, n: int, absolute: bool) -> torch.Tensor:
        """``apply_topn(n, absolute, level='edge', prune=True)``: the pruned ``in_graph`` matrix."""
        edge_scores = scores.clone()
        if absolute:
            edge_scores = torch.abs(edge_scores)
        edge_scores[~self.real] = -torch.inf
        order = torch.argsort(edge_scores.view(-1), descending=True, stable=True)
        in_graph = torch.zeros(self.n_forward, self.n_backward).bool()
        in_graph.view(-1)[order[:n]] = True
        return self.prune(in_graph)[0]

    def from_json(self, d: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``from_json``'s edge loop: ``g.edges[name].score = info['score']`` into float32 matrices."""
        assert all(k in d for k in ["cfg", "nodes", "edges"])
        scores, in_graph = torch.zeros(self.n_forward, self.n_backward), torch.zeros(self.n_forward, self.n_backward).bool()
        for name, info in d["edges"].items():
            scores[self.edges[name]] = info["score"]
            in_graph[self.edges[name]] = info["in_graph"]
        return scores, in_graph


def mib_area_under_curve(evaluate, eap: EapIgGraph, scores: torch.Tensor, absolute: bool) -> tuple[float, float, list]:
    """``evaluate_area_under_curve`` (linear x): ``(area_under, area_from_1, faithfulnesses)``; ``evaluate`` takes an
    ``in_graph`` matrix."""
    baseline = evaluate(torch.ones_like(eap.real) & eap.real)
    corrupted = evaluate(torch.zeros_like(eap.real))
    faithfulnesses = []
    for pct in PERCENTAGES:
        in_graph = eap.apply_topn(scores, int(pct * len(eap.edges)), absolute)
        faithfulnesses.append((evaluate(in_graph) - corrupted) / (baseline - corrupted))
    area_under = area_from_1 = 0.0
    for i in range(len(faithfulnesses) - 1):
        x_1, x_2 = PERCENTAGES[i], PERCENTAGES[i + 1]
        area_from_1 += (x_2 - x_1) * ((abs(1.0 - faithfulnesses[i]) + abs(1.0 - faithfulnesses[i + 1])) / 2)
        area_under += (x_2 - x_1) * ((faithfulnesses[i] + faithfulnesses[i + 1]) / 2)
    return area_under, area_from_1, faithfulnesses


def _graph(layers: int = 2, heads: int = 2, parallel: bool = False) -> Graph:
    return Graph("gpt_neox" if parallel else "gpt2", layers, heads, heads, 1, parallel)


# ------------------------------------------------------------------------------------ names and files
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("layers, heads", [(1, 1), (2, 2), (3, 4)])
def test_names_cells_and_order_are_eap_igs(layers, heads, parallel):
    from subnetlab.models import mib_graph

    graph, eap = _graph(layers, heads, parallel), EapIgGraph(layers, heads, parallel)
    assert set(graph.edge_names) == set(eap.edges) and graph.num_edges == len(eap.edges) == int(eap.real.sum())
    cells = mib_graph.matrix_index(graph).tolist()
    assert cells == [eap.edges[n][0] * eap.n_backward + eap.edges[n][1] for n in graph.edge_names]
    assert [graph.edge_names[e] for e in mib_graph.edge_order(graph)] == list(eap.edges)
    assert len(graph.writers) == eap.n_forward and len(graph.readers) == eap.n_backward
    for r, reader in enumerate(graph.readers):  # every reader's upstream writers: forward indices below prev_index
        node = reader.split("<")[0]
        assert sorted(w for w, rr in graph.edges if rr == r) == list(range(eap.prev_index(node))), reader
    for r, owners in enumerate(graph.reader_owners):  # and the readers' owners: EAP-IG's forward_to_backward
        assert sorted(owners) == eap.forward_to_backward[:, r].nonzero().flatten().tolist()


def test_parallel_file_order_is_eap_igs_loop_by_hand(tmp_path):
    """A 2-layer, 1-head parallel graph's JSON edges, spelled out from ``from_model``'s parallel branch: per layer,
    per upstream node its q, k, v edges and then its MLP edge; the layer's head and MLP join the stream after."""
    from subnetlab.models import mib_graph

    graph = _graph(2, 1, parallel=True)
    mib_graph.save(Circuit(graph, torch.zeros(graph.num_edges)), tmp_path / "g.json", d_model=8)
    expected = ["input->a0.h0<q>", "input->a0.h0<k>", "input->a0.h0<v>", "input->m0",
                "input->a1.h0<q>", "input->a1.h0<k>", "input->a1.h0<v>", "input->m1",
                "a0.h0->a1.h0<q>", "a0.h0->a1.h0<k>", "a0.h0->a1.h0<v>", "a0.h0->m1",
                "m0->a1.h0<q>", "m0->a1.h0<k>", "m0->a1.h0<v>", "m0->m1",
                "input->logits", "a0.h0->logits", "m0->logits", "a1.h0->logits", "m1->logits"]
    data = json.loads((tmp_path / "g.json").read_text())
    assert list(data["edges"]) == expected
    assert data["cfg"]["parallel_attn_mlp"] is True


@pytest.mark.parametrize("layers, heads, count", [(1, 2, 11), (2, 1, 21), (6, 8, 3580), (12, 12, 32347)])
def test_parallel_edge_count_is_eap_igs_closed_form(layers, heads, count):
    """EAP-IG's parallel graph: layer l's 3H + 1 readers each read the 1 + l (H + 1) nodes before the layer, the
    logits every node: (3H + 1) (L + (H + 1) L (L - 1) / 2) + 1 + L (H + 1) edges (6 x 8: Pythia-70m's shape)."""
    from subnetlab.models import mib_graph

    closed = (3 * heads + 1) * (layers + (heads + 1) * layers * (layers - 1) // 2) + 1 + layers * (heads + 1)
    graph = _graph(layers, heads, parallel=True)
    order = mib_graph.edge_order(graph)
    assert closed == count == graph.num_edges == len(order) == len(set(order))
    assert _graph(layers, heads).num_edges - count == layers * heads  # the sequential graph adds a{l}.h{h}->m{l}


def test_gpt2_small_has_eap_igs_edge_count():
    assert _graph(12, 12).num_edges == 32491  # EAP-IG's GPT-2 small graph (MIB's ioi_gpt2)


@pytest.mark.parametrize("parallel", [False, True])
def test_prune_is_eap_igs(parallel, one_thread):
    from subnetlab.models.mib_graph import prune

    graph, eap = _graph(3, 2, parallel), EapIgGraph(3, 2, parallel)
    g = torch.Generator().manual_seed(0)
    cells = [eap.edges[n] for n in graph.edge_names]
    for density in (0.05, 0.2, 0.5, 0.9):
        for _ in range(5):
            keep = torch.rand(graph.num_edges, generator=g) < density
            matrix = torch.zeros(eap.n_forward, eap.n_backward).bool()
            for e, cell in enumerate(cells):
                matrix[cell] = bool(keep[e])
            expected_edges, expected_nodes = eap.prune(matrix)
            edges, nodes = prune(graph, keep)
            assert edges.tolist() == [bool(expected_edges[c]) for c in cells]
            assert nodes.tolist() == expected_nodes.tolist()


def test_prune_on_a_parallel_graph_by_hand():
    """1 layer, 1 head, parallel: kept input->a0.h0<k>, a0.h0->logits, input->m0. The head is fed and read: kept.
    The MLP is fed but feeds nothing (it cannot feed logits through its own layer's heads): dropped, and with it
    input->m0."""
    from subnetlab.models.mib_graph import prune

    graph = _graph(1, 1, parallel=True)
    assert graph.edge_names == ("input->a0.h0<q>", "input->a0.h0<k>", "input->a0.h0<v>", "input->m0",
                                "input->logits", "a0.h0->logits", "m0->logits")
    keep = torch.tensor([False, True, False, True, False, True, False])
    edges, nodes = prune(graph, keep)
    assert edges.tolist() == [False, True, False, False, False, True, False]
    assert nodes.tolist() == [True, True, False]  # input, a0.h0, m0
    keep = torch.tensor([False, False, False, True, False, True, True])  # the head unfed: m0 alone survives
    edges, nodes = prune(graph, keep)
    assert edges.tolist() == [False, False, False, True, False, False, True]
    assert nodes.tolist() == [True, False, True]


def test_json_and_pt_round_trip_to_the_same_scores(tmp_path):
    from subnetlab.models import mib_graph

    graph, eap = _graph(2, 2), EapIgGraph(2, 2)
    g = torch.Generator().manual_seed(1)
    circuit = Circuit(graph, torch.randn(graph.num_edges, generator=g), torch.rand(graph.num_edges, generator=g) < 0.3)
    mib_graph.save(circuit, tmp_path / "g.json", d_model=16)
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["cfg"] == {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": False, "d_model": 16}
    assert list(data["nodes"]) == ["input", "a0.h0", "a0.h1", "m0", "a1.h0", "a1.h1", "m1", "logits"]
    scores, in_graph = eap.from_json(data)  # as EAP-IG reads it
    cells = [eap.edges[n] for n in graph.edge_names]
    assert torch.equal(torch.stack([scores[c] for c in cells]), circuit.scores)
    assert [bool(in_graph[c]) for c in cells] == circuit.in_graph.tolist()
    for path in (tmp_path / "g.json", tmp_path / "g.pt"):
        if path.suffix == ".pt":
            mib_graph.save(circuit, path, d_model=16)
            raw = torch.load(path, weights_only=True)
            assert raw["src_nodes"] == list(graph.writers) and raw["dst_nodes"] == list(graph.readers)
            assert torch.equal(raw["edges_scores"], scores) and torch.equal(raw["edges_in_graph"], in_graph)
        back = mib_graph.load(path)
        assert torch.equal(back.scores, circuit.scores) and torch.equal(back.in_graph, circuit.in_graph)
        assert back.graph.num_edges == graph.num_edges


def test_malformed_files_name_the_field(tmp_path):
    from subnetlab.models import mib_graph

    graph = _graph(1, 1)
    good = mib_graph.to_dict(Circuit(graph, torch.arange(graph.num_edges, dtype=torch.float32)), 8)
    edge = graph.edge_names[0]
    cases = [
        ({k: v for k, v in good.items() if k != "nodes"}, "nodes: missing"),
        ({**good, "cfg": {**good["cfg"], "n_heads": "2"}}, "cfg.n_heads: expected a positive integer"),
        ({**good, "cfg": {**good["cfg"], "parallel_attn_mlp": "yes"}}, "cfg.parallel_attn_mlp: expected true or "
                                                                        "false, got 'yes' (not a bool)"),
        ({**good, "edges": {**good["edges"], edge: {"score": "x", "in_graph": False}}}, f"edges[{edge!r}].score"),
        ({**good, "edges": {**good["edges"], edge: {"score": 1.0}}}, f"edges[{edge!r}].in_graph"),
        ({**good, "edges": {k: v for k, v in good["edges"].items() if k != edge}}, f"edges[{edge!r}]: missing"),
        ({**good, "edges": {**good["edges"], "a9.h0->logits": {"score": 0.0, "in_graph": False}}}, "edges['a9.h0->logits']"),
        ({**good, "nodes": {**good["nodes"], "m0": {"in_graph": True, "neurons": [True] * 8}}}, "nodes['m0'].neurons"),
    ]
    for data, fragment in cases:
        with pytest.raises(SubnetlabError, match=None) as e:
            mib_graph.from_dict(data, "f.json")
        assert fragment in str(e.value), str(e.value)
    other = Graph("gpt2", 2, 1, 1, 1)
    with pytest.raises(SubnetlabError, match="belongs to another model"):
        mib_graph.from_dict(good, "f.json", other)
    with pytest.raises(SubnetlabError, match="one embedding node"):
        mib_graph.to_dict(Circuit(Graph("gpt2", 1, 1, 1, 2), torch.zeros(Graph("gpt2", 1, 1, 1, 2).num_edges)), 8)


def test_a_pt_file_needing_more_than_weights_is_refused_unread(tmp_path):
    from subnetlab.models import mib_graph

    marker = tmp_path / "ran"
    (tmp_path / "evil.pt").write_bytes(b"cposix\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
    with pytest.raises(SubnetlabError, match="not a weights-only torch file, refused unread"):
        mib_graph.load(tmp_path / "evil.pt")
    assert not marker.exists()
    torch.save({"cfg": {"n_layers": 1, "n_heads": 1, "d_model": 8}}, tmp_path / "short.pt")
    with pytest.raises(SubnetlabError, match="src_nodes: missing"):
        mib_graph.load(tmp_path / "short.pt")


def test_submission_folder_layout_and_checker(tmp_path):
    from subnetlab.models import mib_graph, mib_submission

    graph = _graph(1, 1)  # 8 edges: caps of 0.1 % ... 50 % allow 0, 0, 0, 0, 0, 0, 0, 1, 4 edges
    scores = torch.arange(graph.num_edges, dtype=torch.float32)
    for task, model in (("ioi", "gpt2"), ("mcqa", "qwen2.5")):
        mib_submission.write(tmp_path / "sub", task, model, Circuit(graph, scores), d_model=8)
    rows = mib_submission.check(tmp_path / "sub")
    assert [(r["folder"], r["kind"]) for r in rows] == [("ioi_gpt2", "importances"), ("mcqa_qwen2.5", "importances")]
    nine = tmp_path / "nine" / "ioi_mine"
    for i, kept in enumerate([0, 0, 0, 0, 0, 0, 0, 1, 4]):
        keep = torch.zeros(graph.num_edges, dtype=torch.bool)
        keep[:kept] = True
        mib_graph.save(Circuit(graph, None, keep), nine / f"c{i}.json", 8)
    assert mib_submission.check(tmp_path / "nine", mib_names=False)[0]["kept"] == [0, 0, 0, 0, 0, 0, 0, 1, 4]
    with pytest.raises(SubnetlabError, match="model 'mine' is not one of MIB's"):
        mib_submission.check(tmp_path / "nine")
    keep = torch.zeros(graph.num_edges, dtype=torch.bool)
    keep[:5] = True  # 5 of 8 edges: over every cap
    mib_graph.save(Circuit(graph, None, keep), nine / "c8.json", 8)
    with pytest.raises(SubnetlabError, match=r"c8.json: in_graph: 5 of 8 edges kept"):
        mib_submission.check(tmp_path / "nine", mib_names=False)
    (nine / "c8.json").unlink()
    with pytest.raises(SubnetlabError, match="8 .json/.pt files"):
        mib_submission.check(tmp_path / "nine", mib_names=False)
    for task in ("ioi", "mcqa"):
        mib_submission.write(tmp_path / "one-model", task, "gpt2", Circuit(graph, scores), d_model=8)
    with pytest.raises(SubnetlabError, match="at least two models"):
        mib_submission.check(tmp_path / "one-model")


# ------------------------------------------------------------------------------------ MIB's numbers
@pytest.fixture(scope="module")
def tiny():
    from transformers import GPT2Config

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.methods.attribution.scores import attribute
    from subnetlab.models import build_model, get_adapter
    from subnetlab.tasks import get_task
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    torch.set_num_threads(1)
    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    model = build_model(config, head="causal-lm", seed=0).model.eval()
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter, embedding_nodes=1)
    task = get_task("circuit:ioi", n_train=8, n_eval=8).bind(tok)
    scores = attribute(model, adapter, graph, task.pair_batches(tok, "train", 8, None),
                       lambda logits, b, full: task.metrics(logits, b, full)["logit_diff"], method="eap").edges
    return model, tok, graph, scores, edge_evaluator(model, adapter, graph, task, tok, "eval")


def test_mib_cpr_and_cmd_are_the_reference_formula_on_eap_scores(tiny, one_thread):
    from subnetlab.analysis.faithfulness import curve_from_scores
    from subnetlab.analysis.mib_faithfulness import mib_curves

    _, _, graph, scores, evaluate = tiny
    scores = -scores  # MIB's orientation: it attributes the loss (minus the logit difference), subnetlab the metric
    eap = EapIgGraph(graph.num_layers, graph.num_heads)
    matrix = torch.zeros(eap.n_forward, eap.n_backward)
    cells = [eap.edges[n] for n in graph.edge_names]
    for e, cell in enumerate(cells):
        matrix[cell] = scores[e]

    def on_matrix(in_graph):
        return evaluate(torch.tensor([bool(in_graph[c]) for c in cells]))["logit_diff"]

    under_signed, _, f_signed = mib_area_under_curve(on_matrix, eap, matrix, absolute=False)
    _, from_1_abs, f_abs = mib_area_under_curve(on_matrix, eap, matrix, absolute=True)
    mine = mib_curves(graph, scores, evaluate)
    assert mine["definition"] == "mib"
    assert mine["cpr"] == pytest.approx(under_signed, abs=1e-9) and mine["cmd"] == pytest.approx(from_1_abs, abs=1e-9)
    assert mine["signed"]["faithfulness"]["logit_diff"] == pytest.approx(f_signed, abs=1e-9)
    assert mine["absolute"]["faithfulness"]["logit_diff"] == pytest.approx(f_abs, abs=1e-9)
    assert mine["cpr_printed"] == f"{under_signed:.2f}"
    # subnetlab's own CPR (absolute ranking, no pruning) on the same scores and graph: higher, as in the issue
    # (0.837 against MIB's 0.588 on GPT-2); its CMD is MIB's (same ranking; pruning changes no patched m(C))
    own = curve_from_scores(scores, evaluate, empty=evaluate.corrupted_run)
    assert own.cpr > mine["cpr"] + 0.1, (own.cpr, mine["cpr"])
    assert own.cmd == pytest.approx(mine["cmd"], abs=1e-5)


def test_circuit_eval_mib_end_to_end_with_eap_ig_files(tiny, tmp_path, capsys, one_thread):
    from subnetlab.analysis.mib_faithfulness import mib_curves
    from subnetlab.cli import main
    from subnetlab.models import mib_graph, mib_submission

    model, tok, graph, scores, evaluate = tiny
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    Circuit(graph, scores).save(tmp_path / "scores.json")
    base = ["circuit-eval", "--model", str(tmp_path / "model"), "--task", "circuit:ioi", "--task-option", "n_train=8",
            "--task-option", "n_eval=8"]

    def run(args):
        with pytest.raises(SystemExit) as e:
            main(base + args)
        captured = capsys.readouterr()
        assert e.value.code == 0, captured.err
        return captured.out

    out = run(["--scores", str(tmp_path / "scores.json"), "--mib", "--mib-export", str(tmp_path / "eap.json"),
               "--mib-submission", str(tmp_path / "sub"), "--out", str(tmp_path / "a")])
    expected = mib_curves(graph, -scores, evaluate)  # subnetlab's attribution scores turned to MIB's orientation
    written = json.loads((tmp_path / "a" / "faithfulness.json").read_text())
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert written["definition"] == metrics["definition"] == "mib" and "MIB: CPR" in out
    full, empty = (evaluate(torch.full((graph.num_edges,), fill))["logit_diff"] for fill in (True, False))
    tolerance = faithfulness_tolerance(full, empty)  # the command's float32 path against the test's
    assert written["cpr"] == pytest.approx(expected["cpr"], abs=tolerance)
    assert metrics["cmd"] == pytest.approx(expected["cmd"], abs=tolerance)
    assert written["score_orientation"].startswith("negated")
    assert torch.equal(mib_graph.load(tmp_path / "eap.json").scores, -scores)
    assert mib_submission.check(tmp_path / "sub", mib_names=False)[0]["folder"] == "ioi_model"
    from subnetlab.models import get_adapter
    from subnetlab.runs.circuit_eval import read_scores  # what the warm start (circuit --init-from) reads too

    level, read, on, absolute = read_scores(str(tmp_path / "eap.json"), get_adapter(model))
    assert level == "edges" and absolute and torch.equal(read, -scores) and on.shape() == graph.shape()
    mib_graph.save(Circuit(graph, -scores), tmp_path / "eap.pt", d_model=16)
    for name, path in (("b", tmp_path / "eap.json"), ("c", tmp_path / "eap.pt")):  # an EAP-IG file feeds circuit-eval
        run(["--scores", str(path), "--mib", "--out", str(tmp_path / name)])
        again = json.loads((tmp_path / name / "faithfulness.json").read_text())
        assert again["cpr"] == written["cpr"] and again["cmd"] == written["cmd"]
    run(["--scores", str(tmp_path / "eap.json"), "--out", str(tmp_path / "d")])  # subnetlab's own definition
    own = json.loads((tmp_path / "d" / "metrics.json").read_text())
    assert own["definition"] == "subnetlab" and own["cpr"] > written["cpr"]
    keep = mib_graph.prune(graph, torch.zeros(graph.num_edges, dtype=torch.bool))[0]  # an EAP-IG circuit file
    keep[graph.edge_names.index("a1.h0->logits")] = True
    mib_graph.save(Circuit(graph, None, keep), tmp_path / "circuit.json", d_model=16)
    run(["--circuit", str(tmp_path / "circuit.json"), "--out", str(tmp_path / "e")])
    assert json.loads((tmp_path / "e" / "metrics.json").read_text())["kept"] == 1


# ------------------------------------------------------------------ GPT-NeoX / Pythia: attention and MLP in parallel
@pytest.fixture(scope="module")
def neox():
    """A tiny GPT-NeoX with the parallel residual (Pythia's layout), its graph with one embedding node, its IOI task."""
    from transformers import GPTNeoXConfig

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.models import build_model
    from subnetlab.tasks import get_task
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    torch.set_num_threads(1)
    tok = gpt2_style_tokenizer()
    config = GPTNeoXConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=2, max_position_embeddings=64, initializer_range=0.3,
                           use_parallel_residual=True, rotary_pct=0.5, bos_token_id=0, eos_token_id=0)
    built = build_model(config, head="causal-lm", seed=0)
    model, adapter = built.model.eval(), built.adapter
    graph = Graph.from_adapter(adapter, embedding_nodes=1)
    task = get_task("circuit:ioi", n_train=8, n_eval=8).bind(tok)
    return model, tok, graph, edge_evaluator(model, adapter, graph, task, tok, "eval")


def test_parallel_gpt_neox_graph_round_trips_json_and_pt(neox, tmp_path):
    from subnetlab.models import mib_graph

    _, _, graph, _ = neox
    assert graph.parallel_attn_mlp and graph.num_edges == 42  # (3 * 2 + 1) (2 + 3) + 1 + 6
    eap = EapIgGraph(2, 2, parallel_attn_mlp=True)
    g = torch.Generator().manual_seed(2)
    circuit = Circuit(graph, torch.randn(graph.num_edges, generator=g), torch.rand(graph.num_edges, generator=g) < 0.4)
    cells = [eap.edges[n] for n in graph.edge_names]
    mib_graph.save(circuit, tmp_path / "g.json", d_model=16)
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["cfg"] == {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": True, "d_model": 16}
    assert list(data["nodes"]) == ["input", "a0.h0", "a0.h1", "m0", "a1.h0", "a1.h1", "m1", "logits"]
    assert list(data["edges"]) == list(eap.edges)
    scores, in_graph = eap.from_json(data)  # as EAP-IG reads it
    assert torch.equal(torch.stack([scores[c] for c in cells]), circuit.scores)
    assert [bool(in_graph[c]) for c in cells] == circuit.in_graph.tolist()
    _, expected_nodes = eap.prune(in_graph)
    assert [data["nodes"][n]["in_graph"] for n in list(data["nodes"])[:-1]] == expected_nodes.tolist()
    mib_graph.save(circuit, tmp_path / "g.pt", d_model=16)
    raw = torch.load(tmp_path / "g.pt", weights_only=True)
    assert raw["cfg"]["parallel_attn_mlp"] is True
    assert torch.equal(raw["edges_scores"], scores) and torch.equal(raw["edges_in_graph"], in_graph)
    assert torch.equal(raw["nodes_in_graph"], expected_nodes)
    for path in (tmp_path / "g.json", tmp_path / "g.pt"):
        for on in (graph, None):  # on the model's graph, and on the file's own
            back = mib_graph.load(path, on)
            assert back.graph.parallel_attn_mlp is True and back.graph.edge_names == graph.edge_names
            assert torch.equal(back.scores, circuit.scores) and torch.equal(back.in_graph, circuit.in_graph)


def test_a_file_of_the_other_layout_is_refused(tmp_path):
    from subnetlab.models import mib_graph

    parallel, sequential = _graph(2, 2, parallel=True), _graph(2, 2)
    expected = {parallel: "the file's graph runs attention and MLP in parallel (GPT-NeoX); the model's in sequence",
                sequential: "the file's graph runs attention and MLP in sequence; the model's in parallel (GPT-NeoX)"}
    for graph, other in ((parallel, sequential), (sequential, parallel)):
        circuit = Circuit(graph, torch.zeros(graph.num_edges))
        for suffix in ("json", "pt"):
            path = tmp_path / f"{graph.family}.{suffix}"
            mib_graph.save(circuit, path, d_model=16)
            with pytest.raises(SubnetlabError) as e:
                mib_graph.load(path, other, setting="scores")
            assert f"{path}: cfg.parallel_attn_mlp: {expected[graph]}" in str(e.value) and e.value.setting == "scores"


def test_a_submission_folder_of_both_layouts_is_refused(tmp_path):
    """Nine circuits, one of a parallel graph of the same shape: another model (42 edges, not 46), refused."""
    from subnetlab.models import mib_graph, mib_submission

    folder = tmp_path / "sub" / "ioi_mine"
    for i, graph in enumerate([_graph(2, 2)] * 8 + [_graph(2, 2, parallel=True)]):
        mib_graph.save(Circuit(graph, None, torch.zeros(graph.num_edges, dtype=torch.bool)), folder / f"c{i}.json", 16)
    with pytest.raises(SubnetlabError, match="its files describe graphs of different models"):
        mib_submission.check(tmp_path / "sub", mib_names=False)
    (folder / "c8.json").unlink()
    graph = _graph(2, 2, parallel=True)
    mib_graph.save(Circuit(graph, None, torch.zeros(graph.num_edges, dtype=torch.bool)), folder / "c8.json", 16)
    for i in range(8):
        (folder / f"c{i}.json").write_text((folder / "c8.json").read_text())
    row = mib_submission.check(tmp_path / "sub", mib_names=False)[0]
    assert row["kind"] == "circuits" and row["edges"] == 42


def test_circuit_eval_mib_on_a_parallel_gpt_neox_end_to_end(neox, tmp_path, capsys, one_thread):
    """An EAP-IG file of a parallel model: circuit-eval --mib reads it on the model's graph, its CPR and CMD are
    MIB's formula over EAP-IG's parallel graph (the transcription above: its top-n, its prune), --mib-export
    writes the file back, --circuit measures an EAP-IG circuit file, the warm start (``circuit --init-from``) reads
    it."""
    from subnetlab.cli import main
    from subnetlab.models import get_adapter, mib_graph
    from subnetlab.runs.circuit_eval import read_scores

    model, tok, graph, evaluate = neox
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    scores = torch.randn(graph.num_edges, generator=torch.Generator().manual_seed(3))
    mib_graph.save(Circuit(graph, scores), tmp_path / "eap.json", d_model=16)
    base = ["circuit-eval", "--model", str(tmp_path / "model"), "--task", "circuit:ioi", "--task-option", "n_train=8",
            "--task-option", "n_eval=8"]

    def run(args):
        with pytest.raises(SystemExit) as e:
            main(base + args)
        captured = capsys.readouterr()
        assert e.value.code == 0, captured.err
        return captured.out

    run(["--scores", str(tmp_path / "eap.json"), "--mib", "--mib-export", str(tmp_path / "back.pt"),
         "--out", str(tmp_path / "a")])
    eap = EapIgGraph(2, 2, parallel_attn_mlp=True)
    cells = [eap.edges[n] for n in graph.edge_names]
    matrix = torch.zeros(eap.n_forward, eap.n_backward)
    for e, cell in enumerate(cells):
        matrix[cell] = scores[e]

    def on_matrix(in_graph):
        return evaluate(torch.tensor([bool(in_graph[c]) for c in cells]))["logit_diff"]

    under_signed, _, _ = mib_area_under_curve(on_matrix, eap, matrix, absolute=False)
    _, from_1_abs, _ = mib_area_under_curve(on_matrix, eap, matrix, absolute=True)
    written = json.loads((tmp_path / "a" / "faithfulness.json").read_text())
    assert written["definition"] == "mib"
    full, empty = (evaluate(torch.full((graph.num_edges,), fill))["logit_diff"] for fill in (True, False))
    tolerance = faithfulness_tolerance(full, empty)  # the command's float32 path against the test's
    assert written["cpr"] == pytest.approx(under_signed, abs=tolerance)
    assert written["cmd"] == pytest.approx(from_1_abs, abs=tolerance)
    back = mib_graph.load(tmp_path / "back.pt")
    assert back.graph.parallel_attn_mlp and torch.equal(back.scores, scores)
    level, read, on, _ = read_scores(str(tmp_path / "eap.json"), get_adapter(model))  # what circuit --init-from reads
    assert level == "edges" and torch.equal(read, scores) and on.parallel_attn_mlp
    keep = torch.zeros(graph.num_edges, dtype=torch.bool)
    keep[[graph.edge_index("input->a1.h0<v>"), graph.edge_index("a1.h0->logits"), graph.edge_index("input->m1")]] = True
    mib_graph.save(Circuit(graph, None, keep), tmp_path / "circuit.json", d_model=16)
    run(["--circuit", str(tmp_path / "circuit.json"), "--out", str(tmp_path / "c")])
    measured = json.loads((tmp_path / "c" / "metrics.json").read_text())  # the circuit as written (no pruning)
    assert measured["kept"] == 3
    m = evaluate(keep)["logit_diff"]  # float32 along the command's path and the test's: a tolerance from its precision
    assert measured["faithfulness"]["logit_diff"] == pytest.approx(
        (m - empty) / (full - empty), abs=faithfulness_tolerance(full, empty, m))
