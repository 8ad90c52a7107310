"""Your own data as a task: ``file:PATH`` (CSV, TSV, JSON / JSONL, Parquet, a ``save_to_disk`` folder) or
``hub:NAME[:CONFIG]`` (a dataset on the Hugging Face hub).

Read with the ``datasets`` library (no hand-written parsers): one text column,
optionally a second one for sentence pairs, and either

* a label column holding names or integers (a classification task, for encoders
  or decoders with a classifier head). Label names are collected from the
  training rows (sorted, so the same file always gives the same label ids;
  integer labels keep their values; a hub ``ClassLabel`` column keeps its names);
* or an answer column (``answer_column``): the next-token form for causal
  language models. The prompt is the text (and the text pair after a space);
  the answer is one token of the model's tokenizer. The task is a language-model
  task whose labels are the distinct answers, as ``arith:*`` is.

Held-out data comes from ``eval_file``, or from ``eval_split`` (a split of a hub
dataset or of a ``save_to_disk`` folder holding several); without either,
``eval_fraction`` of the rows are held out as split ``eval``. ``test_fraction``
of the rows are held out as split ``test`` (discovery and transfer report it;
0: none). Which rows is decided once per data file by ``subnetlab.tasks.splits``
(its content hash and ``split_seed``), never by a command's seed, so every
command on the same data holds out the same rows; the task's options and its
``manifest`` say which. A source with splits trains on ``train_split`` (``train``). The result is an ordinary ``Task``, so every method
takes it. ``docs/your-own-model.md`` walks through the commands.

Errors name the file (or hub spec), the row (CSV / TSV: its line, the header being
line 1; JSON lines: the line; other sources: the row from 1) and the column.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.io import check_input_file
from subnetlab.progress import stage_once
from subnetlab.tasks.base import Example, Task
from subnetlab.tasks.splits import SplitManifest, content_hash

SUFFIX_BUILDERS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
HUB_PREFIX = "hub:"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def parse_hub_name(spec: str) -> tuple[str, str | None]:
    """``hub:nyu-mll/glue:mnli`` -> ``("nyu-mll/glue", "mnli")``; ``hub:imdb`` -> ``("imdb", None)``."""
    body = spec[len(HUB_PREFIX):] if spec.startswith(HUB_PREFIX) else spec
    name, _, config = body.partition(":")
    if not name or "@" in body:
        raise SubnetlabError(f"hub dataset {spec!r}: expected hub:NAME or hub:NAME:CONFIG (the split is a separate "
                             "setting: train_split, eval_split)", setting="task")
    return name, config or None


def _load_hub(spec: str) -> Any:
    """The ``DatasetDict`` of a hub dataset; offline or unknown names end in one line naming the spec."""
    import datasets

    name, config = parse_hub_name(spec)
    try:
        return datasets.load_dataset(name, config)
    except Exception as e:  # offline (ConnectionError, OfflineModeIsEnabled), unknown dataset or config
        raise SubnetlabError(f"{spec}: cannot load the hub dataset {name}{':' + config if config else ''} "
                             f"({type(e).__name__}: {_first_line(e)}); without network access, download it where "
                             "there is one, save_to_disk, and use file:FOLDER", setting="task") from None


def _read(path: Path) -> Any:
    """The rows of ``path`` as a ``datasets.Dataset`` (or ``DatasetDict``, a folder with splits); errors name the file."""
    import datasets

    datasets.disable_progress_bars()
    if not path.exists():
        raise SubnetlabError(f"{path}: no such data file", setting="task")
    if not path.is_dir():
        check_input_file(path, setting="task")  # a named pipe would block the reader for ever
    if path.is_file() and path.stat().st_size == 0:
        raise SubnetlabError(f"{path}: empty file (no header, no rows)", setting="task")
    builder = None
    try:
        if path.is_dir():
            if not any((path / name).is_file() for name in ("dataset_info.json", "dataset_dict.json", "state.json")):
                raise SubnetlabError(f"{path}: a directory, but not a dataset saved with save_to_disk (no "
                                     "dataset_dict.json or dataset_info.json); give a data file (.csv, .tsv, .json, "
                                     ".jsonl, .parquet) or such a folder", setting="task")
            return datasets.load_from_disk(str(path))
        builder = SUFFIX_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise SubnetlabError(f"{path}: unknown data format {path.suffix!r} (known: {', '.join(SUFFIX_BUILDERS)})",
                                 setting="task")
        if builder in ("csv", "json"):
            check_utf8(path)
        extra = {"delimiter": "\t"} if path.suffix.lower() == ".tsv" else {}
        with _quiet_datasets():
            return datasets.load_dataset(builder, data_files=str(path), split="train", **extra)
    except SubnetlabError:
        raise
    except Exception as e:  # datasets raises many types (ArrowInvalid, DatasetGenerationError, ...)
        if "corresponds to no data" in str(e):
            raise SubnetlabError(f"{path}: no rows (a header only?)", setting="task") from None
        fault = _csv_fault(path, "\t" if path.suffix.lower() == ".tsv" else ",") if builder == "csv" else None
        if fault is not None:
            raise SubnetlabError(f"{path}{fault}", setting="task") from None
        raise SubnetlabError(f"{path}: cannot read the data ({_first_line(e)})", setting="task") from None


MAX_LINE_BYTES = 1 << 20  # one row of a CSV / TSV / JSON-lines file; far past any prompt a model's positions take


def check_utf8(path: Path) -> None:
    """Refuse a text file that is not UTF-8, naming its line (the readers decode it lazily, mid-task, otherwise),
    and a row file (not ``.json``, whose one line may be a whole array) with a line over ``MAX_LINE_BYTES``: its
    text would be tokenised for minutes before any length check could see it."""
    rows = path.suffix.lower() != ".json"
    with path.open("rb") as f:
        lines = iter(lambda: f.readline(MAX_LINE_BYTES + 1), b"") if rows else f  # a row: read no further than the bound
        for number, line in enumerate(lines, 1):
            if rows and len(line) > MAX_LINE_BYTES:
                raise SubnetlabError(f"{path}:{number}: a line of more than {MAX_LINE_BYTES:,} bytes; one row of "
                                     "prompts or examples is far shorter (is this the right file?)", setting="task")
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise SubnetlabError(f"{path}:{number}: not UTF-8 text (byte 0x{line[e.start]:02x} at column "
                                     f"{e.start + 1}); save the file as UTF-8", setting="task") from None


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Silence ``datasets``' own log while it reads a user's file: a failure is reported once, by ``_read``.

    Its CSV reader logs pandas' ``Failed to read file ... ParserError`` before raising an
    error that has lost the row; the message subnetlab prints names the line instead.
    """
    import datasets

    level = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(logging.CRITICAL)
    try:
        yield
    finally:
        datasets.logging.set_verbosity(level)


