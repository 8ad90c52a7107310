"""Search controls of the induction study's edge pruning: does the found circuit compute the task, or would the
same search fit as good a circuit where there is nothing to find?

At ``edge_pruning.curve_sparsity`` the study's edge-pruning run (seed ``seed``) is repeated with the other seeds
of ``search_controls.seeds``, and each control of ``search_controls.controls`` (``methods.controls``:
``random-weights``, the model re-initialised by its own initialiser; ``shuffled-labels``, the answers moved
across the prompt pairs) runs the same search with every seed. Each run is a circuit run directory under
``out/controls/<kind>/seed-S`` (the real seed's is ``out/edge-pruning/sparsity-S``); ``out/controls/metrics.json``
compares them (``runs.controls``: logit difference, faithfulness and density over seeds, the verdict, the real
circuits' stability).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from subnetlab.experiments.circuits.settings import CircuitsSettings
from subnetlab.io import read_json, write_json
from subnetlab.progress import stage

REAL = "real"


def control_run(model: Any, tokenizer: Any, settings: CircuitsSettings, control: str | None, seed: int,
                run_dir: Path, model_name: str) -> dict[str, Any]:
    """One edge-pruning run at the curve's sparsity on a fresh circuit task (``control`` applied to a copy of the
    model's handle and to that task); its metrics as a ``circuit`` run writes them (cached in ``run_dir``)."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.faithfulness import circuit_faithfulness
    from subnetlab.experiments.circuits.steps import circuit_task
    from subnetlab.methods.controls import apply_control
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.data import circuit_data
    from subnetlab.methods.edge_pruning.train import prune_edges
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.loading import LoadedModel
    from subnetlab.runs.circuit import circuit_health, write_circuit_files

    if (run_dir / "metrics.json").is_file():
        return read_json(run_dir / "metrics.json")
    ep = settings.edge_pruning or {}
    sparsity = float(ep["curve_sparsity"])
    task = circuit_task(settings).bind(tokenizer)
    loaded = apply_control(control, LoadedModel(model, tokenizer, get_adapter(model), model_name), task, seed)
    model, adapter = loaded.model, loaded.adapter
    config = preset_config("demo", sparsity, seed=seed, **dict(ep.get("overrides") or {}))
    result = prune_edges(model, adapter, circuit_data(task, tokenizer, "train"), config, run_dir=run_dir)
    graph, kept = result.graph, result.selection.edges
    sub = write_circuit_files(run_dir, adapter, result, config, task=task.name, model=model_name)
    evaluate = edge_evaluator(model, adapter, graph, task, tokenizer, "eval",
                              batch_size=int(settings.circuit["batch_size"]))
    write_json(run_dir / "config.json", {"command": "circuit", "method": "edge-pruning", "model": model_name,
                                         "task": task.name, "task_options": dict(task.options), "preset": "demo",
                                         "edge_prune": config.to_dict(), "eval_split": "eval",
                                         **({} if control is None else {"control": control})})
    metrics = {"target_sparsity": sparsity, "seed": seed, "edges": graph.num_edges, "kept_edges": sub.count(),
               "sparsity": sub.sparsity, "undecided_masks": result.selection.undecided,
               "masks": result.selection.num_masks, "eval": {"split": "eval", **evaluate(kept.bool())},
               "faithfulness": circuit_faithfulness(kept, evaluate, empty=evaluate.corrupted_run),
               **({} if control is None else {"control": control}),
               "health": circuit_health(result, graph, sub.count(), sparsity, evaluate.baseline("logit_diff"),
                                        config.selection)}
    write_json(run_dir / "metrics.json", metrics)
    return metrics


def search_controls(model: Any, tokenizer: Any, settings: CircuitsSettings, out: Path) -> dict[str, Any] | None:
    """The comparison of the real edge-pruning circuits with the controls' (``out/controls/metrics.json``), or None
    when the settings ask for no controls."""
    from subnetlab.runs.controls import circuit_masks, circuit_measure, write_comparison

    sc, ep = settings.search_controls, settings.edge_pruning or {}
    if not sc:
        return None
    path = out / "controls" / "metrics.json"
    if path.is_file():
        return read_json(path)
    seeds, controls = [int(s) for s in sc["seeds"]], list(sc.get("controls") or [])
    own = out / "edge-pruning" / f"sparsity-{ep['curve_sparsity']}"
    stage(f"search controls: edge pruning at {float(ep['curve_sparsity']):.0%} with seeds "
          f"{', '.join(map(str, seeds))} on the real model and as {', '.join(controls)}")
    runs = []
    for kind in [REAL, *controls]:
        for seed in seeds:
            run_dir = own if kind == REAL and seed == int(settings.seed) else out / "controls" / kind / f"seed-{seed}"
            metrics = control_run(model, tokenizer, settings, None if kind == REAL else kind, seed, run_dir,
                                  str(out / "model"))
            runs.append(SimpleNamespace(metrics=metrics, out_dir=run_dir, name=str(run_dir.relative_to(out))))
    write_comparison(out / "controls", runs, "circuit", controls=controls, measure=circuit_measure,
                     score_name="logit_diff", masks=circuit_masks)
    return read_json(path)


__all__ = ["REAL", "control_run", "search_controls"]
