"""The "random" and "bad" subnetworks that a "good" one is compared with (Prasanna et al., section 4).

Structured (heads / MLPs):

* random: exactly as many heads and as many MLPs as the good subnetwork keeps,
  drawn uniformly at random;
* bad: the same numbers drawn only from what pruning removed: a uniform draw
  among the removed heads (and removed MLPs). When the good subnetwork keeps
  more components than it removed, there are not enough removed ones: all of
  them are taken and the rest are filled from the kept ones, by ``fill``:
  ``"random"`` (a uniform draw among the good components, as the authors'
  ``create_random_masks.ipynb`` does with ``random.sample``; the ``paper``
  preset) or ``"least-important"`` (the least important kept components by the
  last importance scores; without scores a uniform draw). ``extra["bad_fill"]`` records how many were filled.

Weight-level (m-pruning), by ``scope``:

* ``"global"`` (the authors' ``find_global_weight_mask.py``; the ``paper``
  preset): random keeps as many weights as the good subnetwork keeps *in
  total*, uniformly over all prunable weights (``prune.RandomUnstructured``
  through ``global_unstructured``), so a matrix may keep more or fewer than it
  does in the good one; bad keeps the globally smallest-magnitude weights of
  the fine-tuned model, as many as good keeps in total (``L1UnstructuredInvert``
  prunes the largest): it is the exact complement of the good ranking.
* ``"per-matrix"``: in every matrix as many
  weights as the good subnetwork keeps there, uniformly (random) or the
  smallest-magnitude ones of that matrix (bad).

Where subnetlab and the authors' code still differ: the authors prune the
biases of Q/K/V, attention-output and intermediate layers too
(``run_glue.parameters_to_prune``), subnetlab only the weight matrices; their
structured random control keeps each head with probability "share kept"
(``np.random.rand() < p``), so its size varies around the good one's, while
subnetlab draws exactly as many.

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


SCOPES = ("global", "per-matrix")
FILLS = ("random", "least-important")


def _check_choice(value: str, allowed: tuple[str, ...], setting: str) -> None:
    if value not in allowed:
        raise SubnetlabError(f"{setting} {value!r}: choose one of {', '.join(allowed)}", setting=setting)


def _bad_part(keep: Tensor, scores: Tensor | None, g: torch.Generator, fill: str = "least-important") -> tuple[Tensor, int]:
    """Keep-mask of ``keep.sum()`` components drawn from the removed ones (filled if too few)."""
    flat = keep.flatten() > 0.5
    k = int(flat.sum())
    removed, kept = torch.nonzero(~flat).flatten(), torch.nonzero(flat).flatten()
    if removed.numel() >= k:
        return _keep_exactly(flat.numel(), _uniform_choice(removed, k, g)).view_as(keep), 0
    missing = k - removed.numel()
    if fill == "least-important" and scores is not None:
        order = torch.argsort(scores.flatten()[kept].double(), stable=True)
        extra = kept[order[:missing]]
    else:
        extra = _uniform_choice(kept, missing, g)
    return _keep_exactly(flat.numel(), torch.cat([removed, extra])).view_as(keep), missing


def bad_structured(
    good: Subnetwork, adapter: Adapter, seed: int, importance: tuple[Tensor, Tensor] | None = None,
    fill: str = "least-important",
) -> Subnetwork:
    """As many heads and MLPs as ``good`` keeps, drawn from those pruning removed (see module doc)."""
    _check_choice(fill, FILLS, "bad_fill")
    good.check(adapter)
    g = torch.Generator().manual_seed(seed)
    heads, mlps = good.gates()
    sh, sm = importance if importance is not None else (None, None)
    h, fill_h = _bad_part(heads, sh, g, fill)
    m, fill_m = _bad_part(mlps, sm, g, fill)
    return Subnetwork.structured(adapter, h, m, **_meta(good, "bad", seed, bad_fill=str(fill_h + fill_m),
                                                         bad_fill_rule=fill))


# -- weight-level ---------------------------------------------------------------------------
def _split_flat(good: Subnetwork, keep_flat: Tensor) -> dict[str, Tensor]:
    masks, offset = {}, 0
    for name, mask in good.weights.items():
        n = mask.numel()
        masks[name] = keep_flat[offset: offset + n].view(mask.shape).float()
        offset += n
    return masks


def random_weights(good: Subnetwork, adapter: Adapter, seed: int, scope: str = "per-matrix") -> Subnetwork:
    """As many weights as ``good`` keeps, uniformly at random: per matrix, or over all masked matrices at once."""
    _check_choice(scope, SCOPES, "control_scope")
    good.check(adapter)
    g = torch.Generator().manual_seed(seed)
    if scope == "global":
        total = sum(m.numel() for m in good.weights.values())
        kept = sum(int(m.sum()) for m in good.weights.values())
        masks = _split_flat(good, _keep_exactly(total, torch.randperm(total, generator=g)[:kept]))
        return Subnetwork.from_weight_masks(adapter, masks, **_meta(good, "random", seed, control_scope=scope))
    masks = {}
    for name, mask in good.weights.items():
        n, k = mask.numel(), int(mask.sum())
        masks[name] = _keep_exactly(n, torch.randperm(n, generator=g)[:k]).view(mask.shape)
    return Subnetwork.from_weight_masks(adapter, masks, **_meta(good, "random", seed, control_scope=scope))


def bad_weights(good: Subnetwork, adapter: Adapter, seed: int | None = None, scope: str = "per-matrix") -> Subnetwork:
    """The smallest-magnitude weights (of ``adapter``'s model), as many as ``good`` keeps: per matrix or globally."""
    _check_choice(scope, SCOPES, "control_scope")
    good.check(adapter)
    if scope == "global":
        names = list(good.weights)
        magnitude = torch.cat([adapter.parameter(n).detach().abs().flatten().float().cpu() for n in names])
        kept = sum(int(m.sum()) for m in good.weights.values())
        masks = _split_flat(good, smallest_k(magnitude, kept))
        return Subnetwork.from_weight_masks(adapter, masks, **_meta(good, "bad", seed, control_scope=scope))
    masks = {}
    for name, mask in good.weights.items():
        magnitude = adapter.parameter(name).detach().abs().flatten().float().cpu()
        masks[name] = smallest_k(magnitude, int(mask.sum())).view(mask.shape).float()
    return Subnetwork.from_weight_masks(adapter, masks, **_meta(good, "bad", seed, control_scope=scope))


def controls(
    good: Subnetwork, adapter: Adapter, seed: int, importance: tuple[Tensor, Tensor] | None = None,
    *, scope: str = "per-matrix", fill: str = "least-important",
) -> dict[str, Subnetwork]:
    """``{"good", "random", "bad"}`` for a structured or weight-level good subnetwork.

    ``scope`` applies to weight-level subnetworks and ``fill`` to structured ones
    (see the module doc). For weight-level subnetworks ``adapter`` must wrap the
    *fine-tuned* model whose magnitudes were pruned.
    """
    _check_choice(scope, SCOPES, "control_scope")
    _check_choice(fill, FILLS, "bad_fill")
    if good.kind == "structured":
        return {"good": good, "random": random_structured(good, adapter, seed),
                "bad": bad_structured(good, adapter, seed, importance, fill)}
    return {"good": good, "random": random_weights(good, adapter, seed, scope),
            "bad": bad_weights(good, adapter, seed, scope)}
