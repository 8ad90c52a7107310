"""The Heuristic Core report's sections on constructed numbers: capped effective sizes, ablation changes in words,
attention shares that sum to 100%."""

from __future__ import annotations

import re

import pytest

from subnetlab.experiments.heuristic_core import sections
from subnetlab.experiments.heuristic_core.report import ablation_paragraph
from subnetlab.report.markdown import MarkdownReport


def _size(size: float | None) -> dict:
    if size is None:  # no level faithful: saved as 1.0
        return {"size": 1.0, "sparsity": 0.0, "level_sparsity": 0.0, "faithful_levels": []}
    return {"size": size, "sparsity": round(1 - size, 6), "level_sparsity": round(1 - size, 6),
            "faithful_levels": [round(1 - size, 6)]}


def test_effective_size_table_shows_capped_sizes_as_bounds(tmp_path):
    result = {"levels": [0.1, 0.3, 0.5, 0.7], "faithfulness": 0.03, "seeds": [0, 1, 2], "on": ["id", "ood"],
              "checkpoints": [
                  {"step": 40, "id_accuracy": 0.9, "ood_accuracy": 0.6, "effective_size": {"id": _size(0.3), "ood": _size(0.5)}},
                  {"step": 200, "id_accuracy": 0.95, "ood_accuracy": 0.75,
                   "effective_size": {"id": _size(0.3), "ood": _size(None)}}]}
    doc = MarkdownReport("t")
    sections.effective_size_section(doc, result, tmp_path / "es.png", base=tmp_path)
    text = doc.render()
    rows = [line for line in text.splitlines() if line.startswith("| 200")]
    assert rows == ["| 200 | 95.0 | 75.0 | 30.0 | > 90.0 |"]  # not 100.0
    assert '"> 90.0": no tested level was faithful' in text and "A capped value is not a rise." in text
    # nothing capped: no note
    result["checkpoints"].pop()
    doc = MarkdownReport("t")
    sections.effective_size_section(doc, result, tmp_path / "es.png", base=tmp_path)
    assert "no tested level was faithful (" not in doc.render()


def test_ablation_paragraph_states_rises_as_rises():
    eff = {"core_id_drop": 0.003, "core_ood_drop": -0.057, "core_max_ood_drop": -0.01, "core_entailed_drop": 0.02,
           "other_id_drop": 0.0, "other_ood_drop": 0.004, "joint_id_drop": 0.01, "joint_ood_drop": 0.12,
           "core_zero_id_drop": 0.05, "core_zero_ood_drop": -0.02}
    text = ablation_paragraph(eff, hurts=False, joint_hurts=True)
    assert text.startswith("Ablating one core head, on average: ID falls 0.3 points, OOD rises 5.7 points, "
                           "accuracy on the entailment subcases falls 2.0 points")
    assert "no core head lowers OOD, the smallest change: OOD rises 1.0 points" in text
    assert "Ablating one other head: ID is unchanged, OOD falls 0.4 points" in text
    assert "Ablating the joint heads: ID falls 1.0 points, OOD falls 12.0 points" in text
    assert "With zero instead of mean ablation, one core head: ID falls 5.0 points, OOD rises 2.0 points" in text
    assert not re.search(r"-\d", text)  # no signed numbers
    assert "**Pattern 'ablating core heads hurts OOD more than ID and more than other heads (by at least one point)': " \
           "not seen** at this scale (the joint heads: seen)." in text


def test_attention_table_parts_sum_to_100(tmp_path):
    split = {"self": 0.1, "special": 0.3, "repeated": 0.2, "previous": 0.15, "next": 0.05, "other": 0.2}
    attention = {"examples": 60, "query_counts": [120, 900, 900, 900, 900], "split_parts": list(split),
                 "selected": [{"head": "L1.H2", "repeated": 0.7, "previous": 0.2, "next": 0.1, "special": 0.4,
                               "self": 0.1, "dominant": "repeated", "split": split}], "maps": []}
    doc = MarkdownReport("t")
    sections.attention_section(doc, attention, base=tmp_path, root=tmp_path)
    text = doc.render()
    row = next(line for line in text.splitlines() if line.startswith("| L1.H2"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert sum(float(c) for c in cells[1:7]) == pytest.approx(100.0)
    assert cells[7] == "70.0" and cells[8] == "repeated"  # the partner-only share, outside the sum
    assert "sum to 100%" in text and "not part of that sum" in text
    # an attention step saved before the split: the old columns, and the caption says why they overlap
    del attention["selected"][0]["split"]
    doc = MarkdownReport("t")
    sections.attention_section(doc, attention, base=tmp_path, root=tmp_path)
    assert "need not sum to 100%" in doc.render()
