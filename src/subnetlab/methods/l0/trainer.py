"""The one mask trainer: hard-concrete masks on a frozen model, KL to the full model plus Lagrangians.

Every granularity that learns hard-concrete masks subclasses ``MaskTrainer`` (heads and MLPs in
``methods.head_pruning``, edges in ``methods.edge_pruning``): it names its masks (``mask_modules``), installs
them on the model (``install``: a controller with ``enabled`` and ``remove()``), prepares each batch (``prepare``:
resampled or corrupted writer values), adds its sparsity terms (``penalty``) and records its history
(``record``); its checkpoint tensors come from ``state_tensors`` / ``load_state_tensors``. The rest is here, once::

    loss = KL(p_full || p_masked) + penalty(step)        # per micro-batch, divided by the accumulation
    (clip the gradient norm) -> Adam(W) step: descent on the log-alphas, ascent on the lambdas

``train`` drives a trainer: restore from ``run_dir`` -> warm start (a fresh run only) -> steps with
checkpoints and the non-finite check. Data order is a function of the step (``DataOrder``) and every draw comes
from a generator kept in the checkpoint, so on the CPU a resumed run is bit-identical to an uninterrupted one.

Across processes (``subnetlab.distributed``, data parallel): every rank holds the masks and multipliers and takes
a contiguous slice of every batch (``World.share``); its KL is weighted by the slice's share of the batch and the
penalty divided by the world size, so the sum of the ranks' gradients, all-reduced in one collective before
clipping, is the global batch's gradient; every rank then takes the same step (the same mask sample too: the
same generators). The global batch, the schedule and the seeds do not depend on the world size, so N ranks train
the masks one process trains (to rounding); rank 0 alone writes the checkpoints, and every rank resumes from
it (``train`` checks that they start at the same step). A checkpoint holds nothing that depends on the world
size (the masks, multipliers, generator states, the optimiser's moments of the global gradient, the history of
the global KL), so one written by N ranks resumes under M.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from subnetlab.distributed import world
from subnetlab.errors import SubnetlabError
from subnetlab.methods.l0.checkpoint import CHECKPOINT, TrainingState, load_checkpoint, save_checkpoint
from subnetlab.methods.l0.data import DataOrder, PruningData, to_device
from subnetlab.methods.l0.objective import FullModelOutputs, NonFiniteLoss, check_finite, kl_full_to_pruned
from subnetlab.methods.l0.settings import OPTIMIZERS, MaskSettings
from subnetlab.optim import lr_factor, make_optimizer
from subnetlab.progress import stage, track
from subnetlab.runtime import model_device

StepCallback = Callable[[int], None]


class Controller(Protocol):
    """What ``install`` returns: hooks on the model that can be switched off (the full model) and removed."""

    enabled: bool

    def remove(self) -> None: ...


class Frozen:
    """Freeze a model's parameters and put it in eval mode; restore both on exit."""

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


def mask_optimizer(alphas: Iterable[Tensor], lambdas: Iterable[Tensor], settings: MaskSettings) -> torch.optim.Optimizer:
    """Adam(W) descending on the log-alphas and *maximising* over the Lagrange multipliers, as both papers' code.

    ``weight_decay`` applies to both groups, as ``torch.optim.AdamW`` does in the authors' trainers (which leave it
    at torch's default 0.01 when they build AdamW without one).
    """
    if settings.optimizer not in OPTIMIZERS:
        raise SubnetlabError(f"optimizer {settings.optimizer!r}: expected one of {', '.join(OPTIMIZERS)}",
                             setting="optimizer")
    groups = [{"params": list(alphas), "lr": settings.lr},
              {"params": list(lambdas), "lr": settings.lambda_lr, "maximize": True}]
    # torch's per-tensor update, as the authors' trainers run it: the masks are small, so fusing gains nothing here
    return make_optimizer(groups, settings.optimizer, lr=settings.lr, weight_decay=settings.weight_decay, fused=False)


