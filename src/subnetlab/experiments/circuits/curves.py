"""Faithfulness curves (MIB's CPR / CMD) of the circuit methods on the trained induction model.

Every curve is measured on the circuit task's ``eval`` pairs with removed
edges or nodes patched from the corrupted prompt, and normalised by the same
``m(empty)`` (the model on the corrupted prompts, ``Evaluator.corrupted_run``),
so edge and node circuits share one scale (``analysis.faithfulness``):

* ``random-edges`` / ``random-nodes``: circuits of the top-k edges (nodes) by
  scores drawn uniformly from the study's seed, at every MIB size; the floor a
  method has to beat;
* ``node-pruning``: Heuristic Core's hard-concrete pruning of heads and MLPs
  (``methods.head_pruning``, KL to the full model on the clean prompts, mean
  ablation while training), its gates' log-alphas ranking the nodes;
* ``edge-pruning``: Edge Pruning's hard-concrete masks over the graph's edges
  (``methods.edge_pruning``) at each target sparsity: each circuit's
  faithfulness, its edges, and whether it keeps the previous-token head's
  edges into the induction heads' keys; the curve ranks the edges by the
  log-alphas of one of these runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from subnetlab.experiments.circuits.settings import CircuitsSettings
from subnetlab.io import read_json, write_json
from subnetlab.progress import stage


def _random_scores(items: int, seed: int) -> torch.Tensor:
    return torch.rand(items, generator=torch.Generator().manual_seed(int(seed)))


def random_curves(model, tokenizer, task, settings: CircuitsSettings) -> dict[str, Any]:
    """Curves of random edge circuits and random node circuits at MIB's sizes."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator, node_evaluator
    from subnetlab.analysis.faithfulness import curve_from_scores
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.graph import Graph

    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    batch = int(settings.circuit["batch_size"])
    seed = int(settings.seed)
    edges = edge_evaluator(model, adapter, graph, task, tokenizer, "eval", batch_size=batch)
    nodes = node_evaluator(model, adapter, task, tokenizer, "eval", batch_size=batch)
    n_nodes = adapter.num_layers * (adapter.num_heads + 1)
    return {"random-edges": curve_from_scores(_random_scores(graph.num_edges, seed + 11), edges).to_dict(),
            "random-nodes": curve_from_scores(_random_scores(n_nodes, seed + 12), nodes,
                                              empty=edges.corrupted_run).to_dict()}


def node_pruning_curve(model, tokenizer, task, settings: CircuitsSettings, empty: dict[str, float]) -> dict[str, Any]:
    """Heuristic Core's pruning of heads and MLPs on the clean training prompts (its ``demo`` recipe, mean
    ablation) to ``node_pruning.sparsity``; the final log-alphas rank the nodes for the curve."""
    from subnetlab.analysis.circuit_evaluation import node_evaluator, node_vector
    from subnetlab.analysis.faithfulness import curve_from_scores
    from subnetlab.methods.head_pruning.ablation import mean_activations
    from subnetlab.methods.head_pruning.config import preset_config
    from subnetlab.methods.head_pruning.train import prune
    from subnetlab.methods.l0.data import PruningData
    from subnetlab.models.adapters import get_adapter

    np_settings = settings.node_pruning
    adapter = get_adapter(model)
    data = PruningData.from_task(task, tokenizer, "train", max_length=task.options["length"])
    config = preset_config("demo", float(np_settings["sparsity"]), seed=int(settings.seed),
                           **dict(np_settings.get("overrides") or {}))
    means = mean_activations(model, adapter, data, config.means_examples)
    result = prune(model, adapter, data, config, ablation=means)
    scores = node_vector(result.gates.log_alpha_heads.detach().cpu(), result.gates.log_alpha_mlps.detach().cpu())
    evaluate = node_evaluator(model, adapter, task, tokenizer, "eval", batch_size=int(settings.circuit["batch_size"]))
    # log-alphas are signed (a pruned gate is very negative): rank by value, not by MIB's absolute value
    curve = curve_from_scores(scores, evaluate, empty=empty, absolute=False).to_dict()
    curve["log_alphas"] = scores.tolist()
    curve["target_sparsity"] = float(np_settings["sparsity"])
    return curve


