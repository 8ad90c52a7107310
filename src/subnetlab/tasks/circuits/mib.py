"""MIB's circuit-track tasks (Mueller et al. 2025, the Mechanistic Interpretability Benchmark) from a local copy.

``mib-ioi``, ``mib-mcqa``, ``mib-arithmetic-addition``, ``mib-arithmetic-subtraction``, ``mib-arc-easy`` and
``mib-arc-challenge`` read the rows of MIB's datasets (``mib-bench/ioi``, ``copycolors_mcqa`` (config
``4_answer_choices``), ``arithmetic_addition``, ``arithmetic_subtraction``, ``arc_easy``, ``arc_challenge``) from
``path``: a ``datasets`` ``save_to_disk`` folder (one split, or a ``DatasetDict`` with ``train`` / ``validation`` /
``test``) or a JSON lines file, in MIB's own columns. Nothing is downloaded: save the hub dataset where there is
network access (``load_dataset("mib-bench/ioi").save_to_disk(DIR)``).

The pairs are built as MIB's circuit track builds them (``MIB_circuit_track/dataset.py``, ``HFEAPDataset``):

* IOI: clean ``prompt``, corrupted ``<counterfactual>.prompt`` (default ``s2_io_flip_counterfactual``; any
  ``*_counterfactual`` column, e.g. ``abc_counterfactual``); answer `` `` + ``metadata.indirect_object``, wrong
  answer `` `` + ``metadata.subject`` whatever the counterfactual.
* MCQA and ARC: clean ``prompt``; answer ``choices.label[answerKey]`` as written; corrupted
  ``<counterfactual>.prompt`` (default ``symbol_counterfactual``) and wrong answer that counterfactual's own
  ``choices.label[answerKey]``.
* Arithmetic: rows whose ``operator`` is ``+`` (addition) or ``-`` (subtraction); answer ``str(label)``, corrupted
  ``random_counterfactual.prompt``, wrong answer ``str(random_counterfactual.label)``.

MIB's metric for every one of these tasks is the logit difference of the two answers (``logit_diff``).

Checks. Every row's columns are checked when the task is built (a missing column, a value of the wrong type, an
``answerKey`` outside ``choices``: one error naming ``file:row`` and the column). Once bound to a tokenizer, each
row must pass MIB's own filter (IOI: the names `` IO``, `` S`` and `` random_c`` the same number of tokens; MCQA /
ARC: the answer and the counterfactual's answer the same number of tokens; arithmetic: both one token, the
counterfactual present) and every pair check of ``tasks.circuits.pairs`` (equal prompt lengths, each answer one
token after the prompt, two different answers). MIB silently drops rows that fail its filter; here the first such
row is refused by default, naming it, and ``unfit="drop"`` drops them (and the rows subnetlab cannot score: MIB
scores the *first* token of an answer of several) and says how many. Held-out rows: ``eval_split`` (default
``validation`` when the folder has one, the split MIB evaluates on), ``eval_file``, or ``eval_fraction`` of the
rows (``tasks.splits``), as every pairs file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from subnetlab.errors import SubnetlabError
from subnetlab.progress import stage_once
from subnetlab.tasks.circuits.pairs import CircuitPair, CircuitTask, pair_problem, token_ids
from subnetlab.tasks.splits import SplitManifest
from subnetlab.tasks.user_files import RowSource, held_out_rows, local_path, read_sources, rows_hash

Unfit = Literal["refuse", "drop"]


@dataclass(frozen=True)
class MibRow:
    """One row as MIB pairs it, with the texts MIB's filter compares (``same_count``: equal token counts;
    ``one_token``: each one token)."""

    pair: CircuitPair
    same_count: tuple[str, ...] = ()
    one_token: tuple[str, ...] = ()
    missing: str | None = None  # why MIB's filter drops the row whatever the tokenizer (no counterfactual)


def _fault(where: str, column: str, what: str) -> SubnetlabError:
    return SubnetlabError(f"{where}: column {column!r} {what}", setting="task")


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r:.60}"


def _text(value: Any, where: str, column: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fault(where, column, f"holds no text ({'it is empty' if isinstance(value, str) else _kind(value)})")
    return value


def _inside(column: str, key: str) -> str:
    return f"{column}.{key}" if column else key


def _field(record: Any, key: str, where: str, column: str) -> Any:
    """``record[key]`` of a struct column (a dict per row in ``datasets``); ``column`` "" is the row itself."""
    if not isinstance(record, dict):
        raise _fault(where, column, f"holds {_kind(record)}, not a record with {key!r}")
    if record.get(key) is None:
        raise _fault(where, _inside(column, key), "is missing")
    return record[key]


def _choice_answer(record: Any, where: str, column: str) -> str:
    """``choices.label[answerKey]`` of a row (or of its counterfactual record), as MIB reads it."""
    choices = _inside(column, "choices")
    labels = _field(_field(record, "choices", where, column), "label", where, choices)
    key = _field(record, "answerKey", where, column)
    if not isinstance(labels, list) or not labels or not all(isinstance(x, (str, int)) for x in labels):
        raise _fault(where, f"{choices}.label", f"holds {_kind(labels)}, not a list of choice labels")
    if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < len(labels):
        raise _fault(where, _inside(column, "answerKey"), f"holds {_kind(key)}, not an index into its "
                                                          f"{len(labels)} choices")
    return _text(str(labels[key]), where, f"{choices}.label")


def _number(value: Any, where: str, column: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip():
        raise _fault(where, column, f"holds {_kind(value)}, not a number")
    return str(value)


def _ioi(row: dict[str, Any], cf: str, where: str) -> MibRow:
    meta = row["metadata"]
    io, s, c = (_text(_field(meta, key, where, "metadata"), where, f"metadata.{key}")
                for key in ("indirect_object", "subject", "random_c"))
    corrupted = _text(_field(row[cf], "prompt", where, cf), where, f"{cf}.prompt")
    pair = CircuitPair(_text(row["prompt"], where, "prompt"), corrupted, f" {io}", f" {s}", where=where)
    return MibRow(pair, same_count=(f" {io}", f" {s}", f" {c}"))


def _choices(row: dict[str, Any], cf: str, where: str) -> MibRow:
    answer = _choice_answer(row, where, "")
    corrupted = _text(_field(row[cf], "prompt", where, cf), where, f"{cf}.prompt")
    wrong = _choice_answer(row[cf], where, cf)
    return MibRow(CircuitPair(_text(row["prompt"], where, "prompt"), corrupted, answer, wrong, where=where),
                  same_count=(answer, wrong))


def _arithmetic(row: dict[str, Any], cf: str, where: str) -> MibRow:
    clean, answer = _text(row["prompt"], where, "prompt"), _number(row["label"], where, "label")
    record = row[cf]
    if record is None or (isinstance(record, dict) and record.get("prompt") is None):
        return MibRow(CircuitPair(clean, clean, answer, answer, where=where), missing=f"column {cf!r} is empty")
    corrupted = _text(_field(record, "prompt", where, cf), where, f"{cf}.prompt")
    wrong = _number(_field(record, "label", where, cf), where, f"{cf}.label")
    return MibRow(CircuitPair(clean, corrupted, answer, wrong, where=where), one_token=(answer, wrong))


@dataclass(frozen=True)
class MibFormat:
    """One of MIB's datasets: its hub name, the columns a row needs, MIB's default counterfactual and reader."""

    dataset: str
    columns: tuple[str, ...]
    counterfactual: str
    read: Callable[[dict[str, Any], str, str], MibRow]
    operator: str | None = None  # arithmetic: the rows of this operator only (MIB's ``example_domain``)


_CHOICE_COLUMNS = ("prompt", "choices", "answerKey")
FORMATS = {
    "mib-ioi": MibFormat("mib-bench/ioi", ("prompt", "metadata"), "s2_io_flip_counterfactual", _ioi),
    "mib-mcqa": MibFormat("mib-bench/copycolors_mcqa (4_answer_choices)", _CHOICE_COLUMNS, "symbol_counterfactual",
                          _choices),
    "mib-arithmetic-addition": MibFormat("mib-bench/arithmetic_addition", ("prompt", "label", "operator"),
                                         "random_counterfactual", _arithmetic, operator="+"),
    "mib-arithmetic-subtraction": MibFormat("mib-bench/arithmetic_subtraction", ("prompt", "label", "operator"),
                                            "random_counterfactual", _arithmetic, operator="-"),
    "mib-arc-easy": MibFormat("mib-bench/arc_easy", _CHOICE_COLUMNS, "symbol_counterfactual", _choices),
    "mib-arc-challenge": MibFormat("mib-bench/arc_challenge", _CHOICE_COLUMNS, "symbol_counterfactual", _choices),
}


def _rows(source: RowSource, fmt: MibFormat, cf: str) -> tuple[list[MibRow], int]:
    """The rows of ``source`` as MIB pairs them, and how many were left out for another operator."""
    for column in (*fmt.columns, cf):
        if column not in source.data.column_names:
            counterfactuals = [c for c in source.data.column_names if c.endswith("_counterfactual")]
            known = f" (its counterfactual columns: {', '.join(counterfactuals) or 'none'})" if column == cf else ""
            raise SubnetlabError(f"{source.where}: no column {column!r}, which {fmt.dataset} rows have{known}; "
                                 f"columns: {', '.join(source.data.column_names)}",
                                 setting="task_options" if column == cf and known else "task")
    values = {column: source.column(column, "task", column) for column in (*fmt.columns, cf)}
    out, other = [], 0
    for i in range(len(source.data)):
        row = {column: values[column][i] for column in values}
        where = source.row(i)
        if fmt.operator is not None and _text(row["operator"], where, "operator").strip() != fmt.operator:
            other += 1
            continue
        out.append(fmt.read(row, cf, where))
    if not out:
        what = f" with operator {fmt.operator!r}" if fmt.operator is not None and other else ""
        raise SubnetlabError(f"{source.where}: no rows{what}", setting="task")
    return out, other


def _filter_problem(tokenizer: Any, row: MibRow) -> str | None:
    """Why MIB's own filter drops ``row`` for ``tokenizer`` (None: it keeps it)."""
    if row.missing is not None:
        return row.missing
    counts = [len(token_ids(tokenizer, text)) for text in row.same_count]
    if len(set(counts)) > 1:
        said = ", ".join(f"{t!r} {n}" for t, n in zip(row.same_count, counts))
        return f"the answers' token counts differ ({said}); MIB keeps a row only when they are equal"
    for text in row.one_token:
        n = len(token_ids(tokenizer, text))
        if n != 1:
            return f"answer {text!r} is {n} tokens; MIB keeps a row only when both answers are one token"
    return None


