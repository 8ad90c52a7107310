"""Seconds per unit of the demo's work (``estimate``), timed on a few real steps of each study's own functions.

Each unit is timed as the difference of a short and a longer run (``per_unit``), so set-up (a model's first
call, a teacher's cache, tokenising) cancels, with the threads the work gets in the demo: one per job when a
study runs its sweeps in worker processes. Every training, pruning and evaluation call is in this file, through
public functions: ``train_step``, ``methods.evaluate``, ``head_pruning.prune``, ``prune_edges``,
``ContinuousSparsification.fit``, ``train_model``, ``train_induction_model``, the lottery criterion and
``head_types``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Clock = Callable[[], float]


@dataclass
class Calibration:
    """Seconds per unit (``rates``), the wall time calibration took, and what was timed."""

    rates: dict[str, float]
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)


def per_unit(run: Callable[[int], Any], few: int, more: int, clock: Clock = time.perf_counter) -> float:
    """Seconds per unit of ``run(n)`` (``n`` units): ``(t(more) - t(few)) / (more - few)`` after a warm-up
    ``run(few)``, never below zero."""
    def timed(n: int) -> float:
        t0 = clock()
        run(n)
        return clock() - t0

    timed(few)
    return max(timed(more) - timed(few), 0.0) / (more - few)


def _evaluated(loaded: Any, task: Any, batch: int, length: int, clock: Clock) -> float:
    """Seconds per row of ``methods.evaluate`` on the task's first evaluation split."""
    from subnetlab.methods.evaluate import evaluate

    split, tok = list(task.eval_splits)[0], loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer
    return per_unit(lambda n: evaluate(loaded.model, tok, task, [split], batch, length, limit=n, show_progress=False),
                    16, min(144, len(task.examples(split))), clock)


