"""The command line's side of ``subnetlab.runs.health``: one ``warning:`` line per problem, or, under the
global ``--strict`` (``subnetlab --strict COMMAND ...``), one refusal (``error:`` line, exit 2).

A command collects ``(what, health)`` pairs from its runs' metrics once their results are written and
hands them to ``report_health``; the judging itself stays in ``runs.health``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from subnetlab.runs import health
from subnetlab.runs.health import Health

_state = {"strict": False}


def set_strict(on: bool) -> None:
    """Set by the ``subnetlab`` callback on every invocation (so in-process calls never inherit it)."""
    _state["strict"] = bool(on)


def strict() -> bool:
    return _state["strict"]


def _print(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)


def report_health(entries: Iterable[tuple[str, Health | None]]) -> int:
    """Print ``warning: WHAT: PROBLEM`` for every problem (none for runs without a health entry); return how
    many. Under ``--strict`` print nothing and refuse with the first problem (``runs.health.report_health``)."""
    return len(health.report_health(entries, strict=strict(), emit=_print))


def refuse_if_strict(message: str) -> None:
    """A problem that is not one subnetwork's (a sweep with no healthy run): a warning, or the refusal."""
    health.refuse_or_warn(message, strict=strict(), emit=_print)
