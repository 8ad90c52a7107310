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

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import ComponentValues, apply_gates
from subnetlab.methods.l0.distribution import HardConcreteGates
from subnetlab.methods.head_pruning.ablation import resample_values
from subnetlab.methods.l0.checkpoint import CHECKPOINT, TrainingState, load_checkpoint, save_checkpoint
from subnetlab.methods.head_pruning.config import PruneConfig
from subnetlab.methods.l0.data import DataOrder, PruningData, to_device
from subnetlab.methods.l0.objective import FullModelOutputs, Lagrangian, NonFiniteLoss, check_finite, kl_full_to_pruned
from subnetlab.methods.head_pruning.select import Selection, select_threshold, select_topk, undecided_gates
from subnetlab.models.adapters import Adapter
from subnetlab.optim import lr_factor
from subnetlab.runtime import model_device
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
    """Both selections at ``sparsity``, each recording how many gates were still undecided and the gates'
    expected sparsity (the raw numbers ``runs.health`` judges)."""
    with torch.no_grad():
        expected = float(gates.expected_sparsity())
    counts = {"undecided": undecided_gates(gates), "gates": gates.num_gates, "expected_sparsity": expected}
    return {"topk": replace(select_topk(gates, sparsity), **counts),
            "threshold": replace(select_threshold(gates, sparsity), **counts)}


def gate_tensors(gates: HardConcreteGates) -> dict[str, torch.Tensor]:
    """The gates' log-alphas, as a later run's ``start_gates`` takes them."""
    return {"log_alpha_heads": gates.log_alpha_heads.detach().cpu().clone(),
            "log_alpha_mlps": gates.log_alpha_mlps.detach().cpu().clone()}


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


def _optimizer(gates: HardConcreteGates, lagrangian: Lagrangian, config: PruneConfig) -> torch.optim.Optimizer:
    """Adam(W) descending on log-alphas, *maximising* over the lambdas (as the authors' code); weight decay, when set,
    on both groups as ``torch.optim.AdamW`` applies it there."""
    alphas = [p for p in gates.parameters() if p.requires_grad]
    kind = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return kind([
        {"params": alphas, "lr": config.lr},
        {"params": list(lagrangian.parameters()), "lr": config.lambda_lr, "maximize": True},
    ], weight_decay=config.weight_decay, foreach=False)


