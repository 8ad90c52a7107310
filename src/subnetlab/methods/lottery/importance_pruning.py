"""Structured importance pruning of heads and MLPs (s-pruning, Prasanna et al. 2020, section 3.3).

Michel et al. (2019) prune the heads with the lowest importance (see
``subnetlab.methods.lottery.importance``), recompute importance in the pruned model,
and repeat; Prasanna et al. extend this to whole MLPs. Each step of the main
phase removes the least important 10% of *all* heads (``int(0.1 * L * H)``,
at least one) and the least important remaining MLP, then evaluates on the
development set; pruning stops *before* the metric falls below 90% of the full
model's. Pruned components are gated at zero (``apply_gates``), the same
ablation the re-fine-tuning uses.

``refine=True`` then follows the authors' released code (``find_head_mlp_masks.py``
in sai-prasanna/bert-experiments): after the joint phase stops, it continues
with heads alone (half the step) and then MLPs alone, each until the next step
would cross the threshold. The result is never below the threshold either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates
from subnetlab.methods.lottery.importance import Criterion, LossFn, classification_loss, importance
from subnetlab.methods.lottery.magnitude import PruningResult, PruningStep
from subnetlab.models.adapters import Adapter
from subnetlab.progress import stage
from subnetlab.subnetwork import Subnetwork

Evaluate = Callable[[], float]


def least_important(scores: Tensor, keep: Tensor, k: int) -> Tensor:
    """Flat indices of the ``k`` lowest-scoring components still kept (ties: lower index first)."""
    flat, kept = scores.flatten().double(), keep.flatten() > 0.5
    candidates = torch.nonzero(kept).flatten()
    k = min(k, candidates.numel())
    order = torch.argsort(flat[candidates], stable=True)
    return candidates[order[:k]]


def _drop(mask: Tensor, indices: Tensor) -> Tensor:
    out = mask.clone().flatten()
    out[indices] = 0.0
    return out.view_as(mask)


def importance_prune(
    model: nn.Module,
    adapter: Adapter,
    batches: Sequence[dict],
    evaluate: Evaluate,
    *,
    loss_fn: LossFn = classification_loss,
    criterion: str | Criterion = "sensitivity",
    head_fraction: float = 0.1,
    threshold: float = 0.9,
    max_steps: int | None = None,
    refine: bool = True,
    prune_mlps: bool = True,
    full_metric: float | None = None,
    seed: int | None = None,
) -> PruningResult:
    """Iterative head + MLP pruning by importance; returns the last subnetwork above ``threshold * full``.

    ``batches`` (a re-iterable sequence) feed the importance estimate; ``evaluate()``
    is called with the candidate gates applied to ``model``. The result's
    ``extra`` records the criterion; ``result.importance`` holds the last
    importance scores (used to fill "bad" subnetworks when too few were removed).
    """
    if not 0.0 < head_fraction < 1.0:
        raise SubnetlabError(f"head fraction {head_fraction} is outside (0, 1)")
    if not 0.0 < threshold <= 1.0:
        raise SubnetlabError(f"threshold {threshold} is outside (0, 1]")
    L, H = adapter.num_layers, adapter.num_heads
    per_step = max(1, int(head_fraction * L * H))
    heads, mlps = torch.ones(L, H), torch.ones(L)
    full = float(evaluate()) if full_metric is None else float(full_metric)
    history: list[PruningStep] = []
    step = 0

    def scores_for(h: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
        return importance(model, adapter, batches, loss_fn, criterion, heads=h, mlps=m)

    def metric_for(h: Tensor, m: Tensor) -> float:
        with apply_gates(model, adapter, heads=h, mlps=m):
            return float(evaluate())

    imp_h, imp_m = scores_for(heads, mlps)
    phases = [("joint", per_step, 1 if prune_mlps else 0)]
    if refine:
        phases += [("heads", max(1, per_step // 2), 0)] + ([("mlps", 0, 1)] if prune_mlps else [])
    for phase, n_heads, n_mlps in phases:
        while max_steps is None or step < max_steps:
            drop_h = least_important(imp_h, heads, n_heads) if n_heads else torch.empty(0, dtype=torch.long)
            drop_m = least_important(imp_m, mlps, n_mlps) if n_mlps else torch.empty(0, dtype=torch.long)
            if drop_h.numel() == 0 and drop_m.numel() == 0:
                break
            if n_heads and int(heads.sum()) - drop_h.numel() < 1:  # keep at least one head
                break
            cand_h, cand_m = _drop(heads, drop_h), _drop(mlps, drop_m)
            metric = metric_for(cand_h, cand_m)
            step += 1
            accepted = metric >= threshold * full
            removed = int((1 - cand_h).sum() + (1 - cand_m).sum())
            history.append(PruningStep(step, removed, removed / (L * H + L), metric, accepted, phase))
            stage(f"s-pruning step {step} ({phase}): {int(cand_h.sum())} heads, {int(cand_m.sum())} MLPs left, "
                  f"metric {metric:.4f}{'' if accepted else ' below threshold, stop phase'}")
            if not accepted:
                break
            heads, mlps = cand_h, cand_m
            imp_h, imp_m = scores_for(heads, mlps)  # recomputed in the pruned model
    name = criterion if isinstance(criterion, str) else getattr(criterion, "__name__", "custom")
    sub = Subnetwork.structured(
        adapter, heads, mlps, method="importance", seed=seed, ablation="zero",
        extra={"criterion": name, "full_metric": repr(full), "threshold": repr(threshold),
               "head_fraction": repr(head_fraction), "refine": str(refine)},
    )
    return PruningResult(sub, full, threshold, history, importance=(imp_h, imp_m))