class MaskTrainer:
    """Masks, optimiser, data order and history of one run, and one optimisation step.

    ``with trainer: trainer.step(i)``: entering freezes the model, puts the masks in training mode, installs them
    (``self.ctl``) and computes the full model's outputs (``self.teacher``); leaving undoes all of it.
    """

    name = "mask training"  # how messages name the run ("pruning", "edge pruning")
    teacher_mode = "cache"  # ``FullModelOutputs``: the full model's outputs cached per example, or recomputed

    def __init__(self, model: nn.Module, data: PruningData, settings: MaskSettings, total_steps: int,
                 alphas: list[Tensor], lambdas: list[Tensor], teacher: Tensor | None = None) -> None:
        self.model, self.data, self.config = model, data, settings
        self.total = int(total_steps)
        self.device = model_device(model)  # masks live beside the model; their noise comes from CPU generators
        self.optimizer = mask_optimizer(alphas, lambdas, settings)
        self.base_lrs = [group["lr"] for group in self.optimizer.param_groups]
        self.order = DataOrder(data.size, settings.batch_size, settings.seed)
        self.history: list[dict[str, Any]] = []
        self.teacher_table = teacher  # the full model's table, shared by runs on the same data
        self.ctl: Controller | None = None
        self.frozen = Frozen(model)

    # -- what a granularity provides ------------------------------------------------------------
    def mask_modules(self) -> list[nn.Module]:
        raise NotImplementedError

    def install(self) -> Controller:
        raise NotImplementedError

    def target(self, step: int) -> float:
        """The scheduled target sparsity at ``step``."""
        raise NotImplementedError

    def prepare(self, batch: dict[str, Tensor], inputs: dict[str, Tensor]) -> None:
        """Before a micro-batch's forward: set the ablation's values that depend on the batch."""

    def penalty(self, step: int, target: float) -> Tensor:
        """The Lagrangian terms of the masks just sampled."""
        raise NotImplementedError

    def record(self, done: int, target: float, factor: float, kl: float, penalty: float) -> dict[str, Any]:
        raise NotImplementedError

    def state_tensors(self) -> dict[str, Tensor]:
        raise NotImplementedError

    def load_state_tensors(self, tensors: dict[str, Tensor]) -> None:
        raise NotImplementedError

    def checkpoint_info(self) -> dict[str, Any]:
        """JSON beside the tensors beyond the config and the history."""
        return {}

    def clipped_parameters(self) -> list[Tensor]:
        """Every tensor whose gradient enters the clipped norm (cleared before each step): the optimiser's."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    # -- context ------------------------------------------------------------------------------------
    def __enter__(self) -> "MaskTrainer":
        self.frozen.__enter__()
        try:
            for masks in self.mask_modules():
                masks.train()
            self.ctl = self.install()
            self.teacher = FullModelOutputs(self.model, self.ctl, self.data, self.teacher_mode,
                                            self.config.eval_batch_size, table=self.teacher_table)
            self.teacher.prepare()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ctl is not None:
            self.ctl.remove()
            self.ctl = None
        for masks in self.mask_modules():
            masks.eval()
        self.frozen.__exit__()

    # -- one step -----------------------------------------------------------------------------------
    def step(self, step: int) -> tuple[float, float]:
        """Optimizer step ``step`` (0-based): accumulate ``accumulation`` micro-batches, clip, update.

        Returns the mean KL and penalty over the micro-batches."""
        cfg = self.config
        target = self.target(step)
        factor = lr_factor(step, total=self.total, warmup=cfg.lr_warmup_steps, decay=cfg.lr_decay)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * factor
        clipped = self.clipped_parameters()
        for p in clipped:
            p.grad = None
        here = world()
        if here.size > cfg.batch_size:
            raise SubnetlabError(f"batch_size {cfg.batch_size} across {here.size} processes: each process takes a "
                                 "slice of every batch, so the batch needs at least one example per process",
                                 setting="batch_size")
        kl_sum = penalty_sum = 0.0
        for micro in range(cfg.accumulation):
            indices = self.order.indices(step * cfg.accumulation + micro)
            if here.size > 1:  # this rank's slice of the global batch
                indices = [indices[i] for i in here.share(len(indices))]
            batch = to_device(self.data.batch_at(indices), self.device)
            inputs = self.data.model_inputs(batch)
            self.prepare(batch, inputs)
            log_p_full = self.teacher.log_probs(indices, batch)
            outputs = self.model(**inputs)  # draws one mask sample (the same on every rank: the same generator)
            kl = kl_full_to_pruned(log_p_full, self.data.task_logits(outputs, batch))
            penalty = self.penalty(step, target)
            if here.size == 1:
                loss = (kl + penalty) / cfg.accumulation
                check_finite(loss, step + 1)  # steps are counted from 1, as in checkpoints
            else:  # the ranks' gradients are summed: the KL weighted by the slice's share, the penalty split evenly
                share = len(indices) / cfg.batch_size
                kl = kl * share
                loss = (kl + penalty / here.size) / cfg.accumulation
            loss.backward()
            kl_sum += float(kl.detach())
            penalty_sum += float(penalty.detach())
        if here.size > 1:
            check_finite(torch.tensor(penalty_sum), step + 1, "penalty")  # the same on every rank
            kl_sum = self.reduce_gradients(clipped, kl_sum, step)
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(clipped, cfg.max_grad_norm, foreach=False)
        self.optimizer.step()
        done = step + 1
        kl_mean, penalty_mean = kl_sum / cfg.accumulation, penalty_sum / cfg.accumulation
        if done % max(1, self.total // 100) == 0 or done == self.total:
            self.history.append(self.record(done, target, factor, kl_mean, penalty_mean))
        return kl_mean, penalty_mean

    def reduce_gradients(self, parameters: list[Tensor], kl_sum: float, step: int) -> float:
        """Across processes: sum the ranks' gradients of ``parameters`` (each rank's weighted by its slice, so the
        sum is the global batch's gradient) and their KLs, in one all-reduce; return the global batch's KL sum.
        A loss that is not finite on any rank stops every rank at the same step."""
        here = world()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat = torch.cat([g.detach().reshape(-1).double().cpu() for g in grads] + [torch.tensor([kl_sum],
                                                                                                dtype=torch.float64)])
        here.all_reduce_sum(flat)
        check_finite(flat[-1:], step + 1, "loss (summed over the ranks)")
        offset = 0
        for p, g in zip(parameters, grads):
            n = g.numel()
            p.grad = flat[offset:offset + n].view_as(g).to(device=g.device, dtype=g.dtype)
            offset += n
        return float(flat[-1])

    # -- checkpoints ----------------------------------------------------------------------------------
    def save(self, run_dir: Path, step: int) -> None:
        info = {"config": self.config.to_dict(), "history": self.history, **self.checkpoint_info()}
        save_checkpoint(run_dir, TrainingState(step, self.state_tensors(), {}, info), self.optimizer.state_dict())

    def restore(self, run_dir: Path) -> int:
        """Load ``run_dir``'s checkpoint if there is one; return the step to continue from."""
        state = load_checkpoint(run_dir)
        if state is None:
            return 0
        if state.info.get("config") != self.config.to_dict():
            raise SubnetlabError(f"{run_dir / CHECKPOINT}: written by a different {self.name} config; "
                                 "choose another output directory", setting="out")
        with torch.no_grad():
            self.load_state_tensors(state.tensors)
        self.optimizer.load_state_dict(state.optimizer)
        self.history = list(state.info.get("history", []))
        return state.step


