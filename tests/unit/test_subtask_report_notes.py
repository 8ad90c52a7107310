"""The subtask-induction report lists every paper/code difference with its released file."""

from __future__ import annotations

import re

import pytest

from subnetlab.experiments.subtask_induction.report import CODE_NOTES, code_notes
from subnetlab.experiments.subtask_induction.reproduce import PRESETS, Settings

RELEASED_FILE = re.compile(r"`[\w/*.]+\.(py|yaml)`")


@pytest.mark.parametrize("preset", ["demo", "paper"])
def test_every_issue_item_is_listed_with_its_released_file_and_this_runs_choice(preset):
    settings = Settings.from_preset(PRESETS, preset)
    notes = code_notes(settings)
    assert len(notes) == len(CODE_NOTES)
    assert {item for item, _, _ in CODE_NOTES} == {1, 2, 3, 4, 5, 6}
    for note in notes:
        assert RELEASED_FILE.search(note), note  # names the released file it comes from
        assert "This run: " in note
    text = "\n".join(notes)
    for key in ("cs_loss", "transfer_loss", "cs_accuracy", "transfer_accuracy", "transfer_ties"):
        assert f"`{key}` = `{getattr(settings, key)}`" in text  # the run's own choice, read from its settings
    assert ("std 0.02" in text) == (preset == "paper")
    assert f"lr {settings.transfer_lr:g}, {settings.transfer_epochs} epochs" in text
