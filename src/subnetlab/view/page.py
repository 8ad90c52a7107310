"""The page: the runs as JSON for ``static/view.js``, inlined with d3, dagre and the page's CSS into one HTML file.

Modes, from what was given:

* ``single``: one edge run; the slider keeps the top ``k`` edges of its ranking;
* ``compare``: two paths of one run each, side by side; edges in both / only left / only right at each ``k``;
* ``seeds``: several edge runs (a sweep, or three or more paths): each edge's frequency over the runs; the
  slider keeps the ``k`` most frequent;
* ``nodes``: head/MLP subnetworks (prune runs, a core's runs): each component's frequency over seeds, its gate
  in each seed, the core (kept by every seed).

A run's ranking keeps its own kept edges (``in_graph``) first, then the rest by score (its sign convention,
``models.circuit.ranking``), so the slider at the run's size shows exactly the run's circuit.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.models.circuit import ranking
from subnetlab.view.runs import Curve, ViewRun

DRAW_CAP = 1500  # edges drawn at most; beyond, the best DRAW_CAP of the selection are drawn, the rest counted
LAYOUT_EDGES = 150  # edges dagre orders the nodes by, at most
LAYOUT_SPAN = 600  # ... and ranks they cross in all, at most (dagre adds a dummy node per rank an edge crosses)
VENDORED = ("d3.min.js", "dagre.min.js")


def _round(values: torch.Tensor) -> list[float]:
    return [float(f"{v:.4g}") for v in values.tolist()]


def run_order(run: ViewRun) -> torch.Tensor:
    """Edge indices best first: kept edges first, each part by score (module doc)."""
    circuit = run.circuit
    assert circuit is not None
    if circuit.scores is not None:
        order = circuit.ranking()
    else:
        order = torch.arange(circuit.graph.num_edges)
    if circuit.in_graph is not None:
        kept = circuit.in_graph[order]
        order = torch.cat([order[kept], order[~kept]])
    return order


def _graph_dict(run: ViewRun) -> dict[str, Any]:
    graph = run.circuit.graph  # type: ignore[union-attr]
    return {
        "shape": graph.shape(), "writers": list(graph.writers), "readers": list(graph.readers),
        "writer_kind": [n.kind for n in graph.writer_nodes], "writer_layer": [n.layer for n in graph.writer_nodes],
        "writer_index": [n.index for n in graph.writer_nodes], "reader_kind": list(graph.reader_kinds),
        "reader_owner": [o[0] if o else -1 for o in graph.reader_owners],
        "reader_owners": [list(o) for o in graph.reader_owners],
        "edge_writer": [w for w, _ in graph.edges], "edge_reader": [r for _, r in graph.edges],
    }


def _run_dict(run: ViewRun, order: torch.Tensor | None = None) -> dict[str, Any]:
    circuit = run.circuit
    data: dict[str, Any] = {"label": run.label, "path": run.path, "health": run.health, "seed": run.seed,
                            "target": run.target, "curve": None if run.curve is None else run.curve.to_dict()}
    if circuit is not None:
        data["score"] = None if circuit.scores is None else _round(circuit.scores)
        data["score_sign"] = circuit.score_sign
        data["kept"] = None if circuit.in_graph is None else int(circuit.in_graph.sum())
        data["order"] = (run_order(run) if order is None else order).tolist()
    return data


def _seed_curve(runs: list[ViewRun]) -> Curve | None:
    """The runs' own measurements as one curve: f averaged over runs of the same size."""
    by_size: dict[int, list[float]] = {}
    metric = None
    for run in runs:
        for count, f in (run.curve.points if run.curve else []):
            by_size.setdefault(count, []).append(f)
            metric = run.curve.metric  # type: ignore[union-attr]
    if metric is None:
        return None
    return Curve(metric, [(c, sum(fs) / len(fs)) for c, fs in sorted(by_size.items())],
                 source="the runs' metrics.json, averaged over runs of one size")


