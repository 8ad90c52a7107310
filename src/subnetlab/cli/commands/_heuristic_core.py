"""Option parsing shared by `subnetlab ablate`, `attention` and `effective-size`."""

from __future__ import annotations

from typing import Any, Optional

from subnetlab.errors import SubnetlabError


def task_from_flags(task: str, data: Optional[str], eval_data: list[str], task_option: list[str],
                    data_key: str = "eval", model: Optional[str] = None, **data_flags: Any) -> Any:
    """The task named by ``--task``, ``--data``, ``--eval-data``, ``--task-option`` and the data flags
    (``--text-column`` ...: ``_options.DATA_FLAGS``); your own data with the split of the run that fine-tuned
    ``model`` (its training rows are refused as evaluation rows: ``runs.splits``)."""
    from subnetlab.cli.commands._options import parse_task_options, with_data_options
    from subnetlab.runs.splits import held_out_task
    from subnetlab.tasks.spec import TaskSpec

    options = with_data_options(task, parse_task_options(task_option, data, data_key), **data_flags)
    return held_out_task(TaskSpec(task, options, tuple(eval_data)), model)


def parse_subcases(text: Optional[str]) -> Optional[list[str]]:
    """``--subcases a,b`` -> list; ``all`` -> None (every subcase); None -> the default."""
    if text is None or text.strip() == "all":
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise SubnetlabError(f"--subcases: empty list {text!r}")
    return names


def parse_non_listed(text: str) -> int | str | None:
    """``all``, ``none`` or a number of randomly drawn heads for the Avg. (non-HC) row."""
    if text == "all":
        return "all"
    if text == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        raise SubnetlabError(f"--non-listed: {text!r} is not all, none or a number") from None
    if value < 1:
        raise SubnetlabError(f"--non-listed: {value} must be at least 1")
    return value
