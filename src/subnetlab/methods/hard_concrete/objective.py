"""The pruning objective: KL(p_full || p_pruned) plus a Lagrangian on the sparsity.

The full model's distribution comes from the same frozen weights with the gates
switched off (``gates.enabled = False`` under ``no_grad``); no second copy of
the model is held. Because the weights never change, the full model's
log-probabilities of a training example never change either: ``FullModelOutputs``
computes them once per example (``teacher="cache"``, one gradient-free pass
over the training pool) or on every batch (``teacher="online"``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.gates import ComponentGates
from subnetlab.methods.hard_concrete.data import PruningData, to_device
from subnetlab.runtime import model_device


def kl_full_to_pruned(log_p_full: Tensor, pruned_logits: Tensor) -> Tensor:
    """``KL(p_full || p_pruned)`` summed over classes, averaged over the batch (float32)."""
    log_q = F.log_softmax(pruned_logits.float(), dim=-1)  # [B, C]
    return F.kl_div(log_q, log_p_full.float(), reduction="batchmean", log_target=True)


class Lagrangian(nn.Module):
    """``lambda1 * (t - s) + lambda2 * (t - s)^2``; the lambdas are trained by gradient *ascent*.

    With ``s`` below the target ``t``, ascent raises ``lambda1``, and descent on
    the gates then pushes ``s`` up (Appendix B; CoFi writes ``s - t``, the same
    up to the sign of ``lambda1``). Both lambdas start at 0.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lambda1 = nn.Parameter(torch.zeros(()))
        self.lambda2 = nn.Parameter(torch.zeros(()))

    def forward(self, target: float, sparsity: Tensor) -> Tensor:
        gap = torch.as_tensor(target, dtype=torch.float32) - sparsity
        return self.lambda1 * gap + self.lambda2 * gap * gap


class FullModelOutputs:
    """Log-probabilities of the full (ungated) model on training examples.

    ``mode="cache"``: computed once for all ``data.size`` examples in consecutive
    batches of ``batch_size`` (deterministic, so a resumed run gets the same
    values); ``mode="online"``: computed on each training batch.
    """

    def __init__(self, model: nn.Module, gates: ComponentGates, data: PruningData, mode: str = "cache",
                 batch_size: int = 64) -> None:
        if mode not in ("cache", "online"):
            raise SubnetlabError(f"teacher {mode!r}: expected cache or online")
        self.model, self.gates, self.data, self.mode, self.batch_size = model, gates, data, mode, batch_size
        self._table: Tensor | None = None  # [N, C]

    @torch.no_grad()
    def _run(self, batch: dict[str, Tensor]) -> Tensor:
        was = self.gates.enabled
        self.gates.enabled = False
        try:
            out = self.model(**to_device(self.data.model_inputs(batch), model_device(self.model)))
        finally:
            self.gates.enabled = was
        return F.log_softmax(self.data.task_logits(out, batch).float(), dim=-1)

    def prepare(self) -> None:
        if self.mode != "cache" or self._table is not None:
            return
        parts = [self._run(self.data.batch_at(idx)) for idx in self.data.batches(self.batch_size)]
        self._table = torch.cat(parts)

    def log_probs(self, indices: list[int], batch: dict[str, Tensor]) -> Tensor:
        """``[B, C]`` full-model log-probabilities for the examples of ``batch``."""
        if self.mode == "online":
            return self._run(batch)
        self.prepare()
        return self._table[torch.as_tensor(indices, dtype=torch.long, device=self._table.device)]


def check_finite(value: Tensor, step: int, what: str = "loss") -> None:
    """Refuse a NaN or infinite loss, naming the optimisation step."""
    if not bool(torch.isfinite(value).all()):
        raise NonFiniteLoss(f"the {what} became {value.item()} at step {step}")  # the step being computed


class NonFiniteLoss(SubnetlabError):
    """The loss stopped being a finite number; the trainer keeps the last good checkpoint."""
