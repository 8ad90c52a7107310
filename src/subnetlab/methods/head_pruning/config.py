"""Settings of one hard-concrete pruning run, and the ``paper``, ``demo`` and ``quick`` presets.

Where the ``paper`` numbers come from (Bhaskar et al., 2024, Appendix B, "BERT
Pruning" and "Details of Pruning and L0 Regularization"):

* log-alpha learning rate 0.1, lambda learning rate 1 ("The learning rates for
  log alphas and lambdas were 0.1 and 1, respectively");
* effective batch 128 including gradient accumulation (here 32 x 4);
* maximum sequence length 128 ("as before", the fine-tuning length of Appendix A);
* ``warmup_steps = 6500 + 50 * sp``, ``total_steps = warmup_steps + 6 * sp``
  (``l0.schedule.paper_steps``); checkpoints every 64 steps;
* hard-concrete constants ``l, r, beta, eps`` (``methods.l0.distribution``).

Taken from the authors' released code (princeton-nlp/Heuristic-Core), which the
paper does not spell out: log-alpha initialised at 10 with noise 0.01; Adam on
log-alphas and (maximising) on lambdas, both lambdas starting at 0; the learning
rate decaying linearly to 0 over the run; one gate sample per forward shared by
the batch; mean activations over up to 100,000 training examples.

The ``paper`` preset follows the authors' released recipe
(``scripts/pruning/prune-all-mnli.sh`` and ``src/pruning/prune-glue.py``) where
the paper is silent:

* ``optimizer="adamw"``, ``weight_decay=0.01``: ``torch.optim.AdamW`` with its
  default weight decay on both parameter groups (log-alphas, and the lambdas it
  maximises); ``demo`` and ``quick`` use Adam without decay (``optimizer="adam"``);
* ``lr_warmup_steps=200``: the shell script's ``warmup_steps 200`` with
  ``get_linear_schedule_with_warmup``, a linear learning-rate warm-up over 200
  steps, then linear decay to 0 (both groups); ``demo`` and ``quick``: no warm-up;
* ``sparsity_estimate="sample"``: the Lagrangian on the sparsity of the sampled
  gates (``1 - z_sum / num_alpha_params`` in ``modeling_pert.py``); the
  ``demo`` preset's: the expected L0 of the gates (Louizos et al.;
  CoFi), a lower-variance estimate of the same quantity.

Deliberate difference kept in both presets: the frozen model runs in eval mode
(no dropout), so a run is deterministic (the authors' Trainer runs it in train
mode; dropout on a frozen, fine-tuned model only adds noise to the KL).

``demo`` keeps every rule and scales steps, batch and data down for a 2-core
CPU and MiniLM (78 components instead of BERT-base's 156). It also starts the
gates at log alpha 2 instead of 10: at lr 0.1 a gate needs ~100 steps to travel
down from 10, longer than a demo staircase holds its first levels, which then
pick their top-k among gates that have not moved. At 2 every gate is still open
with probability 0.97.

``quick`` is for a user's own small model on a CPU (docs/your-own-model.md):
the demo's sizes (batch 16, length 64, at most 2,000 training rows, gates from
log alpha 2), ``warmup = 100 + 2 * sp`` and ``total = warmup + 400`` steps (600
at 50%, 640 at 70%; well under a minute per run on one thread for docs/your-own-model.md's
2-layer tutorial models), log-alpha learning rate 0.3 and the Lagrangian on the
sampled gates' sparsity (``sparsity_estimate="sample"``, the authors'). Why
those: on a small model that solves its task with room to spare, the KL barely
depends on most gates, and the expected-L0 Lagrangian is met as well by every
gate half open as by some closed and the rest open, so gates that the KL does
not separate settle together in the middle (225 steps at lr 0.1 on the
expected L0 leave 90-100% of the tutorial models' gates undecided). On the
sampled sparsity a gate in the middle gets a gradient that changes with each sample while a decided gate's sample is clamped at 0 or 1 and
gets none, so gates leave the middle and stay decided; lr 0.3 and a 400-step
hold at the target give them the room (at lr 0.1, or with the expected L0 at lr
0.3, 4-7 of 10 gates stayed undecided). It is its own preset so that tuning the
demo reproduction never changes a user's runs. Which gates close is decided by
the KL where it depends on them; where it does not (any half of the tutorial
models keeps their accuracy), by the seed: compare seeds before reading a
choice as the model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from subnetlab.errors import SubnetlabError, check_field_types
from subnetlab.methods.l0.schedule import LinearSchedule, StaircaseSchedule, paper_steps
from subnetlab.methods.l0.settings import DictSettings, check_grad_norm
from subnetlab.runtime import DTYPE_NAMES

CHOICES: dict[str, tuple[str, ...]] = {
    "schedule": ("linear", "staircase"),
    "ablation": ("mean", "zero", "resample"),
    "sparsity_estimate": ("expected", "sample"),
    "selection": ("topk", "threshold"),
    "teacher": ("cache", "online"),
    "lr_decay": ("linear", "constant"),
    "optimizer": ("adam", "adamw"),
    "dtype": DTYPE_NAMES,
}


@dataclass(frozen=True)
class PruneConfig(DictSettings):
    """Everything that determines a pruning run (with the data and the model)."""

    what: ClassVar[str] = "pruning setting"

    sparsity: float = 0.5
    seed: int = 0
    schedule: str = "linear"
    warmup_steps: int = 9000
    total_steps: int = 9300
    levels: tuple[float, ...] = ()
    ramp_steps: int = 1000
    hold_steps: int = 300
    first_ramp_steps: int | None = 6500
    batch_size: int = 32
    accumulation: int = 4
    max_length: int = 128
    lr: float = 0.1
    lambda_lr: float = 1.0
    lr_decay: str = "linear"
    lr_warmup_steps: int = 0  # linear learning-rate warm-up (both groups), then ``lr_decay``
    optimizer: str = "adam"
    weight_decay: float = 0.0
    max_grad_norm: float | None = None  # clip the gradient norm of log-alphas and lambdas together (None: no clipping)
    init_log_alpha: float = 10.0
    init_std: float = 0.01
    prune_mlps: bool = True
    ablation: str = "mean"
    sparsity_estimate: str = "expected"
    selection: str = "topk"
    teacher: str = "cache"
    checkpoint_every: int = 64
    train_limit: int | None = None
    means_examples: int = 100_000
    eval_limit: int | None = None
    eval_batch_size: int = 64
    # the frozen weights' dtype (the model is loaded in it); gates, lambdas and the KL stay float32
    dtype: str = "float32"

    def __post_init__(self) -> None:
        check_field_types(self, "pruning setting")  # batch_size=abc: named, before any comparison
        if not 0.0 < self.sparsity < 1.0:
            raise SubnetlabError(f"sparsity: {self.sparsity} is outside (0, 1)", setting="sparsity")
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise SubnetlabError(f"{name} {getattr(self, name)!r}: expected one of {', '.join(allowed)}",
                                     setting=name)
        for name in ("batch_size", "accumulation", "max_length", "checkpoint_every", "eval_batch_size", "means_examples"):
            if int(getattr(self, name)) < 1:
                raise SubnetlabError(f"{name} {getattr(self, name)} must be at least 1", setting=name)
        if int(self.lr_warmup_steps) < 0 or float(self.weight_decay) < 0:
            raise SubnetlabError(f"lr_warmup_steps {self.lr_warmup_steps} and weight_decay {self.weight_decay} must be "
                                 "non-negative", setting="lr_warmup_steps" if self.lr_warmup_steps < 0 else "weight_decay")
        if self.lr <= 0 or self.lambda_lr <= 0:
            raise SubnetlabError(f"learning rates must be positive, got lr={self.lr}, lambda_lr={self.lambda_lr}")
        check_grad_norm(self.max_grad_norm)
        object.__setattr__(self, "levels", tuple(float(x) for x in self.levels))
        self.make_schedule()  # validates the step counts and levels

    def make_schedule(self) -> LinearSchedule | StaircaseSchedule:
        if self.schedule == "staircase":
            levels = self.levels or (self.sparsity,)
            return StaircaseSchedule(levels, self.ramp_steps, self.hold_steps, self.first_ramp_steps)
        return LinearSchedule(self.sparsity, self.warmup_steps, self.total_steps)

    @property
    def effective_batch(self) -> int:
        return self.batch_size * self.accumulation

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if out["dtype"] == "float32":
            del out["dtype"]  # the default: a run written before the setting existed is the same run (it resumes)
        return out


def demo_steps(sparsity: float) -> tuple[int, int]:
    """The paper's formula scaled for the demo: ``(60 + 4 * sp, + sp // 2)`` steps (sp in percent)."""
    sp = 100.0 * sparsity
    warmup = round(60 + 4 * sp)
    return warmup, warmup + round(sp / 2)


