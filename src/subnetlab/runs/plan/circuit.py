"""The steps of ``prune`` and ``circuit``: ``Pruner.step`` (head/MLP pruning), ``EdgePruner.step`` (edge pruning)
with the trainer's set-up, and ``attribute_batch`` (EAP, EAP-IG)."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from subnetlab.runs.plan.fake import fake_data
from subnetlab.runs.plan.settings import PlanSettings

PAPER_SPARSITY = {"head-pruning": 0.5, "edge-pruning": 0.95}
GRADIENT_METHODS = ("eap", "eap-ig", "eap-ig-activations", "clean-corrupted")  # attribute_batch's gradient path


def method_config(settings: PlanSettings) -> Any:
    """The method's settings for the run: its preset at the sparsity, the micro-batch and the accumulation."""
    sizes = {"batch_size": settings.micro, "accumulation": settings.batch // settings.micro}
    sparsity = settings.sparsity or PAPER_SPARSITY.get(settings.method, 0.5)
    if settings.method == "head-pruning":
        from subnetlab.methods.head_pruning.config import preset_config

        return preset_config(settings.preset, sparsity, max_length=settings.length, **sizes)
    if settings.method == "edge-pruning":
        from subnetlab.methods.edge_pruning.config import preset_config as edge_preset

        return edge_preset(settings.preset, sparsity, dtype=settings.dtype, checkpoint_blocks=settings.checkpoint_blocks,
                           **sizes)
    return None


def circuit_steps(settings: PlanSettings) -> tuple[int, str]:
    """Optimiser steps (pruning), or batches of pairs (attribution: one batch when ``examples`` is not given)."""
    config = method_config(settings)
    if config is not None:
        return int(config.total_steps), ""
    return math.ceil((settings.examples or settings.batch) / settings.batch), ""


def micro_batch_breaks(settings: PlanSettings) -> tuple[int, ...]:
    """The micro-batches at which the method's step changes with the micro-batch: the first that edge pruning
    checkpoints its blocks at (unset ``checkpoint_blocks``: ``AUTO_CHECKPOINT_TOKENS`` tokens a forward), or that
    attribution scores in position chunks at (unset ``position_chunk``: ``AUTO_CHUNK`` tokens a batch)."""
    if settings.method == "edge-pruning" and settings.checkpoint_blocks is None:
        from subnetlab.methods.edge_pruning.train import AUTO_CHECKPOINT_TOKENS

        return (AUTO_CHECKPOINT_TOKENS // settings.length + 1,)
    if settings.method in GRADIENT_METHODS and settings.position_chunk is None:
        from subnetlab.methods.attribution.scores import AUTO_CHUNK

        return (AUTO_CHUNK // settings.length + 1,)
    return ()


def pruning_step(model: Any, adapter: Any, settings: PlanSettings, live: Any = None) -> Callable[[int], None]:
    """Set up the method on ``model`` and return ``step(i)``, the method's own step; ``step(-1)`` tears down.

    The trainer (masks, multipliers, optimiser) is built with real tensors (``plan.memory.built_for_real``), which
    ``live`` counts."""
    from subnetlab.runs.plan.memory import built_for_real

    config = method_config(settings)
    data = fake_data(model, adapter, max(settings.batch, config.eval_batch_size), settings.length)
    if settings.method == "head-pruning":
        from subnetlab.intervene.activations import collect_means
        from subnetlab.methods.head_pruning.train import Pruner

        means = None
        if config.ablation == "mean":
            means = collect_means(model, adapter, (data.model_inputs(data.batch_at(range(settings.micro))),))
        with built_for_real():
            trainer = Pruner(model, adapter, data, config, ablation=means)
    else:
        from subnetlab.methods.edge_pruning.train import EdgePruner

        with built_for_real():
            trainer = EdgePruner(model, adapter, data, config)
            with torch.no_grad():  # undecided masks (a run's middle): every writer in the products, not a start's none
                trainer.edges.log_alpha.zero_()
    if live is not None:
        for group in trainer.optimizer.param_groups:
            for p in group["params"]:
                live.count(p)
    trainer.__enter__()

    def step(i: int) -> None:
        if i < 0:
            trainer.__exit__(None, None, None)
        else:
            trainer.step(i)

    return step


def exact_patched(model: Any, graph: Any, settings: PlanSettings) -> int:
    """The copies of the batch one patched forward of the plan's exact step holds: one forward's worth
    (``exact.copies_per_forward``) of the run's edges. The run's other forwards are the same forward on other
    edges, one at a time, so its peak is this step's; its FLOPs are the clean and corrupted forwards and a forward
    of the batch per edge (``plan.core``: step 0 patches one forward, step 1 two)."""
    from subnetlab.methods.attribution.exact import copies_per_forward

    config = model.config
    copies = settings.copies or copies_per_forward(max(len(b.readers) for b in graph.reader_blocks),
                                                   len(graph.writers), settings.batch, settings.length, int(config.hidden_size),
                                                   int(config.vocab_size),
                                                   torch.finfo(next(model.parameters()).dtype).bits // 8)
    return max(1, min(settings.edges or graph.num_edges, graph.num_edges, copies))


def attribution_step(model: Any, adapter: Any, settings: PlanSettings) -> Callable[[int], None]:
    from subnetlab.methods.attribution.scores import attribute_batch
    from subnetlab.models.graph import Graph
    from subnetlab.tasks.circuits.metrics import logit_difference
    from subnetlab.tasks.circuits.pairs import clean_inputs, corrupted_inputs

    graph = Graph.from_adapter(adapter)
    data = fake_data(model, adapter, settings.batch, settings.length)
    method = settings.method

    def step(i: int) -> None:
        if i < 0:
            return
        batch = data.batch_at(range(settings.batch))
        if method == "exact":  # one forward of patched copies, then two: the peak of any number (one at a time)
            from subnetlab.methods.attribution.exact import exact_batch

            copies = exact_patched(model, graph, settings)
            exact_batch(model, adapter, graph, clean_inputs(batch), corrupted_inputs(batch),
                        lambda logits, full: logit_difference(logits, batch), bytes_per_forward=1 << 60,
                        edges=range(min(graph.num_edges, settings.edges or graph.num_edges, copies * (1 + min(i, 1)))),
                        rows_per_forward=settings.batch * copies)
            return
        attribute_batch(model, adapter, graph, clean_inputs(batch), corrupted_inputs(batch),
                        lambda logits, full: logit_difference(logits, batch), method=method,  # type: ignore[arg-type]
                        steps=settings.ig_steps, position_chunk=settings.position_chunk)

    return step


__all__ = ["GRADIENT_METHODS", "PAPER_SPARSITY", "attribution_step", "circuit_steps", "exact_patched",
           "method_config",
           "micro_batch_breaks", "pruning_step"]
