"""Paper reproductions, one module each, run by `subnetlab reproduce NAME` with a preset (demo or paper).

A reproduction module defines ``NAME`` (the CLI name), ``PRESETS`` (preset name
-> dict of settings, JSON-serialisable) and ``run(settings: dict, out: Path) ->
Path`` which writes the run directory (``config.json``, ``metrics.json``,
``report.md`` and artefacts) and returns the report's path. Reruns resume.

An overriding value must have the type of the preset's value, or of another
preset's where this one holds None, or the type the module's optional
``SETTING_TYPES`` declares for settings that every preset leaves None.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import yaml

from subnetlab.errors import SubnetlabError, type_name, typed

REPRODUCTIONS: dict[str, str] = {
    "heuristic-core": "subnetlab.experiments.heuristic_core.reproduce",
    "subtask-induction": "subnetlab.experiments.subtask_induction.reproduce",
    "lottery": "subnetlab.experiments.lottery.reproduce",
    "shape-bias": "subnetlab.experiments.shape_bias.reproduce",
    "circuits": "subnetlab.experiments.circuits.reproduce",
}


def get_reproduction(name: str) -> ModuleType:
    if name not in REPRODUCTIONS:
        raise SubnetlabError(f"unknown reproduction {name!r}; choose one of {', '.join(REPRODUCTIONS)}")
    try:
        return importlib.import_module(REPRODUCTIONS[name])
    except ModuleNotFoundError as e:
        if e.name == REPRODUCTIONS[name]:
            raise SubnetlabError(f"reproduction {name!r} is not available in this version") from None
        raise


def settings_for(module: ModuleType, preset: str, overrides: dict | None = None):
    """The module's typed settings (``module.Settings``): preset ``preset`` with ``overrides`` (KEY: text or value)."""
    if hasattr(module, "Settings"):
        return module.Settings.from_preset(module.PRESETS, preset, overrides)
    if preset not in module.PRESETS:
        raise SubnetlabError(f"unknown preset {preset!r} for {module.NAME}; choose one of {', '.join(module.PRESETS)}")
    settings = dict(module.PRESETS[preset])
    for key, value in (overrides or {}).items():
        if key not in settings:
            raise SubnetlabError(f"unknown setting {key!r} for {module.NAME}; known: {', '.join(sorted(settings))}")
        try:
            read = yaml.safe_load(value) if isinstance(value, str) else value  # "3" -> 3, "[0, 1]" -> list
        except yaml.YAMLError:
            raise SubnetlabError(f"setting {key} of {module.NAME}: cannot read {value!r}", setting=key) from None
        declared = getattr(module, "SETTING_TYPES", {}).get(key)
        if declared is not None:
            settings[key] = _declared(module.NAME, key, read, declared, value)
        else:
            settings[key] = _like(module.NAME, key, read, _example(module, preset, key), value)
    settings["preset"] = preset
    return settings


def _example(module: ModuleType, preset: str, key: str) -> object:
    """The value whose type ``key`` must have: the preset's own, or (when it is None) another preset's."""
    value = module.PRESETS[preset][key]
    if value is None:
        value = next((p[key] for p in module.PRESETS.values() if p.get(key) is not None), None)
    return value


def _declared(study: str, key: str, value: object, hint: object, text: object) -> object:
    """``value`` read as ``hint``, a study's ``SETTING_TYPES`` entry (for settings every preset leaves None)."""
    ok, read = typed(value, hint)
    if not ok and isinstance(text, str):  # a text setting that YAML read as a number: glue_dir=2024
        ok, read = typed(text, hint)
    if not ok:
        raise SubnetlabError(f"setting {key} of {study}: expected {type_name(hint)}, got {text!r}", setting=key)
    return read


def _like(study: str, key: str, value: object, default: object, text: object) -> object:
    """``value`` of the type of the preset's ``default`` (numbers written as text are read); else refused."""
    if default is None or value is None:
        return value
    if isinstance(default, str):
        return text if isinstance(text, str) and not isinstance(value, (list, dict)) else value
    hint = bool if isinstance(default, bool) else int if isinstance(default, int) else (
        float if isinstance(default, float) else list if isinstance(default, (list, tuple)) else
        dict if isinstance(default, dict) else None)
    if hint is None:
        return value
    ok, read = typed(value, hint)
    if not ok:
        raise SubnetlabError(f"setting {key} of {study}: expected {type_name(hint)} (the preset has {default!r}), "
                             f"got {text!r}", setting=key)
    return read
