"""One table from many runs: every ``config.json`` + ``metrics.json`` under a directory.

A sweep leaves hundreds of run directories; analysis wants one data frame.

``collect_results(dir)`` (wide, the raw record): one row per directory holding a ``metrics.json``:
``run_dir`` (relative to the root), then the config and the metrics with nested keys flattened by dots
(``config.prune.lr``, ``metrics.hans.accuracy``). Lists are kept as JSON text so every row has the same
scalar columns, readable by pandas, Arrow or duckdb; a column of whole numbers stays integer (``Int64``).

``results_table(dir)`` (long, what ``subnetlab results`` writes): one row per number a run measured, in
the canonical columns ``LONG_COLUMNS`` whatever command wrote the run, then that run's raw columns:

- ``run_dir``; ``command`` (``prune``, ``finetune``, ``evaluate``, ``discover``, ``transfer``, ... as the
  config names it or its keys show); ``model``; ``task``; ``seed`` and ``sparsity`` (the target; empty where
  the run has none: ``Int64`` / float with missing values);
- ``split`` (the data a score is on: ``eval``, ``test``, ``hans``, an ablation column; empty for numbers
  of the run as a whole, such as ``train_seconds``), ``metric`` (``accuracy``, ``n``, ``labels.five``,
  ``kept_percent``, ...) and ``value`` (float); ``position`` (``"2,3"``) for an entry of a list or matrix
  (per-layer percentages, head masks), else empty; ``metric_path``, the number's exact place in
  ``metrics.json`` (``final.eval.accuracy``, ``runs[0].test_accuracy``);
- ``health``: ``ok`` or the problems the run's health check found (empty for runs without one).

A record in a list that names itself (``{"edge": "a0.h1->logits", "score": 0.25}``: attribution's top edges)
gives its numbers that name as their ``position``. ``run_summary(frame)`` is one row per run: its command,
seed, sparsity and health, and its ``HEADLINE`` numbers (``eval.accuracy``, ``faithfulness``, ...).

The split is found the same way for every command: a dict holding an ``accuracy`` is one split's scores
(its key is the split: ``eval.hans.accuracy``, ``final.test.accuracy``), a dict naming its ``split`` is that
split's scores (a circuit's ``eval``: ``{"split": "eval", "logit_diff": ...}``), a number named
``eval_accuracy`` is ``accuracy`` on ``eval``, a dict named ``accuracy`` of numbers holds one per split
(ablation rows), and a circuit's faithfulness (``faithfulness``, ``cpr``, ``cmd``, ``areas``, attribution's
``top_edges``) is on the split its config names (``eval_split``, else ``split``). Training traces
(``history``, ``curve``) stay in the raw columns only.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from subnetlab.errors import SubnetlabError
from subnetlab.executor.job import CONFIG_FILE, METRICS_FILE
from subnetlab.io import atomic_path, read_json
from subnetlab.run_directory import natural_order

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
    """Every directory under ``root`` (itself included) that holds a ``metrics.json``, in natural order
    (``steps-5`` before ``steps-10``)."""
    runs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        if METRICS_FILE in filenames:
            runs.append(Path(dirpath))
    return sorted(runs, key=lambda p: natural_order(p.relative_to(root)))


# keys that hold measurements wherever they appear in a metrics.json: a string or an infinity there is a damaged file
NUMERIC_KEYS = {"accuracy", "f1", "mcc", "corr", "loss", "kl", "logit_diff", "answer_prob", "prob_diff", "cpr", "cmd",
                "sparsity", "target_sparsity", "faithfulness", "n"}


def _read_object(path: Path) -> dict:
    data = read_json(path)
    if not isinstance(data, dict):
        raise SubnetlabError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if path.name == METRICS_FILE:
        _check_measurements(path, data)
    return data


def _check_measurements(path: Path, data: Any, where: str = "", numeric: bool = False) -> None:
    """Refuse an infinity anywhere, and text where a number is measured (``NUMERIC_KEYS``). NaN stays: subnetlab
    writes it for a quantity that is undefined (a faithfulness f whose full and empty runs agree)."""
    if isinstance(data, float) and math.isinf(data):
        raise SubnetlabError(f"{path}: {where or 'the file'} is {data}; a measurement is a finite number or NaN")
    if isinstance(data, Mapping):
        for key, value in data.items():
            _check_measurements(path, value, f"{where}.{key}" if where else str(key), str(key) in NUMERIC_KEYS)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _check_measurements(path, value, f"{where}[{i}]", numeric)
    elif numeric and (isinstance(data, str) or isinstance(data, bool)):
        raise SubnetlabError(f"{path}: {where} is {data!r}, not a number; the file is damaged")


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


LONG_COLUMNS = ["run_dir", "command", "model", "task", "seed", "sparsity", "split", "metric", "value", "position",
                "metric_path", "health"]
SPLIT_PREFIX = re.compile(r"^(eval|test|train|validation|dev)_(.+)$")
TRACES = {"history", "curve"}  # per-step records: raw columns only
EVALUATED = {"faithfulness", "cpr", "cmd", "areas", "top_edges"}  # measured on the run's split (config's)
RECORD_NAMES = ("edge", "node", "name")  # a record's own name (attribution's top edges): its numbers' position
# the numbers `subnetlab results` shows per run, in this order, where a run has them
HEADLINE = ("accuracy", "faithfulness", "cpr", "cmd", "kl", "logit_diff", "kept_edges", "kept_percent",
            "sparsity", "l0_lambda")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _get(data: Mapping[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


def _command(config: Mapping[str, Any], run_dir: str) -> str | None:
    """The command that wrote the run: its config says so, or its keys show which job it is."""
    if isinstance(config.get("command"), str):
        return config["command"]
    for key, command in (("prune", "prune"), ("cs", "discover"), ("finetune", "finetune"), ("lottery", "lottery"),
                         ("edge_prune", "circuit")):
        if key in config:
            return command
    if "runs" in config and "train" in config:
        return "transfer"
    if run_dir.rsplit("/", 1)[-1] == "full-model" and "eval" in config:
        return "prune"  # a pruning sweep's unpruned model: sparsity 0
    return None


def _task(config: Mapping[str, Any]) -> str | None:
    task = config.get("task", _get(config, "finetune", "task"))
    if isinstance(task, Mapping):  # a command that stores the task's options: its name or its file
        task = task.get("task") or (f"file:{task['path']}" if task.get("path") else None)
    return task if isinstance(task, str) else None


def _run_split(config: Mapping[str, Any]) -> str | None:
    """The split a run's circuit measurements are on, as its config names it (``eval_split``, else ``split``)."""
    for key in ("eval_split", "split"):
        if isinstance(config.get(key), str):
            return config[key]
    return None


