"""Paired (clean, corrupted) prompts as pruning data: the batch convention edge pruning reads.

A batch holds the clean prompt's model inputs (``input_ids``, ``attention_mask``),
the corrupted prompt's token ids ``corrupted_input_ids`` (same length: the pair
differs in a few tokens, as IOI's ABC prompts or the greater-than task's years),
and ``position``, the index of the token whose next-token distribution is the
task's output (the last real token). ``answer`` and ``wrong`` (one token each)
are kept for logit-difference metrics. ``paired_data`` builds the
``hard_concrete.data.PruningData`` that the trainer and the full-model cache take.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.methods.hard_concrete.data import PruningData, output_logits

CORRUPTED = "corrupted_input_ids"


def prediction_logits(outputs: Any, batch: dict[str, Tensor]) -> Tensor:
    """``[batch, vocab]`` logits at each row's prediction position."""
    logits = output_logits(outputs, batch)
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, batch["position"].to(logits.device)]


def corrupted_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The corrupted prompt's model inputs (the clean prompt's attention mask: the pair has one length)."""
    if CORRUPTED not in batch:
        raise SubnetlabError("corrupted-input ablation needs paired prompts (a corrupted prompt per example)",
                             setting="ablation")
    inputs = {"input_ids": batch[CORRUPTED]}
    if "attention_mask" in batch:
        inputs["attention_mask"] = batch["attention_mask"]
    return inputs


def paired_data(input_ids: Tensor, corrupted_input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                position: Tensor | None = None, answer: Tensor | None = None, wrong: Tensor | None = None,
                name: str = "pairs") -> PruningData:
    """Pruning data from tensors ``[N, P]`` (ids, mask) and ``[N]`` (position, answer, wrong tokens)."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if corrupted_input_ids is not None and corrupted_input_ids.shape != input_ids.shape:
        raise SubnetlabError(f"clean prompts {tuple(input_ids.shape)} and corrupted prompts "
                             f"{tuple(corrupted_input_ids.shape)} differ in shape; each pair needs one length")
    if position is None:
        position = attention_mask.sum(1) - 1
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask, "position": position.long()}
    for key, value in ((CORRUPTED, corrupted_input_ids), ("answer", answer), ("wrong", wrong)):
        if value is not None:
            tensors[key] = value
    return PruningData.from_tensors(tensors, prediction_logits, name=name)
