"""The repeated-span task, its circuit prompt pairs, and the previous-token / induction scores of heads.

Scores are checked on attention patterns built by hand against their closed form, and on a GPT-2 built from
a config whose attention weights are read with eager attention.
"""

from __future__ import annotations

import pytest
import torch

from subnetlab.analysis.induction_scores import (
    head_scores,
    induction_score,
    induction_targets,
    previous_token_score,
)
from subnetlab.errors import SubnetlabError
from subnetlab.tasks.induction import InductionConfig, induction_pairs, induction_tokenizer, repeated_sequences

CFG = InductionConfig(vocab_size=16, length=16, min_span=3, max_span=5, max_gap=3)


@pytest.mark.parametrize("end_aligned", [False, True])
def test_repeated_sequences_repeat_one_span_and_nothing_else(end_aligned):
    batch = repeated_sequences(CFG, 80, torch.Generator().manual_seed(0), end_aligned=end_aligned)
    T = CFG.length
    assert batch.input_ids.shape == (80, T) and (batch.input_ids[:, 0] == CFG.bos_id).all()
    assert set(batch.span.tolist()) == set(range(CFG.min_span, CFG.max_span + 1))
    assert set(batch.gap.tolist()) == set(range(CFG.max_gap + 1))
    for ids, k, gap, start, pred in zip(batch.input_ids.tolist(), batch.span.tolist(), batch.gap.tolist(),
                                        batch.start.tolist(), batch.predictable.tolist()):
        copy = start + k + gap
        assert start >= 1 and copy + k <= T and (copy + k == T or not end_aligned)
        assert ids[copy: copy + k] == ids[start: start + k]
        rest = ids[1:copy] + ids[copy + k:]
        assert len(set(rest)) == len(rest)  # every other token once: one earlier occurrence per repeated token
        assert pred == [copy < i < copy + k for i in range(T)]
    if not end_aligned:
        assert len(set((batch.start + batch.span + batch.gap + batch.span).tolist())) > 1  # the copy moves


def test_repeated_sequences_follow_the_generator():
    a = repeated_sequences(CFG, 8, torch.Generator().manual_seed(3)).input_ids
    b = repeated_sequences(CFG, 8, torch.Generator().manual_seed(3)).input_ids
    c = repeated_sequences(CFG, 8, torch.Generator().manual_seed(4)).input_ids
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_induction_pairs_corrupt_only_the_first_span():
    pairs = induction_pairs(CFG, 40, seed=1)
    T = CFG.length
    assert pairs.clean.shape == pairs.corrupted.shape == (40, T - 1)
    for clean, bad, answer, wrong, k, gap in zip(pairs.clean.tolist(), pairs.corrupted.tolist(), pairs.answer.tolist(),
                                                 pairs.wrong.tolist(), pairs.span.tolist(), pairs.gap.tolist()):
        source = T - 1 - k - gap  # where the answer occurred before
        first = range(source - k + 1, source + 1)
        assert answer == clean[source]  # the token after the query's earlier occurrence
        assert clean[T - 2] == clean[source - 1]  # the query token occurred before
        assert [c for i, c in enumerate(clean) if i not in first] == [c for i, c in enumerate(bad) if i not in first]
        fresh = [bad[i] for i in first]
        assert len(set(fresh)) == k and not set(fresh) & set(clean)  # new tokens, used nowhere else in the row
        assert bad.count(bad[T - 2]) == 1  # the query has no earlier occurrence: nothing to induct from
        assert wrong == bad[source] and wrong != answer


def test_induction_pairs_as_text_rows_round_trip():
    tok = induction_tokenizer(CFG.vocab_size)
    pairs = induction_pairs(CFG, 3, seed=0)
    rows = pairs.as_rows(tok)
    assert rows[0]["clean"].startswith("<bos> t")
    assert tok(rows[0]["clean"])["input_ids"] == pairs.clean[0].tolist()
    assert tok(rows[1]["answer"])["input_ids"] == [int(pairs.answer[1])]


@pytest.mark.parametrize("bad", [dict(min_span=1), dict(max_span=2, min_span=3), dict(max_span=8),
                                 dict(vocab_size=15), dict(length=16.0), dict(max_gap=-1)])
def test_induction_config_refuses_impossible_shapes(bad):
    with pytest.raises(SubnetlabError):
        InductionConfig(**{**CFG.to_dict(), **bad})


def _causal_uniform(T: int) -> torch.Tensor:
    a = torch.tril(torch.ones(T, T))
    return a / a.sum(-1, keepdim=True)


def test_previous_token_score_closed_forms():
    T = 6
    prev = torch.zeros(T, T)
    prev[0, 0] = 1.0
    prev[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    selfish = torch.eye(T)
    att = torch.stack([prev, selfish, _causal_uniform(T)]).unsqueeze(0)  # [1, 3 heads, T, T]
    got = previous_token_score(att)
    uniform = sum(1.0 / (i + 1) for i in range(1, T)) / (T - 1)  # query i spreads over i + 1 keys
    assert torch.allclose(got, torch.tensor([1.0, 0.0, uniform]), atol=1e-6)


def test_induction_targets_and_score_closed_forms():
    ids = torch.tensor([[9, 1, 2, 3, 1, 2, 3]])  # queries 4, 5, 6 repeat tokens 1, 2, 3
    targets = induction_targets(ids)[0]
    expected = {(4, 2), (5, 3), (6, 4)}  # the token after each earlier occurrence
    assert {(i, j) for i, j in targets.nonzero().tolist()} == expected
    T = ids.shape[1]
    perfect = torch.zeros(T, T)
    for i in range(T):
        perfect[i, i] = 1.0
    for i, j in expected:
        perfect[i] = 0.0
        perfect[i, j] = 1.0
    half = 0.5 * perfect + 0.5 * torch.eye(T)
    att = torch.stack([perfect, half, _causal_uniform(T)]).unsqueeze(0)
    got = induction_score(att, ids)
    uniform = sum(1.0 / (i + 1) for i, _ in expected) / len(expected)
    assert torch.allclose(got, torch.tensor([1.0, 0.5, uniform]), atol=1e-6)
    assert torch.isnan(induction_score(att, torch.tensor([[1, 2, 3, 4, 5, 6, 7]]))).all()  # no repeated token


def test_head_scores_read_a_gpt2s_attention(monkeypatch):
    from subnetlab.experiments.circuits.training import ModelShape, build_induction_model

    model = build_induction_model(CFG, ModelShape(layers=2, heads=2, width=16, mlp_width=32), seed=0)
    ids = repeated_sequences(CFG, 4, torch.Generator().manual_seed(0)).input_ids
    with torch.no_grad():
        maps = model(input_ids=ids, output_attentions=True).attentions
    scores = head_scores(model, ids)
    assert scores.previous.shape == scores.induction.shape == (2, 2)
    for layer, att in enumerate(maps):
        assert torch.allclose(scores.previous[layer], previous_token_score(att), atol=1e-6)
        assert torch.allclose(scores.induction[layer], induction_score(att, ids), atol=1e-6)
        prev = torch.stack([att[:, :, i, i - 1] for i in range(1, CFG.length)], -1).mean(dim=(0, 2))
        assert torch.allclose(scores.previous[layer], prev, atol=1e-6)  # the definition, computed another way
