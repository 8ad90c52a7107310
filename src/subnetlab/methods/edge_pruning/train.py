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

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.checkpoint import checkpointed_blocks
from subnetlab.intervene.edges import EdgeMasks, WriterValues, apply_edges, capture_writers, writer_means
from subnetlab.methods.edge_pruning.config import EdgePruneConfig
from subnetlab.methods.edge_pruning.repair import CircuitLoss
from subnetlab.methods.edge_pruning.select import (
    EdgeSelection,
    Repair,
    greedy_repair,
    select_connected_edges,
    select_top_edges,
)
from subnetlab.methods.edge_pruning.tensors import (
    node_tensors,
    padding_size,
    per_tensor_edges,
    per_tensor_nodes,
    tensor_sums,
)
from subnetlab.methods.l0.data import PruningData, to_device
from subnetlab.methods.l0.distribution import HardConcreteMask
from subnetlab.methods.l0.objective import Lagrangian
from subnetlab.methods.l0.schedule import LinearSchedule
from subnetlab.methods.l0.trainer import MaskTrainer, StepCallback, train
from subnetlab.models.adapters import Adapter
from subnetlab.models.circuit import Circuit, edges_kept, threshold_choice
from subnetlab.models.graph import Graph
from subnetlab.runtime import model_device
from subnetlab.tasks.circuits.pairs import corrupted_inputs


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
    repair: dict[str, Any] | None = None  # with repair or restarts: the exact losses, swaps, the restart kept


