"""Ablation table rows on a tiny model, checked against separate `evaluate` calls."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from subnetlab.analysis.ablation import AVERAGE_ROW, NONE_ROW, AblationRow, AblationTable, ablation_table, head_gates, parse_heads
from subnetlab.analysis.scores import score_columns, short_name
from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates, collect_means
from subnetlab.methods.evaluate import evaluate
from subnetlab.models import build_model, resolve
from subnetlab.tasks import get_task
from tests.conftest import tiny_config

SUBCASES = ["ln_subject/object_swap", "cn_embedded_under_if"]


@pytest.fixture(scope="module")
def setup():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model gains nothing from threads, and loses much on a busy CPU
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    config = tiny_config("bert", layers=2, heads=4, hidden=32)
    config.vocab_size = len(tok)
    loaded = build_model(config, head="classification", seed=3)
    task = get_task("nli-synthetic", n_train=32, n_eval=40, hans_per_subcase=3, seed=0)
    means = collect_means(loaded.model, loaded.adapter,
                          (task.model_inputs(b) for b in task.batches(tok, "id", 64)))  # one batch
    yield loaded, tok, task, means
    torch.set_num_threads(threads)


def columns_of(loaded, tok, task) -> dict[str, float]:
    return score_columns(evaluate(loaded.model, tok, task, ["id", "hans-synthetic"], batch_size=128), ["id"], SUBCASES)


def test_rows_equal_separate_evaluate_calls(setup):
    loaded, tok, task, means = setup
    model, adapter = loaded.model, loaded.adapter
    listed = parse_heads(["L0.H1", "L1.H2"], 2, 4)
    table = ablation_table(model, adapter, listed, lambda: columns_of(loaded, tok, task), means,
                           non_listed="all", id_columns=["id"])
    assert [r.label for r in table.rows] == [NONE_ROW, AVERAGE_ROW, "L0.H1", "L1.H2", "L0.H1 & L1.H2"]
    assert table.columns == ["id", *SUBCASES]

    def separately(ablated):
        with apply_gates(model, adapter, heads=head_gates(2, 4, ablated), ablation=means):
            return columns_of(loaded, tok, task)

    assert table.row(NONE_ROW).accuracy == columns_of(loaded, tok, task)
    assert table.row("L0.H1").accuracy == separately([(0, 1)])
    assert table.row("L0.H1 & L1.H2").accuracy == separately([(0, 1), (1, 2)])
    others = [(l, h) for l in range(2) for h in range(4) if (l, h) not in listed]
    assert table.averaged_heads == [f"L{l}.H{h}" for l, h in others]
    singles = [separately([hd]) for hd in others]
    for c in table.columns:
        assert table.row(AVERAGE_ROW).accuracy[c] == pytest.approx(sum(s[c] for s in singles) / len(singles))
    # the model is sensitive to these gates: some row differs from the unablated one
    assert any(r.accuracy != table.base for r in table.rows[1:])

    verdict = table.super_additivity()
    for c in table.columns:
        single_drops = sum(table.base[c] - table.row(h).accuracy[c] for h in ("L0.H1", "L1.H2"))
        joint_drop = table.base[c] - table.row("L0.H1 & L1.H2").accuracy[c]
        assert verdict[c]["sum_single_drops"] == pytest.approx(single_drops)
        assert verdict[c]["super_additive"] == (joint_drop > 1e-9 and joint_drop > single_drops + 1e-9)


def test_super_additivity_on_a_hand_built_table():
    """Only a real joint drop larger than the summed single drops counts; ties and accuracy gains do not."""
    base = {"more": 0.9, "tie": 0.9, "gain": 0.9, "smaller_gain": 0.9}
    rows = [
        AblationRow(NONE_ROW, [], base),
        AblationRow("L0.H0", ["L0.H0"], {"more": 0.8, "tie": 0.8, "gain": 0.8, "smaller_gain": 1.0}),
        AblationRow("L0.H1", ["L0.H1"], {"more": 0.8, "tie": 0.8, "gain": 0.8, "smaller_gain": 1.0}),
        AblationRow("L0.H0 & L0.H1", ["L0.H0", "L0.H1"], {"more": 0.5, "tie": 0.7, "gain": 1.0, "smaller_gain": 0.95}),
    ]
    verdict = AblationTable(list(base), rows, [], []).super_additivity()
    assert {c: v["super_additive"] for c, v in verdict.items()} == {
        "more": True, "tie": False, "gain": False, "smaller_gain": False}
    assert verdict["more"]["joint_drop"] == pytest.approx(0.4) and verdict["more"]["sum_single_drops"] == pytest.approx(0.2)


def test_sampled_non_listed_average_is_seeded(setup):
    loaded, tok, task, means = setup
    calls = []

    def fake() -> dict[str, float]:
        calls.append(1)
        return {"id": 0.5}

    t1 = ablation_table(loaded.model, loaded.adapter, [(0, 0)], fake, means, non_listed=3, seed=1)
    t2 = ablation_table(loaded.model, loaded.adapter, [(0, 0)], fake, means, non_listed=3, seed=1)
    assert t1.averaged_heads == t2.averaged_heads and len(t1.averaged_heads) == 3
    assert "L0.H0" not in t1.averaged_heads
    assert t1.joint is None and t1.super_additivity() == {}
    assert len(calls) == 2 * (1 + 3 + 1)


def test_bad_heads_are_named():
    with pytest.raises(SubnetlabError, match="'L9.H0'"):
        parse_heads(["L9.H0"], 2, 4)
    with pytest.raises(SubnetlabError, match="L1.MLP"):
        parse_heads(["L1.MLP"], 2, 4)


def test_score_columns_and_short_names():
    results = {"id": {"accuracy": 0.8}, "hans": {"accuracy": 0.5, "subcases": {"ln_preposition": 0.4, "cn_adverb": 0.9}}}
    assert score_columns(results, ["id"]) == {"id": 0.8, "ln_preposition": 0.4, "cn_adverb": 0.9}
    assert score_columns(results, ["id"], ["cn_adverb"]) == {"id": 0.8, "cn_adverb": 0.9}
    with pytest.raises(SubnetlabError, match="sn_NP/S"):
        score_columns(results, ["id"], ["sn_NP/S"])
    assert short_name("ln_preposition") == "Prep [LO]"
    assert short_name("hans/ln_subject/object_swap") == "hans: SO-Swap [LO]"