def _health(metrics: Mapping[str, Any]) -> str | None:
    health = metrics.get("health")
    if isinstance(health, str):
        return health
    if isinstance(health, Mapping):
        problems = health.get("problems") or []
        return ",".join(str(p) for p in problems) if problems else "ok"
    return None


def _numbers(value: Any, index: tuple[int, ...] = ()) -> list[tuple[str, float]]:
    """A list or matrix of numbers as ``("2,3", value)`` entries; empty when it holds anything else."""
    if _is_number(value):
        return [(",".join(map(str, index)), float(value))]
    if isinstance(value, list) and value and all(_is_number(v) or isinstance(v, list) for v in value):
        entries = [e for i, v in enumerate(value) for e in _numbers(v, (*index, i))]
        return entries if len(entries) == sum(1 for _ in _leaves(value)) else []
    return []


def _leaves(value: Any):
    if isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _measurements(data: Any, path: str = "", split: str | None = None, metric: str = "",
                  context: dict[str, Any] | None = None, run_split: str | None = None) -> list[dict[str, Any]]:
    """Every number under ``data`` as ``{split, metric, value, position, metric_path, seed?}`` (module docstring);
    ``run_split``: the split of the top-level ``EVALUATED`` entries."""
    context = dict(context or {})
    rows: list[dict[str, Any]] = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            key = str(key)
            if key in TRACES or key == "health":
                continue
            where = f"{path}.{key}" if path else key
            name = f"{metric}.{key}" if metric else key
            if not path and key in EVALUATED and run_split is not None and split is None:
                rows += _measurements({key: value}, path, run_split, metric, context)
            elif isinstance(value, Mapping) and _is_number(value.get("accuracy")):  # one split's scores
                rows += _measurements(value, where, key, "", context)
            elif isinstance(value, Mapping) and isinstance(value.get("split"), str):  # scores naming their split
                rows += _measurements(value, where, value["split"], "", context)
            elif key == "accuracy" and isinstance(value, Mapping) and value and all(map(_is_number, value.values())):
                rows += [{"split": s, "metric": "accuracy", "value": float(v), "position": None,
                          "metric_path": f"{where}.{s}", **context} for s, v in value.items()]
            elif isinstance(value, Mapping):
                rows += _measurements(value, where, split, name, context)
            elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
                for i, item in enumerate(value):  # records; those with a seed are runs (transfer's): their own rows
                    if _is_number(item.get("seed")):
                        rows += _measurements(item, f"{where}[{i}]", split, "", {**context, "seed": item["seed"]})
                    else:
                        named = next((item[k] for k in RECORD_NAMES if isinstance(item.get(k), str)), None)
                        rows += [{**r, "position": r["position"] or named}  # an edge's score says which edge
                                 for r in _measurements(item, f"{where}[{i}]", split, name, context)]
            else:
                match = SPLIT_PREFIX.match(key) if split is None and not metric else None
                row_split, row_metric = (match.group(1), match.group(2)) if match else (split, name)
                rows += [{"split": row_split, "metric": row_metric, "value": v, "position": index or None,
                          "metric_path": where, **context} for index, v in _numbers(value)]
    return rows


