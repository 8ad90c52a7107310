"""Paired (clean, corrupted) prompts as pruning data, in the batch format of ``tasks.circuits``.

A batch is ``CircuitTask.pair_batch``'s: the clean prompt's ``input_ids`` and
``attention_mask``, the corrupted prompt's ``corrupted_input_ids`` (same
length), ``answer_index`` (the position whose next-token distribution is the
task's output), ``answer_id`` and ``wrong_id``. ``circuit_data`` wraps a bound
``CircuitTask``; ``paired_data`` builds the same from tensors (tests, your own
pairs). Both give the ``l0.data.PruningData`` the trainer and the
full-model cache take.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.methods.l0.data import PruningData, output_logits
from subnetlab.tasks.circuits.pairs import CircuitTask


def prediction_logits(outputs: Any, batch: dict[str, Tensor]) -> Tensor:
    """``[batch, vocab]`` logits at each row's answer position."""
    logits = output_logits(outputs, batch)
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, batch["answer_index"].to(logits.device)]


def circuit_data(task: CircuitTask, tokenizer: Any, split: str = "train", limit: int | None = None) -> PruningData:
    """The pairs of ``split`` of a circuit task (bound to ``tokenizer`` here)."""
    task.bind(tokenizer)
    size = len(task.pairs(split))
    if limit is not None:
        size = min(size, int(limit))
    if size == 0:
        raise SubnetlabError(f"task {task.name}: split {split!r} has no prompt pairs", setting="task")

    def batch_at(indices) -> dict[str, Tensor]:
        return task.pair_batch(tokenizer, split, list(indices))

    key = {"task": task.name, "options": getattr(task, "options", {}), "split": split, "size": size, "pairs": True,
           "tokenizer": str(getattr(tokenizer, "name_or_path", type(tokenizer).__name__))}
    return PruningData(size, batch_at, prediction_logits, key=key)


def paired_data(input_ids: Tensor, corrupted_input_ids: Tensor, answer_id: Tensor, wrong_id: Tensor,
                attention_mask: Tensor | None = None, answer_index: Tensor | None = None,
                name: str = "pairs") -> PruningData:
    """Pruning data from tensors ``[N, P]`` (ids, mask) and ``[N]`` (answer position, answer and wrong tokens)."""
    if corrupted_input_ids.shape != input_ids.shape:
        raise SubnetlabError(f"clean prompts {tuple(input_ids.shape)} and corrupted prompts "
                             f"{tuple(corrupted_input_ids.shape)} differ in shape; each pair needs one length")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if answer_index is None:
        answer_index = attention_mask.sum(1) - 1
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask, "corrupted_input_ids": corrupted_input_ids,
               "answer_index": answer_index.long(), "answer_id": answer_id.long(), "wrong_id": wrong_id.long()}
    return PruningData.from_tensors(tensors, prediction_logits, name=name)
