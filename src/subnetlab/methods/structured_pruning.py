"""Structured pruning of heads and MLPs as in the Heuristic Core paper (Bhaskar et al., 2024).

The model stays frozen; only hard-concrete gate parameters (``log_alpha``, one
per head and per MLP) and two Lagrange multipliers are trained. Each step::

    log p_full = log_softmax(task_logits(model ungated))        # cached per example
    z ~ HardConcrete(log_alpha)                                 # one sample per forward
    loss = KL(p_full || p_gated) + lambda1 (t - s) + lambda2 (t - s)^2

with ``s`` the (expected) sparsity over components, ``t`` the scheduled target;
gradient descent on ``log_alpha``, ascent on the lambdas. Gated components are
replaced by their mean activation (or zero, or another example's value).

    from subnetlab.methods.structured_pruning import prune
    from subnetlab.methods.pruning_config import preset_config
    result = prune(model, adapter, data, preset_config("demo", 0.5, seed=3), ablation=means, run_dir=out)
    result.subnetwork.save(out / "subnetwork.safetensors")

With ``run_dir`` the run checkpoints every ``checkpoint_every`` steps and a
rerun resumes from the last checkpoint (bit-identical on CPU). With the
staircase schedule ``on_level(level, selections)`` is called each time a level's
hold ends; ``subnetlab.methods.pruning_job`` writes those to ``levels/<level>/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from subnetlab.intervene import ComponentValues, apply_gates
from subnetlab.methods.hard_concrete import HardConcreteGates
from subnetlab.methods.pruning_ablation import resample_values
from subnetlab.methods.pruning_checkpoint import CHECKPOINT, TrainingState, load_checkpoint, save_checkpoint
from subnetlab.methods.pruning_config import PruneConfig
from subnetlab.methods.pruning_data import DataOrder, PruningData
from subnetlab.methods.pruning_objective import FullModelOutputs, Lagrangian, NonFiniteLoss, check_finite, kl_full_to_pruned
from subnetlab.methods.pruning_schedule import lr_factor
from subnetlab.methods.pruning_select import Selection, select_threshold, select_topk
from subnetlab.models.adapters import Adapter
from subnetlab.progress import stage, track

LevelCallback = Callable[[float, dict[str, Selection], int], None]
StepCallback = Callable[[int], None]


@dataclass
class PruneResult:
    """Trained gates, both binary selections at the final target, and the training history."""

    config: PruneConfig
    gates: HardConcreteGates
    lagrangian: Lagrangian
    selections: dict[str, Selection]
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0

    @property
    def selection(self) -> Selection:
        """The selection named by ``config.selection`` (top-k by default)."""
        return self.selections[self.config.selection]


def selections(gates: HardConcreteGates, sparsity: float) -> dict[str, Selection]:
    return {"topk": select_topk(gates, sparsity), "threshold": select_threshold(gates, sparsity)}


class _Frozen:
    """Freeze the model's parameters and put it in eval mode; restore both on exit."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __enter__(self) -> None:
        self.flags = [(p, p.requires_grad) for p in self.model.parameters()]
        self.training = self.model.training
        for p, _ in self.flags:
            p.requires_grad_(False)
        self.model.eval()

    def __exit__(self, *exc: object) -> None:
        for p, flag in self.flags:
            p.requires_grad_(flag)
        self.model.train(self.training)


def _optimizer(gates: HardConcreteGates, lagrangian: Lagrangian, config: PruneConfig) -> torch.optim.Adam:
    """Adam descending on log-alphas, Adam *maximising* over the lambdas (as the authors' code)."""
    alphas = [p for p in gates.parameters() if p.requires_grad]
    return torch.optim.Adam([
        {"params": alphas, "lr": config.lr},
        {"params": list(lagrangian.parameters()), "lr": config.lambda_lr, "maximize": True},
    ], foreach=False)


def _state(step: int, gates: HardConcreteGates, lagrangian: Lagrangian, resample_gen: torch.Generator,
           config: PruneConfig, history: list[dict[str, float]]) -> TrainingState:
    tensors = {
        "log_alpha_heads": gates.log_alpha_heads.detach(), "log_alpha_mlps": gates.log_alpha_mlps.detach(),
        "lambda1": lagrangian.lambda1.detach(), "lambda2": lagrangian.lambda2.detach(),
        "gate_generator": gates.generator_state(), "resample_generator": resample_gen.get_state(),
    }
    return TrainingState(step, tensors, {}, {"config": config.to_dict(), "history": history})


