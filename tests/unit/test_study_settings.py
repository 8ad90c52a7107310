"""Typed study settings: every preset builds, writes back what the preset spells, and refuses bad keys and values."""

from __future__ import annotations

import dataclasses
import json

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.experiments import REPRODUCTIONS, get_reproduction, settings_for

PRESETS = [(name, preset) for name in REPRODUCTIONS for preset in get_reproduction(name).PRESETS]


@pytest.mark.parametrize("name, preset", PRESETS)
def test_every_preset_builds_and_writes_back_its_own_keys_in_order(name, preset):
    module = get_reproduction(name)
    settings = settings_for(module, preset)
    assert isinstance(settings, module.Settings) and settings.preset == preset
    plain = settings.to_dict()  # what config.json holds
    assert json.dumps(plain) == json.dumps({**module.PRESETS[preset], "preset": preset})
    assert module.Settings.from_dict(json.loads(json.dumps(plain))) == settings  # a config.json reads back the same
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 1  # type: ignore[misc]


def test_overrides_are_read_as_their_fields_type():
    lottery = get_reproduction("lottery")
    s = settings_for(lottery, "demo", {"max_steps": "7", "lr": "1e-3", "seeds": "[0, 1]", "refine": "false",
                                       "glue_dir": "2024", "model": "1.0", "jobs": "null"})
    assert (s.max_steps, s.lr, s.seeds, s.refine, s.glue_dir, s.model, s.jobs) == (7, 1e-3, [0, 1], False, "2024",
                                                                                   "1.0", None)
    assert s.to_dict()["max_steps"] == 7 and lottery.PRESETS["demo"]["max_steps"] is None  # the preset is untouched


@pytest.mark.parametrize("overrides, message", [
    ({"seeds": "abc"}, "setting seeds of lottery: expected a list of integers (the preset has [0, 1, 2]), got 'abc'"),
    ({"max_steps": "abc"}, "setting max_steps of lottery: expected an integer or null, got 'abc'"),
    ({"refine": "maybe"}, "setting refine of lottery: expected true or false (the preset has True), got 'maybe'"),
    ({"nonsense": "1"}, "unknown setting 'nonsense' for lottery; known: backend, bad_fill, batch_size"),
    ({"lr": "[1"}, "setting lr of lottery: cannot read '[1'"),
])
def test_bad_overrides_name_the_key_and_the_type(overrides, message):
    with pytest.raises(SubnetlabError) as refused:
        settings_for(get_reproduction("lottery"), "demo", overrides)
    assert str(refused.value).startswith(message)
    assert refused.value.setting == next(iter(overrides))


def test_a_mapping_is_checked_as_a_config_json_is():
    hc = get_reproduction("heuristic-core")
    plain = settings_for(hc, "demo").to_dict()
    with pytest.raises(SubnetlabError, match=r"unknown setting\(s\) extra for heuristic-core; known: ablation, attention, backend"):
        hc.Settings.from_dict({**plain, "extra": 1})
    with pytest.raises(SubnetlabError, match=r"missing setting\(s\) seeds for heuristic-core"):
        hc.Settings.from_dict({k: v for k, v in plain.items() if k != "seeds"})
    with pytest.raises(SubnetlabError, match="setting jobs of heuristic-core: expected an integer or null, got 'x'"):
        hc.Settings.from_dict({**plain, "jobs": "x"})
    with pytest.raises(SubnetlabError, match="seeds: at least one pruning seed is needed"):  # a range, when built
        hc.Settings.from_dict({**plain, "seeds": []})
    assert hc.Settings.of(plain) == settings_for(hc, "demo")


def test_a_key_only_one_preset_carries_is_left_out_of_the_others():
    shape = get_reproduction("shape-bias")
    demo, paper = settings_for(shape, "demo"), settings_for(shape, "paper")
    assert demo.imagenet_train is None and "imagenet_train" not in demo.to_dict()
    assert paper.num_classes is None and "num_classes" not in paper.to_dict() and paper.imagenet_train == ""
    with pytest.raises(SubnetlabError, match="unknown setting 'imagenet_train' for shape-bias"):  # the preset's keys
        settings_for(shape, "demo", {"imagenet_train": "/data"})