class EdgePruner(MaskTrainer):
    """Edge (and node) masks on the frozen model; ``prune_edges`` drives it, benchmarks time it.

    ``p.ctl`` is the installed ``EdgeMasks``; ``values`` the ablation's writer values when they are fixed.
    """

    name = "edge pruning"

    def __init__(self, model: nn.Module, adapter: Adapter, data: PruningData, config: EdgePruneConfig,
                 values: WriterValues | None = None, teacher: Tensor | None = None) -> None:
        weights = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
        if config.dtype != "float32" and weights != getattr(torch, config.dtype):
            raise SubnetlabError(f"the settings' dtype is {config.dtype} but the model's weights are "
                                 f"{str(weights).removeprefix('torch.')}: load the model in {config.dtype}",
                                 setting="dtype")
        self.adapter, self.values = adapter, values
        self.graph = Graph.from_adapter(adapter, config.embedding_nodes)
        device = model_device(model)
        self.schedule = config.make_schedule()
        self.node_schedule = (LinearSchedule(config.node_sparsity, config.warmup_steps, config.total_steps)
                              if config.node_sparsity else None)
        init = dict(init_log_alpha=config.init_log_alpha, init_std=config.init_std)
        self.edges = HardConcreteMask(self.graph.num_edges, seed=config.seed, **init).to(device)
        self.nodes = (HardConcreteMask(len(self.graph.writers), seed=config.seed + 1_000_003, **init).to(device)
                      if config.node_masks else None)
        self.writer_of = torch.tensor([w for w, _ in self.graph.edges], dtype=torch.long, device=device)
        self.lag_edges = Lagrangian().to(device)
        self.lag_nodes = Lagrangian().to(device) if self.node_schedule is not None else None
        # the authors' read tensors padded to all writers (``tensors``): log-alphas with no gradient, decayed
        self.padding = None
        if config.selection == "threshold" and padding_size(self.graph):
            noise = torch.Generator().manual_seed(config.seed + 2_000_003)
            start = config.init_log_alpha + config.init_std * torch.randn(padding_size(self.graph), generator=noise)
            self.padding = nn.Parameter(start.float().to(device))
        # the authors' untrained node Lagrangian: value 0, its multipliers' gradients in the clipped norm
        self.clip_nodes = Lagrangian().to(device) if config.clip_node_target is not None else None
        self.clip_node_schedule = (LinearSchedule(config.clip_node_target, config.warmup_steps, config.total_steps)
                                   if config.clip_node_target is not None else None)
        alphas = [m.log_alpha for m in self.mask_modules()] + ([self.padding] if self.padding is not None else [])
        lambdas = [p for lag in (self.lag_edges, self.lag_nodes) if lag is not None for p in lag.parameters()]
        super().__init__(model, data, config, config.total_steps, alphas, lambdas, teacher)

    # -- masks --------------------------------------------------------------------------------
    def mask_modules(self) -> list[nn.Module]:
        return [m for m in (self.edges, self.nodes) if m is not None]

    def masks(self) -> Tensor:
        """One draw (training) or the deterministic masks (eval) of every edge, node masks folded in."""
        edges = self.edges()
        return edges if self.nodes is None else edges * self.nodes()[self.writer_of]

    def selection(self, sparsity: float | None = None) -> EdgeSelection:
        """The circuit at ``sparsity`` (default: the target) from the deterministic masks."""
        if self.config.selection == "threshold":
            return self.threshold_selection(sparsity)
        sparsity = self.config.sparsity if sparsity is None else sparsity
        scores = self.edges.deterministic()
        tiebreak = self.edges.log_alpha.detach().cpu().clone()
        undecided, num_masks = self.edges.undecided(), self.edges.size
        if self.nodes is not None:
            writer = self.writer_of.cpu()
            scores = scores * self.nodes.deterministic()[writer]
            tiebreak = tiebreak + self.nodes.log_alpha.detach().cpu()[writer]
            undecided, num_masks = undecided + self.nodes.undecided(), num_masks + self.nodes.size
        if self.config.selection == "greedy":
            edges = Circuit(self.graph, scores, score_sign="signed").greedy(
                edges_kept(sparsity, self.graph.num_edges), tiebreak).kept().float()
        elif self.config.selection == "connected":
            edges = select_connected_edges(self.graph, scores, tiebreak, sparsity,
                                           corrupted=self.config.ablation == "corrupted")
        else:
            edges = select_top_edges(scores, tiebreak, sparsity)
        return EdgeSelection(edges, undecided, num_masks)

    def threshold_selection(self, sparsity: float | None = None) -> EdgeSelection:
        """The authors' final circuit: per-tensor deterministic masks (``tensors``), a threshold meeting
        ``sparsity`` or, when None, the masks' own deterministic sparsity, then the nodes' at theirs, then the
        edges of removed writers dropped (``models.circuit.threshold_choice``)."""
        padding = self.padding if self.padding is not None else torch.zeros(0)
        edges = per_tensor_edges(self.graph, self.edges.log_alpha, padding)
        own = 1 - tensor_sums(self.graph, edges) / self.graph.num_edges
        nodes = node_target = None
        undecided, num_masks = self.edges.undecided(), self.edges.size
        if self.nodes is not None:
            nodes = per_tensor_nodes(self.graph, self.nodes.log_alpha)
            total = torch.zeros((), dtype=torch.float32)
            for part in nodes.split(list(node_tensors(self.graph))):
                total = total + part.sum()
            node_target = 1 - total / nodes.numel()
            undecided, num_masks = undecided + self.nodes.undecided(), num_masks + self.nodes.size
        choice = threshold_choice(self.graph, edges, own if sparsity is None else sparsity, nodes, node_target)
        return EdgeSelection(choice.edges.float(), undecided, num_masks)

    # -- the trainer's parts ----------------------------------------------------------------------
    def ablation_values(self) -> WriterValues | None:
        """The fixed writer values of mean ablation (computed once); None for corrupted and zero ablation."""
        if self.config.ablation == "mean" and self.values is None:
            batches = (to_device(self.data.model_inputs(self.data.batch_at(idx)), self.device)
                       for idx in self.data.batches(self.config.eval_batch_size))
            self.values = writer_means(self.model, self.adapter, batches)
        return self.values

    def strength(self) -> Tensor:
        """``[edges]`` summed log-alphas of each edge and its writer: which edges the repair tries first."""
        strength = self.edges.log_alpha.detach().cpu().clone()
        if self.nodes is not None:
            strength = strength + self.nodes.log_alpha.detach().cpu()[self.writer_of.cpu()]
        return strength

    def __enter__(self) -> "EdgePruner":
        """The masks installed (``MaskTrainer``) and, for forwards of more than ``AUTO_CHECKPOINT_TOKENS``
        tokens or when ``checkpoint_blocks`` asks, the blocks checkpointed (``intervene.checkpoint``)."""
        self.blocks = checkpointed_blocks(self.adapter, when=lambda hidden: checkpoints(self.config, hidden))
        self.blocks.__enter__()
        try:
            return super().__enter__()
        except BaseException:
            self.blocks.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            blocks, self.blocks = getattr(self, "blocks", None), None
            if blocks is not None:
                blocks.__exit__(None, None, None)

    def install(self) -> EdgeMasks:
        self.ablation_values()
        return apply_edges(self.model, self.adapter, self.graph, values=self.values, source=self.masks,
                           keep_reader_inputs=self.config.keep_reader_inputs).__enter__()

    def target(self, step: int) -> float:
        return self.schedule.target(step)

    def prepare(self, batch: dict[str, Tensor], inputs: dict[str, Tensor]) -> None:
        if self.config.ablation == "corrupted":
            self.ctl.enabled = False  # the corrupted prompt runs through the full model
            try:
                self.ctl.values = capture_writers(self.model, self.adapter, corrupted_inputs(batch))
            finally:
                self.ctl.enabled = True

    def penalty(self, step: int, target: float) -> Tensor:
        estimate = "expected_sparsity" if self.config.sparsity_estimate == "expected" else "sample_sparsity"
        terms = self.lag_edges(target, getattr(self.edges, estimate)())
        if self.lag_nodes is not None:
            terms = terms + self.lag_nodes(self.node_schedule.target(step), getattr(self.nodes, estimate)())
        if self.clip_nodes is not None:
            terms = terms + self.clip_nodes(self.clip_node_schedule.target(step), getattr(self.nodes, estimate)())
        if self.padding is not None:  # a zero gradient, as the authors' padded entries get, so the decay applies
            terms = terms + 0.0 * self.padding.sum()
        return terms

    def clipped_parameters(self) -> list[Tensor]:
        extra = list(self.clip_nodes.parameters()) if self.clip_nodes is not None else []
        return super().clipped_parameters() + extra

    def record(self, done: int, target: float, factor: float, kl: float, penalty: float) -> dict[str, Any]:
        return {"step": done, "target": round(target, 6), "kl": kl,
                "expected_sparsity": float(self.edges.expected_sparsity().detach()),
                "lambda1": float(self.lag_edges.lambda1.detach()),
                "lambda2": float(self.lag_edges.lambda2.detach()), "lr_factor": factor}

    # -- checkpoints -------------------------------------------------------------------------------
    def named_parts(self) -> dict[str, tuple[HardConcreteMask, Lagrangian | None]]:
        parts = {"edges": (self.edges, self.lag_edges), "nodes": (self.nodes, self.lag_nodes)}
        return {name: part for name, part in parts.items() if part[0] is not None}

    def state_tensors(self) -> dict[str, Tensor]:
        tensors: dict[str, Tensor] = {}
        for name, (masks, lag) in self.named_parts().items():
            tensors[f"log_alpha_{name}"] = masks.log_alpha.detach()
            tensors[f"{name}_generator"] = masks.generator_state()
            if lag is not None:
                tensors[f"lambda1_{name}"], tensors[f"lambda2_{name}"] = lag.lambda1.detach(), lag.lambda2.detach()
        if self.padding is not None:
            tensors["log_alpha_padding"] = self.padding.detach()
        return tensors

    def load_state_tensors(self, t: dict[str, Tensor]) -> None:
        for name, (masks, lag) in self.named_parts().items():
            masks.log_alpha.copy_(t[f"log_alpha_{name}"])
            masks.set_generator_state(t[f"{name}_generator"])
            if lag is not None:
                lag.lambda1.copy_(t[f"lambda1_{name}"])
                lag.lambda2.copy_(t[f"lambda2_{name}"])
        if self.padding is not None:
            self.padding.copy_(t["log_alpha_padding"])

    def checkpoint_info(self) -> dict[str, Any]:
        return {"graph": self.graph.shape()}

    def start_edges(self, log_alpha: Tensor) -> None:
        """Start from given ``[edges]`` log-alphas (a warm start from attribution scores)."""
        if tuple(log_alpha.shape) != (self.graph.num_edges,):
            raise SubnetlabError(f"{log_alpha.numel()} starting log-alphas for {self.graph.num_edges} edges",
                                 setting="init_from")
        with torch.no_grad():
            self.edges.log_alpha.copy_(log_alpha.to(self.edges.log_alpha))