def _restore(state: TrainingState, gates: HardConcreteGates, lagrangian: Lagrangian, resample_gen: torch.Generator,
             optimizer: torch.optim.Optimizer, config: PruneConfig, run_dir: Path) -> list[dict[str, float]]:
    from subnetlab.errors import SubnetlabError

    if state.info.get("config") != config.to_dict():
        raise SubnetlabError(f"{run_dir / CHECKPOINT}: written by a different pruning config; use another --out")
    t = state.tensors
    with torch.no_grad():
        gates.log_alpha_heads.copy_(t["log_alpha_heads"])
        gates.log_alpha_mlps.copy_(t["log_alpha_mlps"])
        lagrangian.lambda1.copy_(t["lambda1"])
        lagrangian.lambda2.copy_(t["lambda2"])
    gates.set_generator_state(t["gate_generator"])
    resample_gen.set_state(t["resample_generator"].to(torch.uint8))
    optimizer.load_state_dict(state.optimizer)
    return list(state.info.get("history", []))


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
) -> PruneResult:
    """Train hard-concrete gates on the frozen ``model`` to ``config.sparsity`` and select the subnetwork.

    ``ablation``: mean values (``ablation="mean"``) or None (zero; resample draws
    its own per batch). ``on_step(step)`` runs after each optimizer step and its
    checkpoint (tests use it to simulate a kill).
    """
    schedule = config.make_schedule()
    total = schedule.total_steps
    level_ends = schedule.level_ends()
    gates = HardConcreteGates(adapter.num_layers, adapter.num_heads, seed=config.seed,
                              init_log_alpha=config.init_log_alpha, init_std=config.init_std,
                              prune_mlps=config.prune_mlps)
    lagrangian = Lagrangian()
    optimizer = _optimizer(gates, lagrangian, config)
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    resample_gen = torch.Generator().manual_seed(config.seed * 7 + 3)
    order = DataOrder(data.size, config.batch_size, config.seed)
    run_dir = Path(run_dir) if run_dir is not None else None
    history: list[dict[str, float]] = []
    start = 0
    if run_dir is not None and (state := load_checkpoint(run_dir)) is not None:
        history = _restore(state, gates, lagrangian, resample_gen, optimizer, config, run_dir)
        start = state.step
        stage(f"resuming pruning at step {start} of {total}")
    log_every = max(1, total // 100)
    began = time.perf_counter()
    gates.train()
    with _Frozen(model), apply_gates(model, adapter, ablation=ablation, source=gates) as ctl:
        teacher = FullModelOutputs(model, ctl, data, config.teacher, config.eval_batch_size)
        teacher.prepare()
        for step in track(range(start, total), total=total - start, description="pruning"):
            target = schedule.target(step)
            factor = lr_factor(config.lr_decay, step, total)
            for group, base in zip(optimizer.param_groups, base_lrs):
                group["lr"] = base * factor
            optimizer.zero_grad(set_to_none=True)
            kl_sum = lag_sum = 0.0
            for micro in range(config.accumulation):
                indices = order.indices(step * config.accumulation + micro)
                batch = data.batch_at(indices)
                inputs = data.model_inputs(batch)
                if config.ablation == "resample":
                    ctl.ablation = resample_values(model, adapter, ctl, inputs, resample_gen)
                log_p_full = teacher.log_probs(indices, batch)
                outputs = model(**inputs)  # draws one gate sample (source=gates)
                kl = kl_full_to_pruned(log_p_full, data.task_logits(outputs, batch))
                sparsity = gates.expected_sparsity() if config.sparsity_estimate == "expected" else gates.sample_sparsity()
                lag = lagrangian(target, sparsity)
                loss = (kl + lag) / config.accumulation
                try:
                    check_finite(loss, step)
                except NonFiniteLoss as e:
                    where = f"; the last good checkpoint is {run_dir / CHECKPOINT}" if run_dir and (run_dir / CHECKPOINT).exists() else ""
                    raise NonFiniteLoss(f"pruning stopped: {e}{where}") from None
                loss.backward()
                kl_sum += float(kl.detach())
                lag_sum += float(lag.detach())
            optimizer.step()
            done = step + 1
            if done % log_every == 0 or done == total:
                history.append(_record(done, target, gates, lagrangian, kl_sum, lag_sum, config, factor))
            if done in level_ends and on_level is not None:
                ctl.enabled = False  # the callback evaluates under its own gates
                try:
                    on_level(level_ends[done], selections(gates, level_ends[done]), done)
                finally:
                    ctl.enabled = True
            if run_dir is not None and (done % config.checkpoint_every == 0 or done == total):
                save_checkpoint(run_dir, _state(done, gates, lagrangian, resample_gen, config, history),
                                optimizer.state_dict())
            if on_step is not None:
                on_step(done)
    gates.eval()
    return PruneResult(config, gates, lagrangian, selections(gates, schedule.sparsity), history,
                       time.perf_counter() - began, start)


def _record(step: int, target: float, gates: HardConcreteGates, lagrangian: Lagrangian, kl: float, lag: float,
            config: PruneConfig, factor: float) -> dict[str, Any]:
    with torch.no_grad():
        expected = float(gates.expected_sparsity())
    n = config.accumulation
    return {"step": step, "target": round(target, 6), "expected_sparsity": expected, "kl": kl / n,
            "lagrangian": lag / n, "lambda1": float(lagrangian.lambda1.detach()), "lambda2": float(lagrangian.lambda2.detach()),
            "lr_factor": factor}
