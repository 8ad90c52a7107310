"""Atomic, pickle-free file I/O: JSON, YAML (safe_load) and safetensors.

Every write goes to a temporary name in the same directory, is flushed to disk
(``fsync``) and renamed into place, and the directory is synced after the
rename: an interrupted run, or a power loss, never leaves a truncated file
under its final name, and a failed write (a full disk, a read-only directory)
leaves the previous complete file as it was. Files get the permissions any
program would give them (``0666`` less the umask), so colleagues on a shared
machine can read the results.

Crash tests: with ``SUBNETLAB_TEST_KILL_AFTER_WRITE=PATTERN[#N]`` in the
environment, the process kills itself with SIGKILL right after its N-th
(default: first) completed write whose path matches the ``fnmatch`` PATTERN
(``*/checkpoint.json#2``). A test uses it to stop a command at a chosen
checkpoint, whatever the speed of the machine, and then checks that a rerun
resumes to the result an uninterrupted run gives.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from safetensors import (
    SafetensorError,  # the error type only: safetensors.torch (and torch) load when tensors are read or written
)

from subnetlab.errors import SubnetlabError

if TYPE_CHECKING:
    import torch


KILL_AFTER_WRITE = "SUBNETLAB_TEST_KILL_AFTER_WRITE"
_matching_writes = 0


def _kill_point(path: Path) -> None:
    """The crash-test hook (see the module doc): SIGKILL this process after the chosen write."""
    global _matching_writes
    spec = os.environ.get(KILL_AFTER_WRITE)
    if not spec:
        return
    pattern, _, count = spec.partition("#")
    if fnmatch(Path(os.path.abspath(path)).as_posix(), pattern):
        _matching_writes += 1
        if _matching_writes >= int(count or 1):
            os.kill(os.getpid(), signal.SIGKILL)


def current_umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux: /proc)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: the only portable read is a set and a reset
    os.umask(mask)
    return mask


def default_mode(directory: bool = False) -> int:
    """The mode ``open()`` / ``mkdir()`` would give a new file (``0666``) or directory (``0777``) under the umask."""
    return (0o777 if directory else 0o666) & ~current_umask()


WRITE_ERRORS = (OSError, SafetensorError)  # safetensors reports a failed write (a full disk) as its own type


def _errno(error: BaseException) -> int | None:
    """The ``errno`` of an ``OSError``, or the one a ``SafetensorError`` spells in its message (Rust's io::Error:
    ``IoError(Os { code: 28, ... })`` or ``... (os error 28)``)."""
    if isinstance(error, OSError):
        return error.errno
    found = re.search(r"code: (\d+)|os error (\d+)", str(error))
    return int(found.group(1) or found.group(2)) if found else None


def _write_failed(path: Path, error: OSError | SafetensorError) -> SubnetlabError:
    code = _errno(error)
    text = str(error).strip()
    reason = os.strerror(code) if code else text.splitlines()[0] if text else type(error).__name__
    hint = "; free some space and rerun" if code in (errno.ENOSPC, errno.EDQUOT) else ""
    return SubnetlabError(f"{path}: cannot write ({reason}){hint}; the previous file, if any, is unchanged")


write_failed = _write_failed  # for writers outside this module: ``raise write_failed(path, error) from None``


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename or a new entry in ``directory`` durable (a no-op where directories cannot be synced)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename itself is still atomic
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success sync it, rename it onto ``path`` and sync the directory.

    A write that fails (``OSError``: no space, no permission) raises ``SubnetlabError``
    naming ``path``; the temporary file is removed and ``path`` keeps its previous content.
    """
    final = Path(path)
    tmp_path: Path | None = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        tmp_path = Path(tmp)
        os.close(fd)
        yield tmp_path
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            os.fchmod(fd, default_mode())  # again: some writers (safetensors) replace the file with a 0600 one
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_path, final)
        tmp_path = None
        fsync_directory(final.parent)
    except WRITE_ERRORS as e:
        raise _write_failed(final, e) from None
    finally:
        if tmp_path is not None and tmp_path.exists():
            tmp_path.unlink()
    _kill_point(final)


