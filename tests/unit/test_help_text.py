"""``--help`` reads cleanly (issue 30): usage lines without doubled brackets or internal names, epilogues that
describe what the command takes, and the report terms (Avg. (non-HC), s-pruning) defined where they appear."""

from __future__ import annotations

import pytest

from subnetlab.cli import main
from subnetlab.experiments.heuristic_core.sections import ablation_section
from subnetlab.report.markdown import MarkdownReport


def _help(capsys, command: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code in (0, None)
    return " ".join(capsys.readouterr().out.split())  # rewrapped: phrases do not depend on the terminal width


@pytest.mark.parametrize("command,usage", [
    ("prune", "Usage: subnetlab prune [OPTIONS] [SPARSITY]..."),
    ("core", "Usage: subnetlab core [OPTIONS] [DIR]..."),
    ("lottery-stability", "Usage: subnetlab lottery-stability [OPTIONS]"),
])
def test_usage_lines(capsys, command, usage):
    text = _help(capsys, command)
    assert text.startswith(usage + " ") and "[[" not in text and "[more]" not in text


def test_lottery_stability_describes_what_it_takes(capsys):
    text = _help(capsys, "lottery-stability")
    assert "classifier head" not in text and "tasks" not in text and "Models:" not in text
    assert "It loads no model and takes no task" in text


def test_report_and_help_terms_are_defined(capsys):
    assert "m-pruning: individual weights" in _help(capsys, "lottery-prune")
    assert "s-pruning: whole heads and MLPs" in _help(capsys, "lottery-prune")
    assert "Avg. (non-HC) row, the mean of single ablations of heads outside the listed ones (HC: Heuristic Core)" \
        in _help(capsys, "ablate")
    doc = MarkdownReport("t")
    ablation_section(doc, {"columns": ["id"], "id_columns": ["id"], "averaged_heads": ["L0.H1", "L1.H0"],
                           "rows": [{"label": "None", "heads": [], "accuracy": {"id": 0.9}, "kind": "none"}]})
    assert "Avg. (non-HC) is the mean of the single ablations of 2 heads outside the listed ones (HC: the " \
           "Heuristic Core heads, or the heads you listed)" in doc.render()
