"""``subnetlab circuit-eval`` as a run: the faithfulness curve (MIB's CPR / CMD) of a method's scores or circuits.

What it reads (the level, edges or nodes, follows from the file):

* scores: a graph file (``graph.json``, a ``models.circuit.Circuit``) with
  a ``score`` on every edge; a ``.safetensors`` file with ``edges`` ``[edges]``
  (or an edge-pruning checkpoint's ``log_alpha_edges``), its graph's shape in
  its metadata (files without it: the model's graph with as many edges);
  or node scores, ``heads`` ``[layers, heads]`` and ``mlps`` ``[layers]`` (or a
  Heuristic Core run's ``gates.safetensors``: ``log_alpha_heads`` /
  ``log_alpha_mlps``). The curve keeps the top-k items at each size
  (``analysis.faithfulness``).
* circuits (one or more files): graph files with ``in_graph`` on
  every edge, edge subnetwork files (kind ``edges``), or structured subnetwork
  files (heads and MLPs). One circuit
  gets its faithfulness; several get a curve over their own sizes.

Removed items are patched from the corrupted prompt of each pair (or zeroed).
Node curves are normalised by the model on the corrupted prompts, MIB's
``m(empty)`` at every level, so node and edge runs compare on one scale
(``analysis.circuit_evaluation``). The run writes ``config.json`` first (once
its inputs are read and checked), then ``faithfulness.json`` (the curve: sizes,
kept items, every metric's values and ``f``, CPR / CMD of each), the caller's
figure, and ``metrics.json`` last.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from subnetlab.analysis.faithfulness import CIRCUIT_SIZES
from subnetlab.errors import SubnetlabError
from subnetlab.io import write_json
from subnetlab.run_directory import check_config
from subnetlab.runs.job_config import JobConfig, require_positive
from subnetlab.tasks.circuits.metrics import METRICS, TASK_METRICS
from subnetlab.tasks.spec import TaskSpec

ABLATIONS = ("corrupted", "zero")
SELECTIONS = ("topn", "greedy")  # how a curve's circuits are taken from scores (``models.circuit.Circuit``)


@dataclass(frozen=True)
class CircuitEvalJobConfig(JobConfig):
    """A model, a circuit task, and either a scores file or circuit files."""

    command: ClassVar[str] = "circuit-eval"
    model: str
    task: TaskSpec
    scores: str | None = None
    circuits: tuple[str, ...] = ()
    split: str = "eval"
    metric: str = "logit_diff"
    ablation: str = "corrupted"
    sizes: tuple[float, ...] = CIRCUIT_SIZES
    batch_size: int = 32
    limit: int | None = None
    device: str = "auto"
    selection: str = "topn"

    def __post_init__(self) -> None:
        if (self.scores is None) == (not self.circuits):
            raise SubnetlabError("give either a scores file or circuit files (one of the two)", setting="scores")
        for path in ([self.scores] if self.scores else []) + list(self.circuits):
            if not Path(path).is_file():
                raise SubnetlabError(f"{path}: no such file", setting="scores" if path == self.scores else "circuits")
        if self.metric not in METRICS + TASK_METRICS:
            raise SubnetlabError(f"metric {self.metric!r}: choose one of {', '.join(METRICS + TASK_METRICS)}",
                                 setting="metric")
        if self.ablation not in ABLATIONS:
            raise SubnetlabError(f"ablation {self.ablation!r}: choose one of {', '.join(ABLATIONS)}", setting="ablation")
        if len(self.sizes) < 2 or any(not 0.0 <= s <= 1.0 for s in self.sizes):
            raise SubnetlabError(f"sizes {list(self.sizes)}: at least two fractions of the items in [0, 1]",
                                 setting="sizes")
        if self.selection not in SELECTIONS:
            raise SubnetlabError(f"selection {self.selection!r}: choose one of {', '.join(SELECTIONS)}",
                                 setting="selection")
        if self.selection != "topn" and self.scores is None:
            raise SubnetlabError(f"{self.selection} selection takes circuits from scores; circuit files are measured "
                                 "as they are", setting="selection")
        require_positive("circuit evaluation", "batch_size", self.batch_size)
        require_positive("circuit evaluation", "limit", self.limit, allow_none=True)


# ------------------------------------------------------------------ reading scores and circuits
def _graph_file(path: str, adapter: Any, setting: str) -> Any:
    """The ``Circuit`` of a ``graph.json``, its graph checked against the model."""
    from subnetlab.models.circuit import Circuit, check_model_graph

    circuit = Circuit.load(path, setting)
    check_model_graph(circuit.graph, adapter, path, setting)
    return circuit


def _edge_scores(path: str, adapter: Any, tensors: dict[str, Tensor]) -> Any:
    """The ``Circuit`` of an edge scores file: attribution scores (``edges``, ranked by magnitude unless the file
    says otherwise) or an edge-pruning checkpoint's log-alphas (``log_alpha_edges``, ranked by value)."""
    from subnetlab.io import load_tensor_metadata
    from subnetlab.models.circuit import Circuit

    metadata = load_tensor_metadata(path)
    if "edges" in tensors:
        return Circuit.from_tensor(tensors["edges"], adapter, metadata, path)
    try:  # the checkpoint's state records its graph's shape
        shape = json.loads(metadata.get("state") or "{}").get("graph")
    except (json.JSONDecodeError, AttributeError):
        shape = None
    recorded = {} if not isinstance(shape, dict) else {"graph_shape": json.dumps(shape)}
    return Circuit.from_tensor(tensors["log_alpha_edges"], adapter, recorded, path, score_sign="signed")


