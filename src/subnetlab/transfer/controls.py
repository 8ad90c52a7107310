"""Random control subnetworks matched to a discovered one, matrix by matrix.

The paper's random control keeps *exactly* as many weights in each masked
matrix as the discovered subnetwork does (footnote 2 of section 4.3); the
complement control draws those weights only from outside the subnetwork
(appendix B.2). Both functions check the count they produce.

The authors' released code draws its controls differently, and
``random_released`` reproduces its random one: NeuroSurgeon's
``ContSparseLayer._sample_mask_randomly`` (``Masking/contsparse_layer.py``)
returns a mask of ones with zeros at k random positions, and ``math/transfer.py``
(``inherit_from: subnet_sampled``) sets the mask logits to ``2 * mask - 1``, so
the transferred control keeps n - k weights of each matrix (about 92% at the
paper's 8% density), not k. Its complement control
(``_sample_mask_from_complement``) likewise keeps n - k, the whole subnetwork
among them; subnetlab has no condition for that one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.subnetwork import Subnetwork


def kept_counts(sub: Subnetwork) -> dict[str, int]:
    """Number of kept weights in each masked matrix."""
    _need_weights(sub)
    return {name: int(mask.sum()) for name, mask in sub.weights.items()}


def _draw(pool: Tensor, k: int, shape: torch.Size, generator: torch.Generator) -> Tensor:
    """A 0/1 mask of ``shape`` with ones at ``k`` positions drawn uniformly from ``pool`` (flat indices)."""
    chosen = pool[torch.randperm(pool.numel(), generator=generator)[:k]]
    mask = torch.zeros(shape.numel(), dtype=torch.uint8)
    mask[chosen] = 1
    return mask.view(shape)


def random_matched(sub: Subnetwork, seed: int) -> Subnetwork:
    """Same number of kept weights in every matrix as ``sub``, positions uniform over the matrix."""
    g = torch.Generator().manual_seed(int(seed))
    masks = {}
    for name in sorted(sub.weights):
        mask = sub.weights[name]
        k = int(mask.sum())
        masks[name] = _draw(torch.arange(mask.numel()), k, mask.shape, g)
    return _control(sub, masks, "random-matched", seed)


def random_released(sub: Subnetwork, seed: int) -> Subnetwork:
    """The released code's random control: in every matrix, k random positions dropped, the other n - k kept.

    k is the subnetwork's count in that matrix (see the module docstring for the
    released functions this follows); the dropped positions are uniform over the matrix.
    """
    g = torch.Generator().manual_seed(int(seed))
    masks = {}
    for name in sorted(sub.weights):
        mask = sub.weights[name]
        k = int(mask.sum())
        masks[name] = 1 - _draw(torch.arange(mask.numel()), k, mask.shape, g)
    for name, mask in masks.items():  # the count is the point of this control too: n - k, not k
        n, k = mask.numel(), int(sub.weights[name].sum())
        if int(mask.sum()) != n - k:
            raise AssertionError(f"random-released: {name} keeps {int(mask.sum())}, expected {n - k}")
    extra = {**sub.extra, "matched_to": sub.method}
    return Subnetwork("weights", sub.architecture, sub.fingerprint, weights=masks, method="random-released",
                      seed=int(seed), target_sparsity=sub.sparsity, ablation="none", extra=extra)


def complement_matched(sub: Subnetwork, seed: int) -> Subnetwork:
    """Same counts per matrix as ``sub``, drawn only from the weights ``sub`` does not keep."""
    g = torch.Generator().manual_seed(int(seed))
    masks = {}
    for name in sorted(sub.weights):
        mask = sub.weights[name]
        k = int(mask.sum())
        outside = (mask.reshape(-1) == 0).nonzero().squeeze(1)
        if k > outside.numel():
            raise SubnetlabError(
                f"{name}: the subnetwork keeps {k} of {mask.numel()} weights; only {outside.numel()} lie outside it, "
                "so no complement control of the same size exists"
            )
        masks[name] = _draw(outside, k, mask.shape, g)
    return _control(sub, masks, "complement-matched", seed)


def _control(sub: Subnetwork, masks: dict[str, Tensor], method: str, seed: int) -> Subnetwork:
    for name, mask in masks.items():
        if int(mask.sum()) != int(sub.weights[name].sum()):  # the count is the whole point of the control
            raise AssertionError(f"{method}: {name} keeps {int(mask.sum())}, expected {int(sub.weights[name].sum())}")
    extra = {**sub.extra, "matched_to": sub.method}
    return Subnetwork("weights", sub.architecture, sub.fingerprint, weights=masks, method=method, seed=int(seed),
                      target_sparsity=sub.sparsity, ablation="none", extra=extra)


def _need_weights(sub: Subnetwork) -> None:
    if sub.kind != "weights":
        raise SubnetlabError("transfer needs a weight-level subnetwork (kind 'weights'), e.g. from `subnetlab discover`")


__all__ = ["complement_matched", "kept_counts", "random_matched", "random_released"]
