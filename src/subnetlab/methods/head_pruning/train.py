"""Structured pruning of heads and MLPs as in the Heuristic Core paper (Bhaskar et al., 2024).

The model stays frozen; only hard-concrete gate parameters (``log_alpha``, one
per head and per MLP) and two Lagrange multipliers are trained. Each step::

    log p_full = log_softmax(task_logits(model ungated))        # cached per example
    z ~ HardConcrete(log_alpha)                                 # one sample per forward
    loss = KL(p_full || p_gated) + lambda1 (t - s) + lambda2 (t - s)^2

with ``s`` the (expected) sparsity over components, ``t`` the scheduled target;
gradient descent on ``log_alpha``, ascent on the lambdas. Gated components are
replaced by their mean activation (or zero, or another example's value).

    from subnetlab.methods.head_pruning.train import prune
    from subnetlab.methods.head_pruning.config import preset_config
    result = prune(model, adapter, data, preset_config("demo", 0.5, seed=3), ablation=means, run_dir=out)
    result.subnetwork.save(out / "subnetwork.safetensors")

With ``run_dir`` the run checkpoints every ``checkpoint_every`` steps and a
rerun resumes from the last checkpoint (bit-identical on CPU). With the
staircase schedule ``on_level(level, selections)`` is called each time a level's
hold ends; ``subnetlab.runs.prune`` writes those to ``levels/<level>/``.

``stop_at`` runs only up to a step (checkpointed there) and returns; calling
again with a later ``stop_at`` continues from that checkpoint, so a caller can
advance several seeds level by level and decide between levels whether to go
on (the effective-size search does). Because resuming is bit-identical, the
levels reached this way are those of the uninterrupted staircase.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import ComponentValues, apply_gates
from subnetlab.intervene.gates import ComponentGates
from subnetlab.methods.head_pruning.ablation import resample_values
from subnetlab.methods.head_pruning.config import PruneConfig
from subnetlab.methods.head_pruning.select import GateSelection, select_threshold, select_topk
from subnetlab.methods.l0.data import PruningData
from subnetlab.methods.l0.distribution import HardConcreteGates
from subnetlab.methods.l0.objective import Lagrangian
from subnetlab.methods.l0.trainer import MaskTrainer, StepCallback, train
from subnetlab.models.adapters import Adapter
from subnetlab.runtime import model_device

LevelCallback = Callable[[float, dict[str, GateSelection], int], None]


@dataclass
class PruneResult:
    """Trained gates, both binary selections at the final target, and the training history."""

    config: PruneConfig
    gates: HardConcreteGates
    lagrangian: Lagrangian
    selections: dict[str, GateSelection]
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0

    @property
    def selection(self) -> GateSelection:
        """The selection named by ``config.selection`` (top-k by default)."""
        return self.selections[self.config.selection]


def selections(gates: HardConcreteGates, sparsity: float) -> dict[str, GateSelection]:
    """Both selections at ``sparsity``, each recording how many gates were still undecided and the gates'
    expected sparsity (the raw numbers ``runs.health`` judges)."""
    with torch.no_grad():
        expected = float(gates.expected_sparsity())
    counts = {"undecided": gates.undecided(), "num_gates": gates.num_gates, "expected_sparsity": expected}
    return {"topk": replace(select_topk(gates, sparsity), **counts),
            "threshold": replace(select_threshold(gates, sparsity), **counts)}


def gate_tensors(gates: HardConcreteGates) -> dict[str, torch.Tensor]:
    """The gates' log-alphas, as a later run's ``start_gates`` takes them."""
    return {"log_alpha_heads": gates.log_alpha_heads.detach().cpu().clone(),
            "log_alpha_mlps": gates.log_alpha_mlps.detach().cpu().clone()}  # clones: views of one parameter


class Pruner(MaskTrainer):
    """Head and MLP gates on the frozen model; ``prune`` drives it, benchmarks time it.

    ``with Pruner(model, adapter, data, config, ablation) as p: p.step(i)`` (``l0.trainer.MaskTrainer``);
    ``p.ctl`` is the installed ``ComponentGates``.
    """

    name = "pruning"

    def __init__(self, model: nn.Module, adapter: Adapter, data: PruningData, config: PruneConfig,
                 ablation: ComponentValues | None = None, teacher: torch.Tensor | None = None) -> None:
        self.adapter, self.ablation = adapter, ablation
        self.teacher_mode = config.teacher
        self.schedule = config.make_schedule()
        self.gates = HardConcreteGates(adapter.num_layers, adapter.num_heads, seed=config.seed,
                                       init_log_alpha=config.init_log_alpha, init_std=config.init_std,
                                       prune_mlps=config.prune_mlps).to(model_device(model))
        self.lagrangian = Lagrangian().to(model_device(model))
        super().__init__(model, data, config, self.schedule.total_steps, [self.gates.log_alpha],
                         list(self.lagrangian.parameters()), teacher if config.teacher == "cache" else None)
        self.resample_gen = torch.Generator().manual_seed(config.seed * 7 + 3)

    def mask_modules(self) -> list[nn.Module]:
        return [self.gates]

    def install(self) -> ComponentGates:
        return apply_gates(self.model, self.adapter, ablation=self.ablation, source=self.gates).__enter__()

    def target(self, step: int) -> float:
        return self.schedule.target(step)

    def prepare(self, batch: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]) -> None:
        if self.config.ablation == "resample":
            from subnetlab.distributed import world

            if world().size > 1:  # every rank would draw other rows from its slice, and its generator drift
                raise SubnetlabError("ablation resample: across processes each rank would resample from its own "
                                     "slice of the batch; use mean or zero ablation, or one process",
                                     setting="ablation")
            self.ctl.ablation = resample_values(self.model, self.adapter, self.ctl, inputs, self.resample_gen)

    def penalty(self, step: int, target: float) -> torch.Tensor:
        gates = self.gates
        sparsity = gates.expected_sparsity() if self.config.sparsity_estimate == "expected" else gates.sample_sparsity()
        return self.lagrangian(target, sparsity)

    def record(self, done: int, target: float, factor: float, kl: float, penalty: float) -> dict[str, Any]:
        with torch.no_grad():
            expected = float(self.gates.expected_sparsity())
        lag = self.lagrangian
        return {"step": done, "target": round(target, 6), "expected_sparsity": expected, "kl": kl,
                "lagrangian": penalty, "lambda1": float(lag.lambda1.detach()), "lambda2": float(lag.lambda2.detach()),
                "lr_factor": factor}

    # -- checkpoints ----------------------------------------------------------------------------
    def start_gates(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Start from given log-alphas (another run's ``gate_tensors``) instead of ``init_log_alpha``."""
        for name in ("log_alpha_heads", "log_alpha_mlps"):
            mine = getattr(self.gates, name)
            given = tensors.get(name)
            if given is None or tuple(given.shape) != tuple(mine.shape):
                raise SubnetlabError(f"starting gates: {name} of shape "
                                     f"{None if given is None else tuple(given.shape)}, this model's is {tuple(mine.shape)}")
            with torch.no_grad():
                mine.copy_(given.to(mine.device, mine.dtype))

    def state_tensors(self) -> dict[str, torch.Tensor]:
        g, lag = self.gates, self.lagrangian
        return {**gate_tensors(g), "lambda1": lag.lambda1.detach(), "lambda2": lag.lambda2.detach(),
                "gate_generator": g.generator_state(), "resample_generator": self.resample_gen.get_state()}

    def load_state_tensors(self, t: dict[str, torch.Tensor]) -> None:
        self.gates.log_alpha_heads.copy_(t["log_alpha_heads"])
        self.gates.log_alpha_mlps.copy_(t["log_alpha_mlps"])
        self.lagrangian.lambda1.copy_(t["lambda1"])
        self.lagrangian.lambda2.copy_(t["lambda2"])
        self.gates.set_generator_state(t["gate_generator"])
        self.resample_gen.set_state(t["resample_generator"].to(torch.uint8))


