"""Progress reporting: a Rich bar on a terminal, one line per stage otherwise.

Library code calls ``stage("pruning seed 0")`` and ``track(iterable, ...)``;
when stderr is not a terminal it prints nothing but stage lines: ``track``'s
own, off a terminal, are a first line ``LINE_SECONDS`` into a loop, then one
per tenth of it (or every ten ``LINE_SECONDS`` when a tenth takes longer),
with the steps done and the time left, so a ten-minute fine-tuning in a log
is never silent and a short evaluation loop adds no line. ``warning`` prints the one ``warning:`` line of a condition the
user should know before a long run spends its time (a library message, in
setting names).

A long run made of several studies (``subnetlab demo``) shows one ``Board``:
on a terminal a Rich display whose estimate of the time left is recomputed at
every refresh; otherwise a plain line whenever its stage changes. Its owner
hears every stage line through ``listen`` to know where the run is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

_quiet = False
_listeners: list[Callable[[str], None]] = []


def set_quiet(quiet: bool) -> None:
    """Silence stage lines and bars (tests, nested jobs)."""
    global _quiet
    _quiet = quiet


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence stage lines and bars while the block runs (timed or nested work), then restore the setting."""
    global _quiet
    before, _quiet = _quiet, True
    try:
        yield
    finally:
        _quiet = before


def _interactive() -> bool:
    return sys.stderr.isatty()


def stage(message: str) -> None:
    """Announce one stage of a long job on stderr (and to every listener)."""
    for listener in list(_listeners):
        listener(message)
    if not _quiet:
        print(f"[subnetlab] {message}", file=sys.stderr, flush=True)


SAID_VARIABLE = "SUBNETLAB_SAID"  # the notices a sweep's parent gave already, handed to its worker processes
_said: set[str] = set()


def _said_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def stage_once(key: str, message: str) -> None:
    """``stage(message)`` unless a notice under ``key`` was given already in this run.

    A sweep builds the same task in every job: its description is said once by the process that starts the
    sweep, not again by each worker (which inherit what was said through ``said()``).
    """
    hashed = _said_key(key)
    if hashed in _said or hashed in os.environ.get(SAID_VARIABLE, "").split():
        return
    _said.add(hashed)
    stage(message)


def said() -> str:
    """The notices ``stage_once`` gave in this process and its parents, as the value of ``SAID_VARIABLE``."""
    return " ".join(sorted(_said | set(os.environ.get(SAID_VARIABLE, "").split())))


@contextlib.contextmanager
def listen(callback: Callable[[str], None]) -> Iterator[None]:
    """Call ``callback(message)`` for every stage line in this process while the block runs."""
    _listeners.append(callback)
    try:
        yield
    finally:
        _listeners.remove(callback)


LINE_SECONDS = 30.0  # off a terminal, a loop's progress lines are at least this far apart


def warning(message: str) -> None:
    """One ``warning: MESSAGE`` line on stderr (printed even when stage lines are quiet)."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def track(iterable: Iterable[T], total: int | None = None, description: str = "",
          clock: Callable[[], float] = time.monotonic) -> Iterator[T]:
    """Iterate with a progress bar (and the time left) on a terminal; otherwise stage lines over a long loop.

    ``clock`` is the time source of the lines' spacing and estimate (tests pass their own).
    """
    if _quiet:
        yield from iterable
        return
    if not _interactive():
        yield from _lines(iterable, total, description, clock)
        return
    from rich.progress import track as rich_track

    yield from rich_track(iterable, total=total, description=description, console=None, transient=True)


def _lines(iterable: Iterable[T], total: int | None, description: str, clock: Callable[[], float]) -> Iterator[T]:
    """``iterable``, with a stage line (steps done, time left) ``LINE_SECONDS`` after it starts, then whenever a
    new tenth of ``total`` is done, or ten times ``LINE_SECONDS`` passed without one (a tenth of hours)."""
    start = last = clock()
    tenth, printed = 0, False
    for done, item in enumerate(iterable, 1):
        yield item
        if not total or done >= total:
            continue
        now = clock()
        if now - last < LINE_SECONDS or (printed and done * 10 // total <= tenth and now - last < 10 * LINE_SECONDS):
            continue
        tenth, last, printed = done * 10 // total, now, True
        left = (now - start) / done * (total - done)
        stage(f"{description or 'working'}: {done}/{total} ({100 * done // total}%), {duration(left)}")


@dataclass
class Status:
    """What a board shows: the stage running, the share of the work done, the seconds left (None: unknown)."""

    stage: str
    done: float
    seconds_left: float | None


def duration(seconds: float | None) -> str:
    """``'about 12 min left'``, ``'under a minute left'``, or ``'time left unknown'``."""
    if seconds is None:
        return "time left unknown"
    if seconds < 60:
        return "under a minute left"
    return f"about {round(seconds / 60):d} min left"


class Board:
    """One display for a whole multi-stage run, with the time left for all of it.

    ``status()`` is asked for the current ``Status`` at every refresh (on a terminal,
    a few times a second) and at every ``update()`` (otherwise: a plain stage line
    when the stage changed). ``interactive`` defaults to whether stderr is a terminal.
    """

    def __init__(self, title: str, status: Callable[[], Status], interactive: bool | None = None,
                 out: Any = None) -> None:
        self.title, self.status = title, status
        self.interactive = _interactive() if interactive is None else interactive
        self.out = out
        self._progress: Any = None
        self._task: Any = None
        self._last: str | None = None

    def __enter__(self) -> "Board":
        if _quiet:
            return self
        if self.interactive:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.text import Text

            board = self

            class _Left(ProgressColumn):
                def render(self, task: Any) -> Text:
                    return Text(duration(board.status().seconds_left), style="cyan")

            class _Stage(ProgressColumn):
                def render(self, task: Any) -> Text:
                    return Text(board.status().stage)

            self._progress = Progress(SpinnerColumn(), TextColumn(f"[bold]{self.title}"), BarColumn(),
                                      TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(), _Left(), _Stage(),
                                      console=Console(file=self.out or sys.stderr), refresh_per_second=2)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.title, total=1000)
        self.update()
        return self

    def update(self) -> None:
        """Refresh now (after a stage starts or ends)."""
        if _quiet:
            return
        s = self.status()
        if self._progress is not None:
            self._progress.update(self._task, completed=round(1000 * s.done))
            return
        if s.stage != self._last:
            self._last = s.stage
            print(f"[subnetlab] {self.title}: {s.stage} ({round(100 * s.done)}% done, {duration(s.seconds_left)})",
                  file=self.out or sys.stderr, flush=True)

    def print(self, text: str) -> None:
        """A line on stdout (on a terminal Rich shows it above the display)."""
        print(text, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=1000 if exc[0] is None else self._progress.tasks[0].completed)
            self._progress.__exit__(*exc)
            self._progress = None

