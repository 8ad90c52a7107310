"""Your own data as a task: ``file:PATH`` (CSV, TSV, JSON / JSONL, Parquet, or a ``save_to_disk`` folder).

Read with the ``datasets`` library (no hand-written parsers): one text column,
optionally a second one for sentence pairs, and a label column holding names
or integers. Label names are collected from the training file (sorted, so the
same file always gives the same label ids; integer labels keep their values).
Held-out data comes from ``eval_file``; without one, ``eval_fraction`` of the
training rows (drawn with ``seed``) are held out as split ``eval``, and the
task's options say so. The result is an ordinary classification ``Task``, so
every method (finetune, evaluate, prune, core, ablate, lottery-prune) takes it.
``docs/your-own-model.md`` walks through the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import Example, Task

SUFFIX_BUILDERS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def _read(path: Path) -> Any:
    """The rows of ``path`` as a ``datasets.Dataset``; errors name the file."""
    import datasets

    datasets.disable_progress_bars()
    if not path.exists():
        raise SubnetlabError(f"{path}: no such data file", setting="task")
    try:
        if path.is_dir():
            data = datasets.load_from_disk(str(path))
            if isinstance(data, datasets.DatasetDict):
                raise SubnetlabError(f"{path}: a dataset with splits {', '.join(data)}; give the folder of one split",
                                     setting="task")
            return data
        builder = SUFFIX_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise SubnetlabError(f"{path}: unknown data format {path.suffix!r} (known: {', '.join(SUFFIX_BUILDERS)})",
                                 setting="task")
        extra = {"delimiter": "\t"} if path.suffix.lower() == ".tsv" else {}
        return datasets.load_dataset(builder, data_files=str(path), split="train", **extra)
    except SubnetlabError:
        raise
    except Exception as e:  # datasets raises many types (ArrowInvalid, DatasetGenerationError, ...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SubnetlabError(f"{path}: cannot read the data ({first})", setting="task") from None


def _column(data: Any, name: str | None, path: Path, role: str) -> list[Any] | None:
    if name is None:
        return None
    if name not in data.column_names:
        raise SubnetlabError(f"{path}: no {role} column {name!r} (columns: {', '.join(data.column_names)})",
                             setting="task_options")
    return list(data[name])


def _examples(data: Any, path: Path, text: str, pair: str | None, label: str, label_ids: dict[Any, int]) -> list[Example]:
    texts, pairs, labels = _column(data, text, path, "text"), _column(data, pair, path, "text pair"), _column(data, label, path, "label")
    if not texts:
        raise SubnetlabError(f"{path}: no rows", setting="task")
    first_row = 2 if path.suffix.lower() in (".csv", ".tsv") else 1  # CSV / TSV: line 1 is the header
    out = []
    for i, (a, y) in enumerate(zip(texts, labels)):
        b, row = (pairs[i] if pairs is not None else None), first_row + i
        where = f"{path}:{row}"
        if not isinstance(a, str) or not a.strip():
            raise SubnetlabError(f"{where}: column {text!r} holds no text ({a!r})", setting="task")
        if pair is not None and (not isinstance(b, str) or not b.strip()):
            raise SubnetlabError(f"{where}: column {pair!r} holds no text ({b!r})", setting="task")
        if y not in label_ids:
            known = ", ".join(str(k) for k in label_ids)
            raise SubnetlabError(f"{where}: column {label!r} holds an unknown label {y!r} (labels: {known})", setting="task")
        out.append(Example(a, b, label_ids[y]))
    return out


def make_file_task(path: str, text_column: str = "text", text_pair_column: str | None = None,
                   label_column: str = "label", eval_file: str | None = None, eval_fraction: float = 0.1,
                   seed: int = 0) -> Task:
    """A classification task from the user's own file (see the module doc)."""
    train_path = Path(path).expanduser()
    data = _read(train_path)
    for name, role in ((text_column, "text"), (text_pair_column, "text pair"), (label_column, "label")):
        if name is not None and name not in data.column_names:
            raise SubnetlabError(f"{train_path}: no {role} column {name!r} (columns: {', '.join(data.column_names)})",
                                 setting="task_options")
    raw_labels = _column(data, label_column, train_path, "label")
    values = [y for y in raw_labels if y is not None]
    if any(isinstance(y, bool) for y in values) or not values:
        raise SubnetlabError(f"{train_path}: column {label_column!r} holds no usable labels", setting="task")
    if all(isinstance(y, int) for y in values):
        ids = sorted(set(values))
        if ids[0] < 0:
            raise SubnetlabError(f"{train_path}: negative integer label {ids[0]} in column {label_column!r}", setting="task")
        label_ids = {i: i for i in range(ids[-1] + 1)}
        labels = [str(i) for i in range(ids[-1] + 1)]
    elif all(isinstance(y, str) for y in values):
        labels = sorted(set(values))
        label_ids = {name: i for i, name in enumerate(labels)}
    else:
        kinds = sorted({type(y).__name__ for y in values})
        raise SubnetlabError(f"{train_path}: column {label_column!r} mixes label types ({', '.join(kinds)})", setting="task")
    if len(labels) < 2:
        raise SubnetlabError(f"{train_path}: column {label_column!r} has a single label {labels[0]!r}", setting="task")
    examples = _examples(data, train_path, text_column, text_pair_column, label_column, label_ids)
    options: dict[str, Any] = {"path": str(train_path), "text_column": text_column, "text_pair_column": text_pair_column,
                               "label_column": label_column, "eval_file": eval_file, "seed": seed}
    if eval_file is not None:
        eval_path = Path(eval_file).expanduser()
        held_out = _examples(_read(eval_path), eval_path, text_column, text_pair_column, label_column, label_ids)
        train = examples
    else:
        if not 0.0 < eval_fraction < 1.0:
            raise SubnetlabError(f"eval_fraction {eval_fraction} is outside (0, 1)", setting="task_options")
        order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed)).tolist()
        n_eval = max(1, round(eval_fraction * len(examples)))
        if n_eval >= len(examples):
            raise SubnetlabError(f"{train_path}: {len(examples)} rows are too few to hold out an evaluation split",
                                 setting="task")
        held_out = [examples[i] for i in sorted(order[:n_eval])]
        train = [examples[i] for i in sorted(order[n_eval:])]
        options["eval_from_train"] = {"fraction": eval_fraction, "rows": n_eval}
    return Task(f"file:{train_path.name}", "classification", labels, train, {"eval": held_out}, options=options)


__all__ = ["make_file_task"]
