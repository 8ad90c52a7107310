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

Removed items are patched from the corrupted prompt of each pair, replaced by
their mean over the clean prompts measured on, or zeroed (``ablation``; every
result names it, with the positions, the selection and the ranking).
Node curves are normalised by the model on the corrupted prompts, MIB's
``m(empty)`` at every level, so node and edge runs compare on one scale
(``analysis.circuit_evaluation``). The run writes ``config.json`` first (once
its inputs are read and checked), then ``faithfulness.json`` (the curve: sizes,
kept items, every metric's values and ``f``, CPR / CMD of each, the span of
sizes they cover, ``analysis.faithfulness.span``), the caller's figure, and
``metrics.json`` last, with ``health`` (``runs.health``: a degenerate
baseline, the full model and the empty circuit too close to normalise by).

The nulls, each beside the circuit's own figures (``analysis.random_circuits``):
``random_circuits`` random circuits of each size drawn by the method's own
selection rule (``random_null``: percentile, empirical p-value, the random mean
curve's CPR / CMD); ``permute_pairs``: the same circuits with clean and
corrupted prompts re-paired at random within each token length
(``CircuitTask.repairing``); ``ablations``: the same circuits under each
ablation, side by side (``headline``, ``ablation_range``).

On your own prompt pairs, the pairs measured on are never the training rows of
the run that fine-tuned the model (``runs.splits``): its split settings are
taken where not given, and a split that would measure on its training rows is
refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch import Tensor

from subnetlab.analysis.faithfulness import CIRCUIT_SIZES
from subnetlab.errors import SubnetlabError, check_distinct_names
from subnetlab.io import check_input_file, write_json
from subnetlab.run_directory import check_config
from subnetlab.runs.health import judge
from subnetlab.runs.job_config import JobConfig, require_positive
from subnetlab.runs.splits import check_held_out, earlier_runs, inherit_split_settings
from subnetlab.tasks.circuits.metrics import METRICS, TASK_METRICS
from subnetlab.tasks.spec import TaskSpec

ABLATIONS = ("corrupted", "mean", "zero")  # mean: each writer's mean output over the clean prompts measured on
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
    definition: str = "subnetlab"  # "mib": CPR / CMD as MIB's circuit track computes them (analysis.mib_faithfulness)
    mib_export: str | None = None  # also write the scores / circuit as an EAP-IG graph file (.json or .pt)
    mib_submission: str | None = None  # also write the scores into this MIB submission folder and check it
    selection: str = "topn"
    bootstrap: int | None = None  # MIB: resamples of a percentile interval of CPR and CMD over the pairs
    bootstrap_seed: int = 0
    random_circuits: int = 0  # random circuits of each size, drawn by the method's selection rule (0: none)
    random_seed: int = 0
    permute_pairs: bool = False  # also measure with clean and corrupted prompts re-paired at random
    permute_seed: int = 0
    ablations: tuple[str, ...] = ()  # also measure under each of these ablations, side by side

    def __post_init__(self) -> None:
        from subnetlab.analysis.mib_faithfulness import DEFINITIONS
        from subnetlab.analysis.random_circuits import check_draws
        from subnetlab.analysis.stability import check_resamples

        check_draws(self.random_circuits)
        for name in ("random_seed", "permute_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SubnetlabError(f"{name} {value!r}: a seed is a whole number of at least 0", setting=name)
        if not isinstance(self.permute_pairs, bool):
            raise SubnetlabError(f"permute_pairs {self.permute_pairs!r}: true or false", setting="permute_pairs")
        if self.ablations:
            check_distinct_names("ablations", self.ablations)
            for name in self.ablations:
                if name not in ABLATIONS:
                    raise SubnetlabError(f"ablations: {name!r} is not one of {', '.join(ABLATIONS)}",
                                         setting="ablations")

        if self.bootstrap is not None:
            check_resamples(self.bootstrap)
            if self.definition != "mib":
                raise SubnetlabError("a bootstrap interval over the pairs is computed for MIB's CPR and CMD; measure "
                                     "with MIB's definition", setting="bootstrap")

        if self.definition not in DEFINITIONS:
            raise SubnetlabError(f"definition {self.definition!r}: choose one of {', '.join(DEFINITIONS)}",
                                 setting="definition")
        if self.definition == "mib" and self.scores is None:
            raise SubnetlabError("MIB's CPR and CMD are defined on edge scores; give a scores file, not circuits",
                                 setting="definition")
        if self.mib_export is not None and not self.mib_export.endswith((".json", ".pt")):
            raise SubnetlabError(f"{self.mib_export}: an EAP-IG graph file ends in .json or .pt", setting="mib_export")
        if self.mib_submission is not None and self.scores is None:
            raise SubnetlabError("a MIB submission folder takes edge scores; give a scores file", setting="mib_submission")
        if self.circuits:
            check_distinct_names("circuits", [str(Path(c).expanduser().resolve()) for c in self.circuits])
        if (self.scores is None) == (not self.circuits):
            raise SubnetlabError("give either a scores file or circuit files (one of the two)", setting="scores")
        for path in ([self.scores] if self.scores else []) + list(self.circuits):
            check_input_file(path, setting="scores" if path == self.scores else "circuits")  # a named pipe too
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
def _eap_graph_file(path: str, adapter: Any, setting: str) -> Any:
    """The ``Circuit`` of an EAP-IG / MIB graph file (JSON or ``.pt``, ``models.mib_graph``, on the model's graph
    with one embedding node), or None for any other file (subnetlab's own, read by ``models.circuit_files``)."""
    from subnetlab.io import read_json
    from subnetlab.models import mib_graph
    from subnetlab.models.graph import Graph

    mib = Graph.from_adapter(adapter, embedding_nodes=1, ungrouped_kv=True)  # EAP-IG's graph of this model
    if path.endswith(".pt"):
        return mib_graph.load(path, mib, setting)
    if not path.endswith(".json"):
        return None
    try:
        data = read_json(path)
    except SubnetlabError as e:
        raise SubnetlabError(str(e), setting=setting) from None
    if mib_graph.is_eap_json(data):
        return mib_graph.from_dict(data, path, mib, setting)
    return None


def read_scores(path: str, adapter: Any, setting: str = "scores") -> tuple[str, Tensor, Any, bool]:
    """``(level, scores, graph or None, absolute)`` from a scores file, read and checked by the one reader of
    such files (``models.circuit_files.read_scores``); node scores as one vector (``node_vector``).

    ``absolute``: attribution scores rank by magnitude (MIB's ``absolute=True``: a large negative effect is still
    an important edge); log-alphas rank by their signed value, since a very negative log-alpha is a gate training
    closed, the least important item, not the most. Edge files record theirs (``models.circuit``)."""
    from subnetlab.analysis.circuit_evaluation import node_vector
    from subnetlab.models.circuit_files import read_scores as read

    eap = _eap_graph_file(path, adapter, setting)
    if eap is not None:
        if eap.scores is None:
            raise SubnetlabError(f"{path}: edge 0 has no 'score' (every edge needs one)", setting=setting)
        return "edges", eap.scores, eap.graph, eap.absolute
    scores = read(path, adapter, setting)
    if scores.level == "edges":
        return "edges", scores.circuit.scores, scores.circuit.graph, scores.absolute
    return "nodes", node_vector(scores.heads, scores.mlps), None, scores.absolute


def read_circuit(path: str, adapter: Any) -> tuple[str, Tensor, Any]:
    """``(level, keep, graph or None)`` from a circuit file (module doc)."""
    from subnetlab.analysis.circuit_evaluation import node_vector
    from subnetlab.models.circuit_files import read_graph_file
    from subnetlab.subnetwork import Subnetwork

    eap = _eap_graph_file(path, adapter, "circuits")
    if eap is not None:
        if eap.in_graph is None:
            raise SubnetlabError(f"{path}: edge 0 has no 'in_graph' (every edge needs one)", setting="circuits")
        return "edges", eap.in_graph, eap.graph
    if path.endswith(".json"):
        circuit = read_graph_file(path, adapter, "in_graph", "circuits")
        return "edges", circuit.in_graph, circuit.graph
    try:
        sub = Subnetwork.load(path, adapter)
    except SubnetlabError as e:
        raise SubnetlabError(str(e), setting="circuits") from None
    if sub.kind == "edges":  # an edge circuit (subnetlab circuit's subnetwork.safetensors)
        return "edges", sub.edges.bool(), sub.graph()
    if sub.kind != "structured":
        raise SubnetlabError(f"{path}: a weight-level subnetwork has no heads, MLPs or edges to measure as a circuit",
                             setting="circuits")
    return "nodes", node_vector(sub.heads, sub.mlps).bool(), None


# ------------------------------------------------------------------------------------ MIB's files
JOINED_NOTE = ("the file's graph has two embedding nodes (tok_embeds, pos_embeds); MIB's has one (input): each edge "
               "input->r scored the sum of the two edges into r, exact for scores linear in the writer's output "
               "(EAP, EAP-IG, clean-corrupted), so no rescoring")


def mib_orientation(path: str, absolute: bool) -> float:
    """The factor taking a scores file's values to MIB's orientation (higher = the edge matters more).

    MIB attributes with ``loss=True`` (``run_attribution.py``: the metric is minus the logit difference), so an
    EAP-IG / MIB file's scores are the loss's change when the edge is patched. subnetlab's attribution scores are
    the metric's change (``methods.attribution``): the opposite sign (-1). Log-alphas (signed files) already rank
    higher as more important (1)."""
    from subnetlab.io import read_json
    from subnetlab.models import mib_graph

    if path.endswith(".pt") or (path.endswith(".json") and mib_graph.is_eap_json(read_json(path))):
        return 1.0
    return -1.0 if absolute else 1.0


def _mib_circuit(job: CircuitEvalJobConfig, level: str, graph: Any, values: Tensor, absolute: bool) -> Any:
    """The ``Circuit`` MIB's evaluation or files need, scores in MIB's orientation (None when neither is asked
    for), checked before any work."""
    from subnetlab.models.circuit import Circuit
    from subnetlab.models.mib_graph import check_mappable, joined_embeddings

    if job.definition != "mib" and job.mib_export is None and job.mib_submission is None:
        return None
    setting = "definition" if job.definition == "mib" else "mib_export" if job.mib_export else "mib_submission"
    if level != "edges":
        raise SubnetlabError("MIB's evaluation and graph files are defined here on edges; these are node scores or "
                             "circuits", setting=setting)
    source = job.scores or job.circuits[0]
    if job.scores is not None:
        circuit = Circuit(graph, values, score_sign="absolute" if absolute else "signed")
        circuit = joined_embeddings(circuit, source, setting, recorded_shape(source).get("method"))
        check_mappable(circuit.graph, source, setting)
        return Circuit(circuit.graph, mib_orientation(job.scores, absolute) * circuit.scores)
    circuit = joined_embeddings(Circuit(graph, None, values), source, setting)
    check_mappable(graph, source, setting)
    return circuit


def recorded_shape(path: str) -> dict[str, Any]:
    """What a scores or circuit file records of its graph without the model: ``embedding_nodes``, ``score_sign``
    and the attribution ``method`` where it holds them (an EAP-IG / MIB file: one embedding node); {} otherwise."""
    from subnetlab.io import load_tensor_metadata, read_json
    from subnetlab.models import mib_graph
    from subnetlab.models.graph import FORMAT as GRAPH_FORMAT

    if path.endswith(".pt"):
        return {"embedding_nodes": 1}
    try:
        if path.endswith(".json"):
            data = read_json(path)
            if mib_graph.is_eap_json(data):
                return {"embedding_nodes": 1}
            if not isinstance(data, dict) or data.get("format") != GRAPH_FORMAT:
                return {}
            record = {k: data[k] for k in ("score_sign", "method") if isinstance(data.get(k), str)}
            has_scores = isinstance(data.get("edges"), list) and any(
                isinstance(e, dict) and "score" in e for e in data["edges"])
            shape = {k: data.get(k) for k in ("embedding_nodes", "heads", "kv_heads", "ungrouped_kv")}
            return {**shape, "scores": has_scores, **record}
        metadata = load_tensor_metadata(path)
        shape = json.loads(metadata.get("graph_shape", "{}"))
    except (SubnetlabError, json.JSONDecodeError):
        return {}  # unreadable here: the reader after the model load names what is wrong
    record = {k: metadata[k] for k in ("score_sign", "method") if k in metadata}
    if not isinstance(shape, dict) or "embedding_nodes" not in shape:
        return record
    return {**{k: shape.get(k) for k in ("embedding_nodes", "heads", "kv_heads", "ungrouped_kv")}, **record}


def check_mib_files(job: CircuitEvalJobConfig) -> None:
    """Before the model loads: refuse a file whose graph cannot become MIB's (one embedding node) when MIB's
    evaluation or files are asked for, where the file records its graph. Two embedding nodes are joined
    (``models.mib_graph.joined_embeddings``) when the scores add up; what does not is refused here."""
    from subnetlab.models.mib_graph import NONLINEAR_METHODS

    if job.definition != "mib" and job.mib_export is None and job.mib_submission is None:
        return
    setting = "definition" if job.definition == "mib" else "mib_export" if job.mib_export else "mib_submission"
    for path in [job.scores] if job.scores else list(job.circuits[:1]):
        record = recorded_shape(path)
        nodes = record.get("embedding_nodes")
        if record.get("kv_heads") not in (None, record.get("heads")) and not record.get("ungrouped_kv"):
            raise SubnetlabError(f"{path}: its key/value readers are per key/value head ({record['kv_heads']} for "
                                 f"{record['heads']} heads); MIB / EAP-IG's graph has one per query head, which a sum "
                                 "over each group cannot be split back into (score the model with kv_readers=query, "
                                 "the default)", setting=setting)
        if nodes in (None, 1):
            continue
        what = ("no embedding nodes (the embeddings feed every reader, no edge out of them scored)" if nodes == 0
                else f"exact-patching scores (method {record['method']!r}), not linear in the writer's output"
                if record.get("method") in NONLINEAR_METHODS
                else "signed scores (log-alphas or masks), which do not add up" if record.get("score_sign") == "signed"
                else "a circuit (kept edges), whose two embedding edges have no one flag"
                if job.scores is None else None)
        if what is not None:
            raise SubnetlabError(f"{path}: MIB / EAP-IG graphs have one embedding node ('input'); this file's graph "
                                 f"has {nodes} and holds {what}, which cannot be joined into it (score the model "
                                 "with one embedding node)", setting=setting)


def _write_mib_files(job: CircuitEvalJobConfig, circuit: Any, model: Any) -> dict[str, Any]:
    """Write the EAP-IG file and the submission folder asked for; what was written (and the folder's check)."""
    from subnetlab.models import mib_graph, mib_submission

    d_model = int(getattr(model.config, "hidden_size", 0) or getattr(model.config, "n_embd"))
    written: dict[str, Any] = {}
    if job.mib_export is not None:
        mib_graph.save(circuit, job.mib_export, d_model)
        written["export"] = job.mib_export
    if job.mib_submission is not None:
        task = job.task.name.removeprefix("circuit:").replace(":", "-")
        path = mib_submission.write(job.mib_submission, task, Path(job.model).name, circuit, d_model)
        written["submission_file"] = str(path)
        written["submission_check"] = mib_submission.check(job.mib_submission, mib_names=False)
    return written


RUN_FILES = ("config.json", "faithfulness.json", "faithfulness.png", "metrics.json")


def check_side_outputs(job: CircuitEvalJobConfig, out: Path) -> None:
    """The EAP-IG file and the MIB submission folder asked for: writable, valid and distinct from the run's own
    files, checked before any work (a refusal after the evaluation would leave ``out`` written)."""
    from subnetlab.models import mib_submission
    from subnetlab.run_directory import check_distinct_outputs, check_output_file

    submission = None
    if job.mib_export is not None:
        check_output_file(job.mib_export, "mib_export")
    if job.mib_submission is not None:
        task = job.task.name.removeprefix("circuit:").replace(":", "-")
        submission = mib_submission.check_target(job.mib_submission, task, Path(job.model).name)
    check_distinct_outputs({"mib_export": job.mib_export, "mib_submission": submission, "out": out}, out, RUN_FILES)


# ------------------------------------------------------------------------------------ the run
def circuit_eval_run(job: CircuitEvalJobConfig, out: Path,
                     figure: Callable[[dict[str, Any], Path], Any] | None = None) -> dict[str, Any]:
    """Measure ``job``'s circuits and write its run directory; returns the curve as plain data.

    ``figure(result, out)`` draws what the caller wants drawn, before ``metrics.json`` marks the run done.
    """
    from subnetlab.intervene.edges import check_edge_family
    from subnetlab.methods.model_fit import position_limit
    from subnetlab.models import load_model
    from subnetlab.progress import stage
    from subnetlab.runtime import describe_runtime, resolve_device, runtime_record
    from subnetlab.tasks.circuits.pairs import CircuitTask

    check_side_outputs(job, Path(out))
    device = resolve_device(job.device)
    stage(describe_runtime(device))
    earlier = earlier_runs(job.model)  # the fine-tuning run that made the model, where subnetlab made it
    task = TaskSpec(job.task.name, inherit_split_settings(job.task.name, job.task.options, earlier),
                    job.task.eval_data).build()
    if not isinstance(task, CircuitTask):
        raise SubnetlabError(f"task {job.task.name} is not a circuit task (prompt pairs: circuit:ioi, "
                             "circuit:greater-than, circuit:arith:<op>, or your own file with a corrupted column)",
                             setting="task")
    check_mib_files(job)  # a file MIB's graph cannot be made of, refused before the model loads
    loaded = load_model(job.model, head="causal-lm")
    check_edge_family(loaded.adapter)  # the pre-LN causal language models the graph describes, as circuit
    tokenizer = task.tokenizer or loaded.tokenizer
    if tokenizer is None:
        raise SubnetlabError(f"model {job.model} has no tokenizer to read the prompts with", setting="model")
    task.bind(tokenizer)  # every pair checked before any work
    task.check_positions(position_limit(loaded.model), job.model)
    check_held_out(task, earlier)  # no pair measured on was a training row of the model's fine-tuning
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
    mib_circuit = _mib_circuit(job, level, graph, scores if job.scores is not None else read[0][1],
                               absolute if job.scores is not None else True)
    joined = mib_circuit is not None and mib_circuit.graph.num_embeddings != graph.num_embeddings
    if joined and job.definition == "mib":  # MIB's numbers on MIB's graph: the evaluation runs on it
        graph = mib_circuit.graph
    config = {**job.record(task=task.options), **runtime_record(device), "level": level}
    check_config(out, config, "circuit evaluation")  # a finished run of other settings is never overwritten
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", config)
    model = loaded.model.to(device).eval()
    stage(f"{level} circuits on {len(task.examples(job.split))} pairs of {job.split}"
          f"{f' (first {job.limit})' if job.limit else ''}: metric {job.metric}, ablation {job.ablation}")
    inputs_of = _Inputs(job, level, graph, scores if job.scores is not None else None,
                        absolute if job.scores is not None else True, [] if job.scores is not None else read,
                        mib_circuit)

    def evaluator(ablation: str) -> Any:
        return _evaluator(job, ablation, level, graph, model, loaded.adapter, task, tokenizer)

    evaluate = evaluator(job.ablation)
    baseline = evaluate.baseline(job.metric)
    result = _measure(inputs_of, evaluate)
    if job.definition == "mib":
        result["score_orientation"] = ("as in the file" if mib_orientation(job.scores, absolute) > 0 else
                                       "negated: subnetlab's attribution scores are the metric's change when an edge "
                                       "is patched, MIB's the loss's (minus the logit difference)")
    health = judge(baseline=baseline).to_dict()
    result = {"definition": "subnetlab", "level": level, "ablation": job.ablation, "split": job.split,
              "pairs": evaluate.count, **result, "health": health}
    if joined:
        result["mib_graph"] = JOINED_NOTE
    if mib_circuit is not None:
        result["mib_files"] = _write_mib_files(job, mib_circuit, loaded.model)
    result["positions"] = "all"  # a removed item delivers its replacement at every token position
    result["selection"] = job.selection if job.scores is not None else "as in the circuit files"
    result["ranking"] = ("signed for CPR, absolute for CMD (MIB)" if job.definition == "mib" else
                         ("absolute" if absolute else "signed") if job.scores is not None else None)
    if job.random_circuits:
        stage(f"{job.random_circuits} random circuits of each size (seed {job.random_seed})")
        result["random_circuits"] = random_null(inputs_of, evaluate, result)
    if job.ablations:
        side: dict[str, Any] = {}
        for name in job.ablations:
            stage(f"the same circuits under {name} ablation")
            side[name] = headline(result if name == job.ablation else _measure(inputs_of, evaluator(name)), job.metric)
        result["ablations"] = {"by_ablation": side, **ablation_range(side)}
    if job.permute_pairs:
        order = task.repairing(job.split, job.permute_seed, job.limit)
        task.permute_corrupted(job.split, order)
        stage(f"permuted pairs (seed {job.permute_seed}): {sum(i != j for i, j in enumerate(order))} pairs re-paired")
        permuted = evaluator(job.ablation)
        base = permuted.baseline(job.metric)
        measured: dict[str, Any]
        try:
            measured = headline(_measure(inputs_of, permuted), job.metric)
        except SubnetlabError as e:  # the re-paired full model and empty circuit agree: f undefined, said so
            measured = {"undefined": str(e)}
        result["permuted_pairs"] = {"seed": job.permute_seed, "pairs": permuted.count,
                                    "moved": sum(i != j for i, j in enumerate(order[:permuted.count])),
                                    "rule": "each pair takes the corrupted prompt of another pair of its token length "
                                            "(a random cycle through each length)",
                                    **measured, "health": judge(baseline=base).to_dict()}
    write_json(out / "faithfulness.json", result)
    if figure is not None:
        figure(result, out)
    summary = {k: result[k] for k in ("definition", "level", "metric", "items", "pairs") if k in result}
    summary.update({k: result[k] for k in ("cpr", "cmd", "cpr_printed", "cmd_printed", "span", "kept", "bootstrap")
                    if k in result})
    summary.update({k: result[k] for k in ("ablation", "positions", "selection", "ranking")})
    summary["health"] = health
    if "areas" in result:
        summary["areas"] = result["areas"]
    elif result["definition"] == "subnetlab":
        summary["faithfulness"] = result["faithfulness"]
    if "random_circuits" in result:
        summary["random_circuits"] = {k: v for k, v in result["random_circuits"].items() if k != "sizes"}
        summary["random_circuits"]["sizes"] = [{k: v for k, v in size.items() if k != "values"}
                                               for size in result["random_circuits"]["sizes"]]
    for key in ("ablations", "permuted_pairs"):
        if key in result:
            summary[key] = result[key]
    write_json(out / "metrics.json", summary)
    return result


# ------------------------------------------------------------------ measuring, and the nulls
@dataclass(frozen=True)
class _Inputs:
    """What a measurement of the job's circuits needs besides its evaluator."""

    job: CircuitEvalJobConfig
    level: str
    graph: Any
    scores: Tensor | None
    absolute: bool
    read: list[tuple[str, Tensor, Any]]
    mib_circuit: Any


def _evaluator(job: CircuitEvalJobConfig, ablation: str, level: str, graph: Any, model: Any, adapter: Any,
               task: Any, tokenizer: Any) -> Any:
    """The evaluator of ``job``'s pairs under ``ablation``; ``mean``: every writer's (or head's and MLP's) mean
    output over the clean prompts of the pairs measured on (non-padding tokens, all positions pooled)."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator, node_evaluator

    values: Any = ablation
    if ablation == "mean":
        from subnetlab.intervene.activations import collect_means
        from subnetlab.intervene.edges import writer_means
        from subnetlab.tasks.circuits.pairs import clean_inputs

        device = next(model.parameters()).device
        batches = [{k: v.to(device) for k, v in clean_inputs(b).items()}
                   for b in task.pair_batches(tokenizer, job.split, job.batch_size, job.limit)]
        values = writer_means(model, adapter, batches) if level == "edges" else collect_means(model, adapter, batches)
    if level == "edges":
        return edge_evaluator(model, adapter, graph, task, tokenizer, job.split, batch_size=job.batch_size,
                              limit=job.limit, ablation=values)
    return node_evaluator(model, adapter, task, tokenizer, job.split, batch_size=job.batch_size, limit=job.limit,
                          ablation=values)


def _measure(inputs: _Inputs, evaluate: Any) -> dict[str, Any]:
    """The job's curve (or one circuit's faithfulness) measured by ``evaluate``: what ``faithfulness.json`` holds
    of it."""
    from subnetlab.analysis.faithfulness import circuit_faithfulness, curve_from_masks, curve_from_scores

    job, graph = inputs.job, inputs.graph
    empty = evaluate.corrupted_run
    if job.definition == "mib":
        from subnetlab.analysis.mib_faithfulness import mib_curves

        return mib_curves(graph, inputs.mib_circuit.scores, evaluate, metric=job.metric, bootstrap=job.bootstrap,
                          seed=job.bootstrap_seed)
    if inputs.scores is not None:
        select = None
        if job.selection == "greedy":
            from subnetlab.models.circuit import Circuit

            ranked = Circuit(graph, inputs.scores, score_sign="absolute" if inputs.absolute else "signed")
            select = lambda k: ranked.greedy(k).kept()  # noqa: E731
        return curve_from_scores(inputs.scores, evaluate, metric=job.metric, sizes=job.sizes,
                                 absolute=inputs.absolute, empty=empty, select=select).to_dict()
    if len(inputs.read) > 1:
        return curve_from_masks([keep for _, keep, _ in inputs.read], evaluate, metric=job.metric,
                                empty=empty).to_dict()
    keep = inputs.read[0][1]
    f = circuit_faithfulness(keep, evaluate, empty)
    return {"metric": job.metric, "items": keep.numel(), "kept": int(keep.sum()), "faithfulness": f}


def headline(result: dict[str, Any], metric: str) -> dict[str, Any]:
    """The headline numbers of one measurement: CPR and CMD (MIB's: signed / absolute rankings) and ``f`` of
    ``metric`` at each size, or one circuit's ``f``."""
    if result.get("definition") == "mib":
        return {"cpr": result["cpr"], "cmd": result["cmd"], "counts": result["counts"],
                "faithfulness": {"signed": result["signed"]["faithfulness"][metric],
                                 "absolute": result["absolute"]["faithfulness"][metric]}}
    if "fractions" in result:
        return {"cpr": result["cpr"], "cmd": result["cmd"], "counts": result["counts"],
                "faithfulness": result["faithfulness"][metric]}
    return {"kept": result["kept"], "faithfulness": result["faithfulness"][metric]}


def ablation_range(side: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The worst of each headline number over the ablations (lowest CPR or f, highest CMD) and where."""
    if all("cpr" in v for v in side.values()):
        low = min(side, key=lambda a: side[a]["cpr"])
        high = max(side, key=lambda a: side[a]["cmd"])
        return {"worst_cpr": {"ablation": low, "cpr": side[low]["cpr"]},
                "worst_cmd": {"ablation": high, "cmd": side[high]["cmd"]}}
    defined = {a: v["faithfulness"] for a, v in side.items() if v["faithfulness"] is not None}
    if not defined:
        return {}
    low = min(defined, key=lambda a: defined[a])
    return {"worst_faithfulness": {"ablation": low, "faithfulness": defined[low]}}


def random_null(inputs: _Inputs, evaluate: Any, result: dict[str, Any]) -> dict[str, Any]:
    """``job.random_circuits`` random circuits at each of the method's sizes, drawn by the method's selection rule
    (``analysis.random_circuits``), against the method's ``f`` and areas in ``result``."""
    import torch

    from subnetlab.analysis.faithfulness import area
    from subnetlab.analysis.random_circuits import random_circuit_null
    from subnetlab.models.circuit import Circuit, top_k_mask

    job, graph, metric = inputs.job, inputs.graph, inputs.job.metric

    def subnetlab_areas(x: Any, f: Any) -> tuple[float, float]:
        return area(x, f), area(x, [abs(1.0 - v) for v in f])

    fractions = result.get("fractions")
    if job.definition == "mib":
        from subnetlab.analysis.mib_faithfulness import areas, top_n

        items, counts = graph.num_edges, result["counts"]
        select = lambda s, k: top_n(graph, s, k, absolute=False)  # noqa: E731
        rule = "MIB's top-n of random scores, then its pruning: what no longer connects is dropped (realised sizes)"
        method = {name: result[name]["faithfulness"][metric] for name in ("signed", "absolute")}
        full, empty = result["full"][metric], result["empty"][metric]

        def mib_areas(x: Any, f: Any) -> tuple[float, float]:
            a = areas(x, f)
            return a["area_under"], a["area_from_1"]

        area_of = mib_areas
        method_areas = {name: (result[name]["area_under"], result[name]["area_from_1"])
                        for name in ("signed", "absolute")}
    else:
        if inputs.scores is not None:
            items = inputs.scores.numel()
            if job.selection == "greedy":
                select = lambda s, k: Circuit(graph, s, score_sign="signed").greedy(k).kept()  # noqa: E731
                rule = "EAP-IG's greedy selection from the logits on random scores (connected, exact sizes)"
            else:
                select = lambda s, k: top_k_mask(s, k)  # noqa: E731
                rule = "the top k of random scores: a uniform random set of k items"
        else:
            keeps = [keep.reshape(-1).bool() for _, keep, _ in inputs.read]
            items = keeps[0].numel()
            pruned = inputs.level == "edges" and all(
                torch.equal(Circuit(graph, None, k).pruned().kept(), k) for k in keeps)
            if pruned:  # the files' circuits are all pruned to what connects: the random ones are too
                select = lambda s, k: Circuit(graph, None, top_k_mask(s, k)).pruned().kept()  # noqa: E731
                rule = ("a uniform random set of k edges, then pruned to what connects (models.circuit's rule, "
                        "which the files' circuits satisfy; realised sizes)")
            else:
                select = lambda s, k: top_k_mask(s, k)  # noqa: E731
                rule = "a uniform random set of k items"
        if "fractions" in result:
            counts = result["counts"]
            method = {"circuit": result["faithfulness"][metric]}
            full, empty = result["full"][metric], result["empty"][metric]
            method_areas = {"circuit": (result["cpr"], result["cmd"])}
        else:
            counts = [result["kept"]]
            method = {"circuit": [result["faithfulness"][metric]]}
            full = float(evaluate(torch.ones(items, dtype=torch.bool))[metric])
            empty = evaluate.corrupted_run[metric]
            method_areas = None
        area_of = subnetlab_areas
    null = random_circuit_null(evaluate, items, counts, select, draws=job.random_circuits, seed=job.random_seed,
                               metric=metric, full=full, empty=empty, method=method, fractions=fractions,
                               areas=area_of, method_areas=method_areas)
    return {"rule": rule, "ablation": job.ablation, **null}


__all__ = ["ABLATIONS", "JOINED_NOTE", "CircuitEvalJobConfig", "ablation_range", "check_mib_files", "circuit_eval_run",
           "headline", "mib_orientation", "random_null", "recorded_shape", "read_circuit", "read_scores"]
