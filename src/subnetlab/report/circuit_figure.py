"""An edge circuit as a figure: nodes by layer, the kept edges, each edge's reader input (Q/K/V) marked.

Layout: the embeddings at the bottom, one row per layer (its heads left to
right, its MLP at the right end, a little higher because it reads its own
layer's heads), the logits at the top. A kept edge is one line from its writer
to the node that reads it; an edge into a head ends left of the head's centre
for its query, at the centre for its key, right of it for its value (just under
the head), and the
three are drawn in different colours and line styles (legend). With grouped
key/value heads a key/value reader ends at the middle of the query heads that
share it. Nodes with no kept edge in or out are grey.

``circuit_layout`` returns the plain data drawn (positions and one segment per
kept edge), so that tests and other tools can check it without reading pixels.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph
from subnetlab.report.plots import plt, save_figure

# reader input -> (colour, line style, x offset at the head, legend label)
STYLES = {
    "q": ("tab:blue", "-", -0.22, "query (Q)"),
    "k": ("tab:orange", "--", 0.0, "key (K)"),
    "v": ("tab:green", ":", 0.22, "value (V)"),
    "mlp": ("tab:purple", "-", 0.0, "MLP input"),
    "logits": ("tab:red", "-", 0.0, "logits"),
}
NODE_COLOURS = {"head": "tab:blue", "mlp": "tab:purple"}
MLP_RISE = 0.45
READER_DROP = 0.15  # Q/K/V edges end just under their head, side by side


@dataclass(frozen=True)
class EdgeSegment:
    """One kept edge as drawn: its name, its reader input kind (a key of ``STYLES``) and its end points."""

    name: str
    kind: str
    start: tuple[float, float]
    end: tuple[float, float]


@dataclass(frozen=True)
class CircuitLayout:
    nodes: dict[str, tuple[float, float]]  # writer (and "logits") -> position
    active: frozenset[str]  # nodes with at least one kept edge
    segments: tuple[EdgeSegment, ...]


def _positions(graph: Graph) -> dict[str, tuple[float, float]]:
    H = graph.num_heads
    centre = (H - 1) / 2
    E = graph.num_embeddings
    nodes = {}
    for name, node in zip(graph.writers, graph.writer_nodes):
        if node.kind == "embedding":
            nodes[name] = (centre + (node.index - (E - 1) / 2) * 1.5, 0.0)
        elif node.kind == "head":
            nodes[name] = (float(node.index), node.layer + 1.0)
        else:
            nodes[name] = (float(H), node.layer + 1.0 + MLP_RISE)
    nodes["logits"] = (centre, graph.num_layers + 1.0)
    return nodes


def _reader_end(graph: Graph, reader: int, nodes: dict[str, tuple[float, float]]) -> tuple[float, float]:
    """Where an edge into ``reader`` ends: under its head (a grouped key/value head: the middle of the query heads
    sharing it), left of centre for a query and right for a value; at the MLP; at the logits."""
    kind, owners = graph.reader_kinds[reader], graph.reader_owners[reader]
    if not owners:
        return nodes["logits"]
    points = [nodes[graph.writers[w]] for w in owners]
    if kind == "mlp":
        return points[0]
    x = float(np.mean([p[0] for p in points]))
    return x + STYLES[kind][2], points[0][1] - READER_DROP


def circuit_layout(graph: Graph, kept: Any) -> CircuitLayout:
    """Positions of every node and one segment per kept edge (``kept``: one value per edge, > 0.5 = kept)."""
    circuit = Circuit(graph, in_graph=np.asarray(kept, dtype=float).reshape(-1))
    nodes = _positions(graph)
    active: set[str] = set()
    segments = []
    for i in torch.nonzero(circuit.kept()).flatten().tolist():
        w, r = graph.edges[i]
        owners = graph.reader_owners[r]
        # a key/value reader serves every query head of its group: all of them read through it
        active.update([graph.writers[w]] + ([graph.writers[o] for o in owners] if owners else ["logits"]))
        segments.append(EdgeSegment(graph.edge_names[i], graph.reader_kinds[r], nodes[graph.writers[w]],
                                    _reader_end(graph, r, nodes)))
    return CircuitLayout(nodes, frozenset(active), tuple(segments))


def draw_circuit(graph: Graph, kept: Any, path: str | os.PathLike, *, title: str = "",
                 marked: Sequence[str] = ()) -> Path:
    """Write the circuit's figure to ``path`` (PNG, atomically) and return the path; ``marked`` edges (names, such
    as a mechanism's key edges) are drawn over it, thick where kept and dashed grey where removed."""
    fig, _ = circuit_axes(graph, kept, title=title, marked=marked)
    return save_figure(fig, path)


