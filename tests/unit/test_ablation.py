"""Ablation table rows on a tiny model, checked against separate `evaluate` calls."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from subnetlab.analysis.ablation import (
    AVERAGE_ROW,
    NONE_ROW,
    AblationRow,
    AblationTable,
    ablation_table,
    head_gates,
    parse_heads,
)
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
    assert [r.label for r in table.rows] == [NONE_ROW, AVERAGE_ROW, "L0.H1", "L1.H2", table.joint.label]
    assert sorted(table.joint.heads) == ["L0.H1", "L1.H2"] and table.joint.kind == "joint"
    assert table.columns == ["id", *SUBCASES]

    def separately(ablated):
        with apply_gates(model, adapter, heads=head_gates(2, 4, ablated), ablation=means):
            return columns_of(loaded, tok, task)

    assert table.row(NONE_ROW).accuracy == columns_of(loaded, tok, task)
    assert table.row("L0.H1").accuracy == separately([(0, 1)])
    assert table.joint.accuracy == separately([(0, 1), (1, 2)])
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
        joint_drop = table.base[c] - table.joint.accuracy[c]
        assert verdict[c]["sum_single_drops"] == pytest.approx(single_drops)
        assert verdict[c]["super_additive"] == (joint_drop > 1e-9 and joint_drop > single_drops + 1e-9)


def test_super_additivity_on_a_hand_built_table():
    """Only a real joint drop larger than the summed single drops counts; ties and accuracy gains do not."""
    base = {"more": 0.9, "tie": 0.9, "gain": 0.9, "smaller_gain": 0.9}
    rows = [
        AblationRow(NONE_ROW, [], base, "none"),
        AblationRow("L0.H0", ["L0.H0"], {"more": 0.8, "tie": 0.8, "gain": 0.8, "smaller_gain": 1.0}),
        AblationRow("L0.H1", ["L0.H1"], {"more": 0.8, "tie": 0.8, "gain": 0.8, "smaller_gain": 1.0}),
        AblationRow("L0.H0 & L0.H1", ["L0.H0", "L0.H1"], {"more": 0.5, "tie": 0.7, "gain": 1.0, "smaller_gain": 0.95},
                    "joint"),
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


# -- the joint row: the top-3 single OOD drops, and super-additivity over exactly those -----------------------------

A, B, C, D = "L0.H0", "L0.H1", "L1.H0", "L1.H1"
SINGLE_DROP = {A: 0.10, B: 0.08, C: 0.05, D: -0.20}  # D's single ablation *raises* OOD accuracy by 20 points
INTERACTION = 0.02  # ablating A, B and C together costs this much more than their drops summed


def zeroed_heads(loaded, inputs) -> set[str]:
    """Which heads the gates zero-ablate now: their slice of the output projection's input is exactly 0.

    Registered after the gates' own hooks, this pre-hook sees the gated input: an independent reading of what the
    table ablated, through the real gating path rather than its bookkeeping."""
    a, seen, handles = loaded.adapter, set(), []
    for layer in range(a.num_layers):
        def hook(module, args, layer=layer):
            x = args[0].view(*args[0].shape[:-1], a.num_heads, a.head_dim)
            seen.update(f"L{layer}.H{h}" for h in range(a.num_heads) if bool((x[..., h, :] == 0).all()))
        handles.append(a.head_output_module(layer).register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            loaded.model(**inputs)
    finally:
        for h in handles:
            h.remove()
    return seen


def test_joint_row_is_the_top3_and_super_additivity_ignores_the_head_that_helps():
    loaded = build_model(tiny_config("bert", layers=2, heads=2, hidden=16), head="classification", seed=0)
    inputs = {"input_ids": torch.tensor([[1, 5, 7, 2]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}

    def accuracy() -> dict[str, float]:
        ablated = zeroed_heads(loaded, inputs)
        ood = 0.6 - sum(SINGLE_DROP[h] for h in ablated) - (INTERACTION if {A, B, C} <= ablated else 0.0)
        return {"id": 0.9 - 0.01 * len(ablated), "ood": ood}

    heads = parse_heads([A, B, C, D], 2, 2)
    table = ablation_table(loaded.model, loaded.adapter, heads, accuracy, None, non_listed=None, id_columns=["id"])
    assert table.joint.heads == [A, B, C]  # ranked by single OOD drop; D (which helps) is not in it
    verdict = table.super_additivity()["ood"]
    assert verdict["sum_single_drops"] == pytest.approx(0.23)  # 0.10 + 0.08 + 0.05: D's -0.20 is not counted
    assert verdict["joint_drop"] == pytest.approx(0.25) and verdict["super_additive"]
    # the extra row ablates all four; its verdict sums all four singles (0.03) against its own drop (0.05)
    everything = table.of("all")[0]
    assert everything.heads == [A, B, C, D]
    assert table.to_dict()["super_additivity_all"]["ood"]["sum_single_drops"] == pytest.approx(0.03)
    # an explicit joint set counts exactly its heads, the helping one included
    chosen = ablation_table(loaded.model, loaded.adapter, heads, accuracy, None, joint=parse_heads([A, D], 2, 2),
                            non_listed=None, id_columns=["id"])
    assert chosen.super_additivity()["ood"]["sum_single_drops"] == pytest.approx(-0.10)
    assert chosen.super_additivity()["ood"]["super_additive"] is False  # the joint ablation raises accuracy
    back = AblationTable.from_dict(table.to_dict())
    assert back.super_additivity() == table.super_additivity() and back.joint.heads == [A, B, C]


def test_zero_and_resample_control_rows(setup):
    """Control rows equal the same ablation done by hand with zero values, and with values rolled across the batch."""
    from subnetlab.intervene.resample import resampling

    loaded, tok, task, means = setup
    model, adapter = loaded.model, loaded.adapter
    listed = parse_heads(["L0.H1", "L1.H2"], 2, 4)
    evaluator = lambda: columns_of(loaded, tok, task)  # noqa: E731

    def resample(ctl):
        return resampling(model, adapter, ctl, torch.Generator().manual_seed(0), single=means)

    table = ablation_table(model, adapter, listed, evaluator, means, joint=2, non_listed=None, id_columns=["id"],
                           controls=("zero", "resample"), resample=resample)
    assert [(r.kind, r.replacement) for r in table.rows[-6:]] == [
        ("single", "zero"), ("single", "zero"), ("joint", "zero"),
        ("single", "resample"), ("single", "resample"), ("joint", "resample")]
    with apply_gates(model, adapter, heads=head_gates(2, 4, [(0, 1)]), ablation=None):
        assert table.row("L0.H1 (zero)").accuracy == evaluator()
    # resample: one listed head, one resample evaluation, a fresh generator with the same seed -> the same values
    with apply_gates(model, adapter, heads=head_gates(2, 4, [(0, 1)]), ablation=None) as ctl:
        with resampling(model, adapter, ctl, torch.Generator().manual_seed(0), single=means):
            by_hand = evaluator()
    one = ablation_table(model, adapter, [(0, 1)], evaluator, means, joint=None, non_listed=None, id_columns=["id"],
                         controls=("resample",), resample=resample)
    assert one.row("L0.H1 (resample)").accuracy == by_hand
    # and resampling is not a no-op: the logits differ from zero ablation's on a batch of several examples
    batch = next(iter(task.model_inputs(b) for b in task.batches(tok, "id", 8)))
    with torch.no_grad(), apply_gates(model, adapter, heads=head_gates(2, 4, listed), ablation=None) as ctl:
        zeroed = model(**batch).logits
        with resampling(model, adapter, ctl, torch.Generator().manual_seed(0)):
            rolled = model(**batch).logits
        assert ctl.ablation is None  # restored on exit
    assert (zeroed - rolled).abs().max() > 1e-5
    with pytest.raises(SubnetlabError, match="controls"):
        ablation_table(model, adapter, listed, evaluator, means, controls=("median",))


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


def test_a_task_with_only_in_domain_rows_ranks_the_joint_heads_by_them(setup):
    """A user's own data has one held-out split and no out-of-domain one: the top heads are ranked on it."""
    loaded, tok, task, means = setup
    model, adapter = loaded.model, loaded.adapter
    listed = parse_heads(["L0.H1", "L1.H2", "L0.H3"], 2, 4)
    id_only = lambda: score_columns(evaluate(model, tok, task, ["id"], batch_size=128), ["id"], [])  # noqa: E731
    table = ablation_table(model, adapter, listed, id_only, means, joint=2, non_listed=None, id_columns=["id"])
    assert table.columns == ["id"] and table.rank_columns == ["id"]
    drops = {h: table.base["id"] - table.row(h).accuracy["id"] for h in ("L0.H1", "L1.H2", "L0.H3")}
    top = sorted(drops, key=lambda h: -drops[h])[:2]
    assert sorted(table.joint.heads) == sorted(top) or len({drops[h] for h in drops}) < 3  # ties: any order
    with pytest.raises(SubnetlabError, match=r"rank_columns \[\]"):  # an explicit empty choice is still an error
        ablation_table(model, adapter, listed, id_only, means, non_listed=None, id_columns=["id"], rank_columns=[])
