"""Self-attention pattern types (Kovaleva et al., 2019), raw and norm-weighted (Kobayashi et al., 2020).

Kovaleva et al. sort attention maps into five types: *diagonal* (attention to
the previous / next / own token), *block* (spread over the query's own
sentence), *vertical* (to special tokens and punctuation), *vertical +
diagonal*, and *heterogeneous* (everything else; a rough upper bound on heads
that could encode non-trivial relations). They, and Prasanna et al. (2020),
classify maps with a small CNN trained on 400 (plus 600 normed) hand-annotated
maps. Neither the network nor the annotations are available, so this module
uses a transparent rule-based classifier on measured attention shares.

Features of one map ``A [T, T]`` (rows are queries and sum to one), averaged
over the *content* queries (tokens of the two sentences; special tokens and
padding are not queries, as in ``attention_stats``):

* ``vertical`` V: attention to *vertical keys*, the special tokens (``[CLS]``,
  ``[SEP]``) and punctuation tokens;
* ``diagonal`` D: for each offset ``o`` in {-1, 0, +1}, the attention from
  query ``i`` to key ``i + o`` (when that key is not a vertical key); D is the
  largest of the three means, so one consistent neighbour is needed;
* ``block`` S: attention to non-vertical keys of the query's own sentence;
* ``breadth``: how evenly that in-sentence attention is spread: the
  exponential of its entropy divided by the number of such keys (1 = uniform
  over the sentence, ``1/n`` = one token).

Rules, applied in order to a head's features averaged over its example maps
(thresholds in ``Thresholds``). The principle is that a type needs at least
half of the attention (vertical, block), or, for the diagonal, 40% on *one*
neighbour (over sentences of ten or more tokens that is a sharp stripe); the
mixed type needs at least 20% of each and 60% together. Idealised maps of every
type land well inside their region (see the unit tests):

1. V >= 0.2 and D >= 0.2 and V + D >= 0.6 -> vertical+diagonal
2. D >= 0.4 -> diagonal
3. V >= 0.5 -> vertical
4. S >= 0.5 and breadth >= 0.3 -> block
5. otherwise -> heterogeneous

The *normed* map of Kobayashi et al. weights each attention weight by the norm
of the transformed input it mixes: ``alpha_ij * ||f(x_j)||`` with ``f(x_j) =
(x_j W_V + b_V) W_O`` restricted to the head (see ``attention_norms``); each
row is divided by its sum before the same features are measured.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from subnetlab.analysis.attention_stats import TokenLayout, attention_maps, layout_from_tokenizer
from subnetlab.errors import SubnetlabError

TYPES: tuple[str, ...] = ("diagonal", "block", "vertical", "vertical+diagonal", "heterogeneous")
FEATURES: tuple[str, ...] = ("vertical", "diagonal", "block", "breadth")


@dataclass(frozen=True)
class Thresholds:
    """The classifier's decision thresholds (see the module doc for the rules)."""

    mixed_each: float = 0.2
    mixed_total: float = 0.6
    diagonal: float = 0.4
    vertical: float = 0.5
    block: float = 0.5
    block_breadth: float = 0.3


def is_punctuation(word: str | None) -> bool:
    return bool(word) and all(ch in string.punctuation for ch in word)


def vertical_keys(layout: TokenLayout) -> Tensor:
    """``[T]`` bool: special tokens and punctuation, the keys of vertical attention."""
    return (layout.segment < 0) | torch.tensor([is_punctuation(w) for w in layout.words], dtype=torch.bool)


def map_features(attention: Tensor, layout: TokenLayout) -> Tensor:
    """``[..., 4]`` features (``FEATURES``) of maps ``[..., T, T]`` over one example's content queries."""
    T = layout.length
    if attention.shape[-2:] != (T, T):
        raise SubnetlabError(f"attention map is {tuple(attention.shape[-2:])}, the example has {T} tokens")
    a = attention.double()
    seg = layout.segment
    vert = vertical_keys(layout)  # [T]
    queries = seg >= 0  # [T]
    if not queries.any():
        raise SubnetlabError("the example has no content tokens to use as queries")
    q_weight = queries.double() / queries.sum()  # [T], mean over content queries

    V = (a * vert.double()).sum(-1)  # [..., T]
    idx = torch.arange(T)
    diag = []
    for o in (-1, 0, 1):
        key = idx + o
        valid = (key >= 0) & (key < T)
        keep = torch.zeros(T, dtype=torch.float64)
        keep[valid] = (~vert[key[valid]]).double()
        gathered = torch.zeros_like(V)
        gathered[..., valid] = a[..., idx[valid], key[valid]]
        rows = valid & queries
        w = rows.double() / rows.sum().clamp(min=1)
        diag.append(((gathered * keep) * w).sum(-1))
    D = torch.stack(diag, -1).amax(-1)  # [...]

    own = (seg.unsqueeze(1) == seg.unsqueeze(0)) & ~vert.unsqueeze(0)  # [query, key]
    in_sentence = a * own.double()  # [..., T, T]
    S_rows = in_sentence.sum(-1)  # [..., T]
    p = in_sentence / S_rows.unsqueeze(-1).clamp(min=1e-12)
    entropy = -(p * torch.log(p.clamp(min=1e-12))).sum(-1)  # [..., T]
    n_keys = own.sum(-1).double().clamp(min=1)  # [T]
    breadth_rows = torch.where(S_rows > 1e-9, torch.exp(entropy) / n_keys, torch.zeros_like(S_rows))
    return torch.stack([(V * q_weight).sum(-1), D, (S_rows * q_weight).sum(-1), (breadth_rows * q_weight).sum(-1)], -1)


