"""Atomic, pickle-free file I/O: JSON, YAML (safe_load) and safetensors.

Every write goes to a temporary name in the same directory and is renamed into
place, so an interrupted run never leaves a truncated file under its final name.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from subnetlab.errors import SubnetlabError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def write_json(path: str | os.PathLike, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n")


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one JSON line (a log, so appending is the right operation)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=_jsonable) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    p = Path(path)
    if not p.is_file():
        raise SubnetlabError(f"{p}: no such file")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SubnetlabError(f"{p}:{e.lineno}: malformed JSON ({e.msg})") from None


def read_yaml(path: str | os.PathLike) -> Any:
    p = Path(path)
    if not p.is_file():
        raise SubnetlabError(f"{p}: no such file")
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SubnetlabError(f"{p}{line}: malformed YAML") from None


def save_tensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def load_tensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    p = Path(path)
    if not p.is_file():
        raise SubnetlabError(f"{p}: no such file")
    try:
        return load_file(str(p))
    except (SafetensorError, OSError, ValueError) as e:
        raise SubnetlabError(f"{p}: not a readable safetensors file ({e})") from None