def edge_pruning_runs(model, tokenizer, task, key_edges: list[str], ep: dict[str, Any], seed: int, batch_size: int,
                      empty: dict[str, float], out: Path, preset: str = "demo", model_name: str = "") -> dict[str, Any]:
    """Edge Pruning at each target sparsity (corrupted-prompt ablation, its ``preset`` recipe): each circuit's
    faithfulness, its kept edges, whether it keeps the mechanism's key edges; and the MIB curve of the
    log-alphas of the run at ``curve_sparsity`` (signed: a pruned edge's log-alpha is very negative).

    Each run's directory ``out/edge-pruning/sparsity-S`` holds what a ``subnetlab circuit`` run holds
    (``runs.circuit.write_circuit_files``: subnetwork.safetensors, graph.json, circuit.png, history.json) with
    its ``config.json`` and ``metrics.json`` (faithfulness and health), so ``subnetlab results`` reads it."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.faithfulness import circuit_faithfulness, curve_from_scores
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.data import circuit_data
    from subnetlab.methods.edge_pruning.train import prune_edges
    from subnetlab.models.adapters import get_adapter
    from subnetlab.runs.circuit import circuit_health, write_circuit_files

    adapter = get_adapter(model)
    data = circuit_data(task, tokenizer, "train")
    runs, log_alphas = [], {}
    evaluate = None
    for sparsity in ep["sparsities"]:
        stage(f"edge pruning to {sparsity:.0%} of the edges removed")
        config = preset_config(preset, float(sparsity), seed=seed, **dict(ep.get("overrides") or {}))
        run_dir = out / "edge-pruning" / f"sparsity-{sparsity}"
        result = prune_edges(model, adapter, data, config, run_dir=run_dir)
        graph, mask = result.graph, result.selection.edges
        if evaluate is None:
            evaluate = edge_evaluator(model, adapter, graph, task, tokenizer, "eval", batch_size=batch_size)
        kept = [graph.edge_names[i] for i in mask.nonzero().flatten().tolist()]
        run = {"sparsity": float(sparsity), "kept": len(kept), "undecided": result.selection.undecided,
               "faithfulness": circuit_faithfulness(mask, evaluate, empty),
               "key_edges": {e: e in kept for e in key_edges},
               "edges": kept if len(kept) <= int(ep["list_up_to"]) else None,
               "circuit": str((run_dir / "graph.json").relative_to(out))}
        runs.append(run)
        log_alphas[float(sparsity)] = result.log_alpha_edges
        sub = write_circuit_files(run_dir, adapter, result, config, task=task.name, model=model_name)
        write_json(run_dir / "config.json", {"command": "circuit", "method": "edge-pruning", "model": model_name,
                                             "task": task.name, "task_options": dict(task.options),
                                             "preset": preset, "edge_prune": config.to_dict(), "eval_split": "eval"})
        write_json(run_dir / "metrics.json", {
            "target_sparsity": float(sparsity), "seed": seed, "edges": graph.num_edges, "kept_edges": len(kept),
            "sparsity": sub.sparsity,
            "undecided_masks": result.selection.undecided, "masks": result.selection.num_masks,
            "eval": {"split": "eval", **evaluate(mask.bool())}, "faithfulness": run["faithfulness"],
            "health": circuit_health(result, graph, len(kept), float(sparsity), selection=config.selection)})
    chosen = float(ep["curve_sparsity"])
    curve = curve_from_scores(log_alphas[chosen], evaluate, empty=empty, absolute=False).to_dict()
    curve["from_sparsity"] = chosen
    return {"curve": curve, "runs": runs}


def faithfulness_curves(model, tokenizer, task, scores: dict[str, Any], settings: CircuitsSettings,
                        out: Path) -> dict[str, Any]:
    """Every method's curve (``curves.json``); methods the settings turn off are listed under ``missing``."""
    path = out / "curves.json"
    if path.is_file():
        return read_json(path)
    stage("faithfulness curves: random edge and node circuits")
    result: dict[str, Any] = {"curves": random_curves(model, tokenizer, task, settings), "missing": {}}
    empty = result["curves"]["random-edges"]["empty"]  # the model on the corrupted prompts: MIB's m(empty)
    if settings.node_pruning:
        stage("node-level pruning (Heuristic Core) of heads and MLPs")
        result["curves"]["node-pruning"] = node_pruning_curve(model, tokenizer, task, settings, empty)
    else:
        result["missing"]["node-pruning"] = "node_pruning is off in these settings"
    if not settings.edge_pruning:
        result["missing"]["edge-pruning"] = "edge_pruning is off in these settings"
    else:
        from subnetlab.experiments.circuits.steps import mechanism_edges

        runs = edge_pruning_runs(model, tokenizer, task, mechanism_edges(scores)["k"], settings.edge_pruning,
                                 int(settings.seed), int(settings.circuit["batch_size"]), empty, out,
                                 model_name=str(out / "model"))
        result["curves"]["edge-pruning"] = runs["curve"]
        result["key_edges_kept"] = runs["runs"]
    write_json(path, result)
    return result


__all__ = ["faithfulness_curves", "random_curves"]