def _csv_fault(path: Path, delimiter: str) -> str | None:
    """``":LINE: what is wrong"`` (to follow the path) for the first malformed row of a CSV / TSV file; None when
    Python's reader finds none.

    Read only after ``datasets`` refused the file, to say where: the line is the one where
    the faulty row starts (the header is line 1), so an unterminated quote names the line
    that opens it, not the end of the file where the reader gives up.
    """
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f, delimiter=delimiter, strict=True)
            while True:
                start = reader.line_num + 1
                try:
                    next(reader)
                except StopIteration:
                    return None
                except csv.Error as e:
                    cause = "unterminated quoted field" if "unexpected end of data" in str(e) else str(e)
                    return f":{start}: {cause}"
    except UnicodeDecodeError as e:
        return f": not UTF-8 text (byte {e.start}: {e.reason})"


class RowSource:
    """One table of rows: where it came from (for messages) and how its rows are numbered.

    Shared with ``tasks.circuits.files``, which reads prompt pairs from the same kinds of sources."""

    def __init__(self, data: Any, where: str, first_row: int) -> None:
        self.data, self.where, self.first_row = data, where, first_row

    def row(self, i: int) -> str:
        return f"{self.where}:{self.first_row + i}"

    def column(self, name: str | None, setting: str, role: str) -> list[Any] | None:
        if name is None:
            return None
        if name not in self.data.column_names:
            raise SubnetlabError(f"{self.where}: no {role} column {name!r} (columns: {', '.join(self.data.column_names)})",
                                 setting=setting)
        return list(self.data[name])