def results_table(root: str | os.PathLike) -> pd.DataFrame:
    """The long table of every run under ``root``: ``LONG_COLUMNS``, then the run's raw columns (module docstring)."""
    wide = collect_results(root)
    root = Path(root)
    rows = []
    for record in wide.to_dict("records"):
        run = root / record["run_dir"]
        config = _read_object(run / CONFIG_FILE) if (run / CONFIG_FILE).is_file() else {}
        metrics = _read_object(run / METRICS_FILE)
        command = _command(config, record["run_dir"]) or _command(metrics, record["run_dir"])  # a sweep's own
        seed = next((v for v in (config.get("seed"), _get(config, "prune", "seed"), _get(config, "finetune", "seed"),
                                 metrics.get("seed")) if _is_number(v)), None)
        sparsity = next((v for v in (metrics.get("target_sparsity"), _get(config, "prune", "sparsity"),
                                     config.get("sparsity")) if _is_number(v)), None)
        if sparsity is None and command == "prune" and record["run_dir"].rsplit("/", 1)[-1] == "full-model":
            sparsity = 0.0
        canonical = {"run_dir": record["run_dir"], "command": command,
                     "model": config.get("model", _get(config, "finetune", "model")), "task": _task(config),
                     "seed": seed, "sparsity": sparsity, "health": _health(metrics)}
        raw = {k: v for k, v in record.items() if k != "run_dir"}
        for measured in _measurements(metrics, run_split=_run_split(config)):
            rows.append({**canonical, **measured, **raw})
    frame = pd.DataFrame(rows, columns=None if rows else LONG_COLUMNS)
    frame = frame[LONG_COLUMNS + [c for c in frame.columns if c not in LONG_COLUMNS]]
    frame["seed"] = frame["seed"].astype("Int64")
    frame["sparsity"] = frame["sparsity"].astype("float64")
    frame["value"] = frame["value"].astype("float64")
    for column in ("command", "model", "task", "split", "metric", "position", "metric_path", "health"):
        frame[column] = frame[column].astype("string")
    return frame


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
    for column in frame.columns:  # whole numbers stay integers where some runs lack them (not 3.0 and NaN)
        kinds = {type(v) for v in frame[column] if not _missing(v)}
        if kinds == {int}:
            frame[column] = frame[column].astype("Int64")
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


def run_summary(frame: pd.DataFrame, max_numbers: int = 6) -> pd.DataFrame:
    """One row per run of the long table: ``run_dir``, ``command``, ``seed``, ``sparsity``, ``health``, then up to
    ``max_numbers`` of the ``HEADLINE`` numbers (``split.metric`` columns, those most runs have), each the run's
    entry nearest the top of its metrics.json (``eval.accuracy`` before ``final.eval.accuracy``)."""
    keys = ["run_dir", "command", "seed", "sparsity", "health"]
    runs = frame[keys].drop_duplicates("run_dir").set_index("run_dir")
    head = frame["metric"].astype(str).str.split(".").str[0]  # faithfulness.logit_diff: a faithfulness
    chosen = frame[head.isin(HEADLINE) & frame["position"].isna()].copy()
    chosen["column"] = [f"{s}.{m}" if isinstance(s, str) and s else f"measured_{m}" if m in keys else str(m)
                        for s, m in zip(chosen["split"], chosen["metric"])]  # the target sparsity is `sparsity`
    chosen["depth"] = chosen["metric_path"].astype(str).str.count(r"[.\[]")
    chosen = chosen.sort_values("depth", kind="stable").drop_duplicates(["run_dir", "column"])
    order = {m: i for i, m in enumerate(HEADLINE)}
    counts = chosen.groupby("column")["run_dir"].nunique()
    metric_of = chosen.drop_duplicates("column").set_index("column")["metric"].astype(str).str.split(".").str[0]
    columns = sorted(counts.index, key=lambda c: (-counts[c], order[metric_of[c]], c))[:max_numbers]
    columns = sorted(columns, key=lambda c: (order[metric_of[c]], c))
    wide = chosen[chosen["column"].isin(columns)].pivot(index="run_dir", columns="column", values="value")
    table = runs.join(wide.reindex(columns=columns), how="left")
    return table.reset_index()
