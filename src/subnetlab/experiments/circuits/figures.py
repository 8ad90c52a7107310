"""The circuits report's figures: each edge-pruning circuit drawn (the mechanism's key edges marked) and every
method's faithfulness curve, written under ``figures/`` beside report.md; each function returns the Markdown that
shows its figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subnetlab.models.circuit import Circuit
from subnetlab.report.circuit_figure import draw_circuit, draw_faithfulness_curves

FIGURES = "figures"


def curves_figure(out: Path, curves: dict[str, Any], name: str, title: str) -> list[str]:
    """Every method's faithfulness curve in one figure."""
    if not curves:
        return []
    path = draw_faithfulness_curves(curves, out / FIGURES / f"{name}.png", title=title)
    return [f"![{title}]({path.relative_to(out).as_posix()})", ""]


def circuit_figures(out: Path, base: Path, runs: list[dict[str, Any]], key_edges: list[str], name: str,
                    what: str) -> list[str]:
    """Each edge-pruning run's circuit (``run["circuit"]``, a graph.json under ``base``), key edges marked."""
    lines: list[str] = []
    for run in runs:
        file = base / run["circuit"] if run.get("circuit") else None
        if file is None or not file.is_file():
            continue
        circuit = Circuit.load(file)
        title = (f"{what}: edge pruning at target sparsity {run['sparsity']}, {run['kept']} of "
                 f"{circuit.graph.num_edges} edges kept")
        path = draw_circuit(circuit.graph, circuit.kept().float().numpy(),
                            out / FIGURES / f"{name}-{run['sparsity']}.png", title=title, marked=key_edges)
        lines += [f"![{title}]({path.relative_to(out).as_posix()})", ""]
    if lines and key_edges:
        lines = ["Thick black: the mechanism's key edges where the circuit keeps them; dashed grey where it removes "
                 "them. `subnetlab view` opens each circuit's graph.json as an interactive page.", ""] + lines
    return lines


__all__ = ["FIGURES", "circuit_figures", "curves_figure"]