def _split_of(data: Any, split: str, where: str, setting: str) -> Any:
    if split not in data:
        raise SubnetlabError(f"{where}: no split {split!r} (splits: {', '.join(data)})", setting=setting)
    return data[split]


def read_sources(path: str, train_split: str, eval_split: str | None) -> tuple[RowSource, RowSource | None, str]:
    """The training rows, the held-out rows of ``eval_split`` (or None), and the name the task gets."""
    import datasets

    if path.startswith(HUB_PREFIX):
        data, where, name, first_row = _load_hub(path), path, path, 1
    else:
        local = Path(path).expanduser()
        data, where, name = _read(local), str(local), f"file:{local.name}"
        first_row = 2 if local.suffix.lower() in (".csv", ".tsv") else 1  # CSV / TSV: line 1 is the header
    if isinstance(data, datasets.DatasetDict):
        train = _split_of(data, train_split, where, "train_split")
        held = _split_of(data, eval_split, where, "eval_split") if eval_split is not None else None
        return (RowSource(train, f"{where}@{train_split}", first_row),
                RowSource(held, f"{where}@{eval_split}", first_row) if held is not None else None, name)
    if eval_split is not None:
        raise SubnetlabError(f"{where}: a single table has no split {eval_split!r}; give held-out rows as an "
                             "evaluation file instead", setting="eval_split")
    return RowSource(data, where, first_row), None, name


def _texts(source: RowSource, text: str, pair: str | None) -> list[tuple[str, str | None]]:
    texts = source.column(text, "text_column", "text")
    pairs = source.column(pair, "text_pair_column", "text pair")
    if not texts:
        raise SubnetlabError(f"{source.where}: no rows", setting="task")
    out = []
    for i, a in enumerate(texts):
        b = pairs[i] if pairs is not None else None
        for column, value in ((text, a), (pair, b)):
            if column is not None and (not isinstance(value, str) or not value.strip()):
                what = "it is empty" if value is None or isinstance(value, str) else f"a {type(value).__name__}: {value!r}"
                raise SubnetlabError(f"{source.row(i)}: column {column!r} holds no text ({what})", setting="task")
        out.append((a, b))
    return out


def _label_space(source: RowSource, label: str) -> tuple[list[str], dict[Any, int]]:
    """Label names and the id of each raw value, from the training rows (see the module doc)."""
    raw = source.column(label, "label_column", "label")
    feature = source.data.features.get(label)
    names = getattr(feature, "names", None)
    if names:  # a ClassLabel column: integers with names
        return list(names), {i: i for i in range(len(names))}
    first = next(((i, y) for i, y in enumerate(raw) if y is not None), None)
    if first is None:
        raise SubnetlabError(f"{source.where}: column {label!r} holds no labels", setting="task")
    kind = str if isinstance(first[1], str) else int if isinstance(first[1], int) and not isinstance(first[1], bool) else None
    if kind is None:
        raise SubnetlabError(f"{source.row(first[0])}: column {label!r} holds a {type(first[1]).__name__} "
                             f"({first[1]!r}); labels are names or integers", setting="task")
    for i, y in enumerate(raw):
        if y is not None and (not isinstance(y, kind) or isinstance(y, bool)):
            raise SubnetlabError(f"{source.row(i)}: column {label!r} mixes label types: {y!r} ({type(y).__name__}) "
                                 f"where row {source.row(first[0])} holds {first[1]!r} ({kind.__name__})",
                                 setting="task")
    values = [y for y in raw if y is not None]
    if kind is int:
        low = min(values)
        if low < 0:
            i = raw.index(low)
            raise SubnetlabError(f"{source.row(i)}: column {label!r} holds a negative label {low}", setting="task")
        labels = [str(i) for i in range(max(values) + 1)]
        ids: dict[Any, int] = {i: i for i in range(max(values) + 1)}
    else:
        labels = sorted(set(values))
        ids = {name: i for i, name in enumerate(labels)}
    if len(labels) < 2:
        raise SubnetlabError(f"{source.where}: column {label!r} has a single label {labels[0]!r}", setting="task")
    return labels, ids


