"""Progress reporting: a Rich bar on a terminal, one line per stage otherwise.

Library code calls ``stage("pruning seed 0")`` and ``track(iterable, ...)``;
it never prints by itself when stderr is not a terminal except the stage line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Silence stage lines and bars (tests, nested jobs)."""
    global _quiet
    _quiet = quiet


def _interactive() -> bool:
    return sys.stderr.isatty()


def stage(message: str) -> None:
    """Announce one stage of a long job on stderr."""
    if not _quiet:
        print(f"[subnetlab] {message}", file=sys.stderr, flush=True)


def track(iterable: Iterable[T], total: int | None = None, description: str = "") -> Iterator[T]:
    """Iterate with a progress bar on a terminal; silently otherwise."""
    if _quiet or not _interactive():
        yield from iterable
        return
    from rich.progress import track as rich_track

    yield from rich_track(iterable, total=total, description=description, console=None, transient=True)
