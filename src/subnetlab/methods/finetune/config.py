"""The configuration of a fine-tuning run, its presets, and its validation.

A preset supplies defaults; values given explicitly (``None`` means "not
given") override them. The resolved configuration is what ``config.json``
records, and what a rerun must match to resume.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from subnetlab.errors import SubnetlabError, check_count, check_field_types
from subnetlab.tasks.spec import parse_eval_data  # the one parser of [SPLIT:]FORMAT=FILE

# Heuristic Core, Appendix A: bert-base-cased on MNLI, 5 epochs, batch 32, lr 2e-5,
# max length 128, Adam(0.9, 0.999, eps 1e-8), evaluation and checkpoints every 500 steps.
# Subtask Induction, Appendix B.1: AdamW(0.9, 0.999), lr 5e-4, for the arithmetic GPT-2s.
PRESETS: dict[str, dict[str, Any]] = {
    "heuristic-core": dict(model="bert-base-cased", lr=2e-5, batch_size=32, max_length=128, epochs=5.0,
                           adam_betas=(0.9, 0.999), adam_eps=1e-8, save_every=500, eval_every=500),
    "subtask-induction": dict(lr=5e-4, adam_betas=(0.9, 0.999), adam_eps=1e-8, max_length=8),
    # your own small model on a CPU: 500 steps of 16 rows, evaluated and saved every 100 (the sizes of
    # docs/your-own-model.md); the learning rate stays the default (2e-5, a fine-tuning rate): a model never
    # trained wants --lr 1e-3, and finetune says so in one warning line
    "quick": dict(batch_size=16, max_length=64, max_steps=500, save_every=100, eval_every=100),
}


@dataclass
class FinetuneConfig:
    """Everything that determines a fine-tuning run (and so its results)."""

    model: str = "minilm"
    task: str = "nli-synthetic"
    task_options: dict[str, Any] = field(default_factory=dict)
    eval_data: list[str] = field(default_factory=list)  # "[SPLIT:]FORMAT=FILE" extra evaluation splits
    lr: float = 2e-5
    batch_size: int = 32
    epochs: float = 3.0
    max_steps: int | None = None  # overrides epochs when set
    warmup_steps: int = 0
    warmup_ratio: float = 0.0  # of the total steps; used when warmup_steps is 0
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    scheduler: str = "linear"  # linear decay to 0 after warmup, or constant
    grad_clip: float | None = 1.0
    max_length: int = 128
    save_every: int = 500
    eval_every: int = 500
    eval_at_start: bool = True
    eval_limit: int | None = None  # examples per evaluation split
    eval_batch_size: int = 64
    seed: int = 0
    device: str = "cpu"
    preset: str | None = None
    dtype: str = "float32"  # forward passes: float32, or bfloat16 / float16 autocast (runtime.resolve_dtype)
    # fnmatch patterns of weights the model may lack and starts fresh (beyond a new task head, which is always
    # allowed): e.g. bert.pooler.* for an encoder saved without its pooler; any other missing weight is refused
    new_weights: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["adam_betas"] = list(self.adam_betas)
        if self.dtype == "float32":
            del out["dtype"]  # the default: a run written before dtype existed is the same run
        if not self.new_weights:
            del out["new_weights"]  # the default: a run written before the setting existed is the same run
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "FinetuneConfig":
        """The settings ``to_json`` wrote, each read as its field's type and validated (a job config's
        ``finetune``); keys it does not know are ignored."""
        known = {f.name for f in fields(cls)}
        cfg = cls(**{k: v for k, v in data.items() if k in known})
        check_field_types(cfg, "fine-tuning setting")
        cfg.adam_betas = tuple(cfg.adam_betas)  # type: ignore[assignment]
        validate(cfg)
        return cfg


def resolve_config(preset: str | None = None, **given: Any) -> FinetuneConfig:
    """Defaults <- preset <- explicitly given values (``None`` = not given); validated."""
    values: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise SubnetlabError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        values.update(PRESETS[preset])
    known = {f.name for f in fields(FinetuneConfig)}
    for key, value in given.items():
        if key not in known:
            raise SubnetlabError(f"unknown fine-tuning option {key!r}")
        if value is not None:
            values[key] = value
    cfg = FinetuneConfig(preset=preset, **values)
    cfg.adam_betas = tuple(cfg.adam_betas)  # type: ignore[assignment]
    validate(cfg)
    return cfg


def total_steps(cfg: FinetuneConfig, train_examples: int) -> int:
    """Optimizer steps of the run: ``max_steps``, else ``epochs`` passes over ``train_examples``."""
    per_epoch = math.ceil(train_examples / cfg.batch_size)
    return cfg.max_steps or max(1, math.ceil(cfg.epochs * per_epoch))


def check_warmup(cfg: FinetuneConfig, train_examples: int) -> int:
    """The warm-up steps of the run; refused when they would outlast it (the learning rate would never peak)."""
    total = total_steps(cfg, train_examples)
    if cfg.warmup_steps > total:
        raise SubnetlabError(f"warmup_steps {cfg.warmup_steps} is longer than the run ({total} steps: {cfg.epochs:g} "
                             f"epoch(s) of {train_examples} examples in batches of {cfg.batch_size})",
                             setting="warmup_steps")
    return cfg.warmup_steps or int(cfg.warmup_ratio * total)


def validate(cfg: FinetuneConfig) -> None:
    def need(ok: bool, setting: str, problem: str) -> None:
        """``problem`` follows the setting's name and value: ``lr -1.0 must be positive``."""
        if not ok:
            raise SubnetlabError(f"{setting} {problem}", setting=setting)

    need(cfg.lr > 0, "lr", f"{cfg.lr} must be positive")
    need(all(isinstance(p, str) and p.strip() for p in cfg.new_weights), "new_weights",
         f"{cfg.new_weights!r} must be weight names or fnmatch patterns (bert.pooler.*)")
    need(cfg.batch_size >= 1, "batch_size", f"{cfg.batch_size} must be at least 1")
    need(cfg.epochs > 0, "epochs", f"{cfg.epochs} must be positive")
    need(cfg.max_steps is None or cfg.max_steps >= 1, "max_steps", f"{cfg.max_steps} must be at least 1")
    if cfg.max_steps is not None:
        check_count("max_steps", cfg.max_steps)
    check_count("epochs", math.ceil(cfg.epochs), f"{cfg.epochs:g}")
    need(cfg.warmup_steps >= 0, "warmup_steps", f"{cfg.warmup_steps} must be >= 0")
    need(0.0 <= cfg.warmup_ratio < 1.0, "warmup_ratio", f"{cfg.warmup_ratio} must be in [0, 1)")
    need(not (cfg.warmup_steps and cfg.warmup_ratio), "warmup_steps",
         f"{cfg.warmup_steps} and warmup_ratio {cfg.warmup_ratio} are both set; give one of the two")
    need(cfg.max_steps is None or cfg.warmup_steps <= cfg.max_steps, "warmup_steps",
         f"{cfg.warmup_steps} is longer than the run (max_steps {cfg.max_steps})")
    need(cfg.weight_decay >= 0, "weight_decay", f"{cfg.weight_decay} must be >= 0")
    need(cfg.scheduler in ("linear", "constant"), "scheduler", f"{cfg.scheduler!r} is not linear or constant")
    need(cfg.grad_clip is None or cfg.grad_clip > 0, "grad_clip", f"{cfg.grad_clip} must be positive")
    need(cfg.max_length >= 2, "max_length", f"{cfg.max_length} must be at least 2")
    need(cfg.save_every >= 1, "save_every", f"{cfg.save_every} must be at least 1")
    need(cfg.eval_every >= 1, "eval_every", f"{cfg.eval_every} must be at least 1")
    need(cfg.eval_limit is None or cfg.eval_limit >= 1, "eval_limit", f"{cfg.eval_limit} must be at least 1")
    need(cfg.eval_batch_size >= 1, "eval_batch_size", f"{cfg.eval_batch_size} must be at least 1")
    need(cfg.device in ("cpu", "cuda", "auto", "mps") or cfg.device.startswith("cuda:"), "device",
         f"{cfg.device!r} is not auto, cpu, cuda[:N] or mps")
    need(cfg.dtype in ("float32", "bfloat16", "float16"), "dtype", f"{cfg.dtype!r} is not float32, bfloat16 or float16")
    need(cfg.dtype != "float16", "dtype", "float16 has no loss scaling in fine-tuning (gradients would underflow); "
         "use bfloat16 or float32")
    need(len(cfg.adam_betas) == 2 and all(0 <= b < 1 for b in cfg.adam_betas), "adam_betas",
         f"{cfg.adam_betas} must be in [0, 1)")
    for spec in cfg.eval_data:
        parse_eval_data(spec)
