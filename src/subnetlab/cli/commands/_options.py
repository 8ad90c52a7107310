"""Parsers for option values shared by several subcommands, and the flag each library setting is set by."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError

# library setting name -> the command parameter that sets it, where the two names differ
# (every other setting is set by the parameter of its own name: "batch_size" by --batch-size)
# (a tuple: the first parameter the command has)
SETTING_PARAMETERS: dict[str, str | tuple[str, ...]] = {
    "task_options": "task_option",  # the task's options, given one --task-option KEY=VALUE at a time
    "task_data": ("data", "task_option"),  # a file task's data: --data where the command has it
    "n_jobs": "jobs",  # run_jobs(n_jobs=...) is --jobs
    "eval_limit": "limit",  # circuit's evaluation pairs (a command with --eval-limit keeps its own)
    "definition": "mib",  # circuit-eval's definition "mib" is --mib
}

# --preset of the commands that prune with hard-concrete gates (methods/head_pruning/config.py's PRESETS)
PRUNE_PRESET_HELP = ("paper (Appendix B: 9,300 steps x 4 batches of 32 per run; hours per run for BERT-base on a "
                     "CPU), demo (the demo reproduction's: MiniLM on a 2-core CPU) or quick (your own small model "
                     "on a CPU: 600-640 steps of 16 rows per run at lr 0.3, under a minute per run for a 2-layer model).")


def parse_int_list(text: str, name: str = "--seeds") -> list[int]:
    """Parse ``0-11``, ``0,3,5`` or ``0-2,7`` into a sorted list of distinct ints (no more than the setting's
    bound, ``errors.COUNT_BOUNDS``, counted before a range is expanded)."""
    from subnetlab.errors import COUNT_BOUNDS, check_count

    setting = name.lstrip("-").replace("-", "_")
    bound = COUNT_BOUNDS.get(setting, (None, ""))[0]
    values: set[int] = set()
    count = 0  # values named, ranges counted by their length
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo < 0 or hi < lo:
                    raise ValueError
                count += hi - lo + 1
                if bound is None or count <= bound:
                    values.update(range(lo, hi + 1))
            else:
                value = int(part)
                if value < 0:
                    raise ValueError
                count += 1
                values.add(value)
        except ValueError:
            raise SubnetlabError(f"{name}: malformed value {text!r} (expected e.g. 0-11 or 0,3,5)") from None
    if bound is not None:
        check_count(setting, count, repr(text))
    if not values:
        raise SubnetlabError(f"{name}: empty list")
    if count != len(values):
        raise SubnetlabError(f"{name} {text!r}: a value given twice; give each once")
    return sorted(values)


def parse_sparsities(values: list[str]) -> list[float]:
    """``--sparsity`` values (each one or a comma-separated list) as sorted distinct fractions in (0, 1)."""
    out: list[float] = []
    for text in values:
        for part in str(text).split(","):
            part = part.strip()
            try:
                value = float(part)
            except ValueError:
                raise SubnetlabError(f"--sparsity: malformed value {part!r} (expected e.g. 0.5 or 0.5,0.7)") from None
            out.append(parse_fraction(value, "--sparsity"))
    if not out:
        raise SubnetlabError("--sparsity: give at least one target, e.g. --sparsity 0.5")
    repeated = sorted({v for v in out if out.count(v) > 1})
    if repeated:
        raise SubnetlabError(f"--sparsity {', '.join(f'{v:g}' for v in repeated)} given twice: each target once")
    return sorted(out)


def parse_key_values(pairs: list[str], option: str) -> dict[str, object]:
    """``KEY=VALUE`` pairs of ``option`` (``--set``, ``--task-option``) with values read as YAML; a value YAML
    cannot read is refused (``parse_task_options`` keeps it as text instead)."""
    import yaml

    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SubnetlabError(f"{option}: expected KEY=VALUE, got {pair!r}")
        try:
            out[key.replace("-", "_")] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise SubnetlabError(f"{option}: cannot read the value of {pair!r}") from None
    return out


def parse_task_options(pairs: list[str], data: str | None, data_key: str) -> dict[str, Any]:
    """``--task-option KEY=VALUE`` (values typed as YAML scalars) plus ``--data`` as ``data_key``."""
    import yaml

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SubnetlabError(f"--task-option: expected KEY=VALUE, got {pair!r}")
        try:
            options[key.strip().replace("-", "_")] = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            options[key.strip().replace("-", "_")] = value
    if data is not None:
        if not Path(data).exists() and not data.startswith("hub:"):
            raise SubnetlabError(f"{data}: no such file")
        options[data_key] = data
    return options

# Your own data (``--task file:PATH`` or ``hub:NAME[:CONFIG]``): one flag per option of the file task,
# shared by every command that takes a task (the same options as --task-option KEY=VALUE)
DATA_FLAGS = {
    "text_column": ("--text-column", "Your own data (file:/hub: tasks): the column of the text [text]."),
    "text_pair_column": ("--text-pair-column", "Your own data: the column of the second text of a pair."),
    "label_column": ("--label-column", "Your own data: the column of the labels, names or integers [label]."),
    "answer_column": ("--answer-column", "Your own data, for causal LMs: the column of the one-token answer "
                                         "that follows the text (next-token form; replaces --label-column)."),
    "corrupted_column": ("--corrupted-column", "Your own prompt pairs (circuit tasks): the column of the corrupted "
                                               "prompts; --text-column [clean] holds the clean ones."),
    "wrong_answer_column": ("--wrong-answer-column", "Your own prompt pairs: the column of the wrong answer [wrong]; "
                                                     "--answer-column [answer] holds the right one."),
    "eval_file": ("--eval-file", "Your own data: a file of held-out rows (default: 10% of the rows, the same "
                                 "for every command on the file; split_seed and test_fraction are task options)."),
    "eval_split": ("--eval-split", "Your own data: the split of held-out rows of a hub dataset or a save_to_disk "
                                   "folder with splits, e.g. validation."),
}


def data_option(setting: str) -> Any:
    """The typer option of ``DATA_FLAGS[setting]`` (default None: not given)."""
    import typer

    flag, text = DATA_FLAGS[setting]
    return typer.Option(None, flag, help=text)


DATA_PANEL = "Your own data"


def data_flag_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add every flag of ``DATA_FLAGS`` to a Typer command that takes ``data_flags: dict``.

    The command receives the flags given as ``data_flags`` (setting -> value, None when not given), ready
    for ``with_data_options(task, options, **data_flags)``. Applied under ``executor_options`` where a
    command has both.
    """
    from typing import Annotated, Optional

    import typer

    signature = inspect.signature(command, eval_str=True)
    if "data_flags" not in signature.parameters:
        raise TypeError(f"{command.__name__} must take a parameter 'data_flags: dict'")
    kept = [p for name, p in signature.parameters.items() if name != "data_flags"]
    added = [inspect.Parameter(setting, inspect.Parameter.KEYWORD_ONLY, default=None,
                               annotation=Annotated[Optional[str], typer.Option(flag, help=text, rich_help_panel=DATA_PANEL)])
             for setting, (flag, text) in DATA_FLAGS.items()]
    positional = [p for p in kept if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in kept if p.kind is inspect.Parameter.KEYWORD_ONLY]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        flags = {setting: kwargs.pop(setting, None) for setting in DATA_FLAGS}
        return command(*args, data_flags=flags, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=positional + added + keyword)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in positional + added + keyword
                               if p.annotation is not inspect.Parameter.empty}
    return wrapper


