"""Pieces of the Heuristic Core reproduction that need no model: OOD subcase choice, data files,
checkpoint picking, and the report's verdicts computed from hand-made results."""

from __future__ import annotations

import math

import pytest

from subnetlab.analysis.scores import PAPER_SUBCASES
from subnetlab.errors import SubnetlabError
from subnetlab.experiments.heuristic_core import data
from subnetlab.experiments.heuristic_core.report import ablation_effects, compact, compact_table, spread
from subnetlab.experiments.heuristic_core.study import pick_checkpoints
from subnetlab.tasks import load_hans, load_paraphrase
from subnetlab.tasks.base import Example


def test_choose_subcases():
    assert data.choose_subcases("paper", None) == list(PAPER_SUBCASES)
    scores = {s: 0.1 for s in data.non_entailment_subcases()}
    scores.update({"cn_adverb": 0.9, "sn_NP/S": 0.5, "ln_passive": 0.5, "le_passive": 1.0})  # le_: entailment, never chosen
    assert data.choose_subcases("best-non-entailment", scores, count=3) == ["cn_adverb", "ln_passive", "sn_NP/S"]
    assert data.choose_subcases(["ln_preposition"], None) == ["ln_preposition"]
    with pytest.raises(SubnetlabError, match="no_such"):
        data.choose_subcases(["no_such"], None)
    with pytest.raises(SubnetlabError, match="auto"):
        data.choose_subcases("auto", None)
    assert len(data.non_entailment_subcases()) == 15
    assert data.entailment_subcases("lexical_overlap") == [
        "le_relative_clause", "le_around_prepositional_phrase", "le_around_relative_clause", "le_conjunction", "le_passive"]


def test_balanced_rule_skips_a_model_biased_to_non_entailment():
    """The fixture of the fidelity issue: every non-entailment subcase 1.0, every entailment subcase 0.0, except one
    heuristic (constituent) that the model gets partly right both ways. Plain accuracy picks the biased subcases first;
    balanced accuracy picks the constituent ones, whose heuristic the model does not blindly reject."""
    scores = {s: 1.0 for s in data.non_entailment_subcases()}
    scores.update({s: 0.0 for h in ("lexical_overlap", "subsequence") for s in data.entailment_subcases(h)})
    scores.update({s: 0.8 for s in data.entailment_subcases("constituent")})
    scores.update({"cn_adverb": 0.6, "cn_disjunction": 0.7})
    plain = data.choose_subcases("best-non-entailment", scores, count=2)
    assert all(scores[s] == 1.0 for s in plain)
    chosen = data.choose_subcases("auto", scores, count=2)
    # constituent: balanced (1.0 + 0.8) / 2 = 0.9 for its three 1.0 subcases; the others (1.0 + 0.0) / 2 = 0.5, below
    # the entailment floor anyway
    assert chosen == ["cn_after_if_clause", "cn_embedded_under_if"]
    b = data.balanced_accuracies(scores)
    assert b["cn_adverb"] == {"non_entailment": 0.6, "entailment": pytest.approx(0.8), "balanced": pytest.approx(0.7)}
    # no heuristic reaches the floor: the balanced ranking without it
    low = {s: (0.2 if s.startswith("cn") else 0.1) for s in scores}
    low.update({s: 1.0 for s in data.non_entailment_subcases()})
    assert all(s.startswith("cn") for s in data.choose_subcases("balanced", low, count=3))


def ex(i: int, sub: str, heuristic: str = "lexical_overlap", label: int = 1) -> Example:
    return Example(f"the doctor {i} saw the judge .", f"the judge saw the doctor {i} .", label, sub, heuristic)


def test_hans_tsv_round_trip_and_selection(tmp_path):
    pool = [ex(i, s) for i in range(5) for s in ("ln_passive", "cn_adverb")]
    chosen = data.select(pool, ["cn_adverb", "ln_passive"], per_subcase=2)
    assert [e.subcase for e in chosen] == ["cn_adverb", "cn_adverb", "ln_passive", "ln_passive"]
    back = load_hans(data.write_hans_tsv(tmp_path / "o.tsv", chosen))
    assert [(e.text_a, e.text_b, e.label, e.subcase, e.heuristic) for e in back] == \
        [(e.text_a, e.text_b, e.label, e.subcase, e.heuristic) for e in chosen]
    with pytest.raises(SubnetlabError, match="sn_NP/S"):
        data.select(pool, ["sn_NP/S"], 1)


def test_pairs_jsonl_and_interleave(tmp_path):
    pool = [ex(i, s, h) for i in range(3) for s, h in (("ln_passive", "lexical_overlap"), ("le_passive", "lexical_overlap"),
                                                      ("cn_adverb", "constituent"))]
    mixed = data.interleave(pool, lambda e: e.heuristic == "lexical_overlap", 3)
    assert [e.subcase for e in mixed] == ["ln_passive", "le_passive", "ln_passive"]
    back = load_paraphrase(data.write_pairs_jsonl(tmp_path / "p.jsonl", mixed))
    assert [(e.text_a, e.text_b) for e in back] == [(e.text_a, e.text_b) for e in mixed]


