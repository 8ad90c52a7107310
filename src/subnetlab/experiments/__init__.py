"""Paper reproductions, one module each, run by `subnetlab reproduce NAME` with a preset (demo or paper).

A reproduction module defines ``NAME`` (the CLI name), ``PRESETS`` (preset name
-> dict of settings, JSON-serialisable) and ``run(settings: dict, out: Path) ->
Path`` which writes the run directory (``config.json``, ``metrics.json``,
``report.md`` and artefacts) and returns the report's path. Reruns resume.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import yaml

from subnetlab.errors import SubnetlabError

REPRODUCTIONS: dict[str, str] = {
    "heuristic-core": "subnetlab.experiments.heuristic_core.reproduce",
    "subtask-induction": "subnetlab.experiments.subtask_induction.reproduce",
    "lottery": "subnetlab.experiments.lottery.reproduce",
    "shape-bias": "subnetlab.experiments.shape_bias.reproduce",
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


def settings_for(module: ModuleType, preset: str, overrides: dict | None = None) -> dict:
    if preset not in module.PRESETS:
        raise SubnetlabError(f"unknown preset {preset!r} for {module.NAME}; choose one of {', '.join(module.PRESETS)}")
    settings = dict(module.PRESETS[preset])
    for key, value in (overrides or {}).items():
        if key not in settings:
            raise SubnetlabError(f"unknown setting {key!r} for {module.NAME}; known: {', '.join(sorted(settings))}")
        settings[key] = yaml.safe_load(value) if isinstance(value, str) else value  # "3" -> 3, "[0, 1]" -> list
    settings["preset"] = preset
    return settings
