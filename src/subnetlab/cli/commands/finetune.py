"""`subnetlab finetune`: fine-tune a model on a task with checkpoints and training curves."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.cli.commands._options import (
    check_max_length_option,
    data_flag_options,
    dtype_option,
    parse_task_options,
    with_data_options,
)


def finetune(
    task: str = typer.Option(..., "--task", help="Task name: nli-synthetic, mnli, qqp, hans-synthetic, arith:<op>, "
                             "file:PATH (your own CSV/TSV/JSON/Parquet/save_to_disk data), hub:NAME[:CONFIG], ..."),
    out: Path = typer.Option(..., "--out", help="Run directory; rerunning the same command resumes."),
    model: Optional[str] = typer.Option(None, "--model", help="minilm, a model directory, a hub id, or gpt2-arith:<layers> [minilm]."),
    data: Optional[str] = typer.Option(None, "--data", help="Training file for file-based tasks (mnli, qqp, ...)."),
    eval_data: list[str] = typer.Option([], "--eval-data", help="Extra evaluation split, FORMAT=FILE or SPLIT:FORMAT=FILE (repeatable), e.g. hans=hans.tsv."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable), e.g. n_train=5000."),
    data_flags: dict = None,
    preset: Optional[str] = typer.Option(None, "--preset", help="heuristic-core (bert-base-cased, lr 2e-5, batch 32, len 128, 5 epochs), subtask-induction, or quick (your own small model on a CPU: 500 steps of 16 rows)."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Peak learning rate [2e-5]."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Examples per step [32]."),
    epochs: Optional[float] = typer.Option(None, "--epochs", help="Passes over the training set [3]."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after this many steps (overrides --epochs)."),
    warmup_steps: Optional[int] = typer.Option(None, "--warmup-steps", help="Linear warmup steps [0]."),
    warmup_ratio: Optional[float] = typer.Option(None, "--warmup-ratio", help="Warmup as a fraction of the steps [0]."),
    weight_decay: Optional[float] = typer.Option(None, "--weight-decay", help="AdamW weight decay [0]."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="linear (decay to 0) or constant [linear]."),
    grad_clip: Optional[float] = typer.Option(None, "--grad-clip", help="Gradient norm clip [1.0]."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Tokens per example [128]."),
    save_every: Optional[int] = typer.Option(None, "--save-every", help="Checkpoint every N steps [500]."),
    eval_every: Optional[int] = typer.Option(None, "--eval-every", help="Evaluate every N steps [500]."),
    eval_limit: Optional[int] = typer.Option(None, "--eval-limit", help="Examples per evaluation split (default: all)."),
    eval_batch_size: Optional[int] = typer.Option(None, "--eval-batch-size", help="Evaluation batch size [64]."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the head, dropout and data order [0]."),
    device: str = typer.Option("auto", "--device", help="auto (CUDA, else Apple mps, else the CPU), cpu, cuda[:N] or mps."),
    dtype: Optional[str] = dtype_option(),
    new_weights: list[str] = typer.Option([], "--new-weights", help="Weights the model may lack and start freshly "
                                          "initialised (a name or pattern, repeatable), e.g. 'bert.pooler.*' for an "
                                          "encoder saved without its pooler; a new task head needs none. Any other "
                                          "weight missing from the checkpoint, or of another shape, is refused."),
) -> None:
    """Fine-tune MODEL on TASK: AdamW, checkpoints every --save-every steps, evaluation
    (in-domain and every out-of-domain subcase) every --eval-every steps into DIR/metrics.jsonl."""
    from subnetlab.methods.finetune.config import resolve_config
    from subnetlab.runs.finetune import finetune as run

    cfg = resolve_config(
        preset, model=model, task=task,
        task_options=with_data_options(task, parse_task_options(task_option, data, "train"), **data_flags),
        eval_data=list(eval_data), lr=lr, batch_size=batch_size, epochs=epochs, max_steps=max_steps,
        warmup_steps=warmup_steps, warmup_ratio=warmup_ratio, weight_decay=weight_decay, scheduler=scheduler,
        grad_clip=grad_clip, max_length=max_length, save_every=save_every, eval_every=eval_every,
        eval_limit=eval_limit, eval_batch_size=eval_batch_size, seed=seed, device=device, dtype=dtype,
        new_weights=list(new_weights) or None,
    )
    check_max_length_option(model, max_length)
    metrics = run(cfg, out)
    for split, score in metrics["final"].items():
        print(f"{split}: accuracy {score['accuracy']:.4f} (n={score['n']})")
    print(f"model: {out / 'model'}")


def register(app: typer.Typer) -> None:
    app.command("finetune")(data_flag_options(finetune))
