"""Edge-pruning jobs for ``subnetlab.executor``: one per (target edge sparsity, seed) on a circuit task.

Layout of a circuit sweep's directory DIR (what ``subnetlab circuit`` writes)::

    DIR/
      sweep.json                          the executor's record of the sweep
      graph.json                          the model's computation graph (writers, readers, edges)
      sparsity-0.950/seed-0/
        config.json                       everything to rerun it (written first)
        checkpoint.safetensors/.json      training state; a killed run resumes from it
        subnetwork.safetensors            the circuit: a Subnetwork of kind "edges"
        graph.json                        the circuit (``models.circuit``): each edge's log-alpha (score,
                                          signed) and in_graph
        circuit.png                       the circuit drawn: nodes by layer, kept edges, Q/K/V readers marked
        history.json                      target, expected sparsity, KL, lambdas over training
        metrics.json                      kept edges, sparsity, the circuit's metrics and faithfulness on the
                                          evaluation pairs, health (written last: marks the run finished)
      controls/<control>/sparsity-0.950/seed-0/   with a control: the same search as a control
                                          (``methods.controls``), a full run directory of its own
      metrics.json                        with controls or several seeds, per target: the found circuits'
                                          logit difference, faithfulness and density beside each control's, the
                                          verdict, and the circuits' stability over seeds (``runs.controls``)
      stability.md                        with several seeds: the stability as tables (``report.stability``)

Across processes (``torchrun``; ``subnetlab.distributed``) every rank runs every job, the mask training data
parallel; rank 0 alone writes the run directories and measures each circuit while the other ranks wait for it
(``executor.job.execute``'s barrier).

The circuit is measured as ``subnetlab circuit-eval`` measures one: removed
edges patched from each pair's corrupted prompt, every metric the task
measures, and ``f = (m(C) - m(empty)) / (m(full) - m(empty))`` with
``m(empty)`` the model on the corrupted prompts (MIB).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from subnetlab.distributed import launched_size, world
from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job
from subnetlab.intervene.edges import check_edge_family, check_trainable_edges
from subnetlab.io import write_json
from subnetlab.methods.controls import apply_control
from subnetlab.methods.edge_pruning.config import EdgePruneConfig, preset_config
from subnetlab.methods.edge_pruning.data import circuit_data
from subnetlab.methods.edge_pruning.train import prune_edges
from subnetlab.methods.model_fit import position_limit
from subnetlab.models.circuit import Circuit
from subnetlab.models.device_map import DeviceMap, refuse_offloaded
from subnetlab.models.graph import Graph
from subnetlab.progress import stage
from subnetlab.run_directory import absolute_inputs, check_distinct_outputs
from subnetlab.runs.health import judge
from subnetlab.runs.job_config import check_seeds, check_targets, require_positive
from subnetlab.runs.prune_setup import ModelAndTask, load_pruning_model, task_tokenizer
from subnetlab.runtime import resolve_device, resolve_dtype
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.circuits.pairs import CircuitTask

CIRCUIT_JOB = "subnetlab.runs.circuit:circuit_job"
SUBNETWORK_FILE = "subnetwork.safetensors"
GRAPH_FILE = "graph.json"
CIRCUIT_FIGURE = "circuit.png"


@dataclass(frozen=True)
class CircuitJobConfig(ModelAndTask):
    """``circuit_job``'s config: model and circuit task, the preset, the edge-pruning settings, the evaluation."""

    preset: str | None = None
    edge_prune: dict[str, Any] = field(default_factory=dict)
    eval_split: str = "eval"
    eval_limit: int | None = None
    init_from: str | None = None  # attribution scores (edges) to warm-start the log-alphas from

    def __post_init__(self) -> None:
        super().__post_init__()
        self.settings  # checks the edge-pruning settings
        require_positive("edge pruning", "eval_limit", self.eval_limit, allow_none=True,
                         counts=f"the number of {self.eval_split} pairs each circuit is measured on (not the training "
                                "pairs, which are all used)")
        if self.init_from is not None and not Path(self.init_from).is_file():
            raise SubnetlabError(f"{self.init_from}: no such file", setting="init_from")

    @cached_property
    def settings(self) -> EdgePruneConfig:
        return EdgePruneConfig.from_dict(self.edge_prune)


def run_dir_name(sparsity: float, seed: int) -> str:
    return f"sparsity-{sparsity:.3f}/seed-{seed}"