def _fitting(tokenizer: Any, rows: list[MibRow], unfit: Unfit, task: str, split: str) -> list[CircuitPair]:
    """The rows' pairs that pass MIB's filter and subnetlab's pair checks; a failing row is refused or dropped."""
    kept, dropped_mib, dropped_here = [], 0, 0
    for row in rows:
        mib = _filter_problem(tokenizer, row)
        ours = None if mib is not None else pair_problem(tokenizer, row.pair)
        if mib is None and not isinstance(ours, str):
            kept.append(row.pair)
            continue
        if unfit == "refuse":
            hint = "; task option unfit=drop drops such rows" + (" as MIB does" if mib is not None else "")
            raise SubnetlabError(f"{row.pair.where}: {mib or ours}{hint}", setting="task")
        dropped_mib += mib is not None
        dropped_here += mib is None
    if dropped_mib or dropped_here:
        stage_once(f"{task} {split} {rows[0].pair.where} dropped",
                   f"task {task}: split {split!r} keeps {len(kept)} of {len(rows)} rows: {dropped_mib} dropped by "
                   f"MIB's own filter, {dropped_here} more that are not one-token answers after the prompt or "
                   "prompts of equal length for this tokenizer")
    if not kept:
        raise SubnetlabError(f"task {task}: no row of split {split!r} fits this tokenizer (all {len(rows)} dropped)",
                             setting="task")
    return kept