def _edge_page(groups: list[list[ViewRun]]) -> dict[str, Any]:
    runs = [r for g in groups for r in g]
    graph = _graph_dict(runs[0])
    if len(groups) == 2 and len(runs) == 2:
        left, right = runs
        initial = left.circuit.in_graph.sum() if left.circuit.in_graph is not None else min(50, len(graph["edge_writer"]))
        return {"mode": "compare", "graph": graph, "runs": [_run_dict(left), _run_dict(right)], "initial": int(initial)}
    if len(runs) == 1:
        run = runs[0]
        initial = run.circuit.in_graph.sum() if run.circuit.in_graph is not None else min(50, run.circuit.graph.num_edges)
        return {"mode": "single", "graph": graph, "runs": [_run_dict(run)], "initial": int(initial)}
    missing = [r.label for r in runs if r.circuit.in_graph is None]
    if missing:
        raise SubnetlabError(f"several runs are shown as each edge's frequency over them, which needs every run's "
                             f"kept edges; these have none: {', '.join(missing)}", setting="runs")
    kept = torch.stack([r.circuit.in_graph.float() for r in runs])  # [runs, edges]
    frequency = kept.mean(0)
    scored = [r.circuit.scores.abs() for r in runs if r.circuit.scores is not None]
    tiebreak = torch.stack(scored).mean(0) if scored else None
    order = ranking(frequency, tiebreak)
    curve = _seed_curve(runs)
    return {"mode": "seeds", "graph": graph, "runs": [_run_dict(r) for r in runs], "frequency": _round(frequency),
            "order": order.tolist(), "initial": int((frequency > 0.5).sum()) or int(kept.sum(1).max()),
            "curve": None if curve is None else curve.to_dict()}


def _node_page(groups: list[list[ViewRun]]) -> dict[str, Any]:
    runs = [r for g in groups for r in g]
    layers, heads = runs[0].heads.shape  # type: ignore[union-attr]
    names = [f"L{layer}.H{h}" for layer in range(layers) for h in range(heads)] + [f"L{layer}.MLP" for layer in range(layers)]
    gates = torch.stack([torch.cat([r.heads.reshape(-1), r.mlps]) for r in runs])  # [runs, components]
    frequency = (gates > 0.5).float().mean(0)
    order = ranking(frequency, gates.mean(0))
    return {"mode": "nodes", "layers": int(layers), "heads": int(heads), "components": names,
            "runs": [{**_run_dict(r), "gates": _round(g)} for r, g in zip(runs, gates)],
            "frequency": _round(frequency), "order": order.tolist(), "core": int((frequency == 1).sum()),
            "initial": int((frequency == 1).sum()) or int((frequency > 0.5).sum())}


def page_data(groups: list[list[ViewRun]], title: str, stability: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON the page draws (module doc); ``stability``: what the paths recorded (``view.runs.read_stability``),
    shown as a table beside the health."""
    runs = [r for g in groups for r in g]
    data = _node_page(groups) if runs[0].level == "nodes" else _edge_page(groups)
    return {"title": title, "draw_cap": DRAW_CAP, "layout_edges": LAYOUT_EDGES, "layout_span": LAYOUT_SPAN, **data,
            "stability": list(stability or [])}


def _static(name: str) -> str:
    return resources.files("subnetlab.view").joinpath("static", name).read_text(encoding="utf-8")


def render(data: dict[str, Any]) -> str:
    """One self-contained HTML page: CSS, the vendored libraries, the data and the page's script inlined."""
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    scripts = "\n".join(f"<script>{_static(name)}</script>" for name in VENDORED)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(data["title"])}</title>
<style>{_static("view.css")}</style></head>
<body>
<div id="errors" data-count="0"></div>
<header><h1>{html.escape(data["title"])}</h1><div id="summary"></div></header>
<section id="controls"></section>
<section id="health"></section>
<section id="stability"></section>
<main id="panels"></main>
<aside id="details"><p class="hint">Click a node to list its edges.</p></aside>
<footer>Drawn with d3 (ISC licence) and dagre (MIT licence), vendored in subnetlab/view/static/ with their licences.
<span id="drawnote"></span></footer>
<pre id="selftest"></pre>
<script>window.addEventListener("error", function (e) {{ var box = document.getElementById("errors");
box.dataset.count = String(Number(box.dataset.count) + 1); box.textContent += "error: " + e.message + "\\n"; }});</script>
{scripts}
<script id="data" type="application/json">{payload}</script>
<script>{_static("view.js")}</script>
</body></html>
"""


__all__ = ["DRAW_CAP", "LAYOUT_EDGES", "LAYOUT_SPAN", "page_data", "render", "run_order"]
