"""Evaluating a model on a task's splits: accuracy overall, per subcase, per heuristic.

Works for the full model and for any intervened model: wrap the call in the
intervention's context manager (``with apply_gates(...): evaluate(...)``).
Logit columns are matched to the task's label names through the model's
``config.id2label`` when those are real names, so a model trained with a
different label order (e.g. a hub MNLI checkpoint with contradiction first)
is still scored correctly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.progress import track
from subnetlab.runtime import model_device
from subnetlab.tasks.base import Task


def label_permutation(model: nn.Module, task: Task) -> list[int] | None:
    """Column order that puts the model's outputs in the task's label order (None: keep).

    Raises SubnetlabError when the model's head cannot be scored on the task.
    """
    if task.kind == "lm":
        return None
    config = getattr(model, "config", None)
    n = int(getattr(config, "num_labels", 0) or 0)
    if not n:
        return None
    expected = task.model_labels(n)  # raises on a head of the wrong size
    id2label = getattr(config, "id2label", None) or {}
    names = [str(id2label.get(i, id2label.get(str(i), ""))).lower().replace("_", "-") for i in range(n)]
    wanted = [e.lower().replace("_", "-") for e in expected]
    if sorted(names) != sorted(wanted) or names == wanted:
        return None  # generic names (LABEL_0 ...) or already in order
    return [names.index(w) for w in wanted]


@torch.no_grad()
def predict(
    model: nn.Module,
    tokenizer: Any,
    task: Task,
    split: str,
    *,
    batch_size: int = 64,
    max_length: int = 128,
    limit: int | None = None,
    show_progress: bool = True,
) -> Tensor:
    """Predicted label ids (in the split's label space) of the examples ``task.subset(split, limit)``."""
    perm = label_permutation(model, task)
    device = model_device(model)
    preds = []
    batches = task.batches(tokenizer, split, batch_size, max_length=max_length, limit=limit)
    if show_progress:  # off inside another progress bar (fine-tuning): Rich allows one live display
        batches = track(batches, total=task.num_batches(split, batch_size, limit), description=f"eval {split}")
    for batch in batches:
        inputs = {k: v.to(device) for k, v in task.model_inputs(batch).items()}
        logits = task.task_logits(model(**inputs), batch).float()  # [B, C]
        if perm is not None:
            logits = logits[:, perm]
        preds.append(task.predictions(logits, split).cpu())
    return torch.cat(preds) if preds else torch.zeros(0, dtype=torch.long)


def evaluate(
    model: nn.Module,
    tokenizer: Any,
    task: Task,
    splits: Sequence[str] | None = None,
    batch_size: int = 64,
    max_length: int = 128,
    *,
    limit: int | None = None,
    show_progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """``{split: task.score(...)}`` for ``splits`` (default: every evaluation split).

    Runs without gradients in eval mode and restores the model's previous mode.
    ``limit`` caps the examples per split (``Task.subset``: spread over subcases).
    """
    tokenizer = tokenizer if tokenizer is not None else task.tokenizer
    if tokenizer is None:
        raise SubnetlabError(f"task {task.name}: no tokenizer (the model has none and the task brings none)")
    names = list(task.eval_splits) if splits is None else list(splits)
    if not names:
        raise SubnetlabError(f"task {task.name} has no evaluation splits")
    was_training = model.training
    model.eval()
    try:
        results = {}
        for split in names:
            preds = predict(model, tokenizer, task, split, batch_size=batch_size, max_length=max_length, limit=limit,
                            show_progress=show_progress)
            results[split] = task.score(preds, split, limit=limit)
        return results
    finally:
        model.train(was_training)


def mean_values(
    model: nn.Module,
    adapter: Any,
    task: Task,
    tokenizer: Any,
    split: str,
    examples: int = 512,
    batch_size: int = 64,
    max_length: int = 128,
) -> Any:
    """Mean head / MLP activations over ``examples`` of ``split`` (for mean ablation)."""
    from subnetlab.intervene import collect_means

    device = model_device(model)
    batches = (
        {k: v.to(device) for k, v in task.model_inputs(b).items()}
        for b in task.batches(tokenizer, split, batch_size, max_length=max_length, limit=examples)
    )
    return collect_means(model, adapter, batches)


def subnetwork_context(
    model: nn.Module,
    adapter: Any,
    subnetwork: Any,
    *,
    ablation: str | None = None,
    means: Any = None,
) -> Any:
    """A context manager that runs ``model`` as ``subnetwork`` (gates or weight masks).

    Structured subnetworks close the removed heads / MLPs with ``ablation``
    (default: the one saved with the subnetwork): ``zero``, or ``mean`` with
    ``means`` (a ``ComponentValues``). Resample ablation is per batch and
    not offered here; weight-level subnetworks zero the removed weights.
    """
    from subnetlab.intervene import apply_gates, mask_weights

    subnetwork.check(adapter)
    if subnetwork.kind == "weights":
        return mask_weights(model, {k: v.float() for k, v in subnetwork.weights.items()})
    kind = ablation or subnetwork.ablation or "zero"
    if kind not in ("zero", "mean"):
        raise SubnetlabError(f"evaluating with {kind!r} ablation is not supported; choose zero or mean ablation",
                             setting="ablation")
    if kind == "mean" and means is None:
        raise SubnetlabError("mean ablation needs mean activations (give means, or data to compute them from)",
                             setting="means")
    heads, mlps = subnetwork.gates()
    return apply_gates(model, adapter, heads=heads, mlps=mlps, ablation=means if kind == "mean" else None)
