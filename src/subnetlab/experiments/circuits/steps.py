"""The steps of the circuits study, each writing its result under the run directory and skipped on reruns.

1. ``trained_model``: the 2-layer model trained on repeated random spans
   (``training``), saved with ``save_pretrained`` in ``model/`` (with its
   tokenizer: every subnetlab command takes the directory as its model) and its
   curve in ``training.json``;
2. ``attention_scores``: every head's previous-token and induction score from
   its attention pattern on held-out sequences (``analysis.induction_scores``),
   the independent check of which heads form the mechanism, in
   ``head_scores.json``;
3. ``mechanism_check``: the circuit task's metrics of the full model, of the
   model on the corrupted prompts, and with edges of the graph patched from the
   corrupted prompt: the previous-token head's edges into the keys of the
   induction heads (every last-layer head whose induction score reaches
   ``induction_threshold``), together and one by one, and for comparison its
   edges into their queries and values (``intervene.edges`` through
   ``analysis.circuit_evaluation``), in ``mechanism.json``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from subnetlab.experiments.circuits.settings import CircuitsSettings
from subnetlab.experiments.circuits.training import (
    ModelShape,
    TrainSettings,
    build_induction_model,
    load_trained_model,
    phase_change,
    train_induction_model,
    training_record,
)
from subnetlab.io import atomic_directory, read_json, write_json
from subnetlab.progress import stage
from subnetlab.tasks.induction import InductionConfig, induction_tokenizer, repeated_sequences


# the settings' task, model, training and circuit task (a mapping is read as ``CircuitsSettings``)
def task_config(settings: CircuitsSettings | Mapping[str, Any]) -> InductionConfig:
    return InductionConfig(**CircuitsSettings.of(settings).task)


def model_shape(settings: CircuitsSettings | Mapping[str, Any]) -> ModelShape:
    return ModelShape(**CircuitsSettings.of(settings).model)


def train_settings(settings: CircuitsSettings | Mapping[str, Any]) -> TrainSettings:
    settings = CircuitsSettings.of(settings)
    return TrainSettings(**settings.training, seed=int(settings.seed))


def trained_model(settings: CircuitsSettings, out: Path) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """The trained model, its tokenizer and ``training.json`` (trained here unless a previous run saved it)."""
    task, shape, cfg = task_config(settings), model_shape(settings), train_settings(settings)
    model_dir, record_file = out / "model", out / "training.json"
    tokenizer = induction_tokenizer(task.vocab_size)
    if model_dir.is_dir() and record_file.is_file():
        model = load_trained_model(model_dir)
        return model, tokenizer, read_json(record_file)
    stage(f"training a {shape.layers}-layer {shape.family} model ({shape.heads} heads, width {shape.width}"
          f"{'' if shape.mlp else ', attention only'}) on repeated random spans for {cfg.steps} steps")
    model = build_induction_model(task, shape, cfg.seed)
    started = time.perf_counter()
    curve = train_induction_model(model, task, cfg)
    record = {**training_record(task, shape, cfg), "curve": curve, "phase_change": phase_change(curve),
              "seconds": round(time.perf_counter() - started, 1), "threads": torch.get_num_threads()}
    with atomic_directory(model_dir) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    write_json(record_file, record)
    return model, tokenizer, record


def attention_scores(model: torch.nn.Module, settings: CircuitsSettings, out: Path) -> dict[str, Any]:
    """Both scores of every head on ``scores_size`` held-out sequences, and the heads that carry each."""
    from subnetlab.analysis.induction_scores import head_scores

    path = out / "head_scores.json"
    if path.is_file():
        return read_json(path)
    stage("scoring every head's attention: previous-token and induction scores")
    task = task_config(settings)
    seqs = repeated_sequences(task, int(settings.scores_size), torch.Generator().manual_seed(int(settings.seed) + 2))
    scores = head_scores(model, seqs.input_ids)
    last = scores.previous.shape[0] - 1
    prev_head, prev_score = scores.best("previous", 0)
    ind_head, ind_score = scores.best("induction", last)
    threshold = float(settings.induction_threshold)
    result = {**scores.to_dict(), "sequences": int(settings.scores_size), "induction_threshold": threshold,
              "previous_token_head": {"layer": 0, "head": prev_head, "score": prev_score},
              "induction_head": {"layer": last, "head": ind_head, "score": ind_score},
              "induction_heads": [{"layer": last, "head": h, "score": float(v)}
                                  for h, v in enumerate(scores.induction[last].tolist()) if v >= threshold]}
    write_json(path, result)
    return result


def circuit_task(settings: CircuitsSettings | Mapping[str, Any]):
    from subnetlab.tasks.induction import make_induction_task

    settings = CircuitsSettings.of(settings)
    c = settings.circuit
    return make_induction_task(n_train=int(c["n_train"]), n_eval=int(c["n_eval"]), seed=int(settings.seed) + 3,
                               **settings.task)


def mechanism_edges(scores: dict[str, Any]) -> dict[str, list[str]]:
    """The mechanism's edges in the graph's names: the previous-token head into the key of every induction head
    (``k``), and for comparison into their query (``q``) and value (``v``)."""
    p = scores["previous_token_head"]
    src = f"a{p['layer']}.h{p['head']}"
    return {kind: [f"{src}->a{h['layer']}.h{h['head']}<{kind}>" for h in scores["induction_heads"]]
            for kind in ("k", "q", "v")}


def mechanism_check(model: torch.nn.Module, tokenizer: Any, scores: dict[str, Any], settings: CircuitsSettings,
                    out: Path) -> dict[str, Any]:
    """The circuit task's metrics: full model, corrupted prompts, the mechanism's key (query, value) edges cut
    together, and each key edge cut alone."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.graph import Graph

    path = out / "mechanism.json"
    if path.is_file():
        return read_json(path)
    stage("the circuit task on the trained model: full model, corrupted prompts, the mechanism's edges cut")
    task = circuit_task(settings).bind(tokenizer)
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    evaluate = edge_evaluator(model, adapter, graph, task, tokenizer, "eval",
                              batch_size=int(settings.circuit["batch_size"]))
    everything = torch.ones(graph.num_edges, dtype=torch.bool)

    def without(names: list[str]) -> dict[str, float]:
        keep = everything.clone()
        keep[[graph.edge_index(n) for n in names]] = False
        return evaluate(keep)

    edges = mechanism_edges(scores)
    cut = {f"all {len(names)} {kind} edges": without(names) for kind, names in edges.items() if names}
    cut.update({name: without([name]) for name in edges["k"]})
    result = {"edges": graph.num_edges, "writers": len(graph.writers), "readers": len(graph.readers),
              "full": evaluate(everything), "corrupted": evaluate(torch.zeros_like(everything)),
              "cut": cut, "key_edges": edges["k"]}
    write_json(path, result)
    return result


__all__ = ["attention_scores", "circuit_task", "mechanism_edges", "mechanism_check", "model_shape", "task_config",
           "train_settings", "trained_model"]
