"""The attention-pattern statistic on hand-built attention maps with known repeated words."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoTokenizer

from subnetlab.analysis.attention_stats import (
    PATTERNS,
    SPLIT,
    AttentionStats,
    TokenLayout,
    attention_maps,
    layout_from_tokenizer,
    pattern_shares,
    split_masks,
    split_shares,
)
from subnetlab.errors import SubnetlabError
from subnetlab.models import build_model, resolve
from tests.conftest import tiny_config

# [CLS] a b c [SEP] c a [SEP]: "a" and "c" repeat across the sentences, "b" does not
LAYOUT = TokenLayout(torch.tensor([-1, 0, 0, 0, -1, 1, 1, -1]), [None, "a", "b", "c", None, "c", "a", None])
T = 8


def one_hot_rows(targets: dict[int, int]) -> torch.Tensor:
    """Every query row attends fully to ``targets[q]`` (itself when absent)."""
    a = torch.zeros(T, T)
    for q in range(T):
        a[q, targets.get(q, q)] = 1.0
    return a


def hand_maps() -> torch.Tensor:
    repeat = one_hot_rows({1: 6, 3: 5, 5: 3, 6: 1})  # b (position 2) has no partner: attends to itself
    previous = one_hot_rows({q: q - 1 for q in range(1, T)})
    to_sep = one_hot_rows({q: 4 for q in range(T)})
    half = 0.5 * torch.eye(T) + 0.5 * one_hot_rows({q: q + 1 for q in range(T - 1)})
    return torch.stack([repeat, previous, to_sep, half])  # [heads, T, T]


def test_shares_on_a_hand_built_map():
    sums, counts = pattern_shares(hand_maps(), LAYOUT)
    assert counts.tolist() == [4, 5, 5, 5, 5]  # 4 queries have a repeated word, 5 queries in all
    stats = AttentionStats(sums.unsqueeze(0).double(), counts.double(), 1)
    got = {r["head"]: r for r in stats.rows()}
    expected = {
        # queries 1,2,3,5,6; pattern shares worked out by hand
        "L0.H0": {"repeated": 1.0, "previous": 0.0, "next": 0.0, "special": 0.0, "self": 0.2},
        "L0.H1": {"repeated": 0.0, "previous": 1.0, "next": 0.0, "special": 0.4, "self": 0.0},  # 1->CLS, 5->SEP
        "L0.H2": {"repeated": 0.0, "previous": 0.2, "next": 0.2, "special": 1.0, "self": 0.0},  # 5->4 prev, 3->4 next
        "L0.H3": {"repeated": 0.0, "previous": 0.0, "next": 0.5, "special": 0.2, "self": 0.5},  # 3->4, 6->7 are [SEP]
    }
    for head, want in expected.items():
        for p in PATTERNS:
            assert got[head][p] == pytest.approx(want[p]), (head, p)
    assert [got[h]["dominant"] for h in ("L0.H0", "L0.H1", "L0.H2")] == ["repeated", "previous", "special"]


def test_split_parts_sum_to_one_on_a_hand_built_map():
    """The report's Table 5 split: each key in one part (self, special, repeated, previous, next, other)."""
    masks = split_masks(LAYOUT)
    assert torch.equal(sum(m.int() for m in masks.values()), torch.ones(T, T, dtype=torch.int))  # a partition
    sums, queries = split_shares(hand_maps(), LAYOUT)
    assert queries == 5
    got = {f"L0.H{h}": dict(zip(SPLIT, (sums[h] / queries).tolist())) for h in range(4)}
    want = {
        "L0.H0": {"self": 0.2, "repeated": 0.8},  # b has no partner and attends to itself
        "L0.H1": {"special": 0.4, "previous": 0.6},  # 1 -> [CLS] and 5 -> [SEP] count as special, not previous
        "L0.H2": {"special": 1.0},  # 3 -> [SEP] is next and special: special once
        "L0.H3": {"self": 0.5, "next": 0.3, "special": 0.2},  # 3 -> 4 and 6 -> 7 are [SEP]
    }
    for head, parts in want.items():
        assert sum(got[head].values()) == pytest.approx(1.0)
        for part in SPLIT:
            assert got[head][part] == pytest.approx(parts.get(part, 0.0)), (head, part)
    stats = AttentionStats.empty(1, 4)
    stats.add([hand_maps()], LAYOUT)
    stats.add([hand_maps()], LAYOUT)
    rows = {r["head"]: r for r in stats.rows()}
    assert rows["L0.H3"]["split"] == pytest.approx(got["L0.H3"])  # two equal examples average to one
    assert rows["L0.H0"]["repeated"] == pytest.approx(1.0)  # the partner-only share stays beside the split
    assert stats.to_dict()["split_parts"] == list(SPLIT)


def test_accumulating_examples_averages_per_query():
    stats = AttentionStats.empty(1, 4)
    stats.add([hand_maps()], LAYOUT)
    stats.add([hand_maps()], LAYOUT)
    assert stats.examples == 2
    assert stats.shares()[0, 1, PATTERNS.index("special")] == pytest.approx(0.4)
    empty = AttentionStats.empty(1, 1)
    assert math.isnan(float(empty.shares()[0, 0, 0]))


def test_layout_from_a_real_tokenizer_links_whole_words():
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    inputs, layout = layout_from_tokenizer(tok, "The doctor unbelievably thanked the president .",
                                           "the president unbelievably thanked the doctor .")
    tokens = tok.convert_ids_to_tokens(inputs["input_ids"][0])
    assert len(tokens) == layout.length and layout.segment[0] == -1 and layout.segment[-1] == -1
    pieces = [i for i, t in enumerate(tokens) if layout.words[i] == "unbelievably"]
    assert len(pieces) > 2  # several word pieces in both sentences, one word
    from subnetlab.analysis.attention_stats import pattern_masks

    keys, queries = pattern_masks(layout)
    first = pieces[0]
    partners = {k for k in range(layout.length) if keys["repeated"][first, k]}
    assert partners == {i for i in pieces if layout.segment[i] != layout.segment[first]}
    assert layout.words[1] == "the"  # case folded


def test_model_maps_need_eager_attention_and_feed_the_statistic():
    inputs = {"input_ids": torch.tensor([[2, 10, 11, 12, 3, 12, 10, 3]]), "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    eager = build_model(tiny_config("bert"), head="classification", attn_implementation="eager")
    maps = attention_maps(eager.model, inputs)
    assert len(maps) == 2 and maps[0].shape == (1, 4, T, T)
    stats = AttentionStats.empty(2, 4)
    stats.add([m[0] for m in maps], LAYOUT)
    # independent check of one head: attention from "a" (1) to its partner (6) plus "c"/"c"/"a" partners
    m = maps[1][0, 2]
    want = (m[1, 6] + m[3, 5] + m[5, 3] + m[6, 1]) / 4
    assert float(stats.shares()[1, 2, PATTERNS.index("repeated")]) == pytest.approx(float(want), abs=1e-6)
    sdpa = build_model(tiny_config("bert"), head="classification")
    with pytest.raises(SubnetlabError, match="eager"):
        attention_maps(sdpa.model, inputs)