class Pruner:
    """The training state and one optimisation step; ``prune`` drives it, benchmarks time it.

    ``with Pruner(model, adapter, data, config, ablation) as p: p.step(i)``: entering
    freezes the model (eval mode, no parameter gradients), installs the gates
    (``p.gates_ctl``) and computes the full model's outputs; leaving undoes both.
    """

    def __init__(self, model: nn.Module, adapter: Adapter, data: PruningData, config: PruneConfig,
                 ablation: ComponentValues | None = None, teacher: torch.Tensor | None = None) -> None:
        self.model, self.adapter, self.data, self.config, self.ablation = model, adapter, data, config, ablation
        self.teacher_table = teacher if config.teacher == "cache" else None  # shared by runs on the same data
        self.schedule = config.make_schedule()
        self.total = self.schedule.total_steps
        self.device = model_device(model)  # gates live beside the model; their noise comes from a CPU generator
        self.gates = HardConcreteGates(adapter.num_layers, adapter.num_heads, seed=config.seed,
                                       init_log_alpha=config.init_log_alpha, init_std=config.init_std,
                                       prune_mlps=config.prune_mlps).to(self.device)
        self.lagrangian = Lagrangian().to(self.device)
        self.optimizer = _optimizer(self.gates, self.lagrangian, config)
        self.base_lrs = [group["lr"] for group in self.optimizer.param_groups]
        self.resample_gen = torch.Generator().manual_seed(config.seed * 7 + 3)
        self.order = DataOrder(data.size, config.batch_size, config.seed)
        self.history: list[dict[str, Any]] = []
        self._frozen = _Frozen(model)

    def __enter__(self) -> "Pruner":
        self._frozen.__enter__()
        try:
            self.gates.train()
            self.gates_ctl = apply_gates(self.model, self.adapter, ablation=self.ablation, source=self.gates).__enter__()
            self.teacher = FullModelOutputs(self.model, self.gates_ctl, self.data, self.config.teacher,
                                            self.config.eval_batch_size, table=self.teacher_table)
            self.teacher.prepare()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        ctl = getattr(self, "gates_ctl", None)
        if ctl is not None:
            ctl.remove()
        self.gates.eval()
        self._frozen.__exit__()

    # -- one step ---------------------------------------------------------------------------
    def step(self, step: int) -> tuple[float, float]:
        """Optimizer step ``step`` (0-based): accumulate ``accumulation`` micro-batches, update; (KL, Lagrangian)."""
        cfg, ctl, gates = self.config, self.gates_ctl, self.gates
        target = self.schedule.target(step)
        factor = lr_factor(step, total=self.total, warmup=cfg.lr_warmup_steps, decay=cfg.lr_decay)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * factor
        self.optimizer.zero_grad(set_to_none=True)
        kl_sum = lag_sum = 0.0
        for micro in range(cfg.accumulation):
            indices = self.order.indices(step * cfg.accumulation + micro)
            batch = to_device(self.data.batch_at(indices), self.device)
            inputs = self.data.model_inputs(batch)
            if cfg.ablation == "resample":
                ctl.ablation = resample_values(self.model, self.adapter, ctl, inputs, self.resample_gen)
            log_p_full = self.teacher.log_probs(indices, batch)
            outputs = self.model(**inputs)  # draws one gate sample (source=gates)
            kl = kl_full_to_pruned(log_p_full, self.data.task_logits(outputs, batch))
            sparsity = gates.expected_sparsity() if cfg.sparsity_estimate == "expected" else gates.sample_sparsity()
            lag = self.lagrangian(target, sparsity)
            loss = (kl + lag) / cfg.accumulation
            check_finite(loss, step + 1)  # steps are counted from 1, as in checkpoints
            loss.backward()
            kl_sum += float(kl.detach())
            lag_sum += float(lag.detach())
        self.optimizer.step()
        done = step + 1
        if done % max(1, self.total // 100) == 0 or done == self.total:
            self.history.append(_record(done, target, gates, self.lagrangian, kl_sum, lag_sum, cfg, factor))
        return kl_sum / cfg.accumulation, lag_sum / cfg.accumulation

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

    def save(self, run_dir: Path, step: int) -> None:
        g, lag = self.gates, self.lagrangian
        tensors = {
            "log_alpha_heads": g.log_alpha_heads.detach(), "log_alpha_mlps": g.log_alpha_mlps.detach(),
            "lambda1": lag.lambda1.detach(), "lambda2": lag.lambda2.detach(),
            "gate_generator": g.generator_state(), "resample_generator": self.resample_gen.get_state(),
        }
        state = TrainingState(step, tensors, {}, {"config": self.config.to_dict(), "history": self.history})
        save_checkpoint(run_dir, state, self.optimizer.state_dict())

    def restore(self, run_dir: Path) -> int:
        """Load ``run_dir``'s checkpoint if there is one; return the step to continue from."""
        state = load_checkpoint(run_dir)
        if state is None:
            return 0
        if state.info.get("config") != self.config.to_dict():
            raise SubnetlabError(f"{run_dir / CHECKPOINT}: written by a different pruning config; "
                                 "choose another output directory", setting="out")
        t = state.tensors
        with torch.no_grad():
            self.gates.log_alpha_heads.copy_(t["log_alpha_heads"])
            self.gates.log_alpha_mlps.copy_(t["log_alpha_mlps"])
            self.lagrangian.lambda1.copy_(t["lambda1"])
            self.lagrangian.lambda2.copy_(t["lambda2"])
        self.gates.set_generator_state(t["gate_generator"])
        self.resample_gen.set_state(t["resample_generator"].to(torch.uint8))
        self.optimizer.load_state_dict(state.optimizer)
        self.history = list(state.info.get("history", []))
        return state.step


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
    if stop_at is not None and run_dir is None:
        raise SubnetlabError("pruning in parts (stop_at) needs a run directory to continue from")
    pruner = Pruner(model, adapter, data, config, ablation, teacher)
    run_dir = Path(run_dir) if run_dir is not None else None
    start = pruner.restore(run_dir) if run_dir is not None else 0
    if start == 0 and start_gates is not None:
        pruner.start_gates(start_gates)
    if start and stop_at is None:  # a part of a run in parts resumes by design
        stage(f"resuming pruning at step {start} of {pruner.total}")
    end = pruner.total if stop_at is None else min(int(stop_at), pruner.total)
    level_ends = pruner.schedule.level_ends()
    began = time.perf_counter()
    idle = stop_at is not None and start >= end  # this part ran before: no gates to install, no teacher to compute
    with contextlib.nullcontext() if idle else pruner:
        for step in track(range(start, end), total=max(0, end - start), description="pruning"):
            try:
                pruner.step(step)
            except NonFiniteLoss as e:
                kept = run_dir / CHECKPOINT if run_dir is not None else None
                where = f"; the last good checkpoint is {kept}" if kept is not None and kept.exists() else ""
                raise NonFiniteLoss(f"pruning stopped: {e}{where}") from None
            done = step + 1
            if done in level_ends and on_level is not None:
                pruner.gates_ctl.enabled = False  # the callback evaluates under its own gates
                try:
                    on_level(level_ends[done], selections(pruner.gates, level_ends[done]), done)
                finally:
                    pruner.gates_ctl.enabled = True
            if run_dir is not None and (done % config.checkpoint_every == 0 or done in (pruner.total, end)):
                pruner.save(run_dir, done)
            if on_step is not None:
                on_step(done)
    return PruneResult(config, pruner.gates, pruner.lagrangian, selections(pruner.gates, pruner.schedule.sparsity),
                       pruner.history, time.perf_counter() - began, start)


def _record(step: int, target: float, gates: HardConcreteGates, lagrangian: Lagrangian, kl: float, lag: float,
            config: PruneConfig, factor: float) -> dict[str, Any]:
    with torch.no_grad():
        expected = float(gates.expected_sparsity())
    n = config.accumulation
    return {"step": step, "target": round(target, 6), "expected_sparsity": expected, "kl": kl / n,
            "lagrangian": lag / n, "lambda1": float(lagrangian.lambda1.detach()), "lambda2": float(lagrangian.lambda2.detach()),
            "lr_factor": factor}
