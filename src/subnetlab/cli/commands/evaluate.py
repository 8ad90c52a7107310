"""`subnetlab evaluate`: accuracy per split and per out-of-domain subcase, optionally of a subnetwork."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from subnetlab.cli.commands._options import (
    DEVICE_HELP,
    check_max_length_option,
    data_flag_options,
    dtype_option,
    with_data_options,
)


def _table(split: str, score: dict[str, Any]) -> Any:
    from rich.table import Table

    from subnetlab.tasks import HANS_SUBCASES

    table = Table(title=f"{split}: accuracy {score['accuracy']:.3f} (n={score['n']})")
    if "subcases" not in score:
        table.add_column("label")
        table.add_column("accuracy", justify="right")
        for name, acc in score.get("labels", {}).items():
            table.add_row(name, f"{acc:.3f}")
        return table
    for col in ("heuristic", "label", "subcase"):
        table.add_column(col)
    table.add_column("accuracy", justify="right")
    for name, acc in score["subcases"].items():
        heuristic, label, _ = HANS_SUBCASES.get(name, ("", None, None))
        label_name = "" if label is None else ("entailment" if label == 0 else "non-entailment")
        table.add_row(heuristic, label_name, name, f"{acc:.3f}")
    return table


def evaluate(
    model: str = typer.Option(..., "--model", help="Model directory (e.g. runs/ft/model), minilm or a hub id."),
    task: str = typer.Option(..., "--task", help="Task name: hans, mnli, paws-qqp, qqp, nli-synthetic, arith:<op>, "
                             "file:PATH (your own data), hub:NAME[:CONFIG], ..."),
    out: Path = typer.Option(..., "--out", help="Where metrics.json and config.json go."),
    data: Optional[str] = typer.Option(None, "--data", help="Evaluation file for file-based tasks (hans, mnli, ...)."),
    eval_data: list[str] = typer.Option([], "--eval-data", help="Extra evaluation split, FORMAT=FILE or SPLIT:FORMAT=FILE (repeatable)."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable), e.g. perturbed=all."),
    data_flags: dict = None,
    split: list[str] = typer.Option([], "--split", help="Evaluate only these splits (repeatable; default all)."),
    subnetwork: Optional[Path] = typer.Option(None, "--subnetwork", help="A subnetwork .safetensors file: evaluate the gated model."),
    ablation: Optional[str] = typer.Option(None, "--ablation", help="zero or mean (default: the subnetwork's own)."),
    means: Optional[Path] = typer.Option(None, "--means", help="Mean activations (.safetensors) for mean ablation."),
    means_examples: int = typer.Option(512, "--means-examples", help="Examples to average when computing means."),
    batch_size: int = typer.Option(64, "--batch-size", help="Examples per forward pass."),
    max_length: int = typer.Option(128, "--max-length", help="Tokens per example."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate the first N examples of each split."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    dtype: Optional[str] = dtype_option(),
) -> None:
    """Print a per-subcase accuracy table for each split and write it to DIR/metrics.json."""
    from rich.console import Console

    from subnetlab.cli.commands._options import parse_task_options
    from subnetlab.runs.evaluate import EvaluateJobConfig, evaluate_run
    from subnetlab.tasks.spec import TaskSpec

    job = EvaluateJobConfig(
        model=model, task=TaskSpec(task, with_data_options(task, parse_task_options(task_option, data, "eval"),
                                                           **data_flags),
                                   tuple(eval_data)),
        splits=tuple(split) or None, subnetwork=str(subnetwork) if subnetwork else None, ablation=ablation,
        means=str(means) if means else None, means_examples=means_examples, batch_size=batch_size,
        max_length=max_length, limit=limit, eval_data=tuple(eval_data), device=device, dtype=dtype or "float32")
    check_max_length_option(model, max_length)
    results = evaluate_run(job, out)
    console = Console()
    for name, score in results.items():
        console.print(_table(name, score))
    console.print(f"written: {out / 'metrics.json'}")


def register(app: typer.Typer) -> None:
    app.command("evaluate")(data_flag_options(evaluate))
