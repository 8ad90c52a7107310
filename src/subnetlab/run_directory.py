"""The run-directory contract, in one place: ``config.json`` first, ``metrics.json`` last.

A run directory holds ``config.json`` (everything needed to rerun it, written
before any work), its artefacts, and ``metrics.json`` (written last and
atomically: its presence marks the run finished). A rerun of the same command
skips a finished run and resumes an unfinished one; a directory that holds a
*different* configuration is refused, naming the keys that differ, so one run
can never silently overwrite another. The executor applies this to every job;
studies and commands that are not executor jobs use the same functions. It sits below both layers
(it needs only ``errors`` and ``io``): the executor (which writes every job's directory) and the runs
layer (whose jobs the executor runs) import it, so no import points back up the floors.

One process writes a directory at a time: ``lock(out)`` holds an OS file lock on
``out/.subnetlab.lock`` (which also names the holder's pid) for as long as a
command runs; a second process is refused at once, naming that pid. The kernel
drops the lock of a killed process, so its leftover file is simply taken over.
``check_writable(out)`` refuses, before any work, an output directory that could
not be created or written (a file in its place, a read-only parent).

Run directories are portable: a path the command creates inside its output (the
mean-activation cache) is stored relative to the run directory
(``run_relative``; jobs read it back with ``resolve_run_path``), and input files
outside it (model directories, data files) are stored absolute
(``absolute_inputs``). Configurations are compared by meaning, not spelling
(``same_config``): the same command with its output directory spelled relative or absolute,
or a sweep directory copied elsewhere, is recognised as the same run.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json, write_json

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
LOCK_FILE = ".subnetlab.lock"


def run_entries(out: str | Path) -> list[Path]:
    """What ``out`` holds, less the lock file: an output directory is "empty" when this is."""
    out = Path(out)
    return [p for p in out.iterdir() if p.name != LOCK_FILE] if out.is_dir() else []


def check_writable(out: str | Path, setting: str = "out") -> Path:
    """Refuse an output directory that is a file, lies under a file, or could not be created or written.

    Looks only: nothing is created. Run before any model is loaded or job started.
    """
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise SubnetlabError(f"{out} exists and is not a directory; choose a directory for the results", setting=setting)
    _check_creatable(out, setting, "directory")
    return out


def _check_creatable(path: Path, setting: str, kind: str, folder: Path | None = None) -> None:
    """``path`` could be created and written: its ``folder`` (itself, for a directory) is a directory, or absent
    under a writable one."""
    folder = path if folder is None else folder
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise SubnetlabError(f"{path} cannot be created: {existing} is a file", setting=setting)
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == path else f"cannot be created: {existing} is not writable"
        raise SubnetlabError(f"{path} {what} (read-only or another user's); choose another {kind}", setting=setting)


def check_output_file(path: str | Path, setting: str) -> Path:
    """Refuse an output file that is a directory, lies under a file, or could not be created or replaced.

    Looks only: nothing is created. A command checks each of its side outputs this way before any work."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise SubnetlabError(f"{path} is a directory; name a file", setting=setting)
    if path.exists() and not path.is_file():
        raise SubnetlabError(f"{path} exists and is not a regular file; name a file", setting=setting)
    if path.exists() and not os.access(path, os.W_OK):
        raise SubnetlabError(f"{path} is not writable (read-only or another user's); choose another file",
                             setting=setting)
    _check_creatable(path, setting, "file", path.parent)
    return path


def check_distinct_outputs(outputs: Mapping[str, str | Path | None], out: str | Path | None = None,
                           run_files: tuple[str, ...] = ()) -> None:
    """No two of a command's outputs (setting -> path; None: not asked for) are the same file, and none is one of
    ``run_files``, the files the command writes itself in its output directory ``out``."""
    seen: dict[Path, str] = {}
    reserved = {} if out is None else {Path(out).expanduser().resolve() / name: name for name in run_files}
    for setting, path in outputs.items():
        if path is None:
            continue
        resolved = Path(path).expanduser().resolve()
        if resolved in seen:
            raise SubnetlabError(f"{path}: {setting} and {seen[resolved]} name the same path; give each its own",
                                 setting=setting)
        if resolved in reserved:
            raise SubnetlabError(f"{path}: the run writes its own {reserved[resolved]} there; choose another file",
                                 setting=setting)
        seen[resolved] = setting


