"""Run directories as ``subnetlab circuit`` / ``circuit-eval`` / ``prune`` write them, on small graphs, for the view
tests: seeded scores, connected top-k circuits, health messages and faithfulness records."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from subnetlab.io import save_tensors
from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph

GRAPH = Graph("gpt2", 3, 4, 4, 2)  # 3 layers x 4 heads: 302 edges, 18 nodes with the logits
KEPT = 24
WARNING = "off target: expected sparsity 0.011 at the end against the target 0.900"


def circuit_run(run_dir: Path, seed: int, kept: int = KEPT, graph: Graph = GRAPH, warning: str | None = None) -> Circuit:
    """A circuit run: graph.json (signed scores, the connected top ``kept``), metrics.json (health, f)."""
    gen = torch.Generator().manual_seed(seed)
    circuit = Circuit(graph, torch.randn(graph.num_edges, generator=gen), score_sign="signed").connected(kept)
    run_dir.mkdir(parents=True, exist_ok=True)
    circuit.save(run_dir / "graph.json")
    health = {"problems": ["off-target"] if warning else [], "messages": [warning] if warning else []}
    (run_dir / "metrics.json").write_text(json.dumps({"seed": seed, "target_sparsity": 0.9, "kept_edges": kept,
                                                      "faithfulness": {"logit_diff": 0.25 + 0.1 * seed, "kl": 0.5},
                                                      "health": health}))
    return circuit


def circuit_eval_run(run_dir: Path, scores_file: Path, counts: list[int], fs: list[float]) -> None:
    """A circuit-eval run: faithfulness.json (a curve at ``counts``), config.json naming the scores measured."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"command": "circuit-eval", "scores": str(scores_file)}))
    (run_dir / "faithfulness.json").write_text(json.dumps({
        "level": "edges", "metric": "logit_diff", "items": GRAPH.num_edges, "fractions": [c / GRAPH.num_edges for c in counts],
        "counts": counts, "faithfulness": {"logit_diff": fs}, "cpr": 0.61, "cmd": 0.42}))
    (run_dir / "metrics.json").write_text(json.dumps({"level": "edges", "cpr": 0.61, "cmd": 0.42}))


def prune_run(run_dir: Path, heads: torch.Tensor, mlps: torch.Tensor, seed: int) -> None:
    """A pruning run: subnetwork.safetensors (heads / mlps kept) and metrics.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    save_tensors(run_dir / "subnetwork.safetensors", {"heads": heads, "mlps": mlps},
                 {"kind": "structured", "seed": str(seed), "target_sparsity": "0.5"})
    (run_dir / "metrics.json").write_text(json.dumps({"seed": seed, "target_sparsity": 0.5}))


def touched_nodes(graph: Graph, kept: torch.Tensor) -> int:
    """Nodes with a kept edge in or out: writers, every owner of a reader read, the logits."""
    nodes: set[object] = set()
    for i in torch.nonzero(kept).flatten().tolist():
        w, r = graph.edges[i]
        nodes.add(w)
        nodes.update(graph.reader_owners[r] or ["logits"])
    return len(nodes)
