"""The "random" and "bad" subnetworks that a "good" one is compared with (Prasanna et al., section 4).

* random: exactly as many heads and as many MLPs as the good subnetwork keeps
  (structured), or exactly as many weights *in every matrix* (weight-level),
  drawn uniformly at random;
* bad: the same numbers drawn only from what pruning removed. Structured: a
  uniform draw among the removed heads (and removed MLPs). When the good
  subnetwork keeps more components than it removed, there are not enough
  removed ones: all of them are taken and the rest are the *least important*
  kept components by the last importance scores (or, without scores, a uniform
  draw among the kept); ``extra["bad_fill"]`` records how many. Weight-level:
  in every matrix the smallest-magnitude weights of the fine-tuned model, as
  many as the good subnetwork keeps there (so they are the removed ones
  whenever the matrix lost at least as many weights as it kept).

Every draw comes from an explicit ``torch.Generator``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.methods.lottery.magnitude import smallest_k
from subnetlab.models.adapters import Adapter
from subnetlab.subnetwork import Subnetwork


def _uniform_choice(pool: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """``k`` distinct entries of the 1-D index tensor ``pool``, uniformly at random."""
    if k > pool.numel():
        raise SubnetlabError(f"cannot draw {k} of {pool.numel()} components")
    return pool[torch.randperm(pool.numel(), generator=generator)[:k]]


def _keep_exactly(size: int, indices: Tensor) -> Tensor:
    mask = torch.zeros(size)
    mask[indices] = 1.0
    return mask


def _meta(good: Subnetwork, control: str, seed: int | None, **extra: str) -> dict:
    return dict(method=f"{good.method}-{control}", seed=seed, ablation=good.ablation,
                extra={**good.extra, "control": control, "good_sparsity": repr(good.sparsity), **extra})


# -- structured ---------------------------------------------------------------------------
def random_structured(good: Subnetwork, adapter: Adapter, seed: int) -> Subnetwork:
    """As many heads and MLPs as ``good`` keeps, uniformly at random."""
    good.check(adapter)
    g = torch.Generator().manual_seed(seed)
    heads, mlps = good.gates()
    h = _keep_exactly(heads.numel(), _uniform_choice(torch.arange(heads.numel()), int(heads.sum()), g))
    m = _keep_exactly(mlps.numel(), _uniform_choice(torch.arange(mlps.numel()), int(mlps.sum()), g))
    return Subnetwork.structured(adapter, h.view_as(heads), m, **_meta(good, "random", seed))


def _bad_part(keep: Tensor, scores: Tensor | None, g: torch.Generator) -> tuple[Tensor, int]:
    """Keep-mask of ``keep.sum()`` components drawn from the removed ones (filled if too few)."""
    flat = keep.flatten() > 0.5
    k = int(flat.sum())
    removed, kept = torch.nonzero(~flat).flatten(), torch.nonzero(flat).flatten()
    if removed.numel() >= k:
        return _keep_exactly(flat.numel(), _uniform_choice(removed, k, g)).view_as(keep), 0
    fill = k - removed.numel()
    if scores is not None:
        order = torch.argsort(scores.flatten()[kept].double(), stable=True)
        extra = kept[order[:fill]]
    else:
        extra = _uniform_choice(kept, fill, g)
    return _keep_exactly(flat.numel(), torch.cat([removed, extra])).view_as(keep), fill


def bad_structured(
    good: Subnetwork, adapter: Adapter, seed: int, importance: tuple[Tensor, Tensor] | None = None
) -> Subnetwork:
    """As many heads and MLPs as ``good`` keeps, drawn from those pruning removed (see module doc)."""
    good.check(adapter)
    g = torch.Generator().manual_seed(seed)
    heads, mlps = good.gates()
    sh, sm = importance if importance is not None else (None, None)
    h, fill_h = _bad_part(heads, sh, g)
    m, fill_m = _bad_part(mlps, sm, g)
    return Subnetwork.structured(adapter, h, m, **_meta(good, "bad", seed, bad_fill=str(fill_h + fill_m)))


# -- weight-level ---------------------------------------------------------------------------
def random_weights(good: Subnetwork, adapter: Adapter, seed: int) -> Subnetwork:
    """In every masked matrix, as many weights as ``good`` keeps there, uniformly at random."""
    good.check(adapter)
    g = torch.Generator().manual_seed(seed)
    masks = {}
    for name, mask in good.weights.items():
        n, k = mask.numel(), int(mask.sum())
        masks[name] = _keep_exactly(n, torch.randperm(n, generator=g)[:k]).view(mask.shape)
    return Subnetwork.from_weight_masks(adapter, masks, **_meta(good, "random", seed))


def bad_weights(good: Subnetwork, adapter: Adapter, seed: int | None = None) -> Subnetwork:
    """In every masked matrix, its smallest-magnitude weights (of ``adapter``'s model), as many as ``good`` keeps."""
    good.check(adapter)
    masks = {}
    for name, mask in good.weights.items():
        magnitude = adapter.parameter(name).detach().abs().flatten().float().cpu()
        masks[name] = smallest_k(magnitude, int(mask.sum())).view(mask.shape).float()
    return Subnetwork.from_weight_masks(adapter, masks, **_meta(good, "bad", seed))


def controls(
    good: Subnetwork, adapter: Adapter, seed: int, importance: tuple[Tensor, Tensor] | None = None
) -> dict[str, Subnetwork]:
    """``{"good", "random", "bad"}`` for a structured or weight-level good subnetwork.

    For weight-level subnetworks ``adapter`` must wrap the *fine-tuned* model whose
    magnitudes were pruned.
    """
    if good.kind == "structured":
        return {"good": good, "random": random_structured(good, adapter, seed),
                "bad": bad_structured(good, adapter, seed, importance)}
    return {"good": good, "random": random_weights(good, adapter, seed), "bad": bad_weights(good, adapter, seed)}