def _labelled(source: RowSource, text: str, pair: str | None, label: str, ids: dict[Any, int]) -> list[Example]:
    texts = _texts(source, text, pair)
    raw = source.column(label, "label_column", "label")
    out = []
    for i, ((a, b), y) in enumerate(zip(texts, raw)):
        if y is None:
            raise SubnetlabError(f"{source.row(i)}: column {label!r} is empty", setting="task")
        if isinstance(y, bool) or y not in ids:
            known = ", ".join(str(k) for k in ids)
            raise SubnetlabError(f"{source.row(i)}: column {label!r} holds an unknown label {y!r} (labels: {known})",
                                 setting="task")
        out.append(Example(a, b, ids[y]))
    return out


def _answers(source: RowSource, answer: str) -> list[str]:
    raw = source.column(answer, "answer_column", "answer")
    out = []
    for i, y in enumerate(raw):
        if isinstance(y, bool) or not isinstance(y, (str, int)) or not str(y).strip():
            raise SubnetlabError(f"{source.row(i)}: column {answer!r} holds no answer ({y!r})", setting="task")
        out.append(str(y).strip())
    return out


def _prompts(source: RowSource, text: str, pair: str | None, answer: str,
             ids: dict[str, int] | None) -> tuple[list[Example], dict[str, int]]:
    """Language-model examples (prompt, answer id); ``ids`` None: the answers of these rows define them."""
    texts, answers = _texts(source, text, pair), _answers(source, answer)
    if ids is None:
        names = sorted(set(answers))
        if len(names) < 2:
            raise SubnetlabError(f"{source.where}: column {answer!r} has a single answer {names[0]!r}", setting="task")
        ids = {name: i for i, name in enumerate(names)}
    out = []
    for i, ((a, b), y) in enumerate(zip(texts, answers)):
        if y not in ids:
            raise SubnetlabError(f"{source.row(i)}: column {answer!r} holds an answer {y!r} the training rows never "
                                 f"give (answers: {', '.join(ids)})", setting="task")
        out.append(Example(a if b is None else f"{a} {b}", None, ids[y]))
    return out, ids


def local_path(path: str) -> str | None:
    """The data file or folder of ``path`` with ``~`` expanded; None for a hub dataset."""
    return None if path.startswith(HUB_PREFIX) else str(Path(path).expanduser())


def rows_hash(source: RowSource, local: str | None) -> str:
    """The content hash that keys the split: the local file's or folder's bytes, else the hub dataset's fingerprint."""
    if local is not None:
        return content_hash(local)
    return f"fingerprint:{getattr(source.data, '_fingerprint', None) or source.where}"


def held_out_rows(split_rows: RowSource | None, eval_file: str | None,
                  local: str | None) -> tuple[RowSource | None, dict[str, str] | None]:
    """The held-out rows (``eval_file``'s when given, else the ``eval_split`` rows, else None) and the key the
    split manifest records for them (``SplitManifest.carve``'s ``eval_source``)."""
    if eval_file is not None:
        held = Path(eval_file).expanduser()
        rows = RowSource(_read(held), str(held), 2 if held.suffix.lower() in (".csv", ".tsv") else 1)
        return rows, {"data": rows.where, "sha256": content_hash(rows.where)}
    if split_rows is not None:
        return split_rows, {"data": split_rows.where, "sha256": rows_hash(split_rows, local)}
    return None, None