def read_scores(path: str, adapter: Any) -> tuple[str, Tensor, Any, bool]:
    """``(level, scores, graph or None, absolute)`` from a scores file (module doc).

    ``absolute``: attribution scores rank by magnitude (MIB's ``absolute=True``: a large negative effect is still
    an important edge); log-alphas rank by their signed value, since a very negative log-alpha is a gate training
    closed, the least important item, not the most. Edge files record theirs (``models.circuit``)."""
    from subnetlab.analysis.circuit_evaluation import node_vector
    from subnetlab.io import load_tensors

    if path.endswith(".json"):
        circuit = _graph_file(path, adapter, "scores")
        if circuit.scores is None:
            raise SubnetlabError(f"{path}: edge 0 has no 'score' (every edge needs one)", setting="scores")
        return "edges", circuit.scores, circuit.graph, circuit.absolute
    tensors = load_tensors(path)
    if "edges" in tensors or "log_alpha_edges" in tensors:
        circuit = _edge_scores(path, adapter, tensors)
        return "edges", circuit.scores, circuit.graph, circuit.absolute
    for heads, mlps in (("heads", "mlps"), ("log_alpha_heads", "log_alpha_mlps")):
        if heads in tensors and mlps in tensors:
            L, H = adapter.num_layers, adapter.num_heads
            if tuple(tensors[heads].shape) != (L, H) or tuple(tensors[mlps].shape) != (L,):
                raise SubnetlabError(f"{path}: node scores {tuple(tensors[heads].shape)} and "
                                     f"{tuple(tensors[mlps].shape)}, the model has [{L}, {H}] heads and [{L}] MLPs",
                                     setting="scores")
            return "nodes", node_vector(tensors[heads].float(), tensors[mlps].float()), None, not heads.startswith("log_alpha")
    raise SubnetlabError(f"{path}: no scores (expected a tensor 'edges', or 'heads' and 'mlps'; it holds "
                         f"{', '.join(sorted(tensors)) or 'nothing'})", setting="scores")


def read_circuit(path: str, adapter: Any) -> tuple[str, Tensor, Any]:
    """``(level, keep, graph or None)`` from a circuit file (module doc)."""
    from subnetlab.analysis.circuit_evaluation import node_vector
    from subnetlab.subnetwork import Subnetwork

    if path.endswith(".json"):
        circuit = _graph_file(path, adapter, "circuits")
        if circuit.in_graph is None:
            raise SubnetlabError(f"{path}: edge 0 has no 'in_graph' (every edge needs one)", setting="circuits")
        return "edges", circuit.in_graph, circuit.graph
    sub = Subnetwork.load(path, adapter)
    if sub.kind == "edges":  # an edge circuit (subnetlab circuit's subnetwork.safetensors)
        return "edges", sub.edges.bool(), sub.graph()
    if sub.kind != "structured":
        raise SubnetlabError(f"{path}: a weight-level subnetwork has no heads, MLPs or edges to measure as a circuit",
                             setting="circuits")
    return "nodes", node_vector(sub.heads, sub.mlps).bool(), None


