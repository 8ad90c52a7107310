"""Seconds per unit of the demo's work (``estimate``), timed on this machine through the studies' public functions.

Each unit is the difference of a short and a longer run (``per_unit``), so set-up cancels, with the threads the
work gets in the demo: one per job when a study runs its sweeps in worker processes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch

from subnetlab import progress
from subnetlab.analysis.attention_types import head_types
from subnetlab.analysis.circuit_evaluation import edge_evaluator
from subnetlab.experiments.circuits import steps as circuits_steps
from subnetlab.experiments.circuits import training as circuits_training
from subnetlab.methods.continuous_sparsification import ContinuousSparsification
from subnetlab.methods.edge_pruning.config import preset_config as edge_config
from subnetlab.methods.edge_pruning.data import circuit_data
from subnetlab.methods.edge_pruning.train import prune_edges
from subnetlab.methods.evaluate import evaluate
from subnetlab.methods.finetune.model import arithmetic_gpt2_config, model_for_task
from subnetlab.methods.finetune.step import train_step
from subnetlab.methods.head_pruning.ablation import mean_activations
from subnetlab.methods.head_pruning.config import preset_config as node_config
from subnetlab.methods.head_pruning.train import prune
from subnetlab.methods.l0.data import PruningData
from subnetlab.methods.lottery.importance import classification_loss, get_criterion
from subnetlab.models import build_model, load_model
from subnetlab.models.adapters import get_adapter
from subnetlab.models.graph import Graph
from subnetlab.optim import make_optimizer
from subnetlab.runtime import torch_threads
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.induction import induction_tokenizer, make_induction_task
from subnetlab.tasks.spec import TaskSpec
from subnetlab.transfer import LMSplit, TrainSettings, build_transfer_model, train_model
from subnetlab.transfer.train import accuracy, last_logits, loss_on

Clock = Callable[[], float]


def per_unit(run: Callable[[int], Any], few: int, more: int, clock: Clock = time.perf_counter) -> float:
    """Seconds per unit of ``run(n)``: ``(t(more) - t(few)) / (more - few)`` after a warm-up ``run(few)``, >= 0."""
    def timed(n: int) -> float:
        t0 = clock()
        run(n)
        return clock() - t0

    timed(few)
    return max(timed(more) - timed(few), 0.0) / (more - few)


def job_threads(*settings: Mapping[str, Any] | None) -> int:
    """Torch threads of a sweep's job: one when a study runs its sweeps in worker processes, else unchanged (0)."""
    return int(any(s and s.get("backend", "local") != "local" for s in settings))


def minilm_rates(hc: Mapping[str, Any] | None, lot: Mapping[str, Any] | None,
                 clock: Clock = time.perf_counter) -> dict[str, float]:
    """``minilm_*``, one set for the Heuristic Core and the lottery (both fine-tune MiniLM), on the first one's task:
    a training row (``train_step``) and an evaluated row (``evaluate``, at the Heuristic Core's evaluation batch)
    in-process and in a job; in a job, loading the model, a pruning step (``head_pruning.prune``) and a row of the
    lottery's importance criterion; in-process, the attention types of one sentence pair (``head_types``)."""
    name = hc["studies"][0]["task"] if hc else lot["tasks"][0]
    opts = (hc["studies"][0].get("task_options") if hc else lot["task_options"].get(name)) or {}
    ft = hc["finetune"] if hc else {}
    batch, length = (ft["batch_size"], ft["max_length"]) if hc else (lot["batch_size"], lot["max_length"])
    eval_batch = int(ft.get("eval_batch_size") or 2 * batch)
    task, job = TaskSpec(name, {**opts, "n_train": 8 * batch}).build(), job_threads(hc, lot)
    t0 = clock()
    loaded = model_for_task((hc or lot)["model"], task, seed=0)
    rates = {"minilm_load": clock() - t0}
    model, adapter = loaded.model, loaded.adapter
    tok = loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer
    opt = make_optimizer(model, "adamw", lr=1e-5, weight_decay=0.01, no_decay_1d=True)
    sched, split = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0), list(task.eval_splits)[0]

    def train(n: int) -> None:
        model.train()
        for i in range(n):
            rows = task.batch_at(tok, "train", [(i * batch + j) % (8 * batch) for j in range(batch)], max_length=length)
            train_step(model, task, rows, opt, sched, 1.0, i)
        model.eval()

    for prefix, threads in (("minilm_", 0), ("minilm_job_", job)):
        with torch_threads(threads):
            rates[f"{prefix}train_row"] = per_unit(train, 1, 3, clock) / batch
            rates[f"{prefix}eval_row"] = per_unit(lambda n: evaluate(
                model, tok, task, [split], eval_batch, length, limit=n, show_progress=False), 16, 144, clock)
    with torch_threads(job):
        if hc:
            prune_opts = {k: v for k, v in (hc.get("prune") or {}).items() if v is not None}
            config = lambda n: node_config(hc["prune_preset"], 0.5, seed=0, **{  # noqa: E731
                **prune_opts, "train_limit": 8 * batch, "warmup_steps": n, "total_steps": n})
            data = PruningData.from_task(task, tok, "train", config(1).max_length, 8 * batch)
            means = mean_activations(model, adapter, data, 8 * batch)
            rates["minilm_job_gate_step"] = per_unit(lambda n: prune(model, adapter, data, config(n), ablation=means),
                                                     2, 6, clock)
        if lot:
            rows, criterion = task.batch_at(tok, "train", list(range(batch)), max_length=length), get_criterion(
                lot["criterion"])
            gates = torch.ones(adapter.num_layers, adapter.num_heads), torch.ones(adapter.num_layers)
            rates["minilm_job_importance_row"] = per_unit(lambda n: [criterion(
                model, adapter, rows, classification_loss, *gates) for _ in range(n)], 1, 3, clock) / batch
    if lot:
        eager = load_model(lot["model"], head="base", attn_implementation="eager")
        pairs = [(ex.text_a, ex.text_b or "") for ex in task.examples("train")[:4]]
        with torch.no_grad():
            rates["minilm_pattern_pair"] = per_unit(
                lambda n: head_types(eager.model, eager.tokenizer, pairs[:n], max_length=length), 1, 4, clock)
    return rates


