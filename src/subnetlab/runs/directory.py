"""The run-directory contract, in one place: ``config.json`` first, ``metrics.json`` last.

A run directory holds ``config.json`` (everything needed to rerun it, written
before any work), its artefacts, and ``metrics.json`` (written last and
atomically: its presence marks the run finished). A rerun of the same command
skips a finished run and resumes an unfinished one; a directory that holds a
*different* configuration is refused, naming the keys that differ, so one run
can never silently overwrite another. The executor applies this to every job;
studies and commands that are not executor jobs use the same functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json, write_json

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"


def plain(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as ``config.json`` will hold it (tuples become lists, paths strings)."""
    return json.loads(json.dumps(dict(config), default=str))


def is_finished(out: str | Path) -> bool:
    """True iff ``out/metrics.json`` exists (it is written last, atomically)."""
    return (Path(out) / METRICS_FILE).is_file()


def differing_keys(existing: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The top-level keys whose values differ (a key missing on one side differs)."""
    return sorted(k for k in set(existing) | set(config) if existing.get(k) != config.get(k))


def check_config(out: str | Path, config: Mapping[str, Any], what: str = "config") -> bool:
    """Refuse ``out`` if its ``config.json`` holds another ``config``; True if it holds this one."""
    path = Path(out) / CONFIG_FILE
    if not path.is_file():
        return False
    existing = read_json(path)
    wanted = plain(config)
    if existing != wanted:
        keys = differing_keys(existing, wanted) if isinstance(existing, dict) else []
        raise SubnetlabError(f"{path}: holds a different {what} (differs in {', '.join(keys[:5]) or 'structure'}); "
                             "choose another output directory or delete that run directory", setting="out")
    return True


def finished_metrics(out: str | Path, config: Mapping[str, Any], *, redo_other: bool = False) -> dict[str, Any] | None:
    """The metrics of a finished run of this same ``config`` in ``out``, else None.

    A directory holding another config is refused, or with ``redo_other`` treated
    as unfinished (the steps of a study, which rerun when the study's settings change).
    """
    path = Path(out) / CONFIG_FILE
    if redo_other and path.is_file() and read_json(path) != plain(config):
        return None
    if check_config(out, config) and is_finished(out):
        return read_json(Path(out) / METRICS_FILE)
    return None


def claim(out: str | Path, config: Mapping[str, Any], what: str = "config") -> Path:
    """Make ``out`` this run's directory: refuse another config, then write ``config.json``."""
    out = Path(out)
    check_config(out, config, what)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / CONFIG_FILE, plain(config))
    return out


__all__ = ["CONFIG_FILE", "METRICS_FILE", "check_config", "claim", "differing_keys", "finished_metrics",
           "is_finished", "plain"]