def seal_directory(directory: str | os.PathLike) -> None:
    """Files written into ``directory`` by other libraries (``save_pretrained``): umask modes, synced to disk.

    Call it on a temporary directory before renaming it into place, as ``atomic_path`` does for one file.
    """
    root = Path(directory)
    try:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fchmod(fd, default_mode())
                    os.fsync(fd)
                finally:
                    os.close(fd)
            elif path.is_dir():
                fsync_directory(path)
    except WRITE_ERRORS as e:
        raise _write_failed(root, e) from None
    fsync_directory(root)


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path`` for another library to fill (``save_pretrained``); on success
    seal it (``seal_directory``) and put it in ``path``'s place, replacing a previous directory there.

    A write that fails (``OSError``: no space, no permission) raises ``SubnetlabError``
    naming ``path``; the temporary directory is removed and a previous ``path`` is
    left as it was. (Between moving the previous directory aside and renaming the
    new one in, a kill leaves the previous one as ``.NAME.old-PID.tmp``.)
    """
    final = Path(path)
    tmp: Path | None = None
    old: Path | None = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
        os.chmod(tmp, default_mode(directory=True))  # mkdtemp makes 0700
        yield tmp
        seal_directory(tmp)
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}.tmp")
            os.replace(final, old)
        os.replace(tmp, final)
        tmp = None
        fsync_directory(final.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
            old = None
    except WRITE_ERRORS as e:
        raise _write_failed(final, e) from None
    finally:
        if old is not None and old.exists() and not final.exists():
            os.replace(old, final)  # the new one never arrived: the previous one goes back
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _jsonable(value: Any) -> Any:
    torch = sys.modules.get("torch")  # not imported yet: the value cannot be a tensor (and the CLI stays light)
    if torch is not None and isinstance(value, torch.Tensor):
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
    line = json.dumps(record, default=_jsonable) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except WRITE_ERRORS as e:
        raise _write_failed(Path(path), e) from None


def parse_json(text: str, where: str) -> Any:
    """``json.loads(text)``; malformed JSON, or JSON nested too deep for Python's parser (``[[[...]]]`` 200,000
    levels: a ``RecursionError``), is a ``SubnetlabError`` naming ``where`` (a file, or ``file:line``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SubnetlabError(f"{where}:{e.lineno}: malformed JSON ({e.msg})") from None
    except RecursionError:
        raise SubnetlabError(f"{where}: JSON nested too deep to read (lists or objects within each other "
                             "more levels than Python's parser reads)") from None


def check_input_file(path: str | os.PathLike, setting: str | None = None) -> Path:
    """``path`` is a regular file (or a symlink to one): a named pipe, a device or a socket would block a reader
    for ever or never end, so it is refused, as a missing file is, before it is opened."""
    p = Path(path)
    if not p.exists():
        raise SubnetlabError(f"{p}: no such file", setting=setting)
    if not p.is_file() and not p.is_dir():
        raise SubnetlabError(f"{p}: not a regular file (a named pipe, device or socket); give a file",
                             setting=setting)
    if not p.is_file():
        raise SubnetlabError(f"{p}: no such file (a directory)", setting=setting)
    return p


def read_json(path: str | os.PathLike) -> Any:
    p = check_input_file(path)
    try:
        return parse_json(p.read_text(encoding="utf-8"), str(p))
    except UnicodeDecodeError as e:
        raise SubnetlabError(f"{p}: not UTF-8 text (byte {e.start}), so not JSON") from None


def read_yaml(path: str | os.PathLike) -> Any:
    p = check_input_file(path)
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise SubnetlabError(f"{p}: not UTF-8 text (byte {e.start}), so not YAML") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SubnetlabError(f"{p}{line}: malformed YAML") from None


def save_file(tensors: dict[str, torch.Tensor], filename: str, metadata: dict[str, str] | None = None) -> None:
    """``safetensors.torch.save_file``, imported on first use (it imports torch)."""
    from safetensors.torch import save_file as save

    save(tensors, filename, metadata=metadata)


def load_file(filename: str) -> dict[str, torch.Tensor]:
    """``safetensors.torch.load_file``, imported on first use (it imports torch)."""
    from safetensors.torch import load_file as load

    return load(filename)


def save_tensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def load_tensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    p = check_input_file(path)
    try:
        return load_file(str(p))
    except (SafetensorError, OSError, ValueError) as e:
        raise SubnetlabError(f"{p}: not a readable safetensors file ({e})") from None


def load_tensor_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The string metadata of a ``.safetensors`` file (empty when it has none)."""
    from safetensors import safe_open

    check_input_file(path)
    try:
        with safe_open(str(path), "pt") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as e:
        raise SubnetlabError(f"{path}: not a readable safetensors file ({e})") from None
