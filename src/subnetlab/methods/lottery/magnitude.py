"""Global iterative magnitude pruning (m-pruning, Prasanna et al. 2020, section 3.2).

The fine-tuned model's query, key, value, attention-output, intermediate and
output weight matrices of every layer (``adapter.weight_matrices()``; never the
embeddings or the classifier) are ranked together by absolute value. Each step
removes 10% of the weights still remaining, evaluates on the development set,
and pruning stops *before* the metric falls below 90% of the full model's (at
most 10 steps, so at most ``1 - 0.9**10 = 65%`` of the weights go).

There is no retraining between steps, so the ranking never changes and each
step's mask contains the previous one: step ``k`` removes exactly the
``n - remaining_k`` globally smallest weights, ties broken by position (matrix
order, then row-major index), which makes the result reproducible bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import mask_weights
from subnetlab.models.adapters import Adapter
from subnetlab.progress import stage
from subnetlab.subnetwork import Subnetwork

Evaluate = Callable[[], float]  # the dev metric of the model as it now computes (masks or gates applied)


@dataclass
class PruningStep:
    """One evaluated step: what was removed so far, and the dev metric then."""

    step: int
    removed: int  # weights or components removed in total
    sparsity: float
    metric: float
    accepted: bool
    phase: str = "joint"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PruningResult:
    """The subnetwork found, the full model's metric, and every step tried (the last may be rejected)."""

    subnetwork: Subnetwork
    full_metric: float
    threshold: float
    history: list[PruningStep] = field(default_factory=list)
    importance: tuple[Tensor, Tensor] | None = None  # s-pruning: the last (heads [L, H], mlps [L]) scores

    @property
    def metric(self) -> float:
        """The dev metric of the returned subnetwork."""
        accepted = [s.metric for s in self.history if s.accepted]
        return accepted[-1] if accepted else self.full_metric

    def summary(self) -> dict:
        return {
            "full_metric": self.full_metric, "metric": self.metric, "threshold": self.threshold,
            "sparsity": self.subnetwork.sparsity, "steps": [s.as_dict() for s in self.history],
        }


def smallest_k(scores: Tensor, k: int) -> Tensor:
    """Boolean mask of the ``k`` smallest entries of the 1-D ``scores``; ties go to the lower index.

    Uses ``kthvalue`` rather than a full sort, so memory stays at one copy of the
    scores even for BERT-base's 85M weights.
    """
    n = scores.numel()
    if not 0 <= k <= n:
        raise SubnetlabError(f"cannot select {k} of {n} entries")
    out = torch.zeros(n, dtype=torch.bool, device=scores.device)
    if k == 0:
        return out
    threshold = scores.kthvalue(k).values
    out |= scores < threshold
    need = k - int(out.sum())
    ties = torch.nonzero(scores == threshold).flatten()[:need]
    out[ties] = True
    return out


def remaining_schedule(total: int, fraction: float = 0.1, steps: int = 10) -> list[int]:
    """Weights remaining after each step when every step removes ``round(fraction * remaining)``."""
    if not 0.0 < fraction < 1.0:
        raise SubnetlabError(f"pruning fraction {fraction} is outside (0, 1)")
    remaining, out = total, []
    for _ in range(steps):
        remaining -= max(1, round(fraction * remaining)) if remaining else 0
        out.append(remaining)
    return out


def _flat_magnitudes(adapter: Adapter, names: Sequence[str]) -> Tensor:
    return torch.cat([adapter.parameter(n).detach().abs().flatten().float().cpu() for n in names])


def global_magnitude_masks(adapter: Adapter, names: Sequence[str], remove: int) -> dict[str, Tensor]:
    """Keep-masks (1 = kept) that remove the ``remove`` globally smallest-magnitude weights of ``names``."""
    removed = smallest_k(_flat_magnitudes(adapter, names), remove)
    return _split(adapter, names, ~removed)


def _split(adapter: Adapter, names: Sequence[str], keep_flat: Tensor) -> dict[str, Tensor]:
    masks, offset = {}, 0
    for name in names:
        shape = adapter.parameter(name).shape
        size = shape.numel()
        masks[name] = keep_flat[offset : offset + size].view(shape).to(torch.uint8)
        offset += size
    return masks


def magnitude_prune(
    adapter: Adapter,
    evaluate: Evaluate,
    *,
    fraction: float = 0.1,
    max_steps: int = 10,
    threshold: float = 0.9,
    names: Sequence[str] | None = None,
    full_metric: float | None = None,
    seed: int | None = None,
) -> PruningResult:
    """Iterative global magnitude pruning; returns the last subnetwork above ``threshold * full``.

    ``evaluate()`` is called with the candidate masks applied to ``adapter.model``
    (by parametrization; removed again afterwards). ``names`` defaults to every
    attention and MLP weight matrix.
    """
    if not 0.0 < threshold <= 1.0:
        raise SubnetlabError(f"threshold {threshold} is outside (0, 1]")
    if max_steps < 1:
        raise SubnetlabError(f"max_steps {max_steps} must be at least 1")
    names = list(names) if names is not None else adapter.weight_matrices()
    model = adapter.model
    magnitudes = _flat_magnitudes(adapter, names)
    total = magnitudes.numel()
    full = float(evaluate()) if full_metric is None else float(full_metric)
    history: list[PruningStep] = []
    kept_flat = torch.ones(total, dtype=torch.bool)
    for step, remaining in enumerate(remaining_schedule(total, fraction, max_steps), start=1):
        candidate = ~smallest_k(magnitudes, total - remaining)
        masks = _split(adapter, names, candidate)
        with mask_weights(model, {n: m.to(adapter.parameter(n).device) for n, m in masks.items()}):
            metric = float(evaluate())
        accepted = metric >= threshold * full
        history.append(PruningStep(step, total - remaining, 1 - remaining / total, metric, accepted, "magnitude"))
        stage(f"m-pruning step {step}: {1 - remaining / total:.1%} removed, metric {metric:.4f} "
              f"({'kept' if accepted else 'below ' + format(threshold * full, '.4f') + ', stop'})")
        if not accepted:
            break
        kept_flat = candidate
    sub = Subnetwork.from_weight_masks(
        adapter, _split(adapter, names, kept_flat), method="magnitude", seed=seed,
        target_sparsity=None, ablation="zero",
        extra={"full_metric": repr(full), "threshold": repr(threshold), "fraction": repr(fraction)},
    )
    return PruningResult(sub, full, threshold, history)