def _lock_holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8").split()
    except OSError:
        return "unknown"
    return text[0] if text and text[0].isdigit() else "unknown"


@contextmanager
def lock(out: str | Path) -> Iterator[Path]:
    """Hold ``out``'s writer lock for the ``with`` block; refuse at once if another process holds it.

    Creates ``out`` (and its parents) if needed. On leaving, the lock file is removed
    while still held; directories this call created are removed again when the block
    left them empty, so a refused command leaves no trace.
    """
    from filelock import FileLock, Timeout

    out = Path(out).expanduser()
    created = []
    for parent in [out, *out.parents]:
        if parent.exists():
            break
        created.append(parent)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SubnetlabError(f"{out}: cannot create the directory ({os.strerror(e.errno) if e.errno else e})",
                             setting="out") from None
    path = out / LOCK_FILE

    def record_pid(fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    file_lock = FileLock(path, timeout=0, on_acquired=record_pid)
    try:
        for attempt in range(3):  # a holder that is just leaving (pid not yet written): try again briefly
            try:
                file_lock.acquire()
                break
            except Timeout:
                holder = _lock_holder(path)
                if holder != "unknown" or attempt == 2:
                    raise SubnetlabError(f"{out} is in use by another subnetlab process (pid {holder})") from None
                time.sleep(0.05)
    except BaseException:
        _remove_created(created)
        raise
    try:
        yield out
    finally:
        try:
            path.unlink()  # while held: a process waiting on this inode sees it unlinked and starts over
        except OSError:
            pass
        file_lock.release()
        _remove_created(created)


def _remove_created(created: list[Path]) -> None:
    """Remove the directories ``lock`` created, deepest first, as far as they are empty."""
    for directory in created:
        try:
            directory.rmdir()
        except OSError:
            return


def plain(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as ``config.json`` will hold it (tuples become lists, paths strings)."""
    return json.loads(json.dumps(dict(config), default=str))


def remove_temporaries(out: str | Path) -> int:
    """Delete the temporaries an atomic write left behind when its process was killed; returns how many.

    ``subnetlab.io`` writes ``.NAME.XXXX.tmp`` beside ``NAME`` (a file, or a directory
    another library filled) and renames it into place; a process killed between the
    two leaves the temporary (never a truncated ``NAME``). A directory being replaced
    is first moved aside as ``.NAME.old-PID.tmp``: if the kill came before the new one
    arrived, that previous directory is put back. Only the run's own writer calls
    this, at the start, so no live write is touched.
    """
    import re
    import shutil

    removed = 0
    root = Path(out)
    if root.is_dir():
        for path in sorted(root.rglob(".*.tmp"), key=lambda p: len(p.parts)):
            if not path.exists() and not path.is_symlink():  # inside a temporary directory removed already
                continue
            if path.is_dir() and not path.is_symlink():
                previous = re.fullmatch(r"\.(.+)\.old-\d+\.tmp", path.name)
                if previous and not (path.parent / previous.group(1)).exists():
                    os.replace(path, path.parent / previous.group(1))
                    continue
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed


def is_finished(out: str | Path) -> bool:
    """True iff ``out/metrics.json`` exists (it is written last, atomically)."""
    return (Path(out) / METRICS_FILE).is_file()


RUN_RELATIVE_KEYS = frozenset({"cache_dir"})  # created by the command inside its output: relative to the run dir
INPUT_PATH_KEYS = frozenset({"model", "subnetwork", "means", "ablation", "checkpoints", "data", "runs"})  # user files
NESTED_INPUT_KEYS = frozenset({"finetune"})  # settings of a nested command (lottery-retrain's fine-tuning recipe)


def run_relative(path: str | os.PathLike, run_dir: str | os.PathLike) -> str:
    """``path`` as ``config.json`` of ``run_dir`` stores it: relative to the run directory (``../../cache``)."""
    return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(run_dir))).as_posix()


def resolve_run_path(value: str | os.PathLike | None, run_dir: str | os.PathLike) -> str | None:
    """A stored run-relative path (``run_relative``) as a usable one; absolute paths and None pass unchanged."""
    if value is None:
        return None
    return str(value) if os.path.isabs(value) else os.path.normpath(os.path.join(os.path.abspath(run_dir), value))


def _absolute_if_local(value: str) -> str:
    return os.path.abspath(value) if value and os.path.exists(value) and not os.path.isabs(value) else value


def absolute_input(value: str | os.PathLike) -> str:
    """One input path as a job's config stores it: absolute when it names a local file or directory, else as given
    (an alias such as ``minilm`` or a hub id)."""
    return _absolute_if_local(os.fspath(value))


def _eval_entry_path(entry: str) -> tuple[str, str] | None:
    """``[SPLIT:]FORMAT=FILE`` as (prefix up to ``=``, FILE), or None without one."""
    head, sep, tail = entry.rpartition("=")
    return (head + sep, tail) if sep and tail else None


def absolute_inputs(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` whose local input files are absolute: ``model``, ``task`` ``file:PATH``, ``eval_data`` FILEs,
    the other ``INPUT_PATH_KEYS`` (a path or a list of paths), also inside ``NESTED_INPUT_KEYS`` (``finetune: {model: ...}``).

    Names that are not local paths (aliases, hub ids, builtin tasks) stay as given,
    so the stored config means the same thing from any working directory or copy.
    """
    out = dict(config)
    for key, value in out.items():
        if key in INPUT_PATH_KEYS and isinstance(value, str):
            out[key] = _absolute_if_local(value)
        elif key in INPUT_PATH_KEYS and isinstance(value, (list, tuple)):
            out[key] = [_absolute_if_local(v) if isinstance(v, str) else v for v in value]
        elif key in NESTED_INPUT_KEYS and isinstance(value, Mapping):
            out[key] = absolute_inputs(value)
    task = out.get("task")
    if isinstance(task, str) and task.startswith("file:"):
        out["task"] = "file:" + _absolute_if_local(task[len("file:"):])
    if isinstance(out.get("eval_data"), (list, tuple)):
        entries = []
        for entry in out["eval_data"]:
            parts = _eval_entry_path(entry) if isinstance(entry, str) else None
            entries.append(parts[0] + _absolute_if_local(parts[1]) if parts else entry)
        out["eval_data"] = entries
    return out


def _meanings(key: str | None, value: Any, run_dir: Path) -> set[str]:
    """What a stored path may mean: as written, from the run directory, from the working directory."""
    if key == "task" and isinstance(value, str) and value.startswith("file:"):
        return {"file:" + m for m in _meanings("data", value[len("file:"):], run_dir)}
    if not isinstance(value, str) or not value:
        return {repr(value)}
    if os.path.isabs(value):
        return {os.path.normpath(value)}
    # from the run directory (how paths are stored now) or the working directory (how older versions stored them)
    return {value, os.path.normpath(os.path.join(os.path.abspath(run_dir), value)), os.path.abspath(value)}


# where a run ran, not what it computes: left out of every comparison, so a run resumes on another machine
RUNTIME_KEYS = frozenset({"device", "device_map", "resolved_device", "resolved_dtype"})


def _same(key: str | None, a: Any, b: Any, run_dir: Path) -> bool:
    if a == b:
        return True
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return (set(a) - RUNTIME_KEYS == set(b) - RUNTIME_KEYS
                and all(_same(k, a[k], b[k], run_dir) for k in a if k not in RUNTIME_KEYS))
    if key == "eval_data" and isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            px = _eval_entry_path(x) if isinstance(x, str) else None
            py = _eval_entry_path(y) if isinstance(y, str) else None
            if x != y and not (px and py and px[0] == py[0] and _same("data", px[1], py[1], run_dir)):
                return False
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(key, x, y, run_dir) for x, y in zip(a, b))
    if isinstance(a, str) and isinstance(b, str) and (key in RUN_RELATIVE_KEYS or key in INPUT_PATH_KEYS
                                                      or (key == "task" and a.startswith("file:"))):
        return bool(_meanings(key, a, run_dir) & _meanings(key, b, run_dir))
    return False


def same_config(existing: Any, config: Any, run_dir: str | os.PathLike) -> bool:
    """True when two configs of ``run_dir`` mean the same run: equal, or equal up to how paths are spelled."""
    return _same(None, existing, config, Path(run_dir))


def differing_keys(existing: Mapping[str, Any], config: Mapping[str, Any], run_dir: str | os.PathLike = ".") -> list[str]:
    """The top-level keys whose values differ in meaning (a key missing on one side differs)."""
    return sorted(k for k in (set(existing) | set(config)) - RUNTIME_KEYS
                  if k not in existing or k not in config or not _same(k, existing[k], config[k], Path(run_dir)))


def check_config(out: str | Path, config: Mapping[str, Any], what: str = "config") -> bool:
    """Refuse ``out`` if its ``config.json`` holds another ``config``; True if it holds this one (in any spelling)."""
    path = Path(out) / CONFIG_FILE
    if not path.is_file():
        return False
    existing = read_json(path)
    wanted = plain(config)
    if not same_config(existing, wanted, out):
        keys = differing_keys(existing, wanted, out) if isinstance(existing, dict) else []
        raise SubnetlabError(f"{path}: holds a different {what} (differs in {', '.join(keys[:5]) or 'structure'}); "
                             "choose another output directory or delete that run directory", setting="out")
    return True


def finished_metrics(out: str | Path, config: Mapping[str, Any], *, redo_other: bool = False) -> dict[str, Any] | None:
    """The metrics of a finished run of this same ``config`` in ``out``, else None.

    A directory holding another config is refused, or with ``redo_other`` treated
    as unfinished (the steps of a study, which rerun when the study's settings change).
    """
    path = Path(out) / CONFIG_FILE
    if redo_other and path.is_file() and not same_config(read_json(path), plain(config), out):
        return None
    if check_config(out, config) and is_finished(out):
        return read_json(Path(out) / METRICS_FILE)
    return None


def record_runtime(out: str | Path, record: Mapping[str, Any]) -> None:
    """Add where the run ran (``runtime.runtime_record``: ``resolved_device``, ``resolved_dtype``) to its ``config.json``."""
    path = Path(out) / CONFIG_FILE
    write_json(path, {**(read_json(path) if path.is_file() else {}), **plain(record)})


def claim(out: str | Path, config: Mapping[str, Any], what: str = "config") -> Path:
    """Make ``out`` this run's directory: refuse another config, then write ``config.json``."""
    out = Path(out)
    check_config(out, config, what)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / CONFIG_FILE, plain(config))
    return out


def natural_order(path: Path) -> list[tuple[int, int | str]]:
    """A sort key that reads the numbers in a path as numbers: ``steps-5`` before ``steps-10``, ``seed-2`` before
    ``seed-10``."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", Path(path).as_posix()) if part]


__all__ = ["CONFIG_FILE", "LOCK_FILE", "METRICS_FILE", "absolute_input", "absolute_inputs", "check_config", "check_distinct_outputs", "check_output_file", "check_writable", "claim",
           "natural_order",
           "differing_keys", "finished_metrics", "is_finished", "lock", "plain", "resolve_run_path", "run_entries",
           "record_runtime", "run_relative", "same_config"]
