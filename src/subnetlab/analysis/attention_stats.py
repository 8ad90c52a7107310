"""Attention patterns of heads on sentence pairs (Bhaskar et al., 2024, section 5, Figures 7 and 9).

For every head, the share of attention that each query token sends to:

* ``repeated``: the same word in the *other* sentence (premise -> hypothesis and
  back) - the lexical-overlap feature the heuristic core computes;
* ``previous`` / ``next``: the token just before / after it;
* ``special``: the classification and separator tokens (``[CLS]``, ``[SEP]``);
* ``self``: itself.

Queries are the tokens of the two sentences (special tokens and padding are
not queries). ``repeated`` is averaged over the queries whose word occurs in
the other sentence (otherwise it would be diluted by words with no partner);
the others over all queries. Categories may overlap (the previous token can be
``[SEP]``), so shares need not sum to one. Words are compared case-insensitively
as whole words (all sub-word pieces of a matching word count).

``SPLIT`` divides each query's attention so the parts sum to one: every key
counts once, in the first of ``self``, ``special``, ``repeated``, ``previous``,
``next`` it belongs to, the rest is ``other``, and every part is averaged over
the same queries (all sentence tokens). ``repeated`` there is diluted by the
tokens with no partner; the ``repeated`` pattern above is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import head_name

PATTERNS: tuple[str, ...] = ("repeated", "previous", "next", "special", "self")
# the exclusive parts, in the order a key is assigned (the first that holds); "other" takes the rest
SPLIT: tuple[str, ...] = ("self", "special", "repeated", "previous", "next", "other")


@dataclass
class TokenLayout:
    """Per-token facts of one tokenized pair: which sentence, which word, special or not."""

    segment: Tensor  # [T] long: 0 = first sentence, 1 = second, -1 = special token
    words: list[str | None]  # [T] lower-cased whole word each token belongs to (None for specials)

    @property
    def length(self) -> int:
        return int(self.segment.numel())


def layout_from_tokenizer(tokenizer: Any, text_a: str, text_b: str, max_length: int = 128) -> tuple[dict[str, Tensor], TokenLayout]:
    """Tokenize one pair and describe its tokens (needs a fast tokenizer for word ids and offsets)."""
    enc = tokenizer(text_a, text_b, truncation=True, max_length=max_length, return_offsets_mapping=True)
    if not hasattr(enc, "word_ids") or enc.encodings is None:
        raise SubnetlabError("attention patterns need a fast tokenizer (word ids and character offsets)")
    seq_ids, word_ids, offsets = enc.sequence_ids(), enc.word_ids(), enc["offset_mapping"]
    texts = (text_a, text_b)
    spans: dict[tuple[int, int], list[int]] = {}
    for (start, end), s, w in zip(offsets, seq_ids, word_ids):
        if s is not None and w is not None:
            span = spans.setdefault((s, w), [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
    words = [texts[s][spans[(s, w)][0]:spans[(s, w)][1]].lower() if s is not None and w is not None else None
             for s, w in zip(seq_ids, word_ids)]
    segment = torch.tensor([s if s is not None else -1 for s in seq_ids], dtype=torch.long)
    inputs = {k: torch.tensor([v]) for k, v in enc.items() if k != "offset_mapping"}
    return inputs, TokenLayout(segment, words)


def pattern_masks(layout: TokenLayout) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """``(keys, queries)``: per pattern a ``[T, T]`` bool key mask and a ``[T]`` bool query mask."""
    T = layout.length
    seg = layout.segment
    is_query = seg >= 0  # [T]
    idx = torch.arange(T)
    special = (seg < 0).unsqueeze(0).expand(T, T)  # [query, key]
    same_word = torch.zeros(T, T, dtype=torch.bool)
    for q in range(T):
        if layout.words[q] is None:
            continue
        for k in range(T):
            if seg[k] >= 0 and seg[k] != seg[q] and layout.words[k] == layout.words[q]:
                same_word[q, k] = True
    keys = {
        "repeated": same_word,
        "previous": idx.unsqueeze(1) - 1 == idx.unsqueeze(0),
        "next": idx.unsqueeze(1) + 1 == idx.unsqueeze(0),
        "special": special,
        "self": torch.eye(T, dtype=torch.bool),
    }
    queries = {p: is_query.clone() for p in PATTERNS}
    queries["repeated"] = is_query & same_word.any(1)
    return keys, queries


def split_masks(layout: TokenLayout) -> dict[str, Tensor]:
    """Per part of ``SPLIT`` a ``[T, T]`` bool key mask; for each query every key is in exactly one part."""
    keys, _ = pattern_masks(layout)
    taken = torch.zeros_like(keys["self"])
    out: dict[str, Tensor] = {}
    for part in SPLIT[:-1]:
        out[part] = keys[part] & ~taken
        taken |= out[part]
    out["other"] = ~taken
    return out


def split_shares(attention: Tensor, layout: TokenLayout) -> tuple[Tensor, int]:
    """``sums [heads, parts]`` of each query's attention per part of ``SPLIT``, over the sentence tokens, and how
    many queries that is (each query's parts sum to its row of attention, one)."""
    queries = (layout.segment >= 0).float()
    a = attention.float()
    sums = [((a * mask.float()).sum(-1) * queries).sum(-1) for mask in split_masks(layout).values()]
    return torch.stack(sums, -1), int(queries.sum())


def pattern_shares(attention: Tensor, layout: TokenLayout) -> tuple[Tensor, Tensor]:
    """Summed shares and query counts for one example.

    ``attention`` is ``[heads, T, T]`` (query, key) with rows summing to one.
    Returns ``sums [heads, patterns]`` (share summed over the pattern's queries)
    and ``counts [patterns]`` (how many queries each pattern averages over).
    """
    T = layout.length
    if attention.shape[-2:] != (T, T):
        raise SubnetlabError(f"attention map is {tuple(attention.shape[-2:])}, the example has {T} tokens")
    keys, queries = pattern_masks(layout)
    a = attention.float()
    sums, counts = [], []
    for p in PATTERNS:
        per_query = (a * keys[p].float()).sum(-1)  # [heads, T]
        sums.append((per_query * queries[p].float()).sum(-1))  # [heads]
        counts.append(float(queries[p].sum()))
    return torch.stack(sums, -1), torch.tensor(counts)


@dataclass
class AttentionStats:
    """Shares accumulated over a dataset: ``sums [layers, heads, patterns]``, ``counts [patterns]``."""

    sums: Tensor
    counts: Tensor
    examples: int = 0
    split: Tensor | None = None  # [layers, heads, parts of SPLIT], summed over every query
    split_queries: float = 0.0

    @classmethod
    def empty(cls, layers: int, heads: int) -> "AttentionStats":
        return cls(torch.zeros(layers, heads, len(PATTERNS), dtype=torch.float64), torch.zeros(len(PATTERNS), dtype=torch.float64),
                   split=torch.zeros(layers, heads, len(SPLIT), dtype=torch.float64))

    def add(self, layer_attention: Sequence[Tensor], layout: TokenLayout) -> None:
        """Add one example: ``layer_attention[l]`` is ``[heads, T, T]``."""
        queries = 0
        for layer, att in enumerate(layer_attention):
            s, c = pattern_shares(att, layout)
            self.sums[layer] += s.double()
            if self.split is not None:
                parts, queries = split_shares(att, layout)
                self.split[layer] += parts.double()
        self.counts += c.double()
        self.split_queries += queries
        self.examples += 1

    def split_shares(self) -> Tensor | None:
        """``[layers, heads, parts]`` mean share per query of each part of ``SPLIT`` (each head's parts sum to one)."""
        if self.split is None or self.split_queries == 0:
            return None
        return self.split / self.split_queries

    def shares(self) -> Tensor:
        """``[layers, heads, patterns]`` mean share per query (NaN where a pattern had no queries)."""
        out = self.sums / self.counts.clamp(min=1.0)
        out[..., self.counts == 0] = float("nan")
        return out

    def dominant(self, layer: int, head: int) -> str:
        """The pattern with the largest mean share for one head."""
        row = self.shares()[layer, head]
        row = torch.nan_to_num(row, nan=-1.0)
        return PATTERNS[int(row.argmax())]

    def rows(self, heads: Sequence[tuple[int, int]] | None = None) -> list[dict]:
        """One dict per head: its name, each pattern's share and the dominant pattern."""
        L, H = self.sums.shape[:2]
        chosen = heads if heads is not None else [(l, h) for l in range(L) for h in range(H)]
        shares, split = self.shares(), self.split_shares()
        return [{"head": head_name(l, h), **{p: float(shares[l, h, i]) for i, p in enumerate(PATTERNS)},
                 "dominant": self.dominant(l, h),
                 **({"split": {part: float(split[l, h, i]) for i, part in enumerate(SPLIT)}} if split is not None else {})}
                for l, h in chosen]

    def to_dict(self) -> dict:
        return {"patterns": list(PATTERNS), "examples": self.examples, "query_counts": self.counts.tolist(),
                **({"split_parts": list(SPLIT)} if self.split is not None else {}), "heads": self.rows()}


def attention_maps(model: torch.nn.Module, inputs: dict[str, Tensor]) -> list[Tensor]:
    """Per layer ``[batch, heads, T, T]`` attention weights, on the CPU; the model must use eager attention."""
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(**{k: v.to(device) for k, v in inputs.items()}, output_attentions=True)
    maps = getattr(out, "attentions", None)
    if not maps or any(m is None for m in maps):
        raise SubnetlabError("the model returned no attention weights: load it with attn_implementation='eager'")
    return [m.detach().cpu() for m in maps]


def attention_statistics(
    model: torch.nn.Module,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    num_layers: int,
    num_heads: int,
    max_length: int = 128,
) -> AttentionStats:
    """Pattern shares of every head over sentence ``pairs`` (one forward per pair: exact, no padding)."""
    if not pairs:
        raise SubnetlabError("attention statistics need at least one sentence pair")
    stats = AttentionStats.empty(num_layers, num_heads)
    was_training = model.training
    model.eval()
    try:
        for text_a, text_b in pairs:
            inputs, layout = layout_from_tokenizer(tokenizer, text_a, text_b, max_length)
            maps = attention_maps(model, inputs)
            stats.add([m[0] for m in maps], layout)
    finally:
        model.train(was_training)
    return stats
