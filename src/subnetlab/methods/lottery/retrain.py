"""Re-fine-tuning a subnetwork from the pre-trained weights with its mask fixed (Prasanna et al., 4.2).

The lottery-ticket test: take the *pre-trained* model (a fresh classifier),
switch the pruned parts off, fine-tune what is left, evaluate. The pruned
parts stay exactly off throughout:

* structured (heads / MLPs): the pruned components are gated at zero with
  ``apply_gates`` hooks for every training and evaluation forward, so they
  contribute nothing and their parameters receive zero gradient;
* weight-level: the pruned weights are set to zero and a gradient hook
  multiplies their gradient by the mask. Adam's moments for them stay zero and
  decoupled weight decay keeps zero at zero, so they are exactly zero after
  every step, and the saved checkpoint *is* the subnetwork.

The training recipe is the fine-tuning one (``subnetlab.methods.finetune.train``):
AdamW without decay on biases and LayerNorms, linear warmup / decay, gradient
clipping, the same ``(seed, epoch)`` data order, so "full model" and
subnetwork runs differ only in the mask.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates
from subnetlab.methods.evaluate import evaluate
from subnetlab.methods.finetune.train import build_task, epoch_order, lr_factor
from subnetlab.methods.finetune.config import FinetuneConfig
from subnetlab.methods.finetune.model import model_for_task
from subnetlab.models.adapters import Adapter
from subnetlab.progress import stage, track
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.base import Task


class PinnedSubnetwork:
    """Holds a subnetwork's pruned parts at exactly zero in a model, for training and evaluation.

    ``with PinnedSubnetwork(model, adapter, sub):`` or ``.apply()`` / ``.remove()``.
    Removing the pin restores the forward pass (gates off); zeroed weights stay zero.
    """

    def __init__(self, model: nn.Module, adapter: Adapter, subnetwork: Subnetwork) -> None:
        subnetwork.check(adapter)
        self.model, self.adapter, self.subnetwork = model, adapter, subnetwork
        self._gates = None
        self._handles: list[Any] = []

    def apply(self) -> "PinnedSubnetwork":
        sub = self.subnetwork
        if sub.kind == "structured":
            heads, mlps = sub.gates()
            device = next(self.model.parameters()).device
            self._gates = apply_gates(self.model, self.adapter, heads.to(device), mlps.to(device)).__enter__()
            return self
        for name, mask in sub.weights.items():
            p = self.adapter.parameter(name)
            m = mask.to(device=p.device, dtype=p.dtype)
            with torch.no_grad():
                p.mul_(m)
            self._handles.append(p.register_hook(lambda g, m=m: g * m))
        return self

    def remove(self) -> None:
        if self._gates is not None:
            self._gates.remove()
            self._gates = None
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> "PinnedSubnetwork":
        return self.apply()

    def __exit__(self, *exc: object) -> None:
        self.remove()


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when there is one; a named CUDA device must exist."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SubnetlabError(f"device {name}: no CUDA device here")
    return torch.device(name)


def _optimizer(model: nn.Module, cfg: FinetuneConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.adam_betas), eps=cfg.adam_eps)


def train_masked(
    model: nn.Module, adapter: Adapter, tokenizer: Any, task: Task, subnetwork: Subnetwork, cfg: FinetuneConfig,
    *, on_step: Any = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` on ``task`` with ``subnetwork`` pinned; evaluate it, still pinned.

    ``on_step(step)`` (tests) is called after every optimizer step. Returns the
    final scores per evaluation split and the training summary.
    """
    if not task.train:
        raise SubnetlabError(f"task {task.name} has no training examples")
    device = next(model.parameters()).device
    n = len(task.train)
    per_epoch = math.ceil(n / cfg.batch_size)
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * per_epoch))
    warmup = cfg.warmup_steps or int(cfg.warmup_ratio * total)
    torch.manual_seed(cfg.seed)  # dropout stream
    optimizer = _optimizer(model, cfg)
    scheduler = LambdaLR(optimizer, lambda s: lr_factor(s, warmup, total, cfg.scheduler))
    losses: list[float] = []
    started = time.time()
    with PinnedSubnetwork(model, adapter, subnetwork):
        model.train()
        order: tuple[int, list[int]] | None = None
        for step in track(range(total), total=total, description="re-fine-tuning"):
            epoch, position = divmod(step, per_epoch)
            if order is None or order[0] != epoch:
                order = (epoch, epoch_order(n, cfg.seed, epoch))
            indices = order[1][position * cfg.batch_size : (position + 1) * cfg.batch_size]
            batch = {k: v.to(device) for k, v in task.batch_at(tokenizer, "train", indices, max_length=cfg.max_length).items()}
            loss = task.loss(model(**task.model_inputs(batch)), batch)
            if not torch.isfinite(loss):
                raise SubnetlabError(f"the training loss became {loss.item()} at step {step + 1}; lower the learning rate")
            loss.backward()
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.item()))
            if on_step is not None:
                on_step(step + 1)
        model.eval()
        scores = evaluate(model, tokenizer, task, batch_size=cfg.eval_batch_size, max_length=cfg.max_length,
                          limit=cfg.eval_limit)
    tail = losses[-max(1, per_epoch // 10):]
    return {"steps": total, "epochs": total / per_epoch, "train_examples": n, "final": scores,
            "train_loss": sum(tail) / len(tail), "wall_seconds": time.time() - started}


def retrain_job(config: dict[str, Any], out_dir: str | os.PathLike) -> dict[str, Any]:
    """Job function (``subnetlab.executor``): pre-trained model + fixed mask, fine-tuned and evaluated.

    ``config``: ``finetune`` (a ``FinetuneConfig`` as JSON: model = the *pre-trained*
    model, task, hyperparameters, seed), ``subnetwork`` (the mask file) and
    ``save_model`` (default true). Writes ``subnetwork.safetensors`` (the mask
    used) and ``model/`` (trained weights: weight-level subnetworks are zero in
    place, structured ones must be evaluated with the mask's gates); returns the
    metrics (the executor writes ``config.json`` and ``metrics.json``).
    """
    out = Path(out_dir)
    cfg = FinetuneConfig.from_json(config["finetune"])
    task = build_task(cfg)
    loaded = model_for_task(cfg.model, task, seed=cfg.seed)
    sub = Subnetwork.load(config["subnetwork"], adapter=loaded.adapter)
    model = loaded.model.to(resolve_device(cfg.device))
    sub.save(out / "subnetwork.safetensors")
    control = sub.extra.get("control", "good")
    stage(f"re-fine-tuning {cfg.model} with the {control} {sub.method} subnetwork ({sub.kind}, sparsity {sub.sparsity:.1%})")
    metrics = train_masked(model, loaded.adapter, loaded.tokenizer, task, sub, cfg)
    if config.get("save_model", True):
        model.save_pretrained(str(out / "model"))
        if loaded.tokenizer is not None and hasattr(loaded.tokenizer, "save_pretrained"):
            loaded.tokenizer.save_pretrained(str(out / "model"))
    metrics["subnetwork"] = {"method": sub.method, "kind": sub.kind, "control": control, "sparsity": sub.sparsity,
                             "parameter_sparsity": sub.parameter_sparsity(loaded.adapter)}
    return metrics
