"""The ``subnetlab`` command.

Subcommands live one per module in ``subnetlab.cli.commands``; each module has
``register(app)``. Bad input ends with one ``error: ...`` line on stderr and
exit status 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import sys

import typer
from typer._click import exceptions as click_errors  # typer 0.2x vendors click

from subnetlab.errors import SubnetlabError

app = typer.Typer(
    name="subnetlab",
    help="Find, analyse and transfer the subnetworks inside trained neural networks.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"subnetlab {version('subnetlab')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            print("subnetlab (not installed: no version recorded)")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                          help="Print subnetlab's version and exit."),
             strict: bool = typer.Option(False, "--strict", help=(
        "Refuse (exit 2) instead of warning when a result is degenerate, undecided, off target or unconverged "
        "(subnetlab.runs.health): subnetlab --strict prune ... (also accepted after the command). A degenerate "
        "input (a subnetwork keeping nothing or everything) is refused before any work; a result's health is known "
        "only once it is trained, so its run directory is written (for inspection) before the refusal."))) -> None:
    """Find, analyse and transfer the subnetworks inside trained neural networks."""
    from subnetlab.cli.commands._health import set_strict

    set_strict(strict)


def _register_commands() -> None:
    """Register every command module's commands; each one that takes ``--out`` gets the one shared
    ``--out`` check and run-directory lock (``_options.guard_out``) around its whole run."""
    from subnetlab.cli import commands
    from subnetlab.cli.commands._options import guard_out

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"subnetlab.cli.commands.{info.name}")
        module.register(app)
    from subnetlab.models.accepts import accepted_models

    for command in app.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        command.callback = guard_out(name, command.callback)
        command.epilog = command.epilog or accepted_models(name)  # the models it takes, from one table


_register_commands()


def fail(message: str) -> "typer.Exit":
    """Print the contract's one-line error and return the exit to raise."""
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(2)


def _quiet_libraries() -> None:
    """Library chatter (weight-loading bars, init notices) would drown our one line per stage.

    Set through the environment, read when transformers and huggingface_hub are first imported (by the
    command that needs them, so ``--help`` stays light) and inherited by the worker processes of a sweep.
    ``models.loading.quiet_transformers`` also quiets each model load for Python users.
    """
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:  # imported already (main() called in-process): the variables came too late
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


def _flags_of(argv: list[str] | None) -> dict[str, str]:
    """Setting name -> flag, for the options of the subcommand ``argv`` runs (none found: empty)."""
    from subnetlab.cli.commands._options import setting_flags

    args = sys.argv[1:] if argv is None else list(argv)
    name = next((a for a in args if not a.startswith("-")), None)
    try:
        command = getattr(typer.main.get_command(app), "commands", {}).get(name)
    except Exception:  # the message matters more than the flag: print it as the library wrote it
        return {}
    return {**setting_flags(command), "strict": "--strict"}  # the one global option


GLOBAL_FLAGS = ("--strict",)  # options of ``subnetlab`` itself, accepted after the command too


def _global_options_first(argv: list[str] | None) -> list[str]:
    """``subnetlab prune ... --strict`` reads as ``subnetlab --strict prune ...``: a sweep script may add the
    global flag wherever it builds its command line."""
    args = sys.argv[1:] if argv is None else list(argv)
    return [a for a in args if a in GLOBAL_FLAGS] + [a for a in args if a not in GLOBAL_FLAGS]


# Commands that run across the processes a launcher starts (``subnetlab.distributed``); the others refuse to.
DISTRIBUTED_COMMANDS = ("circuit",)


def _command_name(argv: list[str] | None) -> str | None:
    args = sys.argv[1:] if argv is None else list(argv)
    return next((a for a in args if not a.startswith("-")), None)


def _rank_prefix() -> str:
    """``rank 1 of 2: `` in front of an error of a launched run's rank above 0 (rank 0's lines are the run's)."""
    from subnetlab.distributed import launched, launched_rank, launched_size

    try:
        if launched() and launched_rank() > 0:
            return f"rank {launched_rank()} of {launched_size()}: "
    except SubnetlabError:  # a malformed WORLD_SIZE is the error being printed
        pass
    return ""


@contextlib.contextmanager
def _launched(argv: list[str] | None):
    """Under ``torchrun`` (``WORLD_SIZE`` above 1): refuse a command that runs in one process, keep the ranks
    above 0 quiet (rank 0 reports; errors are still printed) and leave the process group at the end (the
    command joins it when it first asks for its share, ``subnetlab.distributed.world``, after its checks)."""
    from subnetlab.distributed import launched, launched_rank, launched_size, leaving, timeout_minutes

    name = _command_name(argv)
    if not launched() or name is None or "--help" in (sys.argv[1:] if argv is None else argv):
        yield
        return
    if name not in DISTRIBUTED_COMMANDS:
        raise SubnetlabError(f"{name}: runs in one process; under torchrun (WORLD_SIZE={launched_size()}) only "
                             f"{', '.join(DISTRIBUTED_COMMANDS)} splits its work across the processes; start it "
                             "without torchrun")
    timeout_minutes()  # a malformed timeout is refused before the command runs
    from subnetlab.progress import quiet

    with leaving():
        if launched_rank() == 0:
            yield
            return
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull), quiet():
            yield


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, mapping every input error to ``error: ...`` + exit 2.

    A library error names the setting at fault (``SubnetlabError.setting``); the
    message printed names the flag of the running command that sets it.
    """
    from subnetlab.cli.commands._options import error_message

    _quiet_libraries()
    try:
        with _launched(argv):
            code = app(args=_global_options_first(argv), standalone_mode=False, prog_name="subnetlab")
    except SubnetlabError as e:
        message = error_message(e, _flags_of(argv))
        prefix = "" if message.startswith(_rank_prefix()) else _rank_prefix()  # a collective's error names it
        print(f"error: {prefix}{message}", file=sys.stderr)
        sys.exit(2)
    except click_errors.NoArgsIsHelpError as e:
        print(e.format_message() if hasattr(e, "format_message") else e, file=sys.stderr)
        sys.exit(2)
    except click_errors.ClickException as e:
        print(f"error: {e.format_message()}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("error: interrupted; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