def gpt2_rates(si: Mapping[str, Any], clock: Clock = time.perf_counter) -> dict[str, float]:
    """``gpt2_*`` on the first depth's GPT-2 with the study's threads: an evaluated row (``accuracy``), a weight-mask
    row (``ContinuousSparsification.fit``) and a transfer row (``train_model`` around a frozen 5% subnetwork)."""
    numbers, g, cs, tb = int(si["max_number"]), torch.Generator().manual_seed(0), int(si["cs_batch"]), int(
        si["transfer_batch"])

    def split(n: int) -> LMSplit:
        x = torch.randint(0, numbers, (n, 3), generator=g)
        x[:, 2] = numbers  # <sep>
        return LMSplit(x, torch.randint(0, int(si["modulus"]), (n,), generator=g), torch.arange(int(si["modulus"])))

    def masks(n: int) -> None:
        rows = split(n * cs)
        ContinuousSparsification(l0_lambda=float(si["lambdas"][0]), epochs=1, lr=float(si["cs_lr"]), batch_size=cs,
                                 include=tuple(si["cs_include"])).fit(
            model, adapter, batches=lambda _: [(rows.input_ids[i:i + cs], rows.targets[i:i + cs])
                                               for i in range(0, len(rows), cs)],
            loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]), evaluate=lambda m: 0.0, seed=0)

    with torch_threads(int(si.get("threads") or 0)):
        built = build_model(arithmetic_gpt2_config(int(si["layers"][0]), vocab_size=numbers + 3, pad_id=numbers + 1),
                            head="causal-lm", seed=0)
        model, adapter = built.model, built.adapter
        sub = Subnetwork.from_weight_masks(adapter, {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.05
                                                     for n in adapter.weight_matrices()})
        transfer = build_transfer_model(model, "subnetwork", seed=0, subnetwork=sub).model
        settings = TrainSettings(epochs=1, lr=float(si["transfer_lr"]), batch_size=tb, eval_batch_size=8)
        return {"gpt2_eval_row": per_unit(lambda n: accuracy(model, split(n)), 64, 256, clock),
                "gpt2_mask_row": per_unit(masks, 1, 4, clock) / cs,
                "gpt2_train_row": per_unit(lambda n: train_model(transfer, split(n * tb), split(8), None, settings,
                                                                 seed=0, keep_best=False), 1, 4, clock) / tb}


def circuits_rates(cs: Mapping[str, Any], clock: Clock = time.perf_counter) -> dict[str, float]:
    """``tiny_*`` on the circuits study's model shape (untrained: the cost does not depend on the weights), task and
    batch sizes, with its threads: training, edge- and node-pruning steps, and pairs through an edge evaluator."""
    task_cfg, tr = circuits_steps.task_config(dict(cs)), circuits_steps.train_settings(dict(cs))
    batch = int(cs["circuit"]["batch_size"])
    edge_opts = dict((cs.get("edge_pruning") or {}).get("overrides") or {})
    node_opts = dict((cs.get("node_pruning") or {}).get("overrides") or {})
    with torch_threads(max(0, int(cs.get("threads") or 0))):
        model = circuits_training.build_induction_model(task_cfg, circuits_steps.model_shape(dict(cs)), 0)
        train = per_unit(lambda n: circuits_training.train_induction_model(model, task_cfg, replace(
            tr, steps=n, eval_every=n, eval_size=1)), 2, 8, clock)
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
    t0 = clock()
    subprocess.run([sys.executable, "-c", "import subnetlab.runs.prune, subnetlab.runs.lottery, transformers, torch"],
                   check=True, capture_output=True)
    return clock() - t0


def calibrate(settings: Mapping[str, Mapping[str, Any]], clock: Clock = time.perf_counter) -> dict[str, float]:
    """Rates for every study in ``settings`` (``{"heuristic-core": ..., ...}``), their timed work kept silent."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    rates: dict[str, float] = {}
    with progress.quiet():
        if "heuristic-core" in settings or "lottery" in settings:
            rates.update(minilm_rates(settings.get("heuristic-core"), settings.get("lottery"), clock))
        for name, timer in (("subtask-induction", gpt2_rates), ("circuits", circuits_rates)):
            if name in settings:
                rates.update(timer(settings[name], clock))
        if job_threads(*settings.values()):
            rates["sweep_start"] = sweep_start_rate(clock)
    return rates


__all__ = ["calibrate", "circuits_rates", "gpt2_rates", "job_threads", "minilm_rates", "per_unit", "sweep_start_rate"]
