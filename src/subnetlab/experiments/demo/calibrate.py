"""A few seconds of the demos' real work, timed on this machine: seconds per unit of ``estimate.UNITS``.

MiniLM runs in this process with its threads (the Heuristic Core demo runs its
jobs here, ``backend="local"``): hard-concrete steps through ``Pruner.step``
(mean ablation, cached teacher) on real synthetic-NLI batches of the demo's
batch size and length, fine-tuning steps through ``finetune.step.train_step``,
and the teacher's forward pass as the evaluation rate. The arithmetic GPT-2
runs with the Subtask Induction demo's threads per job: weight-mask steps
through ``ContinuousSparsification.fit``, transfer-training rows through
``transfer.train.train_model`` on a model built by ``build_transfer_model``,
and evaluation rows through ``transfer.train.accuracy``. Every step is timed
after one warm-up step; the median counts. The circuits demo's tiny model
runs untrained at its shape and threads: training and edge-pruning steps
through ``train_induction_model`` and ``prune_edges``, evaluation pairs
through ``edge_evaluator`` (``circuits_rates``). The lottery demo's MiniLM: its
loading, fine-tuning rows, evaluation examples and attention-type readings
(``lottery_rates``); and, when a study runs its sweeps in worker processes, how
long such a sweep takes to start (``sweep_start_rate``). Evaluation is timed
through ``methods.evaluate`` itself (tokenising and scoring included).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Calibration:
    """Seconds per unit (``rates``), the wall time calibration took, and what was timed."""

    rates: dict[str, float]
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)


def _median_time(fn: Callable[[int], Any], repeats: int, clock: Callable[[], float], budget: float | None = None) -> float:
    """Median seconds of ``fn(i)`` over up to ``repeats`` calls after one warm-up call; stops early (after at
    least one timed call) once ``budget`` seconds are spent, so a busy machine does not stretch calibration."""
    started = clock()
    fn(0)  # warm-up: first-call allocations
    times = []
    for i in range(1, repeats + 1):
        t0 = clock()
        fn(i)
        times.append(clock() - t0)
        if budget is not None and clock() - started > budget:
            break
    return statistics.median(times)


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _evaluation_rate(model: Any, tokenizer: Any, task: Any, batch_size: int, max_length: int,
                     clock: Callable[[], float], examples: int = 128) -> float:
    """Seconds per example of ``methods.evaluate.evaluate`` on ``examples`` rows of the task's first evaluation
    split (after one warm-up call on a few rows)."""
    from subnetlab.methods.evaluate import evaluate

    split = list(task.eval_splits)[0]
    n = min(examples, len(task.examples(split)))
    evaluate(model, tokenizer, task, [split], batch_size, max_length, limit=min(8, n), show_progress=False)
    t0 = clock()
    evaluate(model, tokenizer, task, [split], batch_size, max_length, limit=n, show_progress=False)
    return (clock() - t0) / n


def sweep_start_rate(clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds a sweep of worker processes takes to start: its fork server, a fresh Python importing torch,
    transformers and the job modules (jobs are then forked from it in milliseconds: ``executor.processes``)."""
    import subprocess
    import sys

    t0 = clock()
    subprocess.run([sys.executable, "-c", "import subnetlab.runs.prune, subnetlab.runs.lottery, transformers, torch"],
                   check=True, capture_output=True)
    return clock() - t0


