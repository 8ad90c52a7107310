"""Your own prompt pairs: a CSV / TSV / JSON lines file (or a hub dataset) as a circuit task.

One row per pair, four columns: the clean prompt (``text_column``), the
corrupted prompt (``corrupted_column``), the answer (``answer_column``) and the
wrong answer (``wrong_answer_column``). The file is read as ``file:PATH`` tasks
read theirs (``tasks.user_files``: the same formats; held-out rows from
``eval_file``, ``eval_split`` or the file's own ``SplitManifest`` — ``eval_fraction``
of the rows drawn with ``split_seed``, fixed by the file's content, never by a
command's seed); a ``corrupted_column`` makes it a circuit task.

Answers follow the clean prompt *as written*: `` Mary`` (with its space) after
``... gave a drink to``, ``33`` after ``the year 17``. In a CSV file a column of
numbers is read as numbers (``02`` becomes ``2``): write such answers in JSON
lines as strings. When the task is bound to the model's tokenizer, every row
is checked before any work (equal token lengths of the two prompts, one token
for each answer, two different answers); the first row that fails ends the run
naming its ``file:line``.
"""

from __future__ import annotations

from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.circuits.pairs import CircuitPair, CircuitTask
from subnetlab.tasks.splits import SplitManifest
from subnetlab.tasks.user_files import RowSource, held_out_rows, local_path, read_sources, rows_hash


def _column_texts(source: RowSource, column: str, setting: str, role: str, *, prompt: bool) -> list[str]:
    values = source.column(column, setting, role)
    assert values is not None
    out = []
    for i, value in enumerate(values):
        if isinstance(value, int) and not isinstance(value, bool) and not prompt:
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            what = "it is empty" if value is None or isinstance(value, str) else f"a {type(value).__name__}: {value!r}"
            raise SubnetlabError(f"{source.row(i)}: column {column!r} holds no {role} ({what})", setting="task")
        out.append(value.rstrip("\r\n") if prompt else value)
    return out


def _pairs(source: RowSource, columns: dict[str, str]) -> list[CircuitPair]:
    clean = _column_texts(source, columns["text_column"], "text_column", "clean prompt", prompt=True)
    corrupted = _column_texts(source, columns["corrupted_column"], "corrupted_column", "corrupted prompt", prompt=True)
    answer = _column_texts(source, columns["answer_column"], "answer_column", "answer", prompt=False)
    wrong = _column_texts(source, columns["wrong_answer_column"], "wrong_answer_column", "wrong answer", prompt=False)
    if not clean:
        raise SubnetlabError(f"{source.where}: no rows", setting="task")
    return [CircuitPair(c, x, a, w, where=source.row(i))
            for i, (c, x, a, w) in enumerate(zip(clean, corrupted, answer, wrong))]


def make_circuit_file_task(path: str, text_column: str = "clean", corrupted_column: str | None = None,
                           answer_column: str | None = "answer", wrong_answer_column: str | None = "wrong",
                           eval_file: str | None = None, eval_split: str | None = None, train_split: str = "train",
                           eval_fraction: float = 0.1, test_fraction: float = 0.0,
                           split_seed: int = 0) -> CircuitTask:
    """A circuit task from the rows of ``path`` (module doc); splits ``train`` and ``eval``."""
    if corrupted_column is None:
        raise SubnetlabError(f"{path}: prompt pairs need the column of the corrupted prompts (corrupted_column)",
                             setting="corrupted_column")
    for setting, value, role in (("answer_column", answer_column, "answers"),
                                 ("wrong_answer_column", wrong_answer_column, "wrong answers")):
        if value is None:
            raise SubnetlabError(f"{path}: prompt pairs need the column of the {role} ({setting})", setting=setting)
    if eval_file is not None and eval_split is not None:
        raise SubnetlabError(f"eval_split {eval_split!r} and eval_file {eval_file}: give one source of held-out rows",
                             setting="eval_split")
    columns = {"text_column": text_column, "corrupted_column": corrupted_column, "answer_column": answer_column,
               "wrong_answer_column": wrong_answer_column}
    train_source, held_source, name = read_sources(path, train_split, eval_split)
    for setting, column in columns.items():  # every column named is there, before any row is read
        train_source.column(column, setting, setting.replace("_column", "").replace("_", " "))
    local = local_path(path)
    held_source, held_key = held_out_rows(held_source, eval_file, local)
    pairs = _pairs(train_source, columns)
    manifest = SplitManifest.carve(train_source.where, rows_hash(train_source, local), len(pairs),
                                   eval_fraction=eval_fraction, test_fraction=test_fraction, split_seed=split_seed,
                                   eval_source=held_key)
    options: dict[str, Any] = {"path": local or path, **columns, "eval_file": eval_file, "eval_split": eval_split,
                               **manifest.settings}
    held = _pairs(held_source, columns) if held_source is not None else [pairs[i] for i in manifest.eval]
    splits = {"train": [pairs[i] for i in manifest.train], "eval": held}
    if manifest.test:
        splits["test"] = [pairs[i] for i in manifest.test]
    return CircuitTask(name, lambda tokenizer: splits, tuple(splits), options=options, manifest=manifest)
