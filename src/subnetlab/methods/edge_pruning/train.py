"""Edge Pruning: learn which edges of the computation graph a task needs.

The model stays frozen; only hard-concrete log-alphas (one per edge, and one
per writer node when ``node_masks``) and the Lagrange multipliers are trained.
Each step, as in Edge Pruning (Bhaskar et al., 2024)::

    log p_full = log_softmax(full model's logits at the prediction position)   # cached per example
    m = z_edge * z_node[writer]        (one hard-concrete sample per forward)
    loss = KL(p_full || p_circuit) + lambda1 (t - s) + lambda2 (t - s)^2  (+ the same for nodes)

with ``s`` the edge sparsity, ``t`` the target rising linearly over the
warm-up; a removed edge's reader sees the corrupted prompt's (or the mean, or
zero) output of its writer (``intervene.edges``). The distribution, the
Lagrangian, the schedule, the full-model cache, the data order and the
checkpoint file are ``methods.l0``'s. A rerun with ``run_dir``
resumes from the last checkpoint; on the CPU the result is bit-identical.

    result = prune_edges(model, adapter, data, preset_config("demo", 0.9, seed=1), run_dir=out)
    result.selection.edges  # [edges] 0/1 over result.graph
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.edges import EdgeMasks, WriterValues, apply_edges, capture_writers, writer_means
from subnetlab.methods.edge_pruning.config import EdgePruneConfig
from subnetlab.tasks.circuits.pairs import corrupted_inputs
from subnetlab.methods.edge_pruning.select import EdgeSelection, select_connected_edges, select_top_edges
from subnetlab.methods.l0.checkpoint import CHECKPOINT, TrainingState, load_checkpoint, save_checkpoint
from subnetlab.methods.l0.data import DataOrder, PruningData, to_device
from subnetlab.methods.l0.distribution import HardConcreteMask
from subnetlab.methods.l0.objective import (FullModelOutputs, Lagrangian, NonFiniteLoss, check_finite,
                                                       kl_full_to_pruned)
from subnetlab.methods.l0.schedule import LinearSchedule
from subnetlab.methods.head_pruning.train import _Frozen
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph
from subnetlab.optim import lr_factor
from subnetlab.progress import stage, track
from subnetlab.runtime import model_device

StepCallback = Callable[[int], None]


@dataclass
class EdgePruneResult:
    config: EdgePruneConfig
    graph: Graph
    selection: EdgeSelection
    log_alpha_edges: Tensor
    log_alpha_nodes: Tensor | None
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0


class EdgePruner:
    """Training state and one optimisation step; ``prune_edges`` drives it, benchmarks time it."""

    def __init__(self, model: nn.Module, adapter: Adapter, data: PruningData, config: EdgePruneConfig,
                 values: WriterValues | None = None, teacher: Tensor | None = None) -> None:
        self.model, self.adapter, self.data, self.config = model, adapter, data, config
        self.graph = Graph.from_adapter(adapter, config.embedding_nodes)
        self.device = model_device(model)
        self.values = values
        self.teacher_table = teacher
        self.schedule = config.make_schedule()
        self.node_schedule = (LinearSchedule(config.node_sparsity, config.warmup_steps, config.total_steps)
                              if config.node_sparsity else None)
        init = dict(init_log_alpha=config.init_log_alpha, init_std=config.init_std)
        self.edges = HardConcreteMask(self.graph.num_edges, seed=config.seed, **init).to(self.device)
        self.nodes = (HardConcreteMask(len(self.graph.writers), seed=config.seed + 1_000_003, **init).to(self.device)
                      if config.node_masks else None)
        self.writer_of = torch.tensor([w for w, _ in self.graph.edges], dtype=torch.long, device=self.device)
        self.lag_edges = Lagrangian().to(self.device)
        self.lag_nodes = Lagrangian().to(self.device) if self.node_schedule is not None else None
        alphas = [self.edges.log_alpha] + ([self.nodes.log_alpha] if self.nodes is not None else [])
        lambdas = list(self.lag_edges.parameters()) + (list(self.lag_nodes.parameters()) if self.lag_nodes else [])
        self.optimizer = torch.optim.Adam([{"params": alphas, "lr": config.lr},
                                           {"params": lambdas, "lr": config.lambda_lr, "maximize": True}],
                                          foreach=False)
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.order = DataOrder(data.size, config.batch_size, config.seed)
        self.history: list[dict[str, Any]] = []
        self._frozen = _Frozen(model)

    # -- masks --------------------------------------------------------------------------------
    def masks(self) -> Tensor:
        """One draw (training) or the deterministic masks (eval) of every edge, node masks folded in."""
        edges = self.edges()
        return edges if self.nodes is None else edges * self.nodes()[self.writer_of]

    def selection(self, sparsity: float | None = None) -> EdgeSelection:
        """The circuit at ``sparsity`` (default: the target) from the deterministic masks."""
        sparsity = self.config.sparsity if sparsity is None else sparsity
        scores = self.edges.deterministic()
        tiebreak = self.edges.log_alpha.detach().cpu().clone()
        undecided, masks = self.edges.undecided(), self.edges.size
        if self.nodes is not None:
            writer = self.writer_of.cpu()
            scores = scores * self.nodes.deterministic()[writer]
            tiebreak = tiebreak + self.nodes.log_alpha.detach().cpu()[writer]
            undecided, masks = undecided + self.nodes.undecided(), masks + self.nodes.size
        if self.config.selection == "connected":
            edges = select_connected_edges(self.graph, scores, tiebreak, sparsity,
                                           corrupted=self.config.ablation == "corrupted")
        else:
            edges = select_top_edges(scores, tiebreak, sparsity)
        return EdgeSelection(edges, undecided, masks)

    # -- context ----------------------------------------------------------------------------------
    def __enter__(self) -> "EdgePruner":
        self._frozen.__enter__()
        try:
            if self.config.ablation == "mean" and self.values is None:
                batches = (to_device(self.data.model_inputs(self.data.batch_at(idx)), self.device)
                           for idx in self.data.batches(self.config.eval_batch_size))
                self.values = writer_means(self.model, self.adapter, batches)
            self.edges.train()
            if self.nodes is not None:
                self.nodes.train()
            self.ctl: EdgeMasks = apply_edges(self.model, self.adapter, self.graph, values=self.values,
                                              source=self.masks).__enter__()
            self.teacher = FullModelOutputs(self.model, self.ctl, self.data, "cache", self.config.eval_batch_size,
                                            table=self.teacher_table)
            self.teacher.prepare()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        ctl = getattr(self, "ctl", None)
        if ctl is not None:
            ctl.remove()
        self.edges.eval()
        if self.nodes is not None:
            self.nodes.eval()
        self._frozen.__exit__()

    # -- one step ----------------------------------------------------------------------------------
    def step(self, step: int) -> float:
        """Optimizer step ``step`` (0-based); returns the KL."""
        cfg = self.config
        target = self.schedule.target(step)
        factor = lr_factor(step, total=cfg.total_steps, warmup=cfg.lr_warmup_steps, decay=cfg.lr_decay)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * factor
        self.optimizer.zero_grad(set_to_none=True)
        indices = self.order.indices(step)
        batch = to_device(self.data.batch_at(indices), self.device)
        if cfg.ablation == "corrupted":
            self.ctl.enabled = False  # the corrupted prompt runs through the full model
            try:
                self.ctl.values = capture_writers(self.model, self.adapter, corrupted_inputs(batch))
            finally:
                self.ctl.enabled = True
        log_p_full = self.teacher.log_probs(indices, batch)
        outputs = self.model(**self.data.model_inputs(batch))  # draws one mask sample (source=masks)
        kl = kl_full_to_pruned(log_p_full, self.data.task_logits(outputs, batch))
        estimate = "expected_sparsity" if cfg.sparsity_estimate == "expected" else "sample_sparsity"
        sparsity = getattr(self.edges, estimate)()
        loss = kl + self.lag_edges(target, sparsity)
        if self.lag_nodes is not None:
            loss = loss + self.lag_nodes(self.node_schedule.target(step), getattr(self.nodes, estimate)())
        check_finite(loss, step + 1)
        loss.backward()
        self.optimizer.step()
        done = step + 1
        if done % max(1, cfg.total_steps // 100) == 0 or done == cfg.total_steps:
            self.history.append({"step": done, "target": round(target, 6), "kl": float(kl.detach()),
                                 "expected_sparsity": float(self.edges.expected_sparsity().detach()),
                                 "lambda1": float(self.lag_edges.lambda1.detach()),
                                 "lambda2": float(self.lag_edges.lambda2.detach()), "lr_factor": factor})
        return float(kl.detach())

    # -- checkpoints -------------------------------------------------------------------------------
    def _stateful(self) -> dict[str, Any]:
        parts = {"edges": self.edges, "nodes": self.nodes}
        return {k: v for k, v in parts.items() if v is not None}

    def save(self, run_dir: Path, step: int) -> None:
        tensors: dict[str, Tensor] = {}
        for name, masks in self._stateful().items():
            tensors[f"log_alpha_{name}"] = masks.log_alpha.detach()
            tensors[f"{name}_generator"] = masks.generator_state()
        for name, lag in (("edges", self.lag_edges), ("nodes", self.lag_nodes)):
            if lag is not None:
                tensors[f"lambda1_{name}"], tensors[f"lambda2_{name}"] = lag.lambda1.detach(), lag.lambda2.detach()
        info = {"config": self.config.to_dict(), "history": self.history, "graph": self.graph.shape()}
        save_checkpoint(run_dir, TrainingState(step, tensors, {}, info), self.optimizer.state_dict())

    def restore(self, run_dir: Path) -> int:
        state = load_checkpoint(run_dir)
        if state is None:
            return 0
        if state.info.get("config") != self.config.to_dict():
            raise SubnetlabError(f"{run_dir / CHECKPOINT}: written by a different edge pruning config; "
                                 "choose another output directory", setting="out")
        t = state.tensors
        with torch.no_grad():
            for name, masks in self._stateful().items():
                masks.log_alpha.copy_(t[f"log_alpha_{name}"])
                masks.set_generator_state(t[f"{name}_generator"])
            for name, lag in (("edges", self.lag_edges), ("nodes", self.lag_nodes)):
                if lag is not None:
                    lag.lambda1.copy_(t[f"lambda1_{name}"])
                    lag.lambda2.copy_(t[f"lambda2_{name}"])
        self.optimizer.load_state_dict(state.optimizer)
        self.history = list(state.info.get("history", []))
        return state.step


def prune_edges(model: nn.Module, adapter: Adapter, data: PruningData, config: EdgePruneConfig, *,
                values: WriterValues | None = None, run_dir: str | Path | None = None,
                on_step: StepCallback | None = None, teacher: Tensor | None = None,
                init_log_alpha_edges: Tensor | None = None) -> EdgePruneResult:
    """Train edge masks on the frozen ``model`` to ``config.sparsity`` and select the circuit.

    ``values``: the ablation's writer values when they are fixed (means computed elsewhere); corrupted
    ablation captures them per batch from the data's corrupted prompts. ``on_step(step)`` runs after each
    step and its checkpoint (tests use it to simulate a kill). ``teacher``: the full model's table.
    ``init_log_alpha_edges``: ``[edges]`` starting log-alphas (a warm start from attribution scores,
    ``methods.attribution.warm_start``) instead of the config's constant; a resumed run keeps its checkpoint's.
    """
    if config.batch_size > data.size:
        raise SubnetlabError(f"batch size {config.batch_size} is larger than the {data.size} training examples",
                             setting="batch_size")
    pruner = EdgePruner(model, adapter, data, config, values, teacher)
    run_dir = Path(run_dir) if run_dir is not None else None
    start = pruner.restore(run_dir) if run_dir is not None else 0
    if init_log_alpha_edges is not None and not start:
        if tuple(init_log_alpha_edges.shape) != (pruner.graph.num_edges,):
            raise SubnetlabError(f"{init_log_alpha_edges.numel()} starting log-alphas for {pruner.graph.num_edges} edges",
                                 setting="init_from")
        with torch.no_grad():
            pruner.edges.log_alpha.copy_(init_log_alpha_edges.to(pruner.edges.log_alpha))
    if start:
        stage(f"resuming edge pruning at step {start} of {config.total_steps}")
    began = time.perf_counter()
    with pruner:
        for step in track(range(start, config.total_steps), total=config.total_steps - start,
                          description="edge pruning"):
            try:
                pruner.step(step)
            except NonFiniteLoss as e:
                kept = run_dir / CHECKPOINT if run_dir is not None else None
                where = f"; the last good checkpoint is {kept}" if kept is not None and kept.exists() else ""
                raise NonFiniteLoss(f"edge pruning stopped: {e}{where}") from None
            done = step + 1
            if run_dir is not None and (done % config.checkpoint_every == 0 or done == config.total_steps):
                pruner.save(run_dir, done)
            if on_step is not None:
                on_step(done)
    nodes = pruner.nodes.log_alpha.detach().cpu().clone() if pruner.nodes is not None else None
    return EdgePruneResult(config, pruner.graph, pruner.selection(), pruner.edges.log_alpha.detach().cpu().clone(),
                           nodes, pruner.history, time.perf_counter() - began, start)