def prune(
    model: nn.Module,
    adapter: Adapter,
    data: PruningData,
    config: PruneConfig,
    *,
    ablation: ComponentValues | None = None,
    run_dir: str | Path | None = None,
    on_level: LevelCallback | None = None,
    on_step: StepCallback | None = None,
    teacher: torch.Tensor | None = None,
    stop_at: int | None = None,
    start_gates: Mapping[str, torch.Tensor] | None = None,
) -> PruneResult:
    """Train hard-concrete gates on the frozen ``model`` to ``config.sparsity`` and select the subnetwork.

    ``ablation``: mean values (``ablation="mean"``) or None (zero; resample draws
    its own per batch). ``on_step(step)`` runs after each optimizer step and its
    checkpoint (tests use it to simulate a kill). A NaN or infinite loss stops
    the run naming the step; the last checkpoint written stays as it was.
    ``teacher``: the full model's table (``objective.full_model_table``) when
    several runs share it. ``stop_at``: return after that step, checkpointed
    (needs ``run_dir``); a run already past it returns at once. ``start_gates``:
    log-alphas to start from (``gate_tensors`` of another run) when the run
    starts at step 0; a run resumed from its checkpoint ignores them.
    """
    pruner = Pruner(model, adapter, data, config, ablation, teacher)
    level_ends = pruner.schedule.level_ends()

    def level_done(done: int) -> None:
        if done in level_ends and on_level is not None:
            pruner.ctl.enabled = False  # the callback evaluates under its own gates
            try:
                on_level(level_ends[done], selections(pruner.gates, level_ends[done]), done)
            finally:
                pruner.ctl.enabled = True

    warm = (lambda: pruner.start_gates(start_gates)) if start_gates is not None else None
    start, seconds = train(pruner, Path(run_dir) if run_dir is not None else None, stop_at=stop_at,
                           warm_start=warm, after_step=level_done, on_step=on_step)
    return PruneResult(config, pruner.gates, pruner.lagrangian, selections(pruner.gates, pruner.schedule.sparsity),
                       pruner.history, seconds, start)
