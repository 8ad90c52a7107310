"""Rule-based attention pattern types on hand-built maps; normed attention against the layer's output."""

from __future__ import annotations

import pytest
import torch

from subnetlab.analysis.attention_norms import normed_attention, transformed_inputs
from subnetlab.analysis.attention_stats import TokenLayout
from subnetlab.analysis.attention_types import (
    HeadTypes,
    Thresholds,
    classify_map,
    head_types,
    map_features,
    row_normalize,
    vertical_keys,
)
from subnetlab.models import build_model
from tests.conftest import tiny_config
from tests.unit.lottery_helpers import one_thread  # noqa: F401  (autouse fixture)

# [CLS] the cat sat on mats [SEP] a dog ran far . [SEP]
WORDS = [None, "the", "cat", "sat", "on", "mats", None, "a", "dog", "ran", "far", ".", None]
SEGMENT = torch.tensor([-1, 0, 0, 0, 0, 0, -1, 1, 1, 1, 1, 1, -1])
LAYOUT = TokenLayout(SEGMENT, WORDS)
T = len(WORDS)
CLS, SEP1, SEP2, DOT = 0, 6, 12, 11


def _rows(weights: dict[int, float], i: int, noise: float = 0.05) -> torch.Tensor:
    row = torch.full((T,), noise / T)
    for k, w in weights.items():
        row[k] += w
    return row


def _map(fn) -> torch.Tensor:
    return row_normalize(torch.stack([fn(i) for i in range(T)]))


def _previous_or_self(i: int) -> int:
    return i - 1 if i - 1 >= 0 and not vertical_keys(LAYOUT)[i - 1] else i


HAND_BUILT = {
    "diagonal": _map(lambda i: _rows({_previous_or_self(i): 0.9}, i)),
    "vertical": _map(lambda i: _rows({CLS: 0.3, SEP1: 0.3, SEP2: 0.2, DOT: 0.1}, i)),
    "vertical+diagonal": _map(lambda i: _rows({_previous_or_self(i): 0.45, SEP2: 0.45}, i)),
    "block": _map(lambda i: _rows({k: 0.9 / len(ks) for ks in [[k for k in range(T) if SEGMENT[k] == SEGMENT[i]
                                                                  and k != DOT]] for k in ks} if SEGMENT[i] >= 0 else {i: 0.9}, i)),
    # each word attends to one distant word of the other sentence (an alignment-like head)
    "heterogeneous": _map(lambda i: _rows({(i + 7) % T if (i + 7) % T not in (CLS, SEP1, SEP2, DOT) else 3: 0.9}, i)),
}


@pytest.mark.parametrize("expected", list(HAND_BUILT))
def test_hand_built_maps_get_their_type(expected):
    assert classify_map(HAND_BUILT[expected], LAYOUT) == expected


def test_features_measure_the_shares():
    v, d, s, breadth = map_features(HAND_BUILT["vertical"], LAYOUT).tolist()
    assert v == pytest.approx((0.9 + 0.05 * 4 / T) / 0.95) and d < 0.1  # rows sum to 0.95 before normalising
    v, d, s, breadth = map_features(HAND_BUILT["block"], LAYOUT).tolist()
    assert s > 0.9 and breadth > 0.95
    batched = map_features(torch.stack([HAND_BUILT["block"], HAND_BUILT["diagonal"]]), LAYOUT)
    assert batched.shape == (2, 4)
    assert torch.allclose(batched[1], map_features(HAND_BUILT["diagonal"], LAYOUT))


def test_head_types_shares_over_a_head_subset():
    feats = torch.stack([map_features(HAND_BUILT[t], LAYOUT) for t in
                         ["diagonal", "block", "vertical", "heterogeneous"]]).view(2, 2, 4)
    ht = HeadTypes(feats, feats, examples=1)
    assert ht.types() == [["diagonal", "block"], ["vertical", "heterogeneous"]]
    shares = ht.shares("raw", heads=torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    assert shares["diagonal"] == 0.5 and shares["vertical"] == 0.5 and shares["block"] == 0.0
    assert sum(ht.shares().values()) == pytest.approx(1.0)
    assert Thresholds().diagonal == 0.4


def _eager_bert():
    cfg = tiny_config("bert")
    return build_model(cfg, head="classification", seed=0, attn_implementation="eager")


def test_transformed_inputs_rebuild_the_attention_output():
    """sum_h sum_j alpha_ij f_h(x_j) + b_O is exactly what the output projection returns."""
    m = _eager_bert()
    a = m.adapter
    ids = torch.randint(3, 97, (2, 6), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    outputs = {}
    handles = [a.head_output_module(l).register_forward_hook(lambda mod, x, o, l=l: outputs.__setitem__(l, o.detach()))
               for l in range(a.num_layers)]
    try:
        maps, fx = transformed_inputs(m.model, a, inputs)
    finally:
        for h in handles:
            h.remove()
    for l in range(a.num_layers):
        rebuilt = torch.einsum("bhij,bhjk->bik", maps[l], fx[l]) + a.head_output_module(l).bias
        assert torch.allclose(rebuilt, outputs[l], atol=1e-5)
    raw, normed = normed_attention(m.model, a, inputs)
    assert torch.allclose(normed[0], raw[0] * fx[0].norm(dim=-1).unsqueeze(-2))


class _Tokenizer:
    """A whitespace tokenizer with word ids and offsets, as ``layout_from_tokenizer`` needs."""

    def __init__(self):
        from tokenizers import Tokenizer, models, pre_tokenizers, processors
        from transformers import BertTokenizerFast

        vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "a", "dog", "ran", "."])}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
        self.fast = BertTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                      cls_token="[CLS]", sep_token="[SEP]")