def _default_eval_split(path: str, train_split: str) -> str | None:
    """``validation`` for a ``save_to_disk`` folder of splits that has one (MIB evaluates on it), else None."""
    index = Path(path).expanduser() / "dataset_dict.json"
    if not index.is_file():
        return None
    try:
        splits = json.loads(index.read_text(encoding="utf-8")).get("splits", [])
    except (ValueError, UnicodeDecodeError, AttributeError, RecursionError):
        return None  # the datasets reader says what is wrong with the folder
    return "validation" if "validation" in splits and train_split != "validation" else None


def make_mib_task(name: str, path: str | None = None, counterfactual: str | None = None, unfit: Unfit = "refuse",
                  train_split: str = "train", eval_split: str | None = None, eval_file: str | None = None,
                  eval_fraction: float = 0.1, test_fraction: float = 0.0, split_seed: int = 0) -> CircuitTask:
    """The MIB task ``name`` (a key of ``FORMATS``) from the local copy at ``path`` (module doc)."""
    fmt = FORMATS[name]
    if path is None:
        raise SubnetlabError(f"task {name} reads a local copy of {fmt.dataset}: give its folder or JSON lines file as "
                             "task option path", setting="task_options")
    if unfit not in ("refuse", "drop"):
        raise SubnetlabError(f"task {name}: unfit {unfit!r} is not 'refuse' or 'drop'", setting="task_options")
    if eval_file is not None and eval_split is not None:
        raise SubnetlabError(f"eval_split {eval_split!r} and eval_file {eval_file}: give one source of held-out rows",
                             setting="eval_split")
    cf = counterfactual or fmt.counterfactual
    split = eval_split if eval_split is not None or eval_file is not None else _default_eval_split(path, train_split)
    train_source, held_source, _ = read_sources(path, train_split, split)
    local = local_path(path)
    train, other = _rows(train_source, fmt, cf)
    held_source, held_key = held_out_rows(held_source, eval_file, local)
    held = _rows(held_source, fmt, cf)[0] if held_source is not None else None
    manifest = SplitManifest.carve(train_source.where, rows_hash(train_source, local), len(train),
                                   eval_fraction=eval_fraction, test_fraction=test_fraction, split_seed=split_seed,
                                   eval_source=held_key)
    rows = {"train": [train[i] for i in manifest.train],
            "eval": held if held is not None else [train[i] for i in manifest.eval]}
    if manifest.test:
        rows["test"] = [train[i] for i in manifest.test]
    if other:
        stage_once(f"{name} {train_source.where} operator",
                   f"task {name}: {other} rows of {train_source.where} have another operator than {fmt.operator!r} "
                   "(left out, as MIB does)")

    def source(tokenizer: Any) -> dict[str, list[CircuitPair]]:
        return {split_name: _fitting(tokenizer, split_rows, unfit, name, split_name)
                for split_name, split_rows in rows.items()}

    options: dict[str, Any] = {"path": local, "counterfactual": cf, "unfit": unfit, "train_split": train_split,
                               "eval_split": split, "eval_file": eval_file, **manifest.settings}
    return CircuitTask(name, source, tuple(rows), options=options)


def _factory(name: str) -> Callable[..., CircuitTask]:
    def make(path: str | None = None, counterfactual: str | None = None, unfit: Unfit = "refuse",
             train_split: str = "train", eval_split: str | None = None, eval_file: str | None = None,
             eval_fraction: float = 0.1, test_fraction: float = 0.0, split_seed: int = 0) -> CircuitTask:
        return make_mib_task(name, path, counterfactual, unfit, train_split, eval_split, eval_file, eval_fraction,
                             test_fraction, split_seed)

    make.__doc__ = f"``{name}``: MIB's {FORMATS[name].dataset} from a local copy (``tasks.circuits.mib``)."
    return make


MIB_TASKS: dict[str, Callable[..., CircuitTask]] = {name: _factory(name) for name in FORMATS}

__all__ = ["FORMATS", "MIB_TASKS", "MibFormat", "MibRow", "make_mib_task"]