def test_synthetic_ood_examples_use_the_held_out_vocabulary():
    from subnetlab.tasks.registry import get_task

    pool = data.synthetic_ood_examples({"seed": 0, "n_train": 10}, per_subcase=3)
    task = get_task("nli-synthetic", n_train=10, n_eval=5, hans_per_subcase=3, seed=0)
    assert [(e.text_a, e.subcase) for e in pool] == [(e.text_a, e.subcase) for e in task.eval_splits["hans-synthetic"]]


def test_pick_checkpoints():
    found = [(s, f"step-{s}") for s in (10, 20, 30, 40, 50)]
    assert pick_checkpoints(found, None) == found
    assert [s for s, _ in pick_checkpoints(found, 3)] == [10, 30, 50]
    assert [s for s, _ in pick_checkpoints(found, 1)] == [50]
    assert pick_checkpoints(found, 9) == found


def test_report_verdict_numbers_from_hand_made_results():
    acc = {"id": 0.8, "ood/a": 0.4, "ood/b": 0.6, "real/a": 0.2, "real/b": 0.4}
    assert compact(acc) == {"id": 0.8, "a": 0.4, "b": 0.6, "real HANS (mean)": pytest.approx(0.3)}
    table = {"model": acc, "by_sparsity": {"50%": {"id": [0.80, 0.82], "ood/a": [0.2, 0.6], "ood/b": [0.4, 0.4],
                                                   "real/a": [0.1, 0.3], "real/b": [0.3, 0.5]}}}
    t = compact_table(table)
    assert t["by_sparsity"]["50%"]["real HANS (mean)"] == pytest.approx([0.2, 0.4])
    s = spread(t, "50%")
    assert s["id_sd"] == pytest.approx(math.sqrt(2) * 0.01)
    assert s["ood_mean_range"] == pytest.approx(0.2)  # seed means 0.3 and 0.5
    assert s["ood_subcase_sd"] == pytest.approx((math.sqrt(2) * 0.2 + 0.0) / 2)
    ablation = {"columns": ["id", "a"], "id_columns": ["id"], "rows": [
        {"label": "None", "heads": [], "accuracy": {"id": 0.8, "a": 0.6}},
        {"label": "Avg. (non-HC)", "heads": ["L0.H0", "L0.H1"], "accuracy": {"id": 0.79, "a": 0.59}},
        {"label": "L1.H0", "heads": ["L1.H0"], "accuracy": {"id": 0.8, "a": 0.4}},
        {"label": "L1.H1", "heads": ["L1.H1"], "accuracy": {"id": 0.78, "a": 0.5}},
        {"label": "L1.H0 & L1.H1", "heads": ["L1.H0", "L1.H1"], "accuracy": {"id": 0.7, "a": 0.1}}]}
    e = ablation_effects(ablation)
    assert e["core_id_drop"] == pytest.approx(0.01) and e["core_ood_drop"] == pytest.approx(0.15)
    assert e["other_ood_drop"] == pytest.approx(0.01) and e["joint_ood_drop"] == pytest.approx(0.5)
    assert e["core_max_ood_drop"] == pytest.approx(0.2)


@pytest.mark.parametrize("preset", ["demo", "paper"])
def test_presets_resolve_to_valid_configurations(preset):
    """Every setting of a preset reaches a validated config (no data is loaded, so the paper preset needs no hub)."""
    from subnetlab.experiments import get_reproduction, settings_for
    from subnetlab.methods.finetune.config import resolve_config
    from subnetlab.methods.head_pruning.config import preset_config
    from subnetlab.methods.l0.schedule import parse_levels

    module = get_reproduction("heuristic-core")
    s = settings_for(module, preset)
    assert s.preset == preset and len(s.seeds) >= 2
    for study in s.studies:
        resolve_config(s.finetune_preset, model=s.model, task=study["task"],
                       **{**s.finetune, **(study.get("finetune") or {})})
        assert len(study["sparsities"]) == 2 and study["sparsities"][0] < study["sparsities"][1]
        for target in study["sparsities"]:
            preset_config(s.prune_preset, target, seed=0, **s.prune)
        rule = study["ood"]["subcases"]
        assert rule is None or rule in ("auto", "paper") or all(x in data.non_entailment_subcases() for x in rule)
    es = s.effective_size
    levels = parse_levels(es["levels"])
    preset_config(s.prune_preset, max(levels), seed=0, schedule="staircase", levels=levels, **{**s.prune, **es["prune"]})
    if preset == "paper":
        assert s.model == "bert-base-cased" and s.seeds == list(range(12))
        assert [st["sparsities"] for st in s.studies] == [[0.5, 0.7], [0.3, 0.6]]
