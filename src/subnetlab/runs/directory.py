"""The run-directory contract, in one place: ``config.json`` first, ``metrics.json`` last.

A run directory holds ``config.json`` (everything needed to rerun it, written
before any work), its artefacts, and ``metrics.json`` (written last and
atomically: its presence marks the run finished). A rerun of the same command
skips a finished run and resumes an unfinished one; a directory that holds a
*different* configuration is refused, naming the keys that differ, so one run
can never silently overwrite another. The executor applies this to every job;
studies and commands that are not executor jobs use the same functions.

One process writes a directory at a time: ``lock(out)`` holds an OS file lock on
``out/.subnetlab.lock`` (which also names the holder's pid) for as long as a
command runs; a second process is refused at once, naming that pid. The kernel
drops the lock of a killed process, so its leftover file is simply taken over.
``check_writable(out)`` refuses, before any work, an output directory that could
not be created or written (a file in its place, a read-only parent).
"""

from __future__ import annotations

import json
import os
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


def check_writable(out: str | Path) -> Path:
    """Refuse an output directory that is a file, lies under a file, or could not be created or written.

    Looks only: nothing is created. Run before any model is loaded or job started.
    """
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise SubnetlabError(f"{out} exists and is not a directory; choose a directory for the results", setting="out")
    existing = out
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise SubnetlabError(f"{out} cannot be created: {existing} is a file", setting="out")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == out else f"cannot be created: {existing} is not writable"
        raise SubnetlabError(f"{out} {what} (read-only or another user's); choose another directory", setting="out")
    return out


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
    """Delete the temporary files an atomic write left behind when its process was killed; returns how many.

    ``subnetlab.io`` writes ``.NAME.XXXX.tmp`` beside ``NAME`` and renames it into place;
    a process killed between the two leaves the temporary (never a truncated ``NAME``).
    Only the run's own writer calls this, at the start, so no live write is touched.
    """
    removed = 0
    root = Path(out)
    if root.is_dir():
        for path in root.rglob(".*.tmp"):
            if path.is_file():
                path.unlink(missing_ok=True)
                removed += 1
    return removed


def is_finished(out: str | Path) -> bool:
    """True iff ``out/metrics.json`` exists (it is written last, atomically)."""
    return (Path(out) / METRICS_FILE).is_file()


def differing_keys(existing: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The top-level keys whose values differ (a key missing on one side differs)."""
    return sorted(k for k in set(existing) | set(config) if existing.get(k) != config.get(k))


def check_config(out: str | Path, config: Mapping[str, Any], what: str = "config") -> bool:
    """Refuse ``out`` if its ``config.json`` holds another ``config``; True if it holds this one."""
    path = Path(out) / CONFIG_FILE
    if not path.is_file():
        return False
    existing = read_json(path)
    wanted = plain(config)
    if existing != wanted:
        keys = differing_keys(existing, wanted) if isinstance(existing, dict) else []
        raise SubnetlabError(f"{path}: holds a different {what} (differs in {', '.join(keys[:5]) or 'structure'}); "
                             "choose another output directory or delete that run directory", setting="out")
    return True


def finished_metrics(out: str | Path, config: Mapping[str, Any], *, redo_other: bool = False) -> dict[str, Any] | None:
    """The metrics of a finished run of this same ``config`` in ``out``, else None.

    A directory holding another config is refused, or with ``redo_other`` treated
    as unfinished (the steps of a study, which rerun when the study's settings change).
    """
    path = Path(out) / CONFIG_FILE
    if redo_other and path.is_file() and read_json(path) != plain(config):
        return None
    if check_config(out, config) and is_finished(out):
        return read_json(Path(out) / METRICS_FILE)
    return None


def claim(out: str | Path, config: Mapping[str, Any], what: str = "config") -> Path:
    """Make ``out`` this run's directory: refuse another config, then write ``config.json``."""
    out = Path(out)
    check_config(out, config, what)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / CONFIG_FILE, plain(config))
    return out


__all__ = ["CONFIG_FILE", "LOCK_FILE", "METRICS_FILE", "check_config", "check_writable", "claim", "differing_keys",
           "finished_metrics", "is_finished", "lock", "plain", "run_entries"]
