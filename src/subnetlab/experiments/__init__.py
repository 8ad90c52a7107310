"""Paper reproductions, one module each, run by `subnetlab reproduce NAME` with a preset (demo or paper).

A reproduction module defines ``NAME`` (the CLI name), ``PRESETS`` (preset name
-> dict of settings, JSON-serialisable), ``Settings`` (its typed settings, an
``experiments.settings.StudySettings``: one field per preset key) and
``run(settings, out) -> Path`` which writes the run directory (``config.json``,
``metrics.json``, ``report.md`` and artefacts) and returns the report's path.
Reruns resume.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.settings import StudySettings

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


def settings_for(module: ModuleType, preset: str, overrides: Mapping[str, object] | None = None) -> StudySettings:
    """The module's typed settings: preset ``preset`` with ``overrides`` (``KEY: VALUE``, text read as YAML then as
    the key's type), checked."""
    return module.Settings.from_preset(module.PRESETS, preset, overrides)
