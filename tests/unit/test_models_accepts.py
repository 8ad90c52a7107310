"""Which models each command accepts: one table in models/, shown in every command's --help and by `subnetlab models`."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from subnetlab.cli import app
from subnetlab.models import FAMILIES
from subnetlab.models.accepts import COMMAND_MODELS, KIND_NAMES, accepted_models, families_of


def _commands() -> dict:
    return typer.main.get_command(app).commands


def test_every_command_that_loads_a_model_has_an_entry_and_says_so_in_its_help():
    runner = CliRunner()
    loads_a_model = {name for name, cmd in _commands().items()
                     if any("--model" in p.opts for p in cmd.params)}
    assert loads_a_model <= set(COMMAND_MODELS), loads_a_model - set(COMMAND_MODELS)
    assert set(COMMAND_MODELS) <= set(_commands())  # no entry for a command that does not exist
    for name in COMMAND_MODELS:
        help_text = " ".join(runner.invoke(app, [name, "--help"], terminal_width=400).output.split())
        assert accepted_models(name) in help_text, name


def test_the_sentence_lists_the_families_of_each_kind_from_the_family_table():
    for kind in KIND_NAMES:  # independent: straight from FAMILIES
        expected = [s.family for s in FAMILIES.values() if s.kind == kind and s.has_components]
        assert families_of(kind) == expected
    assert families_of("vision", components=False) == ["vit", "resnet"]
    assert accepted_models("discover").startswith("Models: causal language models (gpt2, llama, gemma2, olmo2, "
                                                  "gpt_neox).")
    assert accepted_models("inspect") == ("Models: text encoders (bert, roberta); causal language models (gpt2, llama, "
                                          "gemma2, olmo2, gpt_neox); image models (vit, resnet).")
    assert accepted_models("core") is None  # loads no model


def test_models_lists_every_family_with_its_kind_and_example():
    out = " ".join(CliRunner().invoke(app, ["models"], env={"COLUMNS": "400"}).output.split())
    for spec in FAMILIES.values():
        assert spec.family in out and spec.example.split(",")[0] in out
    assert "resnet │ image models" in out and "Models each command accepts" in out
