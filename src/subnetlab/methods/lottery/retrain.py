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

The training recipe is the fine-tuning one (``subnetlab.methods.finetune.step``):
AdamW without decay on biases and LayerNorms, linear warmup / decay, gradient
clipping, the same ``(seed, epoch)`` data order, so "full model" and
subnetwork runs differ only in the mask.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates
from subnetlab.methods.evaluate import evaluate
from subnetlab.methods.finetune.config import FinetuneConfig
from subnetlab.methods.finetune.step import BatchOrder, train_step, training_optimizer
from subnetlab.models.adapters import Adapter
from subnetlab.optim import lr_scheduler
from subnetlab.progress import track
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.base import Task

PINNABLE_KINDS = ("structured", "weights")


def refuse_unpinnable(subnetwork: Subnetwork, where: str = "") -> None:
    """Refuse a subnetwork that re-fine-tuning cannot hold fixed: only head/MLP gates or weight masks can be.

    An edge circuit cuts connections between components, which no gate on a head or mask on a weight
    expresses; read as weight masks it would pin nothing and train the whole model under its sparsity.
    """
    if subnetwork.kind not in PINNABLE_KINDS:
        raise SubnetlabError(f"{where or 'subnetwork'}: a subnetwork of kind {subnetwork.kind!r} (an edge circuit "
                             "cuts connections, not heads or weights); re-fine-tuning pins a structured subnetwork "
                             "(heads and MLPs) or weight masks", setting="subnetwork")


class PinnedSubnetwork:
    """Holds a subnetwork's pruned parts at exactly zero in a model, for training and evaluation.

    ``with PinnedSubnetwork(model, adapter, sub):`` or ``.apply()`` / ``.remove()``.
    Removing the pin restores the forward pass (gates off); zeroed weights stay zero.
    """

    def __init__(self, model: nn.Module, adapter: Adapter, subnetwork: Subnetwork) -> None:
        refuse_unpinnable(subnetwork)
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
    optimizer = training_optimizer(model, cfg)
    scheduler = lr_scheduler(optimizer, total=total, warmup=warmup, decay=cfg.scheduler)
    losses: list[float] = []
    started = time.time()
    with PinnedSubnetwork(model, adapter, subnetwork):
        model.train()
        batches = BatchOrder(n, cfg.batch_size, cfg.seed)
        for step in track(range(total), total=total, description="re-fine-tuning"):
            batch = task.batch_at(tokenizer, "train", batches.indices(step), max_length=cfg.max_length)
            loss = train_step(model, task, {k: v.to(device) for k, v in batch.items()}, optimizer, scheduler,
                              cfg.grad_clip, step)
            losses.append(float(loss.item()))
            if on_step is not None:
                on_step(step + 1)
        model.eval()
        scores = evaluate(model, tokenizer, task, batch_size=cfg.eval_batch_size, max_length=cfg.max_length,
                          limit=cfg.eval_limit)
    tail = losses[-max(1, per_epoch // 10):]
    return {"steps": total, "epochs": total / per_epoch, "train_examples": n, "final": scores,
            "train_loss": sum(tail) / len(tail), "wall_seconds": time.time() - started}
