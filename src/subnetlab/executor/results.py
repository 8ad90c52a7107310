"""One table from many runs: every ``config.json`` + ``metrics.json`` under a directory.

A sweep leaves hundreds of run directories; analysis wants one data frame. Each
directory holding a ``metrics.json`` is one row: ``run_dir`` (relative to the
root), then the config and the metrics with nested keys flattened by dots
(``config.prune.lr``, ``metrics.hans.accuracy``). Lists are kept as JSON text so
every row has the same scalar columns, readable by pandas, Arrow or duckdb.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from subnetlab.errors import SubnetlabError
from subnetlab.executor.job import CONFIG_FILE, METRICS_FILE
from subnetlab.io import atomic_path, read_json

SKIP_DIRS = {".git", "__pycache__", ".venv", "node_modules"}


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [1, 2]}`` -> ``{"a.b": 1, "c": "[1, 2]"}``."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple, Mapping)):
            flat[name] = json.dumps(value)
        else:
            flat[name] = value
    return flat


def find_runs(root: Path) -> list[Path]:
    """Every directory under ``root`` (itself included) that holds a ``metrics.json``, sorted."""
    runs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        if METRICS_FILE in filenames:
            runs.append(Path(dirpath))
    return sorted(runs, key=lambda p: p.relative_to(root).as_posix())


def _read_object(path: Path) -> dict:
    data = read_json(path)
    if not isinstance(data, dict):
        raise SubnetlabError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def collect_results(root: str | os.PathLike) -> pd.DataFrame:
    """One row per run directory under ``root``; columns ``run_dir``, ``config.*``, ``metrics.*``."""
    root = Path(root)
    if not root.is_dir():
        raise SubnetlabError(f"{root}: no such directory")
    runs = find_runs(root)
    if not runs:
        raise SubnetlabError(f"{root}: no run directories (no {METRICS_FILE} found below it)")
    rows = []
    for run in runs:
        row: dict[str, Any] = {"run_dir": run.relative_to(root).as_posix()}
        config_path = run / CONFIG_FILE
        if config_path.is_file():
            row.update(flatten(_read_object(config_path), "config."))
        row.update(flatten(_read_object(run / METRICS_FILE), "metrics."))
        rows.append(row)
    return _uniform_columns(pd.DataFrame(rows))


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _uniform_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """A column whose runs disagree on type (``3`` here, ``"auto"`` there) becomes text, so Parquet can hold it."""
    for column in frame.columns:
        if frame[column].dtype != object:
            continue
        kinds = {type(v) for v in frame[column] if not _missing(v)}
        if len(kinds) > 1 and not kinds <= {int, float}:
            frame[column] = frame[column].map(lambda v: None if _missing(v) else str(v))
    return frame


def write_results(frame: pd.DataFrame, stem: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``STEM.csv`` and ``STEM.parquet`` atomically; return both paths."""
    stem = Path(stem)
    if stem.suffix in (".csv", ".parquet"):
        stem = stem.with_suffix("")
    csv_path, parquet_path = stem.parent / f"{stem.name}.csv", stem.parent / f"{stem.name}.parquet"
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(parquet_path) as tmp:
        frame.to_parquet(tmp, index=False, engine="pyarrow")
    return csv_path, parquet_path