# ------------------------------------------------------------------------------------ the run
def circuit_eval_run(job: CircuitEvalJobConfig, out: Path,
                     figure: Callable[[dict[str, Any], Path], Any] | None = None) -> dict[str, Any]:
    """Measure ``job``'s circuits and write its run directory; returns the curve as plain data.

    ``figure(result, out)`` draws what the caller wants drawn, before ``metrics.json`` marks the run done.
    """
    from subnetlab.analysis.circuit_evaluation import edge_evaluator, node_evaluator
    from subnetlab.analysis.faithfulness import circuit_faithfulness, curve_from_masks, curve_from_scores
    from subnetlab.models import load_model
    from subnetlab.progress import stage
    from subnetlab.runtime import describe_runtime, resolve_device, runtime_record
    from subnetlab.tasks.circuits.pairs import CircuitTask

    device = resolve_device(job.device)
    stage(describe_runtime(device))
    task = job.task.build()
    if not isinstance(task, CircuitTask):
        raise SubnetlabError(f"task {job.task.name} is not a circuit task (prompt pairs: circuit:ioi, "
                             "circuit:greater-than, circuit:arith:<op>, or your own file with a corrupted column)",
                             setting="task")
    loaded = load_model(job.model, head="causal-lm")
    tokenizer = task.tokenizer or loaded.tokenizer
    if tokenizer is None:
        raise SubnetlabError(f"model {job.model} has no tokenizer to read the prompts with", setting="model")
    task.bind(tokenizer)  # every pair checked before any work
    if job.metric not in task.metric_names:
        raise SubnetlabError(f"metric {job.metric!r}: task {task.name} measures {', '.join(task.metric_names)}",
                             setting="metric")
    task.examples(job.split)
    if job.scores is not None:
        level, scores, graph, absolute = read_scores(job.scores, loaded.adapter)
        if job.selection == "greedy" and level != "edges":
            raise SubnetlabError(f"{job.scores}: node scores; greedy selection follows edges from the logits",
                                 setting="selection")
        inputs = [(level, graph)]
    else:
        read = [read_circuit(path, loaded.adapter) for path in job.circuits]
        inputs = [(level, graph) for level, _, graph in read]
        level, graph = inputs[0]
    shapes = {(lv, None if g is None else json.dumps(g.shape(), sort_keys=True)) for lv, g in inputs}
    if len(shapes) > 1:
        raise SubnetlabError("the circuits mix levels or graphs (edges of two graphs, or edges and nodes); give one kind",
                             setting="circuits")
    config = {**job.record(task=task.options), **runtime_record(device), "level": level}
    check_config(out, config, "circuit evaluation")  # a finished run of other settings is never overwritten
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", config)
    model = loaded.model.to(device).eval()
    stage(f"{level} circuits on {len(task.examples(job.split))} pairs of {job.split}"
          f"{f' (first {job.limit})' if job.limit else ''}: metric {job.metric}, ablation {job.ablation}")
    if level == "edges":
        evaluate = edge_evaluator(model, loaded.adapter, graph, task, tokenizer, job.split, batch_size=job.batch_size,
                                  limit=job.limit, ablation=job.ablation)  # type: ignore[arg-type]
    else:
        evaluate = node_evaluator(model, loaded.adapter, task, tokenizer, job.split, batch_size=job.batch_size,
                                  limit=job.limit, ablation=job.ablation)  # type: ignore[arg-type]
    empty = evaluate.corrupted_run
    if job.scores is not None:
        select = None
        if job.selection == "greedy":
            from subnetlab.models.circuit import Circuit

            ranked = Circuit(graph, scores, score_sign="absolute" if absolute else "signed")
            select = lambda k: ranked.greedy(k).kept()  # noqa: E731
        result = curve_from_scores(scores, evaluate, metric=job.metric, sizes=job.sizes, absolute=absolute,
                                   empty=empty, select=select).to_dict()
    elif len(read) > 1:
        result = curve_from_masks([keep for _, keep, _ in read], evaluate, metric=job.metric, empty=empty).to_dict()
    else:
        keep = read[0][1]
        f = circuit_faithfulness(keep, evaluate, empty)
        result = {"metric": job.metric, "items": keep.numel(), "kept": int(keep.sum()), "faithfulness": f}
    result = {"level": level, "ablation": job.ablation, "split": job.split, "pairs": evaluate.count, **result}
    if job.scores is not None:
        result["selection"] = job.selection
    write_json(out / "faithfulness.json", result)
    if figure is not None:
        figure(result, out)
    summary = {k: result[k] for k in ("level", "metric", "items", "pairs") if k in result}
    summary.update({k: result[k] for k in ("cpr", "cmd", "kept") if k in result})
    if "areas" in result:
        summary["areas"] = result["areas"]
    else:
        summary["faithfulness"] = result["faithfulness"]
    write_json(out / "metrics.json", summary)
    return result


__all__ = ["CircuitEvalJobConfig", "circuit_eval_run", "read_circuit", "read_scores"]
