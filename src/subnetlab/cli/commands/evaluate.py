"""`subnetlab evaluate`: accuracy per split and per out-of-domain subcase, optionally of a subnetwork."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from subnetlab.errors import SubnetlabError


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
    task: str = typer.Option(..., "--task", help="Task name: hans, mnli, paws-qqp, qqp, nli-synthetic, arith:<op>, ..."),
    out: Path = typer.Option(..., "--out", help="Where metrics.json and config.json go."),
    data: Optional[str] = typer.Option(None, "--data", help="Evaluation file for file-based tasks (hans, mnli, ...)."),
    eval_data: list[str] = typer.Option([], "--eval-data", help="Extra evaluation split, FORMAT=FILE or SPLIT:FORMAT=FILE (repeatable)."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable), e.g. perturbed=all."),
    split: list[str] = typer.Option([], "--split", help="Evaluate only these splits (repeatable; default all)."),
    subnetwork: Optional[Path] = typer.Option(None, "--subnetwork", help="A subnetwork .safetensors file: evaluate the gated model."),
    ablation: Optional[str] = typer.Option(None, "--ablation", help="zero or mean (default: the subnetwork's own)."),
    means: Optional[Path] = typer.Option(None, "--means", help="Mean activations (.safetensors) for mean ablation."),
    means_examples: int = typer.Option(512, "--means-examples", help="Examples to average when computing means."),
    batch_size: int = typer.Option(64, "--batch-size", help="Examples per forward pass."),
    max_length: int = typer.Option(128, "--max-length", help="Tokens per example."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate the first N examples of each split."),
) -> None:
    """Print a per-subcase accuracy table for each split and write it to DIR/metrics.json."""
    from rich.console import Console

    from subnetlab.io import write_json
    from subnetlab.methods.evaluate import evaluate as run_eval
    from subnetlab.methods.evaluate import subnetwork_context
    from subnetlab.cli.commands._heuristic_core import task_from_flags
    from subnetlab.methods.finetune.model import ARITH_PREFIX
    from subnetlab.models import load_model
    from subnetlab.progress import stage

    if model.startswith(ARITH_PREFIX):
        raise SubnetlabError(f"--model {model}: evaluate a trained model directory, not a fresh {ARITH_PREFIX} model")
    t = task_from_flags(task, data, eval_data, task_option)
    loaded = load_model(model, head="causal-lm" if t.kind == "lm" else "classification")
    archs = getattr(loaded.model.config, "architectures", None) or []
    if t.kind == "classification" and not any(a.endswith("ForSequenceClassification") for a in archs):
        raise SubnetlabError(f"--model {model} has no trained classification head ({', '.join(archs) or 'none'}); fine-tune it first")
    tokenizer = t.tokenizer or loaded.tokenizer
    splits = list(split) or None
    config = {"command": "evaluate", "model": model, "task": t.options, "eval_data": list(eval_data), "splits": splits,
              "subnetwork": str(subnetwork) if subnetwork else None, "ablation": ablation, "means": str(means) if means else None,
              "batch_size": batch_size, "max_length": max_length, "limit": limit}
    if subnetwork is None:
        results = run_eval(loaded.model, tokenizer, t, splits, batch_size, max_length, limit=limit)
    else:
        from subnetlab.intervene import ComponentValues
        from subnetlab.methods.evaluate import mean_values
        from subnetlab.subnetwork import Subnetwork

        sub = Subnetwork.load(subnetwork, loaded.adapter)
        values = None
        if sub.kind == "structured" and (ablation or sub.ablation) == "mean":
            if means is not None:
                values = ComponentValues.load(means)
            else:
                source = "train" if t.train else (splits or list(t.eval_splits))[0]
                count = min(means_examples, len(t.examples(source)))
                stage(f"mean activations over {count} examples of {source}")
                values = mean_values(loaded.model, loaded.adapter, t, tokenizer, source, count, batch_size, max_length)
                config["means_from"] = {"split": source, "examples": count}
        with subnetwork_context(loaded.model, loaded.adapter, sub, ablation=ablation, means=values):
            results = run_eval(loaded.model, tokenizer, t, splits, batch_size, max_length, limit=limit)
        config["subnetwork_sparsity"] = sub.sparsity
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", config)
    write_json(out / "metrics.json", results)
    console = Console()
    for name, score in results.items():
        console.print(_table(name, score))
    console.print(f"written: {out / 'metrics.json'}")


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)
