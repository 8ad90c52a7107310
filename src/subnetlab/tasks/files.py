"""Reading TSV and JSONL data files with errors that name ``file:line``.

The loaders in ``tasks.nli.files`` and ``tasks.nli.paraphrase_files`` build on these; they never
use ``csv`` quoting rules, because GLUE / HANS / PAWS files are plain
tab-separated text whose fields may contain quote characters.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError


def check_file(path: str | os.PathLike) -> Path:
    """The path as a Path, or a SubnetlabError if it is missing, a directory or empty."""
    p = Path(path)
    if not p.exists():
        raise SubnetlabError(f"{p}: no such file")
    if not p.is_file():
        raise SubnetlabError(f"{p}: not a file")
    if p.stat().st_size == 0:
        raise SubnetlabError(f"{p}: empty file")
    return p


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number from 1, text without newline)`` for every non-blank line."""
    p = check_file(path)
    try:
        with open(p, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if line.strip():
                    yield lineno, line
    except UnicodeDecodeError as e:
        raise SubnetlabError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def is_jsonl(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in (".jsonl", ".json", ".ndjson")


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[str, dict[str, Any]]]:
    """``("file:line", record)`` for every JSON object line."""
    for lineno, line in read_lines(path):
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise SubnetlabError(f"{where}: malformed JSON ({e.msg})") from None
        except RecursionError:
            raise SubnetlabError(f"{where}: JSON nested too deep to read") from None
        if not isinstance(record, dict):
            raise SubnetlabError(f"{where}: expected a JSON object, got {type(record).__name__}")
        yield where, record


class TsvTable:
    """A tab-separated file with a header row; rows addressed by column name."""

    def __init__(self, path: str | os.PathLike, required: Sequence[str]) -> None:
        self.path = Path(path)
        self._lines = read_lines(path)
        try:
            lineno, header = next(self._lines)
        except StopIteration:
            raise SubnetlabError(f"{path}: empty file") from None
        self.columns = [c.strip() for c in header.split("\t")]
        missing = [c for c in required if c not in self.columns]
        if missing:
            raise SubnetlabError(
                f"{path}:{lineno}: header lacks column(s) {', '.join(missing)} (found: {', '.join(self.columns)})"
            )
        self.index = {c: i for i, c in enumerate(self.columns)}

    def rows(self) -> Iterator[tuple[str, dict[str, str]]]:
        """``("file:line", {column: value})``; a row with too few fields is an error."""
        n = len(self.columns)
        for lineno, line in self._lines:
            fields = line.split("\t")
            where = f"{self.path}:{lineno}"
            if len(fields) < n:
                raise SubnetlabError(f"{where}: expected {n} tab-separated fields, got {len(fields)}")
            yield where, {c: fields[i] for c, i in self.index.items()}


def first_fields(path: str | os.PathLike) -> list[str]:
    """The first non-blank line's tab-separated fields (to sniff a header)."""
    for _, line in read_lines(path):
        return [f.strip() for f in line.split("\t")]
    raise SubnetlabError(f"{path}: empty file")


def label_index(value: Any, labels: Sequence[str], where: str, aliases: dict[str, str] | None = None) -> int:
    """Index of ``value`` in ``labels`` (names case-insensitively; ints as indices)."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        if 0 <= value < len(labels):
            return value
        raise SubnetlabError(f"{where}: unknown label {value!r} (allowed: 0-{len(labels) - 1} or {', '.join(labels)})")
    text = str(value).strip().lower()
    if aliases and text in aliases:
        text = aliases[text]
    lowered = [lab.lower() for lab in labels]
    if text in lowered:
        return lowered.index(text)
    raise SubnetlabError(f"{where}: unknown label {str(value)!r} (allowed: {', '.join(labels)})")


def require_text(value: Any, where: str, field: str) -> str:
    """A non-empty string field of a row."""
    if not isinstance(value, str) or not value.strip():
        raise SubnetlabError(f"{where}: field {field!r} is missing or empty")
    return value.strip()


def require_examples(examples: list, path: str | os.PathLike, what: str = "examples") -> list:
    if not examples:
        raise SubnetlabError(f"{path}: no {what} found")
    return examples
