"""One supervised training step, shared by fine-tuning and lottery re-fine-tuning.

Both loops follow the same recipe (the BERT one): AdamW without decay on biases
and LayerNorm weights, a linear warm-up and decay, gradient clipping, and a data
order that is a function of ``(seed, epoch)`` alone, so that a resumed run sees
the same batches and "full model" and subnetwork runs differ only in the mask.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.methods.finetune.config import FinetuneConfig
from subnetlab.optim import make_optimizer
from subnetlab.tasks.base import Task


def training_optimizer(model: nn.Module, cfg: FinetuneConfig) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters; biases and LayerNorm weights are not decayed."""
    return make_optimizer(model, "adamw", lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.adam_betas),
                          eps=cfg.adam_eps, no_decay_1d=True)


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The example order of ``epoch``: a permutation seeded by ``(seed, epoch)`` alone."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + 7919 * epoch + 1) % (2**63))
    return torch.randperm(n, generator=g).tolist()


class BatchOrder:
    """The example indices of every step: epoch after epoch, each in its own seeded order."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.per_epoch = -(-n // batch_size)
        self._order: tuple[int, list[int]] | None = None

    def indices(self, step: int) -> list[int]:
        epoch, position = divmod(step, self.per_epoch)
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, epoch_order(self.n, self.seed, epoch))
        return self._order[1][position * self.batch_size : (position + 1) * self.batch_size]


def train_step(model: nn.Module, task: Task, batch: dict[str, Tensor], optimizer: torch.optim.Optimizer,
               scheduler: Any, grad_clip: float | None, step: int) -> Tensor:
    """Forward, loss, backward, clip, optimiser and scheduler step on one batch (already on the device).

    Returns the loss (a tensor: callers read it at their logging interval). A
    non-finite loss stops training, naming the step.
    """
    loss = task.loss(model(**task.model_inputs(batch)), batch)
    if not torch.isfinite(loss):
        raise SubnetlabError(f"the training loss became {loss.item()} at step {step + 1}; lower the learning rate")
    loss.backward()
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


__all__ = ["BatchOrder", "epoch_order", "train_step", "training_optimizer"]
