"""Typed job configs: the keys of a run's ``config.json``, checked once when the config is made.

A job function receives the plain dict the executor read from ``config.json``
(that is what crosses process and machine boundaries, and what a rerun compares
with the run directory's file). Its first line turns the dict into one of these
frozen dataclasses, which refuses unknown keys, missing keys and wrong values,
naming them, before any model is loaded; builders of sweeps make the same
dataclasses and write ``to_dict()``. Fields mirror the JSON keys one to one, so
``from_dict(c).to_dict() == c`` and a run directory written by an earlier
version of subnetlab is recognised (and resumed) by this one.

Nested settings (``prune``, ``cs``, ``train``, ``finetune``) stay as the JSON
mapping the user or preset gave, so a config that names three settings is not
rewritten with thirty; each job checks them by building its typed settings
object in ``__post_init__``.

A command that runs one job itself, without the executor (``evaluate``,
``circuit-eval``, ``circuit`` by attribution), writes ``record(...)``: its
``command``, the keys of ``to_dict()`` and what only the run learns (the
built task's options, where it ran).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeVar, get_type_hints

from subnetlab.errors import SubnetlabError, check_count, check_typed, check_whole_numbers
from subnetlab.run_directory import absolute_inputs

C = TypeVar("C", bound="JobConfig")


def optional(default: Any = None) -> Any:
    """A key that may be absent from ``config.json``; it is left out of ``to_dict()`` while it is None."""
    return field(default=default, metadata={"optional": True})


def unrecorded(default: Any) -> Any:
    """A setting ``record()`` leaves out of ``config.json``: the run records what it used another way."""
    return field(default=default, metadata={"recorded": False})


@dataclass(frozen=True)
class JobConfig:
    """Base class: ``from_dict`` checks the keys, the subclass's ``__post_init__`` the values."""

    what: ClassVar[str] = "job setting"  # how errors call one key
    command: ClassVar[str | None] = None  # the subcommand ``record()`` names; None: a job the executor runs

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        if not isinstance(data, Mapping):
            raise SubnetlabError(f"{cls.__name__}: expected a mapping, got {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise SubnetlabError(f"unknown {cls.what}(s) {', '.join(unknown)}; known: {', '.join(known)}")
        missing = [n for n, f in known.items()
                   if n not in data and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise SubnetlabError(f"missing {cls.what}(s) {', '.join(missing)}")
        hints = get_type_hints(cls)  # each value read as its field's type: threads="abc" fails naming threads
        return cls(**{k: check_typed(cls.what, k, v, hints.get(k, Any)) for k, v in data.items()})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("optional") and value is None:
                continue
            out[f.name] = _plain(value)
        return out

    def record(self, **facts: Any) -> dict[str, Any]:
        """``config.json`` of a run its command writes itself: ``command``, the keys of ``to_dict()`` (but
        ``unrecorded`` ones), then ``facts``, what only the run knows (a key of both is the fact, in the key's
        place: ``task=`` the built task's options), with local input files absolute (``absolute_inputs``)."""
        head = {} if self.command is None else {"command": self.command}
        kept = {f.name for f in fields(self) if f.metadata.get("recorded", True)}
        return absolute_inputs({**head, **{k: v for k, v in self.to_dict().items() if k in kept}, **facts})


def _plain(value: Any) -> Any:
    """JSON-ready copies: tuples become lists, mappings plain dicts."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def require_positive(owner: str, name: str, value: Any, allow_none: bool = False, counts: str | None = None) -> None:
    """``value`` must be an integer >= 1 (or None when allowed); ``counts`` says what it counts, where the name
    alone does not (``limit 0: the number of train pairs ... must be an integer of at least 1``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problem = f"{owner}: {name} {value!r}" if counts is None else f"{name} {value!r}: {counts}"
        raise SubnetlabError(f"{problem} must be an integer of at least 1", setting=name)


def check_seeds(seeds: Any, setting: str = "seeds") -> list[int]:
    """A sweep's seeds (one or a list): whole numbers of at least 0, each once, no more than the bound
    (``errors.COUNT_BOUNDS``); the one check of the command line's seeds and the Python API's."""
    return check_whole_numbers(setting, seeds, least=0)


def check_targets(targets: Any, setting: str = "sparsity") -> list[float]:
    """A sweep's target sparsities (one or a list): numbers strictly between 0 and 1, no more than the bound."""
    items = [targets] if isinstance(targets, (int, float)) and not isinstance(targets, bool) else targets
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)):
        raise SubnetlabError(f"{setting} {targets!r}: expected a number in (0, 1) or a list of them", setting=setting)
    if not items:
        raise SubnetlabError(f"{setting}: give at least one target", setting=setting)
    check_count(setting, len(items), listed=True)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item) \
                or not 0.0 < item < 1.0:
            raise SubnetlabError(f"{setting}: {item!r} is outside (0, 1)", setting=setting)
    return [float(t) for t in items]


def check_jobs(jobs: Any, setting: str = "jobs") -> int | None:
    """Worker processes of a sweep: None (in this process) or a whole number of at least 1, within the bound."""
    if jobs is None:
        return None
    require_positive("sweep", setting, jobs)
    check_count("jobs", jobs)
    return jobs


def _text(setting: str, value: Any, paths: bool = False, optional: bool = False) -> None:
    import os

    if value is None and optional:
        return
    kinds = (str, os.PathLike) if paths else (str,)
    if not isinstance(value, kinds) or not str(os.fspath(value) if paths else value).strip():
        what = "a path (text)" if paths else "text"
        raise SubnetlabError(f"{setting} {value!r}: expected {what}{' or None' if optional else ''}, not empty",
                             setting=setting)


def check_call(**arguments: Any) -> None:
    """The arguments every entry point shares, checked at the call with the command line's checks, before anything
    is read or written: ``model``, ``out`` (paths), ``task``, ``device`` (text), ``preset`` (text or None),
    ``task_options`` (a mapping or None), ``jobs`` (``check_jobs``), ``controls`` (names, each once), ``seeds``
    (``check_seeds``) and ``samples`` (a whole number of at least 1, or None). Each refusal names the argument."""
    from collections.abc import Mapping as AnyMapping

    from subnetlab.errors import check_distinct_names

    for name, value in arguments.items():
        if name in ("model", "out", "subnetwork", "scores", "init_from"):
            _text(name, value, paths=True, optional=name in ("subnetwork", "scores", "init_from"))
        elif name in ("task", "device"):
            _text(name, value)
        elif name in ("preset", "method", "split", "metric", "ablation", "warm_start"):
            _text(name, value, optional=True)
        elif name == "task_options":
            if value is not None and not isinstance(value, AnyMapping):
                raise SubnetlabError(f"task_options {value!r}: expected a mapping of option: value, or None",
                                     setting=name)
        elif name == "jobs":
            check_jobs(value)
        elif name == "controls":
            if isinstance(value, str):
                raise SubnetlabError(f"controls {value!r}: expected a list of control names", setting="control")
            check_distinct_names("control", list(value)) if value else None
        elif name == "seeds":
            if value is not None:
                check_seeds(value)
        elif name in ("samples", "limit", "batch_size"):
            require_positive("argument", name, value, allow_none=name != "batch_size")
            if name == "samples" and value is not None:
                check_count("samples", value)
        else:
            raise TypeError(f"check_call: no check for argument {name!r}")  # a caller's mistake, not a user's


__all__ = ["JobConfig", "check_call", "check_jobs", "check_seeds", "check_targets", "optional", "require_positive", "unrecorded"]
