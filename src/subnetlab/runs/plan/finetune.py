"""The step of ``finetune``: ``methods.finetune.step.train_step`` (forward, the task's loss, backward, clipping,
AdamW and the learning-rate schedule) on every weight of the model, in training mode (dropout on), with the
optimiser and schedule the command builds from its ``FinetuneConfig``.

The task is a classification task on an encoder (MNLI's three labels by default) and a next-token task on a decoder
(an arithmetic subtask: the answer after the prompt); its loss is ``Task.loss``, the command's own.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from subnetlab.errors import SubnetlabError
from subnetlab.runs.plan.settings import PlanSettings

MNLI_TRAIN_ROWS = 392_702  # MNLI's training pairs (Williams et al. 2018), the task of the heuristic-core preset


def finetune_config(preset: str, settings: PlanSettings | None = None) -> Any:
    """The command's ``FinetuneConfig`` at ``preset``, with the plan's batch, length and dtype where given."""
    from subnetlab.methods.finetune.config import resolve_config

    if settings is None:
        return resolve_config(preset)
    return resolve_config(preset, batch_size=settings.batch, max_length=settings.length, dtype=settings.dtype)


def default_rows(preset: str) -> tuple[int | None, str]:
    """The training rows of the preset's task where they are known without its data: MNLI's for heuristic-core,
    an arithmetic task's default ``n_train`` for subtask-induction; else None."""
    if preset == "heuristic-core":
        return MNLI_TRAIN_ROWS, "MNLI's training set, the heuristic-core preset's task"
    if preset == "subtask-induction":
        from subnetlab.tasks.arithmetic import make_arithmetic_task

        rows = int(inspect.signature(make_arithmetic_task).parameters["n_train"].default)
        return rows, "an arithmetic task's default n_train, the subtask-induction preset's"
    return None, ""


def finetune_steps(settings: PlanSettings) -> tuple[int, str]:
    """``total_steps`` of the command: the preset's ``max_steps``, else its epochs over the training rows
    (``examples``, else ``default_rows``)."""
    from subnetlab.methods.finetune.config import total_steps

    cfg = finetune_config(settings.preset, settings)
    if cfg.max_steps is not None:
        return cfg.max_steps, f"the {settings.preset} preset's max_steps"
    rows, source = (settings.examples, "as given") if settings.examples else default_rows(settings.preset)
    if rows is None:
        raise SubnetlabError(f"finetune's steps are epochs over the training rows, and the {settings.preset} preset "
                             "names no task whose size is known without its data: give the rows with examples",
                             setting="examples")
    return total_steps(cfg, rows), f"{cfg.epochs:g} epochs of {rows:,} rows ({source})"


def plan_task(adapter: Any, labels: int) -> Any:
    """A task without examples whose ``loss`` and ``model_inputs`` are the command's: classification on an encoder,
    the next token on a decoder."""
    from subnetlab.tasks.base import Task

    if adapter.spec.kind == "decoder":
        return Task("plan", "lm", ["answer"], [], {})
    return Task("plan", "classification", [str(i) for i in range(labels)], [], {})


def finetune_step(model: Any, adapter: Any, settings: PlanSettings, live: Any = None) -> Callable[[int], None]:
    """The command's optimiser and schedule on ``model`` in training mode, and ``step(i)``: one ``train_step`` on a
    batch of ``settings.batch`` rows of ``settings.length`` tokens; ``step(-1)`` puts the model back in eval mode.

    Without padding (no attention mask): see ``fake.fake_data``."""
    import torch

    from subnetlab.methods.finetune.step import train_step, training_optimizer
    from subnetlab.optim import lr_scheduler
    from subnetlab.runtime import autocast

    cfg = finetune_config(settings.preset, settings)
    task = plan_task(adapter, settings.labels)
    optimizer = training_optimizer(model, cfg)
    scheduler = lr_scheduler(optimizer, total=1_000, warmup=0, decay=cfg.scheduler)
    n, length = settings.batch, settings.length
    batch: dict[str, Any] = {"input_ids": torch.zeros(n, length, dtype=torch.long)}
    if task.kind == "lm":
        batch.update(answer_index=torch.full((n,), length - 1, dtype=torch.long),
                     target_ids=torch.zeros(n, dtype=torch.long))
    else:
        batch["labels"] = torch.zeros(n, dtype=torch.long)
    dtype = getattr(torch, settings.dtype)
    model.train()

    def step(i: int) -> None:
        if i < 0:
            model.eval()
            return
        with autocast(next(model.parameters()).device, dtype):
            train_step(model, task, batch, optimizer, scheduler, cfg.grad_clip, i)

    return step


__all__ = ["MNLI_TRAIN_ROWS", "default_rows", "finetune_config", "finetune_step", "finetune_steps", "plan_task"]