AUTO_CHECKPOINT_TOKENS = 2048  # checkpoint_blocks unset: blocks recomputed in forwards of more tokens than this


def checkpoints(config: EdgePruneConfig, hidden: Tensor) -> bool:
    """Whether a forward of ``hidden`` (``[batch, pos, hidden]``) checkpoints its blocks under ``config``."""
    if config.checkpoint_blocks is not None:
        return config.checkpoint_blocks
    return int(hidden.shape[0]) * int(hidden.shape[1]) > AUTO_CHECKPOINT_TOKENS


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

    With ``config.restarts`` > 1, seeds ``seed + i`` train too (checkpoints in ``run_dir/restart-i``) and the
    circuit of lowest exact loss (``repair.CircuitLoss``) is kept; ``config.repair == "greedy"`` repairs each
    restart's circuit first (``select.greedy_repair``).
    """
    if config.batch_size > data.size:
        raise SubnetlabError(f"batch size {config.batch_size} is larger than the {data.size} training examples",
                             setting="batch_size")
    runs = []
    for i in range(config.restarts):
        cfg = config if i == 0 else replace(config, seed=config.seed + i)
        where = None if run_dir is None else Path(run_dir) / (f"restart-{i}" if i else "")
        runs.append(train_one(model, adapter, data, cfg, values, where, on_step, teacher, init_log_alpha_edges))
    if config.repair == "none" and config.restarts == 1:
        return runs[0][0]
    first = runs[0][1]
    loss = CircuitLoss(model, adapter, first.graph, data, config.repair_objective, config.ablation,
                       first.ablation_values(), config.eval_batch_size)
    repaired = []
    for result, pruner in runs:
        keep = result.selection.edges.bool()
        if config.repair == "greedy":
            repaired.append(greedy_repair(keep, loss, pruner.strength(), config.repair_pool, config.repair_depth))
        else:
            value = loss(keep)
            repaired.append(Repair(keep, value, value, 0, 1))
    chosen = min(range(len(runs)), key=lambda i: repaired[i].loss_after)  # ties: the first restart
    result, fix = runs[chosen][0], repaired[chosen]
    record = {"objective": config.repair_objective, "restart": chosen, "seed": config.seed + chosen,
              "loss_trained": [r.loss_before for r in repaired], "loss_repaired": [r.loss_after for r in repaired],
              "swaps": fix.swaps, "evaluations": sum(r.evaluations for r in repaired)}
    selection = replace(result.selection, edges=fix.edges.float())
    return replace(result, selection=selection, repair=record)


def train_one(model: nn.Module, adapter: Adapter, data: PruningData, config: EdgePruneConfig,
              values: WriterValues | None, run_dir: Path | None, on_step: StepCallback | None,
              teacher: Tensor | None, init_log_alpha_edges: Tensor | None) -> tuple[EdgePruneResult, EdgePruner]:
    """One training run of ``prune_edges`` (one seed) and its pruner."""
    pruner = EdgePruner(model, adapter, data, config, values, teacher)
    warm = (lambda: pruner.start_edges(init_log_alpha_edges)) if init_log_alpha_edges is not None else None
    start, seconds = train(pruner, run_dir, warm_start=warm, on_step=on_step)
    nodes = pruner.nodes.log_alpha.detach().cpu().clone() if pruner.nodes is not None else None
    result = EdgePruneResult(config, pruner.graph, pruner.selection(), pruner.edges.log_alpha.detach().cpu().clone(),
                             nodes, pruner.history, seconds, start)
    return result, pruner