DEVICE_HELP = "auto (CUDA, else Apple mps, else the CPU), cpu, cuda[:N] or mps."
DTYPE_HELP = ("Precision of forward passes: float32, or bfloat16 / float16 autocast (float16 on CUDA or mps only; "
              "bfloat16 also on the CPU) [float32].")


DEVICE_MAP_HELP = ("Spread a model too large for one device with accelerate: auto, or a JSON file (or JSON text) "
                   "mapping module names to cpu, cuda:N, mps or disk, e.g. {\"model.layers.0\": 0, \"model.layers.1\": "
                   "\"disk\"}; needs pip install accelerate. Each layer's gates run on its layer's device.")


def device_map_option(scope: str = "") -> Any:
    """``--device-map`` (default None: the whole model on --device); ``scope`` names the methods that read it."""
    import typer

    return typer.Option(None, "--device-map", help=scope + DEVICE_MAP_HELP)


def max_memory_option(scope: str = "") -> Any:
    import typer

    return typer.Option(None, "--max-memory", help=scope + "With --device-map auto: what each device may hold, e.g. "
                        "0=20GiB,cpu=60GiB (the rest is offloaded to disk).")


def offload_folder_option(scope: str = "") -> Any:
    import typer

    return typer.Option(None, "--offload-folder", help=scope + "With --device-map: where weights offloaded to disk are "
                        "written when they are not .safetensors already (those are read in place).")


def dtype_option() -> Any:
    """The ``--dtype`` option (default None: float32)."""
    import typer

    return typer.Option(None, "--dtype", help=DTYPE_HELP)


def given_options() -> dict[str, str]:
    """Parameter name -> its long flag (an argument: its metavar), for each parameter of the running command that
    the user set (command line or environment), in the command's order. A parameter left at its default is not
    among them, whatever its value; outside a command, none is."""
    from typer._click.core import ParameterSource  # typer 0.2x vendors click: its context, not click's
    from typer._click.globals import get_current_context

    context = get_current_context(silent=True)
    if context is None:
        return {}
    given = {}
    for param in context.command.params:
        if param.name and context.get_parameter_source(param.name) in (ParameterSource.COMMANDLINE,
                                                                       ParameterSource.ENVIRONMENT):
            longs = [opt for opt in param.opts if opt.startswith("--")]
            given[param.name] = longs[0] if longs else (param.metavar or param.name.upper())
    return given


