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

Rules, applied in order to the features of one map, or of a head's features
averaged over its example maps (thresholds in ``Thresholds``). The principle is that a type needs at least
half of the attention (vertical, block), or, for the diagonal, 40% on *one*
neighbour (over sentences of ten or more tokens that is a sharp stripe); the
mixed type needs at least 20% of each and 60% together. Idealised maps of every
type land well inside their region (see the unit tests):

1. V >= 0.2 and D >= 0.2 and V + D >= 0.6 -> vertical+diagonal
2. D >= 0.4 -> diagonal
3. V >= 0.5 -> vertical
4. S >= 0.5 and breadth >= 0.3 -> block
5. otherwise -> heterogeneous

Two ways to count (``HeadTypes.shares(counting=...)``):

* ``"per-map"`` (Prasanna et al.: 100 maps per head are each classified and the
  labels counted, summed over heads and seeds): each map gets its own type and
  a group's share of a type is the share of the group's *maps* with that type
  (``HeadTypes.counts``; ``merge`` sums the counts of several models / seeds);
* ``"per-head"``: one type per head, from its
  features averaged over the maps; a share is a share of heads.

``head_types(..., gates=(heads, mlps))`` reads the maps inside a *pruned*
model (closed heads / MLPs gated at zero), as the authors read the
super-survivors' patterns in the model pruned to the super-survivors
(``compute_super_masks.py`` and ``head_classification.ipynb``); only the kept
heads' maps are counted then (``HeadTypes.measured``).

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


COUNTINGS = ("per-map", "per-head")


@dataclass
class HeadTypes:
    """Averaged features ``[L, H, 4]``, per-map type counts ``[L, H, 5]`` and the type of every head.

    ``counts`` maps ``"raw"`` / ``"normed"`` to how many of each head's maps got
    each type (``TYPES`` order); ``measured`` ``[L, H]`` is 1 for the heads whose
    maps were read (all, unless the model was pruned).
    """

    raw: Tensor
    normed: Tensor
    examples: int
    thresholds: Thresholds = Thresholds()
    counts: dict[str, Tensor] | None = None
    measured: Tensor | None = None

    def types(self, kind: str = "raw") -> list[list[str]]:
        feats = self.raw if kind == "raw" else self.normed
        return [[classify_features(feats[l, h], self.thresholds) for h in range(feats.shape[1])]
                for l in range(feats.shape[0])]

    def _chosen(self, heads: Tensor | None) -> Tensor:
        L, H = self.raw.shape[:2]
        chosen = torch.ones(L, H, dtype=torch.bool) if heads is None else heads > 0.5
        if self.measured is not None:
            chosen = chosen & (self.measured > 0.5)
        return chosen

    def shares(self, kind: str = "raw", heads: Tensor | None = None, counting: str = "per-head") -> dict[str, float]:
        """Share of each type among the heads where ``heads [L, H]`` is 1 (all measured heads by default).

        ``counting="per-map"``: the share of those heads' maps of each type;
        ``"per-head"``: the share of those heads whose averaged features have it.
        """
        if counting not in COUNTINGS:
            raise SubnetlabError(f"pattern counting {counting!r}: choose one of {', '.join(COUNTINGS)}",
                                 setting="pattern_counting")
        chosen = self._chosen(heads)
        if counting == "per-map":
            if self.counts is None:
                raise SubnetlabError("these pattern types hold no per-map counts (measured before they were kept)",
                                     setting="pattern_counting")
            total = self.counts[kind][chosen].sum(0)  # [5]
            n = float(total.sum())
            return {t: (float(total[i]) / n if n else float("nan")) for i, t in enumerate(TYPES)}
        labels = self.types(kind)
        picked = [(l, h) for l, h in torch.nonzero(chosen).tolist()]
        if not picked:
            return {t: float("nan") for t in TYPES}
        return {t: sum(labels[l][h] == t for l, h in picked) / len(picked) for t in TYPES}

    def type_fraction(self, kind: str, type_name: str, counting: str = "per-head") -> Tensor:
        """``[L, H]``: per map, the share of each head's maps of ``type_name``; per head, 1 where it has that type."""
        if counting == "per-map" and self.counts is not None:
            c = self.counts[kind].double()
            return (c[..., TYPES.index(type_name)] / c.sum(-1).clamp(min=1)).float()
        return torch.tensor([[t == type_name for t in row] for row in self.types(kind)], dtype=torch.float32)

    @staticmethod
    def merge(parts: Sequence["HeadTypes"]) -> "HeadTypes":
        """Several models' (seeds') types as one: per-map counts summed, features averaged over all maps."""
        if not parts:
            raise SubnetlabError("nothing to merge: no pattern types")
        n = sum(p.examples for p in parts)
        raw = sum(p.raw * p.examples for p in parts) / n
        normed = sum(p.normed * p.examples for p in parts) / n
        counts = None
        if all(p.counts is not None for p in parts):
            counts = {k: sum(p.counts[k] for p in parts) for k in ("raw", "normed")}  # type: ignore[index]
        measured = None
        if any(p.measured is not None for p in parts):
            measured = torch.stack([p.measured if p.measured is not None else torch.ones(p.raw.shape[:2])
                                    for p in parts]).amax(0)
        return HeadTypes(raw, normed, n, parts[0].thresholds, counts, measured)

    def to_dict(self) -> dict:
        out = {"features": list(FEATURES), "examples": self.examples, "thresholds": self.thresholds.__dict__,
               "raw": {"features": self.raw.tolist(), "types": self.types("raw")},
               "normed": {"features": self.normed.tolist(), "types": self.types("normed")}}
        if self.counts is not None:
            out["type_order"] = list(TYPES)
            for k in ("raw", "normed"):
                out[k]["map_counts"] = self.counts[k].tolist()
        if self.measured is not None:
            out["measured"] = self.measured.tolist()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "HeadTypes":
        counts = None
        if "map_counts" in data["raw"]:
            counts = {k: torch.tensor(data[k]["map_counts"], dtype=torch.float64) for k in ("raw", "normed")}
        measured = torch.tensor(data["measured"]) if "measured" in data else None
        return cls(torch.tensor(data["raw"]["features"]), torch.tensor(data["normed"]["features"]),
                   int(data["examples"]), Thresholds(**data.get("thresholds", {})), counts, measured)