def minilm_rates(hc: Mapping[str, Any], steps: int = 3, clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """``minilm_*`` rates at the Heuristic Core demo's model, data, batch sizes and lengths."""
    import torch

    from subnetlab.intervene import collect_means
    from subnetlab.methods.finetune.step import train_step
    from subnetlab.methods.head_pruning.config import preset_config
    from subnetlab.methods.l0.data import PruningData
    from subnetlab.methods.head_pruning.train import Pruner
    from subnetlab.methods.finetune.model import model_for_task
    from subnetlab.optim import make_optimizer
    from subnetlab.runtime import torch_threads
    from subnetlab.tasks.spec import TaskSpec

    _quiet_transformers()
    study = hc["studies"][0]
    prune = {k: v for k, v in (hc.get("prune") or {}).items() if v is not None}
    cfg = preset_config(hc["prune_preset"], 0.5, seed=0, **prune)
    ft = hc["finetune"]
    batch = int(cfg.batch_size) * int(cfg.accumulation)
    rows = max(batch * (steps + 1), int(cfg.eval_batch_size))
    options = {**(study.get("task_options") or {}), "n_train": rows}  # the study's generator, fewer rows
    task = TaskSpec(study["task"], options).build()
    loaded = model_for_task(hc["model"], task, seed=0)
    model, adapter = loaded.model, loaded.adapter
    tok = loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer
    data = PruningData.from_task(task, tok, "train", cfg.max_length, rows)
    means = collect_means(model, adapter, [data.batch_at(list(range(min(rows, 16))))])
    config = preset_config(hc["prune_preset"], 0.5, seed=0, **{**prune, "train_limit": rows, "teacher": "cache",
                                                               "warmup_steps": 1000, "total_steps": 1000})
    pruner = Pruner(model, adapter, data, config, means).__enter__()  # the teacher: one forward over every row
    jobs: dict[str, float] = {}
    in_jobs = hc.get("backend", "local") != "local"  # sweep jobs run with one thread each (executor cpus_per_job)
    try:
        gate = _median_time(pruner.step, steps, clock, budget=2.0)
        if in_jobs:
            with torch_threads(1):
                jobs["minilm_job_gate_step"] = _median_time(pruner.step, steps, clock, budget=2.0)
                jobs["minilm_job_eval_example"] = _evaluation_rate(model, tok, task, int(cfg.eval_batch_size),
                                                                   int(cfg.max_length), clock)
    finally:
        pruner.__exit__()
    # evaluation through ``methods.evaluate`` (tokenising, the forward pass, scoring) on the in-domain split
    eval_rate = _evaluation_rate(model, tok, task, int(cfg.eval_batch_size), int(cfg.max_length), clock)
    model.train()
    opt = make_optimizer(model, "adamw", lr=float(ft.get("lr", 5e-5)), weight_decay=0.01, no_decay_1d=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    ft_batch = int(ft.get("batch_size", batch))
    ft_length = int(ft.get("max_length", cfg.max_length))

    def ft_step(i: int) -> None:
        idx = [(i * ft_batch + j) % rows for j in range(ft_batch)]
        train_step(model, task, task.batch_at(tok, "train", idx, max_length=ft_length), opt, sched, 1.0, i)

    finetune = _median_time(ft_step, max(2, steps - 1), clock, budget=2.0)
    model.eval()
    return {"minilm_gate_step": gate, "minilm_finetune_step": finetune, "minilm_eval_example": eval_rate, **jobs}


def gpt2_rates(si: Mapping[str, Any], batches: int = 4, clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """``gpt2_*`` rates on the Subtask Induction demo's GPT-2 (first depth) with its threads per job."""
    import torch

    from subnetlab.methods.continuous_sparsification import ContinuousSparsification
    from subnetlab.methods.finetune.model import arithmetic_gpt2_config
    from subnetlab.models import build_model
    from subnetlab.runtime import torch_threads
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.transfer import LMSplit, TrainSettings, build_transfer_model, train_model
    from subnetlab.transfer.train import accuracy, last_logits, loss_on

    n_numbers = int(si["max_number"])
    vocab = n_numbers + 3
    g = torch.Generator().manual_seed(0)

    def split(n: int) -> LMSplit:
        x = torch.randint(0, n_numbers, (n, 3), generator=g)
        x[:, 2] = n_numbers  # <sep>
        return LMSplit(x, torch.randint(0, int(si["modulus"]), (n,), generator=g), torch.arange(int(si["modulus"])))

    with torch_threads(int(si.get("threads") or 1)):
        trained = build_model(arithmetic_gpt2_config(int(si["layers"][0]), vocab_size=vocab, pad_id=n_numbers + 1),
                              head="causal-lm", seed=0)
        adapter = trained.adapter
        ev = split(int(si["n_eval"]))
        t_eval = _median_time(lambda _: accuracy(trained.model, ev), 2, clock)
        eval_rate = t_eval / len(ev)
        # weight-mask training: one epoch of ``batches`` batches, evaluation stubbed out (timed above)
        cs_batch = int(si["cs_batch"])
        cs_rows = split(cs_batch * batches)
        strategy = ContinuousSparsification(l0_lambda=float(si["lambdas"][0]), epochs=1, lr=float(si["cs_lr"]),
                                            batch_size=cs_batch, include=tuple(si["cs_include"]))
        perm = list(range(0, len(cs_rows), cs_batch))
        t0 = clock()
        strategy.fit(trained.model, adapter,
                     batches=lambda _: [(cs_rows.input_ids[i:i + cs_batch], cs_rows.targets[i:i + cs_batch]) for i in perm],
                     loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]), evaluate=lambda m: 0.0, seed=0)
        mask_rate = (clock() - t0) / len(cs_rows)
        # transfer training: a frozen 5% subnetwork inside a re-initialised model (the demo's main condition)
        sub = Subnetwork.from_weight_masks(
            adapter, {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.05 for n in adapter.weight_matrices()})
        tm = build_transfer_model(trained.model, "subnetwork", seed=0, subnetwork=sub)
        tr_batch = int(si["transfer_batch"])
        rows = split(tr_batch * batches)
        tiny = split(8)
        settings = TrainSettings(epochs=1, lr=float(si["transfer_lr"]), batch_size=tr_batch, eval_batch_size=8)
        train_model(tm.model, split(tr_batch), tiny, None, settings, seed=0, keep_best=False)  # warm-up
        t0 = clock()
        train_model(tm.model, rows, tiny, None, settings, seed=0, keep_best=False)
        train_rate = (clock() - t0) / len(rows)
    return {"gpt2_eval_row": eval_rate, "gpt2_mask_row": mask_rate, "gpt2_train_row": train_rate}


def circuits_rates(cs: Mapping[str, Any], clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """``tiny_*`` rates on the circuits demo's model shape, task and batch sizes, untrained (its cost does not
    depend on its weights), with the study's threads. Training and edge-pruning steps are timed as the
    difference of a short and a longer run of the real functions (``train_induction_model``, ``prune_edges``,
    ``head_pruning.train.prune`` for node-level pruning),
    so their fixed set-up cost cancels; evaluation pairs through ``edge_evaluator`` on one batch of pairs."""
    import tempfile
    from pathlib import Path

    import torch

    from subnetlab import progress
    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.experiments.circuits.steps import model_shape, task_config, train_settings
    from subnetlab.experiments.circuits.training import TrainSettings, build_induction_model, train_induction_model
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.data import circuit_data
    from subnetlab.methods.edge_pruning.train import prune_edges
    from subnetlab.methods.head_pruning.ablation import mean_activations
    from subnetlab.methods.head_pruning.config import preset_config as hc_config
    from subnetlab.methods.l0.data import PruningData
    from subnetlab.methods.head_pruning.train import prune
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.graph import Graph
    from subnetlab.runtime import torch_threads
    from subnetlab.tasks.induction import induction_tokenizer, make_induction_task

    few, more = 2, 8
    task_cfg, shape, train_cfg = task_config(dict(cs)), model_shape(dict(cs)), train_settings(dict(cs))
    batch = int(cs["circuit"]["batch_size"])
    # the timed runs announce their steps and means: not the demo's stages (``calibrate`` silences them all)
    with progress.quiet():
        with torch_threads(max(0, int(cs.get("threads") or 0))):
            model = build_induction_model(task_cfg, shape, 0)

            def train(n: int) -> float:
                t0 = clock()
                train_induction_model(model, task_cfg, TrainSettings(steps=n, batch_size=train_cfg.batch_size,
                                                                     lr=train_cfg.lr, eval_every=n, eval_size=1))
                return clock() - t0

            train(few)  # warm-up
            train_rate = max(train(more) - train(few), 0.0) / (more - few)
            tokenizer = induction_tokenizer(task_cfg.vocab_size)
            overrides = dict((cs.get("edge_pruning") or {}).get("overrides") or {})
            prune_batch = int(preset_config("demo", 0.9, seed=0, **overrides).batch_size)
            task = make_induction_task(n_train=max(batch, prune_batch), n_eval=batch, seed=0,
                                       **dict(cs["task"])).bind(tokenizer)
            adapter = get_adapter(model)
            graph = Graph.from_adapter(adapter)
            evaluate = edge_evaluator(model, adapter, graph, task, tokenizer, "eval", batch_size=batch)
            keep = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(0)) < 0.5
            eval_rate = _median_time(lambda _: evaluate(keep), 3, clock, budget=2.0) / batch
            data = circuit_data(task, tokenizer, "train")

            def edge_prune(n: int) -> float:
                config = preset_config("demo", 0.9, seed=0, **{**overrides, "warmup_steps": n, "total_steps": n})
                with tempfile.TemporaryDirectory() as tmp:
                    t0 = clock()
                    prune_edges(model, adapter, data, config, run_dir=Path(tmp) / "run")
                    return clock() - t0

            edge_prune(few)  # warm-up
            prune_rate = max(edge_prune(more) - edge_prune(few), 0.0) / (more - few)
            # node-level pruning (Heuristic Core's demo recipe on heads and MLPs, mean ablation), as the study runs it
            nodes = PruningData.from_task(task, tokenizer, "train", max_length=task_cfg.length)
            node_overrides = dict((cs.get("node_pruning") or {}).get("overrides") or {})
            means = mean_activations(model, adapter, nodes, min(batch, nodes.size))

            def node_prune(n: int) -> float:
                config = hc_config("demo", 0.7, seed=0, **{**node_overrides, "warmup_steps": n, "total_steps": n})
                t0 = clock()
                prune(model, adapter, nodes, config, ablation=means)
                return clock() - t0

            node_prune(few)  # warm-up
            node_rate = max(node_prune(more) - node_prune(few), 0.0) / (more - few)
    return {"tiny_train_step": train_rate, "tiny_prune_step": prune_rate, "tiny_node_step": node_rate,
            "tiny_eval_pair": eval_rate}


def lottery_rates(lot: Mapping[str, Any], clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """``lottery_*`` rates on the lottery demo's model, first task, batch size and length, with the threads its
    jobs get (one in worker processes; this process's otherwise): loading the model with the task's head, a
    fine-tuning step (``finetune.step.train_step``), s-pruning's importance on a batch (the study's criterion),
    evaluation (``methods.evaluate``) and the attention-type reading of one pair
    (``analysis.attention_types.head_types``)."""
    import torch

    from subnetlab.analysis.attention_types import head_types
    from subnetlab.methods.finetune.model import model_for_task
    from subnetlab.methods.finetune.step import train_step
    from subnetlab.methods.lottery.importance import classification_loss, get_criterion
    from subnetlab.models import load_model
    from subnetlab.optim import make_optimizer
    from subnetlab.runtime import torch_threads
    from subnetlab.tasks.spec import TaskSpec

    _quiet_transformers()
    in_workers = lot.get("backend", "local") != "local"
    task_name = lot["tasks"][0]
    batch, length = int(lot["batch_size"]), int(lot["max_length"])
    rows = 4 * batch
    options = {**dict(lot["task_options"].get(task_name) or {}), "n_train": rows}
    task = TaskSpec(task_name, options).build()
    rates: dict[str, float] = {}
    with torch_threads(1 if in_workers else 0):
        t0 = clock()
        loaded = model_for_task(lot["model"], task, seed=0)
        rates["lottery_model_load"] = clock() - t0
        model, tok = loaded.model, loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer
        opt = make_optimizer(model, "adamw", lr=float(lot["lr"]), weight_decay=0.01, no_decay_1d=True)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        model.train()

        def step(i: int) -> None:
            idx = [(i * batch + j) % rows for j in range(batch)]
            train_step(model, task, task.batch_at(tok, "train", idx, max_length=length), opt, sched, 1.0, i)

        rates["lottery_train_row"] = _median_time(step, 2, clock, budget=2.0) / batch
        model.eval()
        # s-pruning's importance: the study's criterion on one batch (gradients reach the gates, not the weights)
        criterion = get_criterion(lot["criterion"])
        adapter = loaded.adapter
        heads, mlps = torch.ones(adapter.num_layers, adapter.num_heads), torch.ones(adapter.num_layers)
        rows_batch = task.batch_at(tok, "train", list(range(batch)), max_length=length)
        rates["lottery_importance_row"] = _median_time(
            lambda _: criterion(model, adapter, rows_batch, classification_loss, heads, mlps), 2, clock) / batch
        rates["lottery_eval_example"] = _evaluation_rate(model, tok, task, 2 * batch, length, clock)
    eager = load_model(lot["model"], head="base", attn_implementation="eager")
    pairs = [(ex.text_a, ex.text_b or "") for ex in task.examples("train")[:3]]
    with torch.no_grad():
        rates["lottery_pattern_pair"] = _median_time(
            lambda i: head_types(eager.model, eager.tokenizer, [pairs[i % len(pairs)]], max_length=length), 2, clock)
    return rates


def calibrate(settings: Mapping[str, Mapping[str, Any]], clock: Callable[[], float] = time.perf_counter) -> Calibration:
    """Rates for every demo in ``settings`` (``{"heuristic-core": ..., "subtask-induction": ...}``); the timed work's
    own stage lines (a model given a new head, ...) are not the demo's, and stay silent."""
    from subnetlab import progress

    with progress.quiet():
        return _calibrate(settings, clock)


def _calibrate(settings: Mapping[str, Mapping[str, Any]], clock: Callable[[], float]) -> Calibration:
    started = clock()
    rates: dict[str, float] = {}
    details: dict[str, Any] = {}
    if "heuristic-core" in settings:
        t0 = clock()
        rates.update(minilm_rates(settings["heuristic-core"], clock=clock))
        details["minilm_seconds"] = round(clock() - t0, 2)
    if "subtask-induction" in settings:
        t0 = clock()
        rates.update(gpt2_rates(settings["subtask-induction"], clock=clock))
        details["gpt2_seconds"] = round(clock() - t0, 2)
    if "circuits" in settings:
        t0 = clock()
        rates.update(circuits_rates(settings["circuits"], clock=clock))
        details["circuits_seconds"] = round(clock() - t0, 2)
    if "lottery" in settings:
        t0 = clock()
        rates.update(lottery_rates(settings["lottery"], clock=clock))
        details["lottery_seconds"] = round(clock() - t0, 2)
    if any(s.get("backend", "local") != "local" for s in settings.values()):
        rates["sweep_start"] = sweep_start_rate(clock)
    return Calibration(rates, clock() - started, details)


__all__ = ["Calibration", "calibrate", "circuits_rates", "gpt2_rates", "lottery_rates", "minilm_rates",
           "sweep_start_rate"]