def train(trainer: MaskTrainer, run_dir: Path | None = None, *, stop_at: int | None = None,
          warm_start: Callable[[], None] | None = None, after_step: StepCallback | None = None,
          on_step: StepCallback | None = None) -> tuple[int, float]:
    """Run ``trainer`` to its last step (or ``stop_at``); returns ``(the step it started from, seconds)``.

    With ``run_dir`` it resumes from the checkpoint there and writes one every ``checkpoint_every`` steps and at
    the end. ``warm_start()`` sets starting masks when the run starts at step 0. ``after_step(done)`` runs after
    each step, before its checkpoint (the staircase's level callback); ``on_step(done)`` after the checkpoint
    (tests use it to simulate a kill). A NaN or infinite loss stops the run naming the step; the last checkpoint
    written stays as it was. A run with nothing left to do does not install its masks.
    """
    if stop_at is not None and run_dir is None:
        raise SubnetlabError(f"{trainer.name} in parts (stop_at) needs a run directory to continue from")
    start = trainer.restore(run_dir) if run_dir is not None else 0
    here = world()
    if not here.all_same([start]):  # across processes every rank resumes from rank 0's checkpoint
        raise SubnetlabError(f"rank {here.rank} of {here.size}: {trainer.name} resumes at step {start} here and at "
                             f"another step on another rank: {run_dir} must be on a file system every rank sees, "
                             "its checkpoint written by rank 0 alone")
    if start == 0 and warm_start is not None:
        warm_start()
    if start and stop_at is None:  # a part of a run in parts resumes by design
        stage(f"resuming {trainer.name} at step {start} of {trainer.total}")
    end = trainer.total if stop_at is None else min(int(stop_at), trainer.total)
    every = trainer.config.checkpoint_every
    writer = here.is_writer  # across processes rank 0 alone writes checkpoints (every rank holds the same masks)
    began = time.perf_counter()
    with contextlib.nullcontext() if start >= end else trainer:
        for step in track(range(start, end), total=max(0, end - start), description=trainer.name):
            try:
                trainer.step(step)
            except NonFiniteLoss as e:
                kept = run_dir / CHECKPOINT if run_dir is not None else None
                where = f"; the last good checkpoint is {kept}" if kept is not None and kept.exists() else ""
                raise NonFiniteLoss(f"{trainer.name} stopped: {e}{where}") from None
            done = step + 1
            if after_step is not None:
                after_step(done)
            if run_dir is not None and (done % every == 0 or done in (trainer.total, end)) and writer:
                trainer.save(run_dir, done)
            if on_step is not None:
                on_step(done)
    return start, time.perf_counter() - began
