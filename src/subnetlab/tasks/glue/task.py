"""GLUE tasks as ``Task`` objects that score themselves with the GLUE metric (``glue-cola`` ... ``glue-wnli``).

``GlueTask`` is a classification task whose ``score`` adds the GLUE metrics
(``metrics.classification_scores``) to the usual accuracy and names its
metric in ``task.metric``; ``score(...)["metric"]`` is that metric's value,
so code that stops or reports "the task's metric" reads it from there
(``task_metric(task)`` gives the name for any task: accuracy for non-GLUE ones).
``GlueRegressionTask`` is STS-B: one output, trained with the mean squared
error, predictions are the raw outputs and its scores are Pearson / Spearman.

Options of every ``glue-<name>`` task: ``data_dir`` (a GLUE release or the
task's folder in it: ``train.tsv`` and the dev files), or ``train`` / ``eval``
(a TSV file or ``hub:nyu-mll/glue:<name>@<split>``; ``eval`` may be a dict
``{split: source}``), and ``metric`` (default: the authors' stop metric, see
``formats``). The development split is ``id`` (MNLI also gets
``id-mismatched`` from ``data_dir``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import Task
from subnetlab.tasks.glue.formats import GlueFormat, glue_format, read_glue, release_files
from subnetlab.tasks.glue.metrics import classification_scores, regression_scores

REGRESSION_LABELS = ["similarity"]


def task_metric(task: Task) -> str:
    """The name of the metric ``task`` is judged by: its own ``metric``, else accuracy."""
    return str(getattr(task, "metric", None) or "accuracy")


def metric_value(task: Task, score: dict[str, Any]) -> float:
    """The value of ``task``'s metric in one split's ``score`` dict."""
    name = task_metric(task)
    if name not in score:
        raise SubnetlabError(f"task {task.name}: its scores hold no {name!r} (they hold {', '.join(score)})")
    return float(score[name])


class GlueTask(Task):
    """A GLUE classification task: accuracy plus the GLUE metrics; ``metric`` names the one it is judged by."""

    def __init__(self, fmt: GlueFormat, metric: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.glue = fmt
        self.metric = metric

    def _gold(self, split: str, limit: int | None) -> list:
        return [self.examples(split)[i].label for i in self.subset(split, limit)]

    def score(self, predictions: Tensor | Any, split: str, limit: int | None = None) -> dict[str, Any]:
        result = super().score(predictions, split, limit)
        preds = predictions.tolist() if isinstance(predictions, Tensor) else list(predictions)
        binary = len(self.split_labels(split)) == 2
        result.update(classification_scores(preds, self._gold(split, limit), binary))
        result["metric"] = result[self.metric]
        return result


class GlueRegressionTask(GlueTask):
    """STS-B: one regression output; loss = mean squared error; scores = correlations with the gold scores."""

    def batch_at(self, tokenizer: Any, split: str, indices: Any, *, max_length: int = 128) -> dict[str, Tensor]:
        idx = indices.tolist() if isinstance(indices, Tensor) else list(indices)
        batch = super().batch_at(tokenizer, split, idx, max_length=max_length)
        batch["labels"] = torch.tensor([float(self.examples(split)[i].label) for i in idx], dtype=torch.float32)
        return batch

    def loss(self, outputs: Any, batch: dict[str, Tensor]) -> Tensor:
        logits = self.task_logits(outputs, batch)
        return F.mse_loss(logits[:, 0].float(), batch["labels"].to(logits.device).float())

    def example_losses(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Per-example squared errors ``[B]``."""
        return (logits[:, 0].float() - batch["labels"].to(logits.device).float()) ** 2

    def predictions(self, task_logits: Tensor, split: str) -> Tensor:
        if task_logits.shape[-1] != 1:
            raise SubnetlabError(f"task {self.name} is a regression: the model needs 1 output, it has {task_logits.shape[-1]}")
        return task_logits[:, 0].float()

    def score(self, predictions: Tensor | Any, split: str, limit: int | None = None) -> dict[str, Any]:
        preds = predictions.tolist() if isinstance(predictions, Tensor) else list(predictions)
        gold = self._gold(split, limit)
        if len(preds) != len(gold):
            raise SubnetlabError(f"split {split!r}: {len(preds)} predictions for {len(gold)} examples")
        result: dict[str, Any] = {"n": len(gold), **regression_scores(preds, gold)}
        result["metric"] = result[self.metric]
        return result


def make_glue_task(name: str, train: str | os.PathLike | None = None, eval: Any = None,
                   data_dir: str | os.PathLike | None = None, metric: str | None = None) -> Task:
    """The GLUE task ``name`` (``cola`` ... ``wnli``) from TSV files, a GLUE release folder or the hub."""
    fmt = glue_format(name)
    metric = metric or fmt.metric
    if metric not in fmt.metrics:
        raise SubnetlabError(f"GLUE {name}: metric {metric!r} is not one of {', '.join(fmt.metrics)}",
                             setting="task_options")
    if data_dir is not None and (train is not None or eval is not None):
        raise SubnetlabError(f"GLUE {name}: give data_dir or train / eval, not both", setting="task_options")
    if data_dir is not None:
        train_path, dev = release_files(fmt, data_dir)
        train = train_path if train_path.is_file() else None
        splits: dict[str, Any] = dict(dev)
    else:
        splits = dict(eval) if isinstance(eval, dict) else ({"id": eval} if eval is not None else {})
    if train is None and not splits:
        raise SubnetlabError(f"GLUE {name} reads data: pass data_dir=DIR, or train=FILE and/or eval=FILE "
                             f"(a TSV file or hub:nyu-mll/glue:{fmt.hub_config}@SPLIT)", setting="task_options")
    skipped = 0
    train_examples: list = []
    if train is not None:
        train_examples, skipped = read_glue(fmt, str(train) if not isinstance(train, str) else train)
    eval_splits = {}
    for split, source in splits.items():
        eval_splits[split], n = read_glue(fmt, str(source) if not isinstance(source, str) else source)
        skipped += n
    options = {"train": str(train) if train is not None else None, "eval": {k: str(v) for k, v in splits.items()},
               "data_dir": str(data_dir) if data_dir is not None else None, "metric": metric,
               "skipped_rows": skipped}
    cls = GlueRegressionTask if fmt.regression else GlueTask
    labels = REGRESSION_LABELS if fmt.regression else list(fmt.labels)
    return cls(fmt, metric, f"glue-{name}", "classification", labels, train_examples, eval_splits, options=options)


__all__ = ["GLUE_TASKS", "GlueRegressionTask", "GlueTask", "make_glue_task", "metric_value", "task_metric"]


def _factory(name: str):
    def factory(train: str | os.PathLike | None = None, eval: Any = None, data_dir: str | os.PathLike | None = None,
                metric: str | None = None) -> Task:
        return make_glue_task(name, train=train, eval=eval, data_dir=data_dir, metric=metric)

    factory.__name__ = f"glue_{name}"
    factory.__doc__ = f"GLUE {name} (see subnetlab.tasks.glue.task)."
    return factory


GLUE_TASKS = {f"glue-{name}": _factory(name) for name in ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli",
                                                            "rte", "wnli")}