def make_file_task(path: str, text_column: str = "text", text_pair_column: str | None = None,
                   label_column: str = "label", answer_column: str | None = None, eval_file: str | None = None,
                   eval_split: str | None = None, train_split: str = "train", eval_fraction: float = 0.1,
                   test_fraction: float = 0.1, split_seed: int = 0) -> Task:
    """A classification (or, with ``answer_column``, language-model) task from the user's own data (module doc)."""
    if eval_file is not None and eval_split is not None:
        raise SubnetlabError(f"eval_split {eval_split!r} and eval_file {eval_file}: give one source of held-out rows",
                             setting="eval_split")
    train_source, held_source, name = read_sources(path, train_split, eval_split)
    for column, setting, role in ((text_column, "text_column", "text"), (text_pair_column, "text_pair_column", "text pair"),
                                  (answer_column, "answer_column", "answer")
                                  if answer_column is not None else (label_column, "label_column", "label")):
        train_source.column(column, setting, role)  # every column named is there, before any row is read
    local = local_path(path)
    held_source, held_key = held_out_rows(held_source, eval_file, local)
    if answer_column is not None:
        kind = "lm"
        examples, answer_ids = _prompts(train_source, text_column, text_pair_column, answer_column, None)
        labels = list(answer_ids)
        held = _prompts(held_source, text_column, text_pair_column, answer_column, answer_ids)[0] if held_source else None
    else:
        kind = "classification"
        labels, label_ids = _label_space(train_source, label_column)
        examples = _labelled(train_source, text_column, text_pair_column, label_column, label_ids)
        held = _labelled(held_source, text_column, text_pair_column, label_column, label_ids) if held_source else None
    manifest = SplitManifest.carve(train_source.where, rows_hash(train_source, local), len(examples),
                                   eval_fraction=eval_fraction, test_fraction=test_fraction, split_seed=split_seed,
                                   eval_source=held_key)
    options: dict[str, Any] = {"path": local or path,
                               "text_column": text_column, "text_pair_column": text_pair_column,
                               "label_column": None if answer_column is not None else label_column,
                               "answer_column": answer_column, "eval_file": eval_file, "eval_split": eval_split,
                               **manifest.settings,
                               "held_out": {"sha256": manifest.sha256, "eval": len(held) if held is not None
                                            else len(manifest.eval), "test": len(manifest.test)}}
    splits = {"eval": held if held is not None else [examples[i] for i in manifest.eval]}
    if manifest.test:
        splits["test"] = [examples[i] for i in manifest.test]
    task = Task(name, kind, labels, [examples[i] for i in manifest.train], splits, options=options, manifest=manifest)
    _announce(task)
    return task




def _announce(task: Task) -> None:
    """Say once per run (a sweep builds the task in every job, each worker too) what the user's data became."""
    import json

    stage_once("task " + json.dumps(task.options, sort_keys=True, default=str), describe(task))


def describe(task: Task) -> str:
    """One line on a user-data task: its kind, labels (or answers) and which rows are held out, and how."""
    what = "answers" if task.kind == "lm" else "labels"
    shown = ", ".join(task.labels[:10]) + (", ..." if len(task.labels) > 10 else "")
    manifest = task.manifest
    settings = manifest.settings
    rows = manifest.rows
    if manifest.eval_source is None:
        held = f"{len(manifest.eval)} rows ({settings['eval_fraction']:.0%})"
    else:
        held = f"{len(task.eval_splits['eval'])} rows from {task.options.get('eval_file') or task.options.get('eval_split')}"
    tested = f"; test split 'test': {len(manifest.test)} rows ({settings['test_fraction']:.0%})" if manifest.test else ""
    return (f"task {task.name}: {task.kind}, {len(task.labels)} {what} ({shown}); {len(task.train)} training rows; "
            f"evaluation split 'eval': {held}{tested}; held out of the {rows} rows once per data file "
            f"(sha256 {manifest.sha256[:12]}, split_seed {settings['split_seed']}), the same for every command and seed")


__all__ = ["HUB_PREFIX", "RowSource", "describe", "held_out_rows", "local_path", "make_file_task", "parse_hub_name",
           "read_sources", "rows_hash"]