def test_head_types_on_a_tiny_model_end_to_end():
    m = _eager_bert()
    tok = _Tokenizer().fast
    ht = head_types(m.model, tok, [("the cat sat .", "a dog ran ."), ("a cat ran", "the dog sat .")])
    assert ht.raw.shape == (2, 4, 4) and ht.normed.shape == (2, 4, 4) and ht.examples == 2
    assert all(t in {"diagonal", "block", "vertical", "vertical+diagonal", "heterogeneous"}
               for row in ht.types("normed") for t in row)
    assert sum(ht.shares("normed").values()) == pytest.approx(1.0)


def test_per_map_counting_differs_from_per_head_in_the_known_way():
    """Head 0: 3 diagonal maps + 1 block map; head 1: 4 vertical maps. Per map: 3/8, 1/8, 4/8; per head: 1/2, 1/2."""
    maps = {0: ["diagonal"] * 3 + ["block"], 1: ["vertical"] * 4}
    feats = torch.stack([torch.stack([map_features(HAND_BUILT[t], LAYOUT) for t in maps[h]]).mean(0) for h in (0, 1)])
    counts = torch.zeros(1, 2, 5, dtype=torch.float64)
    for h, labels in maps.items():
        for t in labels:
            counts[0, h, ["diagonal", "block", "vertical", "vertical+diagonal", "heterogeneous"].index(t)] += 1
    ht = HeadTypes(feats.view(1, 2, 4), feats.view(1, 2, 4), 4, counts={"raw": counts, "normed": counts})
    per_map = ht.shares("raw", counting="per-map")
    assert per_map["diagonal"] == 3 / 8 and per_map["block"] == 1 / 8 and per_map["vertical"] == 4 / 8
    per_head = ht.shares("raw", counting="per-head")
    assert per_head["vertical"] == 0.5 and per_head["block"] == 0.0 and sum(per_head.values()) == pytest.approx(1)
    assert ht.type_fraction("raw", "diagonal", "per-map").tolist() == [[0.75, 0.0]]
    both = HeadTypes.merge([ht, ht])
    assert torch.equal(both.counts["raw"], 2 * counts) and both.examples == 8
    assert both.shares("raw", counting="per-map") == per_map
    again = HeadTypes.from_dict(both.to_dict())
    assert torch.equal(again.counts["normed"], 2 * counts)


def test_per_map_counts_and_pruned_model_maps_against_hand_removed_heads():
    m = _eager_bert()
    tok = _Tokenizer().fast
    pairs = [("the cat sat .", "a dog ran ."), ("a cat ran", "the dog sat ."), ("the dog", "a cat sat .")]
    heads = torch.ones(2, 4)
    heads[0, 1] = heads[0, 3] = heads[1, 2] = 0
    ht = head_types(m.model, tok, pairs)
    pruned = head_types(m.model, tok, pairs, gates=(heads, torch.ones(2)))
    assert torch.equal(ht.counts["raw"].sum(-1), torch.full((2, 4), 3.0, dtype=torch.float64))
    assert torch.equal(pruned.measured, heads)
    # independent: remove the closed heads by hand (their columns of the output projection zeroed), then classify
    # each map of each pair on its own
    from subnetlab.analysis.attention_stats import layout_from_tokenizer

    hand = _eager_bert()
    a = hand.adapter
    d = a.head_dim
    with torch.no_grad():
        for l, h in torch.nonzero(heads == 0).tolist():
            a.head_output_module(l).weight[:, h * d:(h + 1) * d] = 0
    TYPE_ORDER = ["diagonal", "block", "vertical", "vertical+diagonal", "heterogeneous"]
    for model, got in ((m, ht), (hand, pruned)):
        expected = torch.zeros(2, 4, 5, dtype=torch.float64)
        for text_a, text_b in pairs:
            inputs, layout = layout_from_tokenizer(tok, text_a, text_b, 128)
            raw, _ = normed_attention(model.model, model.adapter, inputs)
            for l in range(2):
                for h in range(4):
                    expected[l, h, TYPE_ORDER.index(classify_map(raw[l][0, h], layout))] += 1
        assert torch.equal(got.counts["raw"], expected)
    kept = pruned.counts["raw"][heads > 0.5].sum(0)
    share = pruned.shares("raw", counting="per-map")
    assert [share[t] for t in TYPE_ORDER] == pytest.approx((kept / kept.sum()).tolist())