def _minilm(name: str, task: Any, batch: int, length: int, lr: float, clock: Clock) -> tuple[Any, float, float]:
    """MiniLM with ``task``'s head, the seconds its loading took and seconds per training row (``train_step``)."""
    import torch

    from subnetlab.methods.finetune.model import model_for_task
    from subnetlab.methods.finetune.step import train_step
    from subnetlab.optim import make_optimizer

    t0 = clock()
    loaded = model_for_task(name, task, seed=0)
    load = clock() - t0
    tok = loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer
    opt = make_optimizer(loaded.model, "adamw", lr=lr, weight_decay=0.01, no_decay_1d=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    rows = len(task.examples("train"))

    def train(n: int) -> None:
        loaded.model.train()
        for i in range(n):
            idx = [(i * batch + j) % rows for j in range(batch)]
            train_step(loaded.model, task, task.batch_at(tok, "train", idx, max_length=length), opt, sched, 1.0, i)
        loaded.model.eval()

    return loaded, load, per_unit(train, 1, 3, clock) / batch


def heuristic_core_rates(hc: Mapping[str, Any], clock: Clock = time.perf_counter) -> dict[str, float]:
    """``hc_*``: fine-tuning and evaluation in-process; pruning steps and evaluation with a job's threads."""
    from subnetlab.methods.head_pruning.ablation import mean_activations
    from subnetlab.methods.head_pruning.config import preset_config
    from subnetlab.methods.head_pruning.train import prune
    from subnetlab.methods.l0.data import PruningData
    from subnetlab.runtime import torch_threads
    from subnetlab.tasks.spec import TaskSpec

    study, ft = hc["studies"][0], hc["finetune"]
    opts = {k: v for k, v in (hc.get("prune") or {}).items() if v is not None}
    cfg = preset_config(hc["prune_preset"], 0.5, seed=0, **opts)
    rows = 4 * max(int(ft["batch_size"]), int(cfg.batch_size) * int(cfg.accumulation))
    task = TaskSpec(study["task"], {**(study.get("task_options") or {}), "n_train": rows}).build()
    loaded, _, train = _minilm(hc["model"], task, int(ft["batch_size"]), int(ft["max_length"]), float(ft["lr"]), clock)
    eval_batch = int(ft.get("eval_batch_size") or cfg.eval_batch_size)
    evaluated = _evaluated(loaded, task, eval_batch, int(ft["max_length"]), clock)
    tok = loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer
    data = PruningData.from_task(task, tok, "train", cfg.max_length, rows)
    means = mean_activations(loaded.model, loaded.adapter, data, rows)
    with torch_threads(1 if hc.get("backend", "local") != "local" else 0):
        job_evaluated = _evaluated(loaded, task, int(cfg.eval_batch_size), int(cfg.max_length), clock)
        gate = per_unit(lambda n: prune(loaded.model, loaded.adapter, data, preset_config(
            hc["prune_preset"], 0.5, seed=0, **{**opts, "train_limit": rows, "warmup_steps": n, "total_steps": n}),
            ablation=means), 2, 6, clock)
    return {"hc_train_row": train, "hc_eval_row": evaluated, "hc_job_gate_step": gate, "hc_job_eval_row": job_evaluated}


def lottery_rates(lot: Mapping[str, Any], clock: Clock = time.perf_counter) -> dict[str, float]:
    """``lottery_*`` with a job's threads on the first task: loading, training and evaluated rows, the study's
    importance criterion per row; in-process, the attention types of one sentence pair (``head_types``)."""
    import torch

    from subnetlab.analysis.attention_types import head_types
    from subnetlab.methods.lottery.importance import classification_loss, get_criterion
    from subnetlab.models import load_model
    from subnetlab.runtime import torch_threads
    from subnetlab.tasks.spec import TaskSpec

    name, batch, length = lot["tasks"][0], int(lot["batch_size"]), int(lot["max_length"])
    task = TaskSpec(name, {**dict(lot["task_options"].get(name) or {}), "n_train": 4 * batch}).build()
    with torch_threads(1 if lot.get("backend", "local") != "local" else 0):
        loaded, load, train = _minilm(lot["model"], task, batch, length, float(lot["lr"]), clock)
        evaluated = _evaluated(loaded, task, 2 * batch, length, clock)
        adapter, criterion = loaded.adapter, get_criterion(lot["criterion"])
        tok = loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer
        rows = task.batch_at(tok, "train", list(range(batch)), max_length=length)
        gates = torch.ones(adapter.num_layers, adapter.num_heads), torch.ones(adapter.num_layers)
        importance = per_unit(lambda n: [criterion(loaded.model, adapter, rows, classification_loss, *gates)
                                         for _ in range(n)], 1, 3, clock) / batch
    eager = load_model(lot["model"], head="base", attn_implementation="eager")
    pairs = [(ex.text_a, ex.text_b or "") for ex in task.examples("train")[:4]]
    with torch.no_grad():
        pattern = per_unit(lambda n: head_types(eager.model, eager.tokenizer, pairs[:n], max_length=length),
                           1, 4, clock)
    return {"lottery_load": load, "lottery_train_row": train, "lottery_eval_row": evaluated,
            "lottery_importance_row": importance, "lottery_pattern_pair": pattern}


def gpt2_rates(si: Mapping[str, Any], clock: Clock = time.perf_counter) -> dict[str, float]:
    """``gpt2_*`` on the first depth's GPT-2 with a job's threads: a weight-mask row
    (``ContinuousSparsification.fit``), a transfer row (``train_model`` around a frozen 5% subnetwork) and an
    evaluated row (``accuracy``)."""
    import torch

    from subnetlab.methods.continuous_sparsification import ContinuousSparsification
    from subnetlab.methods.finetune.model import arithmetic_gpt2_config
    from subnetlab.models import build_model
    from subnetlab.runtime import torch_threads
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.transfer import LMSplit, TrainSettings, build_transfer_model, train_model
    from subnetlab.transfer.train import accuracy, last_logits, loss_on

    numbers, g = int(si["max_number"]), torch.Generator().manual_seed(0)

    def split(n: int) -> LMSplit:
        x = torch.randint(0, numbers, (n, 3), generator=g)
        x[:, 2] = numbers  # <sep>
        return LMSplit(x, torch.randint(0, int(si["modulus"]), (n,), generator=g), torch.arange(int(si["modulus"])))

    with torch_threads(int(si.get("threads") or 0)):
        trained = build_model(arithmetic_gpt2_config(int(si["layers"][0]), vocab_size=numbers + 3, pad_id=numbers + 1),
                              head="causal-lm", seed=0)
        model, adapter, cs, tb = trained.model, trained.adapter, int(si["cs_batch"]), int(si["transfer_batch"])
        evaluated = per_unit(lambda n: accuracy(model, split(n)), 64, 256, clock)

        def masks(n: int) -> None:
            rows = split(n * cs)
            ContinuousSparsification(l0_lambda=float(si["lambdas"][0]), epochs=1, lr=float(si["cs_lr"]), batch_size=cs,
                                     include=tuple(si["cs_include"])).fit(
                model, adapter, batches=lambda _: [(rows.input_ids[i:i + cs], rows.targets[i:i + cs])
                                                   for i in range(0, len(rows), cs)],
                loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]), evaluate=lambda m: 0.0, seed=0)

        sub = Subnetwork.from_weight_masks(adapter, {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.05
                                                     for n in adapter.weight_matrices()})
        transfer = build_transfer_model(model, "subnetwork", seed=0, subnetwork=sub).model
        settings = TrainSettings(epochs=1, lr=float(si["transfer_lr"]), batch_size=tb, eval_batch_size=8)
        train = per_unit(lambda n: train_model(transfer, split(n * tb), split(8), None, settings, seed=0,
                                               keep_best=False), 1, 4, clock) / tb
        return {"gpt2_eval_row": evaluated, "gpt2_mask_row": per_unit(masks, 1, 4, clock) / cs, "gpt2_train_row": train}