def check_types_defined(model: torch.nn.Module) -> None:
    """Refuse a model that is not a bidirectional encoder: the types are defined on its maps only.

    Kovaleva et al.'s types describe ``[CLS] A [SEP] B [SEP]`` maps of BERT-style encoders
    (attention to both sentences and to the special tokens); a causal model's maps are
    triangular, so every head would read as one type.
    """
    from subnetlab.methods.model_fit import family_kind

    if family_kind(model) != "encoder":
        model_type = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        raise SubnetlabError(f"attention pattern types (Kovaleva et al.) are defined for encoder models such as BERT "
                             "and RoBERTa, whose maps span both sentences and their [CLS] / [SEP] tokens; this model "
                             f"is {model_type}", setting="model")


def head_types(
    model: torch.nn.Module,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    max_length: int = 128,
    thresholds: Thresholds = Thresholds(),
    gates: tuple[Tensor, Tensor] | None = None,
) -> HeadTypes:
    """Classify every head from its raw and normed maps on sentence ``pairs`` (eager attention needed).

    One forward per pair (no padding). Every map is classified on its own (the
    per-map counts) and the features are also averaged over the pairs (the
    per-head types). ``gates = (heads [L, H], mlps [L])`` reads the maps in the
    model pruned to those components (closed ones gated at zero); only the kept
    heads count as measured.
    """
    from contextlib import nullcontext

    from subnetlab.analysis.attention_norms import normed_attention
    from subnetlab.intervene import apply_gates
    from subnetlab.models.adapters import get_adapter

    if not pairs:
        raise SubnetlabError("attention pattern types need at least one sentence pair")
    check_types_defined(model)
    adapter = get_adapter(model)
    device = next(model.parameters()).device
    raw_sum = normed_sum = None
    L, H = adapter.num_layers, adapter.num_heads
    counts = {k: torch.zeros(L, H, len(TYPES), dtype=torch.float64) for k in ("raw", "normed")}
    was_training = model.training
    model.eval()
    context = (apply_gates(model, adapter, heads=gates[0].float().to(device), mlps=gates[1].float().to(device))
               if gates is not None else nullcontext())
    try:
        with context:
            for text_a, text_b in pairs:
                inputs, layout = layout_from_tokenizer(tokenizer, text_a, text_b, max_length)
                inputs = {k: v.to(device) for k, v in inputs.items()}
                raw, normed = normed_attention(model, adapter, inputs)  # per layer [1, H, T, T]
                fr = torch.stack([map_features(m[0].cpu(), layout) for m in raw])  # [L, H, 4]
                fn = torch.stack([map_features(row_normalize(m[0].cpu()), layout) for m in normed])
                for kind, feats in (("raw", fr), ("normed", fn)):
                    for l in range(L):
                        for h in range(H):
                            counts[kind][l, h, TYPES.index(classify_features(feats[l, h], thresholds))] += 1
                raw_sum = fr if raw_sum is None else raw_sum + fr
                normed_sum = fn if normed_sum is None else normed_sum + fn
    finally:
        model.train(was_training)
    n = len(pairs)
    measured = gates[0].detach().float().cpu() if gates is not None else None
    return HeadTypes(raw_sum / n, normed_sum / n, n, thresholds, counts, measured)


__all__ = ["COUNTINGS", "TYPES", "FEATURES", "Thresholds", "HeadTypes", "map_features", "classify_features", "classify_map",
           "check_types_defined", "head_types", "vertical_keys", "row_normalize", "attention_maps"]