def load_circuit_task(job: ModelAndTask) -> tuple[Any, CircuitTask, Any]:
    """The model, its circuit task bound to the tokenizer (every pair checked), and the tokenizer."""
    task = job.task_spec.build()
    if not isinstance(task, CircuitTask):
        raise SubnetlabError(f"task {job.task} is not a circuit task (prompt pairs: circuit:ioi, circuit:greater-than, "
                             "circuit:arith:<op>, or your own file with a corrupted column)", setting="task")
    loaded = load_pruning_model(job.model, task, job.placement)
    check_edge_family(loaded.adapter)
    check_trainable_edges(loaded.adapter)  # Edge Pruning trains the masks
    tokenizer = task_tokenizer(loaded, task)
    task.bind(tokenizer)
    task.check_positions(position_limit(loaded.model), str(job.model))
    return loaded, task, tokenizer


def circuit_job(config: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Executor job: edge-prune one model to one target edge sparsity with one seed, then measure the circuit."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.faithfulness import circuit_faithfulness

    out_dir = Path(out_dir)
    job = CircuitJobConfig.from_dict(config)
    cfg = job.settings
    loaded, task, tokenizer = load_circuit_task(job)
    job.place(loaded)
    if next(loaded.model.parameters()).dtype != getattr(torch, cfg.dtype):
        loaded.model.to(getattr(torch, cfg.dtype))  # the frozen weights' dtype; masks and the loss stay float32
    loaded = apply_control(job.control, loaded, task, cfg.seed)  # methods.controls: the same search, nothing to find
    model, adapter = loaded.model, loaded.adapter
    data = circuit_data(task, tokenizer, "train")
    stage(f"edge pruning seed {cfg.seed} to {cfg.sparsity:.3f} of the edges removed ({cfg.total_steps} steps)")
    result = prune_edges(model, adapter, data, cfg, run_dir=out_dir, init_log_alpha_edges=warm_start(job, adapter))
    graph, kept = result.graph, result.selection.edges
    if not world().is_writer:  # across processes: the same circuit on every rank; rank 0 writes and measures it
        return {"target_sparsity": cfg.sparsity, "seed": cfg.seed, "edges": graph.num_edges,
                "kept_edges": int(kept.sum()), "steps": cfg.total_steps, "resumed_from": result.resumed_from}
    sub = write_circuit_files(out_dir, adapter, result, cfg, task=str(job.task), model=str(job.model))
    stage(f"seed {cfg.seed}: measuring the circuit ({int(kept.sum())} of {graph.num_edges} edges)")
    evaluate = edge_evaluator(model, adapter, graph, task, tokenizer, job.eval_split, limit=job.eval_limit,
                              batch_size=cfg.eval_batch_size,
                              ablation="zero" if cfg.ablation == "zero" else "corrupted")
    scores = evaluate(kept.bool())
    faithful = circuit_faithfulness(kept, evaluate, empty=evaluate.corrupted_run)
    final = result.history[-1] if result.history else {}
    metrics: dict[str, Any] = {
        "target_sparsity": cfg.sparsity, "seed": cfg.seed, "edges": graph.num_edges, "kept_edges": sub.count(),
        "sparsity": sub.sparsity, "selection": cfg.selection, "kept": sub.kept_names(),
        "undecided_masks": result.selection.undecided, "masks": result.selection.num_masks,
        "eval": {"split": job.eval_split, **scores}, "faithfulness": faithful,
        "eval_ablation": "zero" if cfg.ablation == "zero" else "corrupted",
        "steps": cfg.total_steps, "resumed_from": result.resumed_from, "train_seconds": round(result.seconds, 3),
        "final": final,
    }
    if result.repair is not None:
        metrics["repair"] = result.repair
    if job.control is not None:
        metrics["control"] = job.control
    metrics["health"] = circuit_health(result, graph, sub.count(), cfg.sparsity, evaluate.baseline("logit_diff"),
                                       cfg.selection)
    return metrics


def write_circuit_files(out_dir: Path, adapter: Any, result: Any, cfg: EdgePruneConfig, *, task: str,
                        model: str) -> Subnetwork:
    """A finished edge-pruning run's artefacts (the run-directory contract): ``subnetwork.safetensors``,
    ``graph.json`` (log-alphas and in_graph), ``history.json`` and ``circuit.png``; returns the subnetwork.
    Every writer of edge circuits calls this, the ``circuit`` command's jobs and the studies alike."""
    out_dir = Path(out_dir)
    graph, kept = result.graph, result.selection.edges
    sub = Subnetwork.from_edges(adapter, graph, kept, method="edge-pruning", seed=cfg.seed,
                                target_sparsity=cfg.sparsity, ablation=cfg.ablation,
                                extra={"task": task, "model": model, "selection": cfg.selection})
    sub.save(out_dir / SUBNETWORK_FILE)
    Circuit(graph, result.log_alpha_edges, kept, score_sign="signed").save(out_dir / GRAPH_FILE)
    write_json(out_dir / "history.json", result.history)
    _draw(graph, kept, out_dir / CIRCUIT_FIGURE, f"{task}: seed {cfg.seed}, target sparsity {cfg.sparsity:.3f}")
    return sub


def _draw(graph: Graph, kept: Any, path: Path, title: str) -> None:
    """``circuit.png`` beside the run's graph.json, before metrics.json marks the run finished (so a finished run
    always has its figure). Imported here: plotting's home is report/, a floor above (import-graph exception)."""
    from subnetlab.report.circuit_figure import draw_circuit

    draw_circuit(graph, kept.detach().cpu().numpy(), path,
                 title=f"{title}: {int((kept > 0.5).sum())} of {graph.num_edges} edges")


WARM_START_DIR = "warm-start"  # the attribution run a warm start scores the edges in, inside the sweep's directory
WARM_START_METHODS = ("eap", "eap-ig")


def check_warm_start(method: str | None, init_from: str | Path | None, device_map: DeviceMap | None = None) -> None:
    """A warm start scores the edges first (``method``), so it replaces a scores file given in ``init_from``; it
    scores them with the whole model on one device, so it does not go with a device map."""
    if method is None:
        return
    if device_map is not None:
        raise SubnetlabError(f"warm_start {method!r} scores the edges with the whole model on one device, which a "
                             "device map exists to avoid; score them where the model fits and give init_from",
                             setting="warm_start")
    if method not in WARM_START_METHODS:
        raise SubnetlabError(f"warm_start {method!r}: choose {' or '.join(WARM_START_METHODS)}", setting="warm_start")
    if init_from is not None:
        raise SubnetlabError(f"init_from {str(init_from)!r}: a warm start ({method}) computes the scores this file "
                             "would give; give one of the two", setting="init_from")


def warm_start(job: CircuitJobConfig, adapter: Any) -> Any:
    """Starting log-alphas from ``job.init_from``'s edge scores (``methods.attribution.warm_start``), or None.

    The file is read by the one reader of scores files (``models.circuit_files``); the command calls this before
    it writes anything, so a file that cannot warm-start this run is refused before any work."""
    if job.init_from is None:
        return None
    from subnetlab.methods.attribution.warm_start import warm_start_log_alphas
    from subnetlab.models.circuit_files import read_scores

    scores = read_scores(job.init_from, adapter, setting="init_from")
    if not scores.absolute:  # log-alphas: the mapping ranks by |score|, which would start the most-closed edges kept
        raise SubnetlabError(f"{job.init_from}: holds log-alphas, not attribution scores; a warm start maps attribution "
                             "scores (eap or eap-ig) to starting log-alphas", setting="init_from")
    mine = Graph.from_adapter(adapter, job.settings.embedding_nodes)
    graph = None if scores.circuit is None else scores.circuit.graph
    if graph is None or graph.shape() != mine.shape():
        hint = (" (these have a key/value reader per query head, EAP-IG's graph: score with kv_readers=kv)"
                if graph is not None and graph.ungrouped_kv else "")
        raise SubnetlabError(f"{job.init_from}: {scores.level} scores{'' if graph is None else f' of {graph.shape()}'}; "
                             f"a warm start needs edge scores of this run's graph {mine.shape()}{hint}",
                             setting="init_from")
    cfg = job.settings
    return warm_start_log_alphas(scores.circuit.scores, cfg.sparsity, cfg.init_log_alpha)


def circuit_health(result: Any, graph: Graph, kept: int, target: float,
                   baseline: Mapping[str, Any] | None = None, selection: str | None = None) -> dict[str, Any]:
    """The ``health`` entry of an edge circuit (``runs.health.judge``): units are edges; the gates are the edge
    (and node) masks; the objective is the KL over training; ``baseline`` the logit difference of the full model
    and the empty circuit its faithfulness divides by; ``selection`` the settings' (the off-target message names
    what it did)."""
    expected = result.history[-1].get("expected_sparsity") if result.history else None
    health = judge(kept=kept, maskable=graph.num_edges, undecided=result.selection.undecided,
                   gates=result.selection.num_masks, expected_sparsity=expected, target_sparsity=target,
                   objective=[h.get("kl") for h in result.history], baseline=baseline, selection=selection)
    return health.to_dict()


def circuit_sweep(base: Mapping[str, Any], out: Path, *, targets: Sequence[float], seeds: Sequence[int], preset: str,
                  overrides: Mapping[str, Any] | None = None, eval_split: str = "eval",
                  eval_limit: int | None = None, init_from: str | None = None) -> list[Job]:
    """One edge-pruning job per (target, seed); ``base`` holds the model and task keys of a job config."""
    if not seeds:
        raise SubnetlabError("seeds: at least one seed", setting="seeds")
    if not targets:
        raise SubnetlabError("sparsity: give at least one target", setting="sparsity")
    common = ModelAndTask.from_dict(absolute_inputs(dict(base)))
    jobs = []
    for target in targets:
        for seed in seeds:
            cfg = preset_config(preset, target, seed=seed, **dict(overrides or {}))
            job = CircuitJobConfig(**common.to_dict(), preset=preset, edge_prune=cfg.to_dict(), eval_split=eval_split,
                                   eval_limit=eval_limit,
                                   init_from=None if init_from is None else str(Path(init_from).resolve()))
            jobs.append(Job(CIRCUIT_JOB, job.to_dict(), out / run_dir_name(target, seed)))
    return jobs


def plan_circuit(model: str, task: str, out: Path, *, targets: Sequence[float], seeds: Sequence[int], preset: str,
                 overrides: Mapping[str, Any] | None = None, task_options: Mapping[str, Any] | None = None,
                 split: str = "eval", limit: int | None = None, init_from: str | None = None,
                 device: str = "auto", controls: Sequence[str] = (),
                 device_map: DeviceMap | None = None) -> tuple[list[Job], Any]:
    """The checked jobs of one edge-pruning sweep and the model's adapter, for ``subnetlab circuit`` and
    ``sl.circuit`` alike; nothing is written. Refused here, before any job: the device, every job's typed
    settings, the model (a missing directory, its family), every prompt pair, the evaluation split, and (your
    own pairs) evaluation pairs that were training rows of the run that fine-tuned the model (``runs.splits``)."""
    from subnetlab.methods.controls import SHUFFLED_LABELS, check_shufflable
    from subnetlab.runs.controls import control_jobs
    from subnetlab.runs.splits import check_held_out, earlier_runs, held_out_options

    targets, seeds = check_targets(targets), check_seeds(seeds)  # types, ranges and bounds: before anything else
    resolve_device(device)
    earlier = earlier_runs(model)
    options = held_out_options(model, task, dict(task_options or {}))  # your own pairs: the fine-tuning's split
    base = {"model": model, "task": task, "task_options": options, "device": device}
    if device_map is not None:
        base["device_map"] = device_map.to_dict()
        check_distinct_outputs({"out": out, "offload_folder": device_map.offload_folder})
    jobs = circuit_sweep(base, out, targets=targets, seeds=seeds, preset=preset, overrides=overrides,
                         eval_split=split, eval_limit=limit, init_from=init_from)  # builds (so checks) every config
    first = CircuitJobConfig.from_dict(jobs[0].config)
    check_batch_across_processes(first.settings.batch_size)
    resolve_dtype(first.settings.dtype, resolve_device(device))  # float16 on the CPU: refused
    loaded, built, _ = load_circuit_task(first)  # the model, its family and every prompt pair
    refuse_offloaded(loaded.model, "edge interventions")  # a device map may place layers, not offload them
    built.examples(split)
    check_held_out(built, earlier)
    warm_start(first, loaded.adapter)  # the warm start's file: read and checked before anything is written
    if SHUFFLED_LABELS in controls:
        check_shufflable(built)
    return jobs + control_jobs(jobs, out, controls, CIRCUIT_JOB), loaded.adapter


def check_batch_across_processes(batch_size: int) -> None:
    """Launched as several processes (``torchrun``), each rank takes a slice of every training batch: a batch of
    fewer pairs than processes is refused before any rank waits for another."""
    size = launched_size()
    if size > batch_size:
        raise SubnetlabError(f"batch_size {batch_size} across {size} processes: each process takes a slice of every "
                             "batch, so the batch needs at least one pair per process", setting="batch_size")


def write_sweep_graph(adapter: Any, out: Path, embedding_nodes: int | None) -> Graph:
    """``DIR/graph.json``: the model's graph, for other tools (every run's own copy adds scores and in_graph)."""
    graph = Graph.from_adapter(adapter, embedding_nodes)
    graph.save(out / GRAPH_FILE)
    return graph


__all__ = ["CIRCUIT_FIGURE", "CIRCUIT_JOB", "WARM_START_DIR", "WARM_START_METHODS", "CircuitJobConfig",
           "check_batch_across_processes",
           "check_warm_start", "circuit_health", "circuit_job", "circuit_sweep", "load_circuit_task", "plan_circuit",
           "run_dir_name", "warm_start", "write_circuit_files", "write_sweep_graph"]