def circuits_rates(cs: Mapping[str, Any], clock: Clock = time.perf_counter) -> dict[str, float]:
    """``tiny_*`` on the circuits study's model shape (untrained: the cost does not depend on the weights), task
    and batch sizes, with its threads: training, edge- and node-pruning steps, and pairs through an edge evaluator."""
    import torch

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.experiments.circuits.steps import model_shape, task_config, train_settings
    from subnetlab.experiments.circuits.training import TrainSettings, build_induction_model, train_induction_model
    from subnetlab.methods.edge_pruning.config import preset_config as edge_config
    from subnetlab.methods.edge_pruning.data import circuit_data
    from subnetlab.methods.edge_pruning.train import prune_edges
    from subnetlab.methods.head_pruning.ablation import mean_activations
    from subnetlab.methods.head_pruning.config import preset_config as node_config
    from subnetlab.methods.head_pruning.train import prune
    from subnetlab.methods.l0.data import PruningData
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.graph import Graph
    from subnetlab.runtime import torch_threads
    from subnetlab.tasks.induction import induction_tokenizer, make_induction_task

    task_cfg, tr, batch = task_config(dict(cs)), train_settings(dict(cs)), int(cs["circuit"]["batch_size"])
    edge_opts = dict((cs.get("edge_pruning") or {}).get("overrides") or {})
    node_opts = dict((cs.get("node_pruning") or {}).get("overrides") or {})
    with torch_threads(max(0, int(cs.get("threads") or 0))):
        model = build_induction_model(task_cfg, model_shape(dict(cs)), 0)
        train = per_unit(lambda n: train_induction_model(model, task_cfg, TrainSettings(
            steps=n, batch_size=tr.batch_size, lr=tr.lr, eval_every=n, eval_size=1)), 2, 8, clock)
        tokenizer, adapter = induction_tokenizer(task_cfg.vocab_size), get_adapter(model)
        task = make_induction_task(n_train=max(batch, int(edge_config("demo", 0.9, seed=0, **edge_opts).batch_size)),
                                   n_eval=batch, seed=0, **dict(cs["task"])).bind(tokenizer)
        graph = Graph.from_adapter(adapter)
        evaluator = edge_evaluator(model, adapter, graph, task, tokenizer, "eval", batch_size=batch)
        keep = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(0)) < 0.5
        pair = per_unit(lambda n: [evaluator(keep) for _ in range(n)], 1, 4, clock) / batch
        edges = circuit_data(task, tokenizer, "train")
        edge = per_unit(lambda n: prune_edges(model, adapter, edges, edge_config(
            "demo", 0.9, seed=0, **{**edge_opts, "warmup_steps": n, "total_steps": n})), 2, 8, clock)
        nodes = PruningData.from_task(task, tokenizer, "train", max_length=task_cfg.length)
        means = mean_activations(model, adapter, nodes, min(batch, nodes.size))
        node = per_unit(lambda n: prune(model, adapter, nodes, node_config(
            "demo", 0.7, seed=0, **{**node_opts, "warmup_steps": n, "total_steps": n}), ablation=means), 2, 8, clock)
    return {"tiny_train_step": train, "tiny_prune_step": edge, "tiny_node_step": node, "tiny_eval_pair": pair}


def sweep_start_rate(clock: Clock = time.perf_counter) -> float:
    """Seconds a sweep of worker processes takes to start: its fork server imports torch, transformers and the jobs."""
    import subprocess
    import sys

    t0 = clock()
    subprocess.run([sys.executable, "-c", "import subnetlab.runs.prune, subnetlab.runs.lottery, transformers, torch"],
                   check=True, capture_output=True)
    return clock() - t0


RATES: dict[str, Callable[..., dict[str, float]]] = {
    "heuristic-core": heuristic_core_rates, "subtask-induction": gpt2_rates, "lottery": lottery_rates,
    "circuits": circuits_rates}


def calibrate(settings: Mapping[str, Mapping[str, Any]], clock: Clock = time.perf_counter) -> Calibration:
    """Rates for every study in ``settings`` (``{"heuristic-core": ..., ...}``); the timed work's own stage lines
    stay silent."""
    from subnetlab import progress
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    started, rates, details = clock(), {}, {}
    with progress.quiet():
        for name, study in settings.items():
            t0 = clock()
            rates.update(RATES[name](study, clock=clock))
            details[f"{name}_seconds"] = round(clock() - t0, 2)
        if any(s.get("backend", "local") != "local" for s in settings.values()):
            rates["sweep_start"] = sweep_start_rate(clock)
    return Calibration(rates, clock() - started, details)


__all__ = ["Calibration", "RATES", "calibrate", "circuits_rates", "gpt2_rates", "heuristic_core_rates",
           "lottery_rates", "per_unit", "sweep_start_rate"]
