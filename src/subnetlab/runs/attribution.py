"""The attribution run of ``subnetlab circuit`` (methods eap, eap-ig, eap-ig-activations, clean-corrupted, exact):
scores of every edge on a circuit task; or (nap, nap-ig, ``NODE_METHODS``) of every node.

Layout of DIR::

    DIR/
      config.json            everything to rerun it (written first)
      scores.safetensors     ``edges`` [edges] in the graph's edge order (the scores file circuit-eval reads),
                             and node scores ``heads`` [layers, heads], ``mlps`` [layers], ``embeddings``;
                             its metadata holds the graph's shape and the scores' sign (``Circuit.metadata``)
      node_scores.safetensors  the node scores alone (circuit-eval measures node circuits from it)
      graph.json             the model's graph with each edge's score (a ``models.circuit.Circuit``)
      metrics.json           method, steps, pairs, seconds, the largest edges (written last: marks the run done)

A node method (nap, nap-ig) writes no edge scores: ``scores.safetensors`` holds ``heads``, ``mlps`` and
``embeddings`` (circuit-eval measures node circuits from it, as from ``node_scores.safetensors``), no
``graph.json``, and its metrics.json lists the largest nodes. Mean ablation (``ablation="mean"``, eap and nap):
the corrupted outputs are each writer's mean output over the clean prompts of the pairs scored (computed first,
one forward per batch; every rank of a multi-process run computes the same means).

Scores are the mean over the pairs of the chosen split of each edge's
attribution (``methods.attribution``), for the task metric picked (default the
logit difference; ``kl`` differentiates KL(full || model), which is zero with a
zero gradient at the clean run, so EAP gives zero there and EAP-IG does not).
Scores are in the model's precision (float64 for a float64 model). ``exact``
patches each edge in its own forward rows (no gradients): a ground truth for
graphs of up to a few thousand edges.

Launched as several processes (``torchrun``; ``subnetlab.distributed``), each rank scores its share of the
pairs and the sums are added across the ranks before the division by the pair count, so the scores file is the
one a single process writes; rank 0 alone writes DIR.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json, save_tensors, write_json
from subnetlab.methods.attribution.names import ABLATIONS, MEAN_METHODS, NODE_METHODS
from subnetlab.methods.attribution.scores import IG_METHODS, METHODS, check_method, check_position_chunk
from subnetlab.runs.job_config import JobConfig, optional, require_positive
from subnetlab.tasks.circuits.metrics import METRICS, TASK_METRICS
from subnetlab.tasks.spec import TaskSpec

SCORES_FILE = "scores.safetensors"
NODE_SCORES_FILE = "node_scores.safetensors"
FORMAT = "subnetlab.attribution/1"
KV_READERS = ("query", "kv")


@dataclass(frozen=True)
class AttributionJobConfig(JobConfig):
    """A model, a circuit task, the method (one of ``METHODS``) and its settings; only ``eap-ig`` and
    ``eap-ig-activations`` integrate (``ig_steps`` is 1 for the others, whatever was given)."""

    command: ClassVar[str] = "circuit"
    model: str
    task: TaskSpec
    method: str = "eap"
    ig_steps: int = 5
    split: str = "train"
    metric: str = "logit_diff"
    batch_size: int = 16
    limit: int | None = None
    embedding_nodes: int | None = None
    device: str = "auto"
    sample_seed: int | None = optional()  # None: the first ``limit`` pairs; a seed: a seeded draw of ``limit`` pairs
    # grouped-query models: "query" (None, the default) one key and value reader per query head, EAP-IG's and MIB's
    # graph (``Graph.ungrouped_kv``); "kv" one per key/value head, Edge Pruning's graph (what its warm start reads)
    kv_readers: str | None = optional()

    # tokens of a batch scored per chunk, blocks recomputed in the backward (``attribute_batch``); 0: never;
    # None (left out of config.json): chunks of ``AUTO_CHUNK`` tokens in batches of more
    position_chunk: int | None = optional()
    # what the scored change replaces a writer's output with: None (left out of config.json) the corrupted prompt's
    # output; "mean" its mean output over the clean prompts (eap, nap: MIB's "EAP (mean)")
    ablation: str | None = optional()

    def __post_init__(self) -> None:
        check_method(self.method, self.ig_steps)
        check_position_chunk(self.position_chunk)
        check_ablation(self.method, self.ablation)
        if self.ablation == "corrupted":  # the default, recorded as the default is
            object.__setattr__(self, "ablation", None)
        if self.method in NODE_METHODS and self.position_chunk is not None:
            raise SubnetlabError(f"position_chunk: not used by method {self.method} (a node method scores the whole "
                                 "batch in one backward)", setting="position_chunk")
        if self.kv_readers not in (None, *KV_READERS):
            raise SubnetlabError(f"kv_readers {self.kv_readers!r}: choose query (one key and value reader per query "
                                 "head, EAP-IG's and MIB's graph) or kv (one per key/value head)", setting="kv_readers")
        if self.sample_seed is not None and self.limit is None:
            raise SubnetlabError(f"seed {self.sample_seed}: a seed draws which of the {self.split} pairs are scored; "
                                 "give the number of pairs to draw (a limit below the split's size)", setting="seeds")
        if self.method not in IG_METHODS:
            object.__setattr__(self, "ig_steps", 1)
        if self.metric not in METRICS + TASK_METRICS:
            raise SubnetlabError(f"metric {self.metric!r}: choose one of {', '.join(METRICS + TASK_METRICS)}",
                                 setting="metric")
        require_positive("attribution", "batch_size", self.batch_size)
        require_positive("attribution", "limit", self.limit, allow_none=True,
                         counts=f"the number of {self.split} pairs the edges are scored on")


def check_ablation(method: str, ablation: str | None) -> None:
    """``ablation`` one of ``ABLATIONS``, and mean ablation only under a method that takes it (``MEAN_METHODS``)."""
    if ablation is None:
        return
    if ablation not in ABLATIONS:
        takes = f"corrupted, or mean under {' and '.join(MEAN_METHODS)}" if method in MEAN_METHODS else "corrupted"
        raise SubnetlabError(f"ablation {ablation!r}: method {method} takes {takes}", setting="ablation")
    if ablation == "mean" and method not in MEAN_METHODS:
        raise SubnetlabError(f"ablation mean: method {method} scores the change to the corrupted prompt; mean "
                             f"ablation is taken by {' and '.join(MEAN_METHODS)}", setting="ablation")


def attribution_run(job: AttributionJobConfig, out: Path) -> dict[str, Any]:
    """Score every edge and node of the model for ``job`` and write DIR (module doc); returns metrics.json."""
    from subnetlab.distributed import world
    from subnetlab.intervene.edges import check_edge_family
    from subnetlab.methods.attribution import attribute
    from subnetlab.methods.attribution.scores import clean_means
    from subnetlab.methods.model_fit import position_limit
    from subnetlab.models import load_model
    from subnetlab.models.circuit import Circuit
    from subnetlab.models.graph import Graph
    from subnetlab.progress import stage
    from subnetlab.run_directory import check_config
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
    check_edge_family(loaded.adapter)
    tokenizer = task.tokenizer or loaded.tokenizer
    if tokenizer is None:
        raise SubnetlabError(f"model {job.model} has no tokenizer to read the prompts with", setting="model")
    task.bind(tokenizer)
    task.check_positions(position_limit(loaded.model), job.model)
    if job.metric not in task.metric_names:
        raise SubnetlabError(f"metric {job.metric!r}: task {task.name} measures {', '.join(task.metric_names)}",
                             setting="metric")
    available = len(task.examples(job.split))
    pairs = available if job.limit is None else min(job.limit, available)
    if job.sample_seed is not None and pairs >= available:
        raise SubnetlabError(f"seed {job.sample_seed}: drawing {job.limit} of the {available} {job.split} pairs draws "
                             "them all, whatever the seed; draw fewer", setting="limit")
    graph = Graph.from_adapter(loaded.adapter, job.embedding_nodes, ungrouped_kv=job.kv_readers in (None, "query"))
    if graph.ungrouped_kv:
        stage(f"{loaded.adapter.num_kv_heads} key/value heads for {loaded.adapter.num_heads} heads: one key and value "
              "reader per query head (EAP-IG's and MIB's graph); kv_readers=kv gives one per key/value head")
    model = loaded.model.to(device).eval()
    config = {**job.record(task=task.options), **runtime_record(device)}
    check_config(out, config, "attribution run")  # a finished run of other settings is never overwritten
    if (out / "metrics.json").is_file():  # this run, finished: a rerun of a sweep goes on from here
        stage(f"{out}: finished, its scores reused")
        return read_json(out / "metrics.json")
    here = world()  # across processes (joined here, after the checks): each rank scores its share, rank 0 writes
    if here.is_writer:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "config.json", config)
    nodes_only = job.method in NODE_METHODS
    items = f"{len(graph.writers)} nodes" if nodes_only else f"{graph.num_edges} edges"
    stage(f"{job.method} scores of {items} on {pairs} pairs of {job.split} (metric {job.metric}"
          f"{', mean ablation' if job.ablation == 'mean' else ''}"
          f"{f', split over {here.size} processes' if here.size > 1 else ''}"
          f"{f', {job.ig_steps} steps' if job.method in IG_METHODS else ''}"
          f"{f', {graph.num_edges} forward rows per pair' if job.method == 'exact' else ''})")

    sampled = None if job.sample_seed is None else sampled_pairs(available, pairs, job.sample_seed)

    def metric(logits: Any, batch: dict[str, Any], full: Any) -> Any:
        return task.metrics(logits, batch, full)[job.metric]

    start = time.perf_counter()
    means = None
    if job.ablation == "mean":
        with torch.no_grad():
            means = clean_means(model, loaded.adapter, scored_batches(task, tokenizer, job, pairs))
    result = attribute(model, loaded.adapter, graph, scored_batches(task, tokenizer, job, pairs), metric,
                       method=job.method, steps=job.ig_steps,  # type: ignore[arg-type]
                       position_chunk=job.position_chunk, means=means)
    seconds = time.perf_counter() - start
    nodes = result.node_scores()
    ablation = {} if job.ablation is None else {"ablation": job.ablation}
    if not here.is_writer:  # the same scores as rank 0's (summed over the ranks); rank 0 writes them
        return {"method": job.method, "steps": result.steps, "metric": job.metric, "pairs": result.pairs,
                "edges": graph.num_edges, "seconds": round(seconds, 3), "top_edges": [], **ablation}
    meta = {"format": FORMAT, "method": job.method, "steps": str(result.steps), "metric": job.metric,
            "pairs": str(result.pairs), "graph": graph.family, "edges": str(graph.num_edges), **ablation}
    save_tensors(out / NODE_SCORES_FILE, {"heads": nodes["heads"], "mlps": nodes["mlps"]}, metadata=meta)
    if result.edges is None:  # a node method: node scores alone, no edge graph
        save_tensors(out / SCORES_FILE, nodes, metadata={**meta, "level": "nodes"})
        names = graph.writers  # the graph's names: a0.h1, m0, the embeddings
        order = result.writers.abs().argsort(descending=True)[:10].tolist()
        metrics = {"method": job.method, "steps": result.steps, "metric": job.metric, "pairs": result.pairs,
                   **ablation, **({} if job.sample_seed is None else {"seed": job.sample_seed, "scored_pairs": sampled}),
                   "edges": graph.num_edges, "nodes": len(names), "level": "nodes", "seconds": round(seconds, 3),
                   "pairs_per_second": round(result.pairs / max(seconds, 1e-9), 3),
                   "top_nodes": [{"node": names[i], "score": float(result.writers[i])} for i in order],
                   "top_edges": []}
        write_json(out / "metrics.json", metrics)
        return metrics
    circuit = Circuit(graph, result.edges, score_sign="absolute")
    save_tensors(out / SCORES_FILE, {"edges": result.edges, **nodes}, metadata={**meta, **circuit.metadata()})
    write_json(out / "graph.json", {**circuit.to_dict(), "method": job.method})  # the method: is it linear in D_w
    order = result.edges.abs().argsort(descending=True)[:10].tolist()
    metrics = {"method": job.method, "steps": result.steps, "metric": job.metric, "pairs": result.pairs, **ablation,
               **({} if job.sample_seed is None else {"seed": job.sample_seed, "scored_pairs": sampled}),
               "edges": graph.num_edges, "seconds": round(seconds, 3),
               **({"kv_readers": "query" if graph.ungrouped_kv else "kv"} if graph.group > 1 else {}),
               "pairs_per_second": round(result.pairs / max(seconds, 1e-9), 3),
               "top_edges": [{"edge": graph.edge_names[i], "score": float(result.edges[i])} for i in order]}
    write_json(out / "metrics.json", metrics)
    return metrics


def sampled_pairs(available: int, pairs: int, seed: int) -> list[int]:
    """``pairs`` distinct indices of ``available``, drawn with a generator seeded ``seed``, in increasing order."""
    g = torch.Generator().manual_seed(int(seed))
    return sorted(torch.randperm(available, generator=g)[:pairs].tolist())


def scored_batches(task: Any, tokenizer: Any, job: AttributionJobConfig, pairs: int) -> Iterator[dict[str, Any]]:
    """The pair batches scored: the first ``pairs`` of the split, or with ``job.sample_seed`` a seeded draw."""
    if job.sample_seed is None:
        yield from task.pair_batches(tokenizer, job.split, job.batch_size, job.limit)
        return
    chosen = sampled_pairs(len(task.examples(job.split)), pairs, job.sample_seed)  # as metrics.json records them
    for start in range(0, len(chosen), job.batch_size):
        yield task.pair_batch(tokenizer, job.split, chosen[start:start + job.batch_size])


__all__ = ["AttributionJobConfig", "METHODS", "NODE_SCORES_FILE", "SCORES_FILE", "attribution_run", "check_ablation",
           "sampled_pairs"]
