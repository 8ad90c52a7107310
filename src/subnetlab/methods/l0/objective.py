"""The pruning objective: KL(p_full || p_pruned) plus a Lagrangian on the sparsity.

The full model's distribution comes from the same frozen weights with the gates
switched off (``gates.enabled = False`` under ``no_grad``); no second copy of
the model is held. Because the weights never change, the full model's
log-probabilities of a training example never change either: ``FullModelOutputs``
computes them once per example (``teacher="cache"``, one gradient-free pass
over the training pool) or on every batch (``teacher="online"``).

The table depends only on the model and the data, so the seeds and levels of
one checkpoint can share it: ``full_model_table`` computes it without gates
installed and caches it beside the mean activations (``cache_dir``), and a
``Pruner`` given the table skips its own pass.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.gates import ComponentGates
from subnetlab.io import load_tensors, save_tensors
from subnetlab.methods.l0.data import PruningData, to_device
from subnetlab.models.adapters import Adapter
from subnetlab.models.digest import weights_digest
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

    def __init__(self, model: nn.Module, gates: ComponentGates | None, data: PruningData, mode: str = "cache",
                 batch_size: int = 64, table: Tensor | None = None) -> None:
        if mode not in ("cache", "online"):
            raise SubnetlabError(f"teacher {mode!r}: expected cache or online")
        self.model, self.gates, self.data, self.mode, self.batch_size = model, gates, data, mode, batch_size
        if table is not None and (table.dim() != 2 or table.shape[0] != data.size):
            raise SubnetlabError(f"full-model table of shape {tuple(table.shape)} does not fit {data.size} examples")
        self._table: Tensor | None = table  # [N, C]; given: computed once for several runs

    @torch.no_grad()
    def _run(self, batch: dict[str, Tensor]) -> Tensor:
        was = self.gates.enabled if self.gates is not None else None
        if self.gates is not None:
            self.gates.enabled = False
        try:
            out = self.model(**to_device(self.data.model_inputs(batch), model_device(self.model)))
        finally:
            if self.gates is not None:
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


def teacher_key(model: nn.Module, adapter: Adapter, data: PruningData, batch_size: int) -> str:
    """Cache key of the full model's table: model (architecture and weights), data, and the batching."""
    text = json.dumps({"fingerprint": adapter.fingerprint(), "weights": weights_digest(model), "data": data.key_text(),
                       "batch_size": int(batch_size), "what": "log_softmax(task_logits)"}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def full_model_table(model: nn.Module, adapter: Adapter, data: PruningData, batch_size: int = 64,
                     cache_dir: str | Path | None = None) -> Tensor:
    """``[N, C]`` full-model log-probabilities of every training example, computed once and cached.

    The same values ``FullModelOutputs(mode="cache")`` computes inside a run (the
    model frozen in eval mode, consecutive batches of ``batch_size``), so runs
    given this table are the runs that compute their own. With ``cache_dir``
    the table is kept as ``teacher-<key>.safetensors`` next to the means, for the
    other seeds, stages and reruns on the same checkpoint and data.
    """
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"teacher-{teacher_key(model, adapter, data, batch_size)}.safetensors"
        if path.is_file():
            return load_tensors(path)["log_probs"].to(model_device(model))
    flags = [(p, p.requires_grad) for p in model.parameters()]
    training = model.training
    model.eval()
    try:
        teacher = FullModelOutputs(model, None, data, "cache", batch_size)
        teacher.prepare()
        table = teacher._table
    finally:
        model.train(training)
        for p, flag in flags:
            p.requires_grad_(flag)
    assert table is not None
    if path is not None:
        save_tensors(path, {"log_probs": table.detach().cpu().contiguous()}, {"data": data.key_text()})
    return table


def check_finite(value: Tensor, step: int, what: str = "loss") -> None:
    """Refuse a NaN or infinite loss, naming the optimisation step."""
    if not bool(torch.isfinite(value).all()):
        raise NonFiniteLoss(f"the {what} became {value.item()} at step {step}")  # the step being computed


class NonFiniteLoss(SubnetlabError):
    """The loss stopped being a finite number; the trainer keeps the last good checkpoint."""