def classify_features(features: Tensor, thresholds: Thresholds = Thresholds()) -> str:
    """The type of one map (or one head's averaged features) ``[4]``."""
    V, D, S, breadth = (float(x) for x in features)
    t = thresholds
    if V >= t.mixed_each and D >= t.mixed_each and V + D >= t.mixed_total:
        return "vertical+diagonal"
    if D >= t.diagonal:
        return "diagonal"
    if V >= t.vertical:
        return "vertical"
    if S >= t.block and breadth >= t.block_breadth:
        return "block"
    return "heterogeneous"


def classify_map(attention: Tensor, layout: TokenLayout, thresholds: Thresholds = Thresholds()) -> str:
    """The type of one ``[T, T]`` map."""
    return classify_features(map_features(attention, layout), thresholds)


def row_normalize(weights: Tensor) -> Tensor:
    """Rows divided by their sums (normed attention as a distribution over keys)."""
    return weights / weights.sum(-1, keepdim=True).clamp(min=1e-12)


@dataclass
class HeadTypes:
    """Averaged features ``[L, H, 4]`` and the type of every head, for raw and normed attention."""

    raw: Tensor
    normed: Tensor
    examples: int
    thresholds: Thresholds = Thresholds()

    def types(self, kind: str = "raw") -> list[list[str]]:
        feats = self.raw if kind == "raw" else self.normed
        return [[classify_features(feats[l, h], self.thresholds) for h in range(feats.shape[1])]
                for l in range(feats.shape[0])]

    def shares(self, kind: str = "raw", heads: Tensor | None = None) -> dict[str, float]:
        """Share of each type among the heads where ``heads [L, H]`` is 1 (all heads by default)."""
        labels = self.types(kind)
        chosen = [(l, h) for l in range(len(labels)) for h in range(len(labels[0]))
                  if heads is None or heads[l, h] > 0.5]
        if not chosen:
            return {t: float("nan") for t in TYPES}
        return {t: sum(labels[l][h] == t for l, h in chosen) / len(chosen) for t in TYPES}

    def to_dict(self) -> dict:
        return {"features": list(FEATURES), "examples": self.examples, "thresholds": self.thresholds.__dict__,
                "raw": {"features": self.raw.tolist(), "types": self.types("raw")},
                "normed": {"features": self.normed.tolist(), "types": self.types("normed")}}

    @classmethod
    def from_dict(cls, data: dict) -> "HeadTypes":
        return cls(torch.tensor(data["raw"]["features"]), torch.tensor(data["normed"]["features"]),
                   int(data["examples"]), Thresholds(**data.get("thresholds", {})))


def head_types(
    model: torch.nn.Module,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    max_length: int = 128,
    thresholds: Thresholds = Thresholds(),
) -> HeadTypes:
    """Classify every head from its raw and normed maps on sentence ``pairs`` (eager attention needed).

    One forward per pair (no padding); features are averaged over the pairs, then classified.
    """
    from subnetlab.analysis.attention_norms import normed_attention
    from subnetlab.models.adapters import get_adapter

    if not pairs:
        raise SubnetlabError("attention pattern types need at least one sentence pair")
    adapter = get_adapter(model)
    raw_sum = normed_sum = None
    was_training = model.training
    model.eval()
    try:
        for text_a, text_b in pairs:
            inputs, layout = layout_from_tokenizer(tokenizer, text_a, text_b, max_length)
            inputs = {k: v.to(next(model.parameters()).device) for k, v in inputs.items()}
            raw, normed = normed_attention(model, adapter, inputs)  # per layer [1, H, T, T]
            fr = torch.stack([map_features(m[0].cpu(), layout) for m in raw])  # [L, H, 4]
            fn = torch.stack([map_features(row_normalize(m[0].cpu()), layout) for m in normed])
            raw_sum = fr if raw_sum is None else raw_sum + fr
            normed_sum = fn if normed_sum is None else normed_sum + fn
    finally:
        model.train(was_training)
    n = len(pairs)
    return HeadTypes(raw_sum / n, normed_sum / n, n, thresholds)


__all__ = ["TYPES", "FEATURES", "Thresholds", "HeadTypes", "map_features", "classify_features", "classify_map",
           "head_types", "vertical_keys", "row_normalize", "attention_maps"]
