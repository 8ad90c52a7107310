"""The executor's command-line options, added to any Typer command by one decorator.

Every multi-job command gets the same six options (``--backend``, ``--jobs``,
``--address``, ``--cpus-per-job``, ``--gpus-per-job``, ``--max-retries``) under
an "Execution" help panel, packed into one ``subnetlab.executor.ExecutorOptions`` value::

    from subnetlab.cli.commands._executor_options import executor_options
    from subnetlab.executor import ExecutorOptions, Job

    def register(app: typer.Typer) -> None:
        @app.command()
        @executor_options
        def prune(
            out: Path = typer.Option(..., "--out"),
            seeds: str = typer.Option("0-11", "--seeds"),
            executor: ExecutorOptions = None,   # filled in by the decorator
        ) -> None:
            jobs = [Job("subnetlab.runs.prune:prune_job", {"seed": s}, out / f"seed{s}")
                    for s in parse_int_list(seeds)]
            report = executor.run(jobs, sweep_dir=out)
            if not report.ok:
                raise typer.Exit(1)

``subnetlab prune --out runs/x --jobs 2`` then runs on two local processes and
``--backend ray --address auto --gpus-per-job 0.5`` on a Ray cluster.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from subnetlab.executor.options import ExecutorOptions

PANEL = "Execution"

_OPTIONS: dict[str, tuple[Any, Any]] = {
    "backend": (None, Annotated[str | None, typer.Option(
        "--backend",
        help="local (one job at a time), processes, or ray. Default: processes with --jobs > 1, else local.",
        rich_help_panel=PANEL)]),
    "jobs": (None, Annotated[int | None, typer.Option(
        "--jobs", "-j", help="Jobs at once on this machine (processes; sizes a local Ray instance).",
        rich_help_panel=PANEL)]),
    "address": (None, Annotated[str | None, typer.Option(
        "--address", help="Ray cluster to join: auto or HOST:PORT. Without it, ray starts a local instance.",
        rich_help_panel=PANEL)]),
    "cpus_per_job": (None, Annotated[int | None, typer.Option(
        "--cpus-per-job", help="CPU cores (torch threads) per job. Default: this machine's cores shared among the "
        "jobs that run at once (every core for one job).", rich_help_panel=PANEL)]),
    "gpus_per_job": (0.0, Annotated[float, typer.Option(
        "--gpus-per-job", help="GPUs per job; fractions share a GPU (0.5 = two jobs per GPU).",
        rich_help_panel=PANEL)]),
    "max_retries": (2, Annotated[int, typer.Option(
        "--max-retries", help="Retries of a job whose worker died (a job that raises is not retried).",
        rich_help_panel=PANEL)]),
}

OPTION_NAMES = ("--backend", "--jobs", "--address", "--cpus-per-job", "--gpus-per-job", "--max-retries")
PARAMETERS = tuple(_OPTIONS)  # the command parameters the decorator adds, one per flag of OPTION_NAMES


def executor_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the executor options to a Typer command that takes ``executor: ExecutorOptions``."""
    signature = inspect.signature(command, eval_str=True)
    if "executor" not in signature.parameters:
        raise TypeError(f"{command.__name__} must take a parameter 'executor: ExecutorOptions'")
    clash = set(_OPTIONS) & set(signature.parameters)
    if clash:
        raise TypeError(f"{command.__name__} already has parameter(s) {sorted(clash)}")
    kept = [p for name, p in signature.parameters.items() if name != "executor"]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, (default, annotation) in _OPTIONS.items()
    ]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from subnetlab.errors import check_count

        if isinstance(kwargs.get("jobs"), int) and kwargs["jobs"] > 0:  # ExecutorOptions refuses 0 and below
            check_count("jobs", kwargs["jobs"])  # within the bound of the API's check_jobs (errors.COUNT_BOUNDS)
        options = ExecutorOptions(**{name: kwargs.pop(name) for name in _OPTIONS if name in kwargs})
        return command(*args, executor=options, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=kept + added)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        p.name: p.annotation for p in kept + added if p.annotation is not inspect.Parameter.empty
    }
    if signature.return_annotation is not inspect.Signature.empty:
        wrapper.__annotations__["return"] = signature.return_annotation
    return wrapper


__all__ = ["OPTION_NAMES", "PANEL", "PARAMETERS", "executor_options"]
