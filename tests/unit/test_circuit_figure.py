"""The circuit figure draws exactly the kept edges, each ending at its reader's Q/K/V input."""

from __future__ import annotations

import numpy as np
import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.models.graph import Graph
from subnetlab.report.circuit_figure import READER_DROP, STYLES, circuit_axes, circuit_layout, draw_circuit
from subnetlab.report.plots import plt


def _kept(graph: Graph, names: list[str]) -> np.ndarray:
    kept = np.zeros(graph.num_edges)
    kept[[graph.edge_index(n) for n in names]] = 1
    return kept


NAMES = ["tok_embeds->a0.h0<q>", "a0.h1->a1.h0<k>", "a0.h1->a1.h1<v>", "a1.h0->logits", "a0.h0->m0", "m0->logits"]


def test_the_figure_draws_exactly_the_kept_edges(tmp_path):
    graph = Graph("gpt2", 2, 2, 2, 2)
    kept = _kept(graph, NAMES)
    fig, ax = circuit_axes(graph, kept)
    drawn = [line for line in ax.get_lines() if line.get_gid() is not None]
    assert sorted(line.get_gid() for line in drawn) == sorted(NAMES)
    by_name = {line.get_gid(): line for line in drawn}
    # the key and the value edge out of a0.h1: different colours and styles, ending either side of the query point
    k, v = by_name["a0.h1->a1.h0<k>"], by_name["a0.h1->a1.h1<v>"]
    assert (k.get_color(), k.get_linestyle()) == (STYLES["k"][0], "--")
    assert (v.get_color(), v.get_linestyle()) == (STYLES["v"][0], ":")
    assert k.get_xdata()[1] == 0.0 and v.get_xdata()[1] == pytest.approx(1.22)
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"query (Q)", "key (K)", "value (V)"}
    plt.close(fig)
    layout = circuit_layout(graph, kept)
    # nodes without a kept edge (pos_embeds, m1) are the grey ones; a1.h1 reads a kept value edge so it is in
    assert set(layout.nodes) - layout.active == {"pos_embeds", "m1"}
    path = draw_circuit(graph, kept, tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_grouped_key_value_readers_end_between_their_query_heads():
    graph = Graph("llama", 1, 4, 2, 1)  # two query heads per key/value head
    layout = circuit_layout(graph, _kept(graph, ["input->a0.kv1<k>"]))
    (seg,) = layout.segments
    assert seg.kind == "k" and seg.end == (2.5, 1.0 - READER_DROP)  # middle of query heads 2 and 3
    assert {"a0.h2", "a0.h3", "input"} == set(layout.active)


def test_a_mask_of_the_wrong_length_is_refused():
    with pytest.raises(SubnetlabError, match="edge values"):
        circuit_layout(Graph("gpt2", 1, 2, 2, 2), np.ones(3))


def test_marked_edges_are_drawn_over_the_circuit_kept_or_removed(tmp_path):
    graph = Graph("gpt2", 2, 2, 2, 2)
    kept = _kept(graph, NAMES)
    fig, ax = circuit_axes(graph, kept, marked=["a0.h1->a1.h0<k>", "a0.h0->a1.h1<k>"])
    marks = {line.get_gid(): line for line in ax.get_lines() if (line.get_gid() or "").startswith("marked:")}
    assert set(marks) == {"marked:a0.h1->a1.h0<k>", "marked:a0.h0->a1.h1<k>"}
    assert marks["marked:a0.h1->a1.h0<k>"].get_color() == "black"  # kept
    assert marks["marked:a0.h0->a1.h1<k>"].get_color() == "tab:gray"  # removed
    plain = {line.get_gid(): line for line in ax.get_lines() if line.get_gid() in NAMES}
    assert np.allclose(marks["marked:a0.h1->a1.h0<k>"].get_xydata(), plain["a0.h1->a1.h0<k>"].get_xydata())
    plt.close(fig)


def test_faithfulness_curves_figure_and_the_sweep_curve(tmp_path):
    from subnetlab.cli.commands.circuit import sweep_curve
    from subnetlab.report.circuit_figure import draw_faithfulness_curves

    curve = {"metric": "logit_diff", "items": 10, "fractions": [0.1, 0.5, 1.0], "faithfulness": {"logit_diff": [0.1, None, 1.0]},
             "cpr": 0.5, "cmd": 0.4}
    path = draw_faithfulness_curves({"a": curve, "b": curve}, tmp_path / "f.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = [{"target_sparsity": t, "kept_edges": k, "faithfulness": {"logit_diff": f, "kl": None}}
            for t, k, f in ((0.5, 30, 0.8), (0.9, 6, 0.2), (0.9, 8, 0.4), (0.5, 32, None))]
    x, series = sweep_curve(runs)
    assert x == [7, 31]  # sparsest first: mean kept edges per target
    assert series["f(logit_diff)"] == pytest.approx([0.3, 0.8])
    assert all(np.isnan(series["f(kl)"]))