QUICK_HOLD_STEPS = 400  # quick: steps at the target after the warm-up, where the gates decide


def quick_steps(sparsity: float) -> tuple[int, int]:
    """The ``quick`` preset's steps: ``(100 + 2 * sp, + QUICK_HOLD_STEPS)`` (sp in percent)."""
    sp = 100.0 * sparsity
    warmup = round(100 + 2 * sp)
    return warmup, warmup + QUICK_HOLD_STEPS


PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(
        batch_size=32, accumulation=4, max_length=128, lr=0.1, lambda_lr=1.0, lr_decay="linear",
        checkpoint_every=64, means_examples=100_000, eval_limit=None, eval_batch_size=64,
        ramp_steps=1000, hold_steps=300, first_ramp_steps=6500,
        optimizer="adamw", weight_decay=0.01, lr_warmup_steps=200, sparsity_estimate="sample",
    ),
    "demo": dict(
        batch_size=16, accumulation=1, max_length=64, lr=0.1, lambda_lr=1.0, lr_decay="linear",
        checkpoint_every=25, means_examples=512, train_limit=2000, eval_limit=300, eval_batch_size=64,
        ramp_steps=20, hold_steps=20, first_ramp_steps=60, init_log_alpha=2.0,
    ),
}
# the demo's sizes; its own steps (quick_steps), learning rate and sparsity estimate (the module docstring)
PRESETS["quick"] = dict(PRESETS["demo"], lr=0.3, sparsity_estimate="sample")

STEP_RULES = {"paper": paper_steps, "demo": demo_steps, "quick": quick_steps}


def preset_config(preset: str, sparsity: float, seed: int = 0, schedule: str = "linear",
                  levels: tuple[float, ...] = (), **overrides: Any) -> PruneConfig:
    """A ``PruneConfig`` for ``preset`` at ``sparsity``; ``overrides`` win over the preset."""
    if preset not in PRESETS:
        raise SubnetlabError(f"preset {preset!r}: expected one of {', '.join(PRESETS)}", setting="preset")
    settings: dict[str, Any] = dict(PRESETS[preset])
    warmup, total = STEP_RULES[preset](sparsity)
    settings.update(warmup_steps=warmup, total_steps=total)
    if schedule == "staircase":
        settings["lr_decay"] = "constant"  # a decaying rate would freeze the later levels
    settings.update(sparsity=sparsity, seed=seed, schedule=schedule, levels=tuple(levels))
    settings.update(overrides)
    return PruneConfig.from_dict(settings)
