"""Reports on your own data (issue 30): one evaluation column, one transfer size. The ablation verdict names
the column and states its drops; transfer's table has no column headed "0" and its figure no empty x axis."""

from __future__ import annotations

import matplotlib.pyplot as plt

from subnetlab.experiments.heuristic_core.sections import ablation_section, super_additivity_sentence
from subnetlab.experiments.subtask_induction.figures import figure3_axes
from subnetlab.experiments.subtask_induction.report import summarise, summary_table
from subnetlab.report.markdown import MarkdownReport


def _table(columns, ood=()):
    """An ablation table: no ablation, two single heads, and the two jointly (drops chosen by hand)."""
    acc = lambda v: {c: v for c in columns}  # noqa: E731
    verdict = {c: {"joint_drop": 0.30, "sum_single_drops": 0.10, "super_additive": True} for c in columns}
    return {"columns": list(columns), "id_columns": [c for c in columns if c not in ood], "averaged_heads": [],
            "rows": [{"label": "None", "heads": [], "accuracy": acc(0.9), "kind": "none"},
                     {"label": "L0.H0", "heads": ["L0.H0"], "accuracy": acc(0.85), "kind": "single"},
                     {"label": "L0.H1", "heads": ["L0.H1"], "accuracy": acc(0.85), "kind": "single"},
                     {"label": "L0.H0 & L0.H1", "heads": ["L0.H0", "L0.H1"], "accuracy": acc(0.6), "kind": "joint"}],
            "super_additivity": verdict}


def _text(table) -> str:
    doc = MarkdownReport("t")
    ablation_section(doc, table)
    return doc.render()


def test_one_column_of_your_own_data_states_its_joint_drop():
    sentence = super_additivity_sentence(_table(["eval"])["super_additivity"], "the joint heads", ["eval"],
                                         out_of_domain=False)
    assert sentence == ("Ablating the joint heads together lowers eval accuracy by 30.0 points, against 10.0 for the "
                        "single ablations of the same heads summed: super-additive.")


def test_an_ablation_report_without_out_of_domain_columns_judges_the_columns_it_has():
    text = _text(_table(["eval"]))
    assert "0 of 0" not in text and "in points: ." not in text
    assert "lowers eval accuracy by 30.0 points, against 10.0" in text
    two = _text(_table(["eval", "test"]))
    assert "on 2 of 2 columns (eval, test); joint vs summed single drops, in points: eval 30.0 vs 10.0, test 30.0 vs 10.0." in two


def test_out_of_domain_columns_are_still_the_ones_judged_when_there_are_some():
    text = _text(_table(["id", "ood_a", "ood_b"], ood=("ood_a", "ood_b")))
    assert "on 2 of 2 out-of-domain columns" in text and "id 30.0" not in text


def _runs(sizes, conditions=("subnetwork", "scratch"), seeds=(0, 1)):
    return [{"condition": c, "size": s, "seed": seed, "test_accuracy": 0.5 + 0.1 * seed + (0.2 if c == "subnetwork" else 0)}
            for c in conditions for s in sizes for seed in seeds]


def test_transfer_table_with_one_size_has_no_column_headed_zero():
    text = summary_table(summarise(_runs([0])), [0])
    lines = text.splitlines()
    assert lines[0].split() == ["condition", "test", "accuracy"]
    assert lines[1].split()[:2] == ["subnetwork", "75.0%"] and "s.d. 7.1 over 2 seeds" in lines[1]
    many = summary_table(summarise(_runs([0, 100])), [0, 100]).splitlines()
    assert "disambiguation rows" in many[0] and many[0].split()[-2:] == ["0", "100"]


def test_transfer_figure_with_one_size_draws_bars_per_condition():
    fig = figure3_axes(_runs([0]))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["subnetwork", "scratch"]
    assert [round(p.get_height(), 6) for p in ax.patches] == [75.0, 55.0]
    assert ax.get_xscale() == "linear"
    plt.close(fig)
    curves = figure3_axes(_runs([0, 100]))
    assert curves.axes[0].get_xscale() == "symlog"
    plt.close(curves)


def test_an_ablation_report_on_your_own_data_is_worded_for_it():
    """Own data, every head listed: no "single ablations of 0 heads", and the joint row's basis is the data's own
    column, not the paper's "out-of-domain (non-entailment) columns"."""
    text = _text(_table(["eval"]))
    assert "of 0 heads" not in text and "There is no Avg. (non-HC) row" in text
    assert "out-of-domain (non" not in text and "largest single drops on the columns eval (this data has no out-of-domain" \
        " split)" in text
    ood = _table(["eval", "hans"], ood=["hans"])
    assert "largest single drops on the out-of-domain columns (hans)" in _text(ood)
    paper = _table(["id", "lex", "entailed:lex"], ood=["lex", "entailed:lex"])
    assert "out-of-domain (non-entailment) columns, as the paper's Table 3 does" in _text(paper)
    one = _table(["eval"])
    one["averaged_heads"] = ["L1.H0"]
    assert "the mean of the single ablations of 1 head outside the listed ones" in _text(one)
