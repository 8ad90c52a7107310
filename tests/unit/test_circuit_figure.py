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
