"""Previous-token and induction scores of attention heads, read from their attention patterns.

The two heads of the induction mechanism (Olsson et al., 2022) are recognised
by where they attend, independently of any circuit-discovery method:

* **previous-token score**: the mean attention from position ``i`` to ``i - 1``
  (over every query ``i >= 1`` of every sequence);
* **induction score**: the mean attention from a token to the position *after*
  the earlier occurrences of the same token, i.e. from query ``i`` to the keys
  ``j <= i`` with ``token[j - 1] == token[i]``, summed over those keys and
  averaged over the queries that have at least one (so it is defined on any
  sequence, not only on ``<bos> prefix span span``).

Both are functions of attention weights ``[batch, heads, T, T]`` (rows sum to
one); ``head_scores`` runs a model with eager attention to get them for every
layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from subnetlab.analysis.attention_stats import attention_maps
from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import head_name


def _check(attention: Tensor) -> Tensor:
    if attention.dim() != 4 or attention.shape[-1] != attention.shape[-2]:
        raise SubnetlabError(f"attention weights must be [batch, heads, T, T]; got {tuple(attention.shape)}")
    return attention.double()


def previous_token_score(attention: Tensor) -> Tensor:
    """``[heads]``: mean attention from each query ``i >= 1`` to ``i - 1``."""
    a = _check(attention)
    if a.shape[-1] < 2:
        raise SubnetlabError("a previous-token score needs sequences of at least two tokens")
    previous = torch.diagonal(a, offset=-1, dim1=-2, dim2=-1)  # [B, H, T-1]: a[..., i, i-1]
    return previous.mean(dim=(0, 2)).float()


def induction_targets(input_ids: Tensor) -> Tensor:
    """``[batch, T, T]`` bool: key ``j`` is an induction target of query ``i`` (``j <= i`` and ``token[j-1] == token[i]``)."""
    if input_ids.dim() != 2:
        raise SubnetlabError(f"input ids must be [batch, T]; got {tuple(input_ids.shape)}")
    B, T = input_ids.shape
    match = torch.zeros(B, T, T, dtype=torch.bool)
    if T > 1:
        # key j = m + 1 where token[m] == token[i] and m < i
        same = input_ids.unsqueeze(2) == input_ids[:, :-1].unsqueeze(1)  # [B, i, m]
        earlier = torch.arange(T - 1).unsqueeze(0) < torch.arange(T).unsqueeze(1)  # m < i
        match[:, :, 1:] = same & earlier
    return match


def induction_score(attention: Tensor, input_ids: Tensor) -> Tensor:
    """``[heads]``: attention from a repeated token to the tokens after its earlier occurrences (NaN: no such query)."""
    a = _check(attention)
    targets = induction_targets(input_ids)
    if targets.shape != (a.shape[0], a.shape[-2], a.shape[-1]):
        raise SubnetlabError(f"input ids {tuple(input_ids.shape)} do not match attention {tuple(a.shape)}")
    queries = targets.any(-1)  # [B, T]
    if not bool(queries.any()):
        return torch.full((a.shape[1],), float("nan"))
    per_query = (a * targets.unsqueeze(1).double()).sum(-1)  # [B, H, T]
    return ((per_query * queries.unsqueeze(1).double()).sum(dim=(0, 2)) / queries.sum()).float()


@dataclass(frozen=True)
class HeadScores:
    """``previous`` and ``induction`` scores, ``[layers, heads]`` each."""

    previous: Tensor
    induction: Tensor

    def best(self, kind: str, layer: int) -> tuple[int, float]:
        """The head of ``layer`` with the highest ``kind`` score and that score."""
        scores = getattr(self, kind)[layer]
        h = int(torch.nan_to_num(scores, nan=-1.0).argmax())
        return h, float(scores[h])

    def rows(self) -> list[dict]:
        L, H = self.previous.shape
        return [{"head": head_name(l, h), "previous_token": float(self.previous[l, h]),
                 "induction": float(self.induction[l, h])} for l in range(L) for h in range(H)]

    def to_dict(self) -> dict:
        return {"previous_token": self.previous.tolist(), "induction": self.induction.tolist(), "heads": self.rows()}


def head_scores(model: torch.nn.Module, input_ids: Tensor) -> HeadScores:
    """Both scores of every head of ``model`` (eager attention) on ``input_ids [batch, T]`` (no padding)."""
    was_training = model.training
    model.eval()
    try:
        maps = attention_maps(model, {"input_ids": input_ids})
    finally:
        model.train(was_training)
    ids = input_ids.cpu()
    return HeadScores(torch.stack([previous_token_score(m.cpu()) for m in maps]),
                      torch.stack([induction_score(m.cpu(), ids) for m in maps]))


__all__ = ["HeadScores", "head_scores", "induction_score", "induction_targets", "previous_token_score"]