def check_max_length_option(model: str, max_length: int | None, parameter: str = "max_length") -> None:
    """A ``--max-length`` typed on the command line must fit the model's positions; checked before any work.

    Read from a local model's ``config.json`` (no weights loaded). Only a value the user
    gave is checked this way: a default longer than a small model's positions (128 on a
    16-position arithmetic GPT-2) is refused only when some input is that long.
    A hub id is checked once the command has loaded it.
    """
    if max_length is None or parameter not in given_options():
        return
    from subnetlab.methods.model_fit import check_max_length
    from subnetlab.models import resolve

    try:
        source = Path(resolve(model)).expanduser()
    except SubnetlabError:
        return  # the command names the missing alias's package
    if not (source / "config.json").is_file():
        return
    from subnetlab.models.loading import read_config  # an exported directory's config too

    try:
        config = read_config(str(source))
    except (OSError, ValueError, KeyError):
        return  # loading the model names the fault
    check_max_length(config, max_length, model)


def with_data_options(task: str, options: dict[str, Any], **given: Any) -> dict[str, Any]:
    """``options`` (from --task-option) with the data flags given added; a flag and a --task-option that
    disagree, or a data flag on a task that is not your own data, are refused."""
    out = dict(options)
    for key, value in given.items():
        if value is None:
            continue
        flag = DATA_FLAGS[key][0]
        if not task.startswith(("file:", "hub:")):
            raise SubnetlabError(f"{flag}: only for your own data (--task file:PATH or hub:NAME[:CONFIG]), "
                                 f"not task {task}")
        if key in out and out[key] != value:
            raise SubnetlabError(f"{flag} {value!r} and --task-option {key}={out[key]!r} disagree; give one")
        out[key] = value
    return out


def parse_fraction(value: float, name: str = "--sparsity") -> float:
    """A number strictly between 0 and 1."""
    if not 0.0 < value < 1.0:
        raise SubnetlabError(f"{name}: {value} is outside (0, 1)")
    return value


# commands whose --out is not a run directory of their own
OUT_IS_FILE_STEM = {"results", "view"}  # --out names a file: results STEM.csv / STEM.parquet, view the page
OUT_WITHOUT_LOCK = {
    "export": "the small model is written beside --out and renamed onto it when complete: one atomic step",
    **{name: "--out is a file (stem), not a directory" for name in OUT_IS_FILE_STEM},
}


def guard_out(name: str, callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` (a command taking ``out``) with its ``--out`` checked first and locked while it runs.

    Before the command does anything: ``--out`` must be creatable and writable (not a
    file, not under a file or a read-only directory). Then, for every command that writes
    a run directory, the directory's writer lock is held until the command ends, so a
    second process on the same ``--out`` ends at once naming the first one's pid.
    Applied to every registered command by ``subnetlab.cli``; commands need not call it.
    """
    if "out" not in inspect.signature(callback).parameters:
        return callback

    @functools.wraps(callback)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        from subnetlab.run_directory import check_writable, lock

        out = kwargs.get("out")
        if out is None:
            return callback(*args, **kwargs)
        if name in OUT_IS_FILE_STEM:  # the page's file itself; results checks its STEM.csv and STEM.parquet
            from subnetlab.run_directory import check_output_file

            if name == "view" and not Path(out).is_dir():
                check_output_file(out, "out")
            elif name != "results":
                check_writable(Path(out).expanduser().parent)
            return callback(*args, **kwargs)
        check_writable(out)
        if name in OUT_WITHOUT_LOCK or not writes_here():
            return callback(*args, **kwargs)
        with lock(out):
            return callback(*args, **kwargs)

    return guarded


def writes_here() -> bool:
    """False on the ranks above 0 of a launched run (torchrun): rank 0 alone holds ``--out``'s lock and writes."""
    from subnetlab.distributed import launched, launched_rank

    return not launched() or launched_rank() == 0


def setting_flags(command: Any) -> dict[str, str]:
    """Library setting name -> long flag (``"batch_size": "--batch-size"``), for a click command's options."""
    flags: dict[str, str] = {}
    for param in getattr(command, "params", []):
        longs = [opt for opt in param.opts if opt.startswith("--")]
        if param.param_type_name == "option" and longs and param.name:
            flags[param.name] = longs[0]
    for setting, parameters in SETTING_PARAMETERS.items():
        found = [p for p in ((parameters,) if isinstance(parameters, str) else parameters) if p in flags]
        if found:
            flags.setdefault(setting, flags[found[0]])
    return flags


def error_message(error: SubnetlabError, flags: Mapping[str, str]) -> str:
    """The message of a library error, naming the flag the user typed instead of the setting.

    A message that starts with its setting's name gets the flag in its place
    (``sparsity: 1.5 is outside (0, 1)`` -> ``--sparsity: 1.5 is outside (0, 1)``); any
    other gets the flag in front (``--out: runs/x is not empty ...``). A setting the
    command has no flag for (a ``--set KEY=VALUE`` key, a job's config) leaves the
    message as it is: it already names the setting as the user wrote it.
    """
    message = str(error)
    setting = getattr(error, "setting", None)
    flag = flags.get(setting) if setting else None
    if flag is None:
        return message
    if re.match(rf"{re.escape(setting)}(?![\w-])", message):
        return flag + message[len(setting):]
    return f"{flag}: {message}"
