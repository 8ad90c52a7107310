"""What a run's config says about its task, and the one place a task is built from it.

Every job, study and command names its task the same way: a task name
(``nli-synthetic``, ``mnli``, ``arith:ab`` ...), the task's options
(``{"n_train": 2000}``, ``{"train": FILE}``) and extra evaluation splits read
from files, each written ``[SPLIT:]FORMAT=FILE`` (``hans=FILE`` scores the HANS
file as split ``hans``). ``TaskSpec`` holds the three, checks them once when it
is made, and ``build()`` returns the ``Task``. ``task_from_config(config)``
reads them from the keys ``task``, ``task_options`` and ``eval_data`` of a run's
``config.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from subnetlab.errors import SubnetlabError, check_distinct_names
from subnetlab.tasks.base import Task


def parse_eval_data(spec: str) -> tuple[str, str, str]:
    """``hans=FILE`` -> ("hans", "hans", FILE); ``mm:mnli=FILE`` -> ("mm", "mnli", FILE)."""
    from subnetlab.tasks.registry import FILE_FORMATS

    head, sep, path = str(spec).partition("=")
    if not sep or not path or not head:
        raise SubnetlabError(f"evaluation data {spec!r}: expected FORMAT=FILE or SPLIT:FORMAT=FILE", setting="eval_data")
    split, _, fmt = head.rpartition(":")
    split = split or fmt
    if fmt not in FILE_FORMATS:
        raise SubnetlabError(f"evaluation data {spec!r}: unknown format {fmt!r} (known: {', '.join(FILE_FORMATS)})",
                             setting="eval_data")
    return split, fmt, path


@dataclass(frozen=True)
class TaskSpec:
    """A task name, its options and its extra evaluation files; checked when made."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    eval_data: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SubnetlabError(f"task: expected a task name, got {self.name!r}", setting="task")
        if not isinstance(self.options, Mapping):
            raise SubnetlabError(f"task options: expected a mapping, got {type(self.options).__name__}",
                                 setting="task_options")
        object.__setattr__(self, "options", dict(self.options))
        if isinstance(self.eval_data, str):
            raise SubnetlabError(f"evaluation data {self.eval_data!r}: expected a list of entries", setting="eval_data")
        object.__setattr__(self, "eval_data", tuple(self.eval_data))
        for spec in self.eval_data:
            parse_eval_data(spec)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "TaskSpec":
        """The spec held by a run config's ``task``, ``task_options`` and ``eval_data`` keys."""
        if "task" not in config:
            raise SubnetlabError("config: no task", setting="task")
        return cls(config["task"], config.get("task_options") or {}, tuple(config.get("eval_data") or ()))

    def build(self) -> Task:
        """The task, with each evaluation file attached as its own split."""
        from subnetlab.tasks.registry import add_file_split, get_task

        task = get_task(self.name, **self.options)
        for spec in self.eval_data:
            split, fmt, path = parse_eval_data(spec)
            add_file_split(task, split, fmt, path)
        return task


def task_from_config(config: Mapping[str, Any]) -> Task:
    """The task a run config names (``task``, ``task_options``, ``eval_data``), built."""
    return TaskSpec.from_config(config).build()


def eval_splits(task: Task, requested: Sequence[str] | None) -> list[str]:
    """The evaluation splits to score (None: all of them); an unknown name fails naming the known ones."""
    names = list(task.eval_splits) if not requested else check_distinct_names("splits", list(requested))
    for name in names:
        if name == "train" or name not in task.eval_splits:
            known = ", ".join(task.eval_splits) or "none"
            raise SubnetlabError(f"task {task.name} has no evaluation split {name!r} (it has: {known})", setting="splits")
    if not names:
        raise SubnetlabError(f"task {task.name} has no evaluation splits")
    return names


__all__ = ["TaskSpec", "eval_splits", "parse_eval_data", "task_from_config"]