def circuit_axes(graph: Graph, kept: Any, *, title: str = "", marked: Sequence[str] = ()) -> tuple[Any, Any]:
    """The open figure and its axes (one line per kept edge, its ``gid`` the edge's name; a marked edge's overlay
    ``marked:<name>``), for callers that compose or inspect it; ``draw_circuit`` writes and closes it."""
    layout = circuit_layout(graph, kept)
    H, L = graph.num_heads, graph.num_layers
    fig, ax = plt.subplots(figsize=(min(2.0 + 0.55 * (H + 1), 18.0), min(1.6 + 1.1 * (L + 2), 16.0)))
    for seg in layout.segments:
        colour, style, _, _ = STYLES[seg.kind]
        ax.plot([seg.start[0], seg.end[0]], [seg.start[1], seg.end[1]], color=colour, ls=style, lw=1.0,
                alpha=0.75, zorder=1, gid=seg.name)
    kinds = {name: node for name, node in zip(graph.writers, graph.writer_nodes)}
    for name, (x, y) in layout.nodes.items():
        on = name in layout.active
        node = kinds.get(name)  # None: the logits
        big = node is None or node.kind == "embedding"
        ax.scatter([x], [y], s=260 if big else 160, zorder=2,
                   color="tab:gray" if not on else ("black" if big else NODE_COLOURS[node.kind]),
                   alpha=1.0 if on else 0.25, edgecolors="none")
        label = f"h{node.index}" if node is not None and node.kind == "head" else name
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(0, -13), ha="center", fontsize=6,
                    color="black" if on else "tab:gray")
    drawn = {seg.name for seg in layout.segments}
    for name in marked:
        i = graph.edge_index(name)
        w, r = graph.edges[i]
        start, end = layout.nodes[graph.writers[w]], _reader_end(graph, r, layout.nodes)
        on = name in drawn
        ax.plot([start[0], end[0]], [start[1], end[1]], color="black" if on else "tab:gray", lw=3.2 if on else 1.6,
                ls="-" if on else (0, (2, 2)), alpha=0.9, zorder=3, gid=f"marked:{name}")
    for kind in ("q", "k", "v", "mlp", "logits"):
        colour, style, _, label = STYLES[kind]
        ax.plot([], [], color=colour, ls=style, label=label)  # legend entries only (no data)
    if marked:
        ax.plot([], [], color="black", lw=3.2, label="key edge, kept")
        ax.plot([], [], color="tab:gray", lw=1.6, ls=(0, (2, 2)), label="key edge, removed")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="edge into")
    ax.set_yticks([0] + [layer + 1 for layer in range(L)] + [L + 1], ["embeddings"] + [f"layer {l}" for l in range(L)]
                  + ["logits"])
    ax.set_xticks([])
    ax.set_xlim(-1, H + 1)
    ax.set_ylim(-0.6, L + 1.6)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    kept = len(layout.segments)
    ax.set_title(title or f"{kept} of {graph.num_edges} edges kept ({graph.family}, {L} x {H})", fontsize=9)
    return fig, ax


def draw_faithfulness_curves(curves: Mapping[str, Mapping[str, Any]], path: str | os.PathLike, *,
                             title: str = "") -> Path:
    """Each method's faithfulness curve (MIB): f of its headline metric over the circuit size in percent of its
    items (log axis), CPR / CMD in the legend. ``curves``: name -> a ``FaithfulnessCurve.to_dict()``."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for name, curve in curves.items():
        metric = curve["metric"]
        f = [np.nan if v is None else v for v in curve["faithfulness"][metric]]
        x = [max(100 * fraction, 1e-2) for fraction in curve["fractions"]]
        ax.plot(x, f, marker="o", ms=3, label=f"{name} ({curve['items']} items): CPR {curve['cpr']:.3f}, "
                                               f"CMD {curve['cmd']:.3f}")
    ax.axhline(1.0, color="tab:gray", lw=0.8, ls=":")
    ax.axhline(0.0, color="tab:gray", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("circuit size (% of the method's items)")
    metrics = sorted({c["metric"] for c in curves.values()})
    ax.set_ylabel(f"faithfulness f({', '.join(metrics)})")
    ax.legend(fontsize=7, loc="best")
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


__all__ = ["CircuitLayout", "EdgeSegment", "READER_DROP", "STYLES", "circuit_axes", "circuit_layout", "draw_circuit",
           "draw_faithfulness_curves"]
