"""A language-model task split as three tensors, for training many tiny models fast.

Modular-arithmetic prompts are all three tokens long, so a whole split fits in
one ``[N, T]`` tensor: batches become slices, with no per-batch tokenization or
collation (the per-step overhead that dominates tiny models on a CPU). The
tensors come from the task's own ``batch_at``, so tokenization, answer tokens
and targets are exactly the task's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import Task


@dataclass
class LMSplit:
    """``input_ids [N, T]`` prompts, ``targets [N]`` gold next-token ids, ``answers [C]`` answer token ids."""

    input_ids: Tensor
    targets: Tensor
    answers: Tensor

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def labels(self) -> Tensor:
        """``[N]`` index of each target among the answer tokens (what accuracy compares)."""
        return (self.targets.unsqueeze(1) == self.answers.unsqueeze(0)).float().argmax(1)

    def to(self, device: torch.device | str) -> "LMSplit":
        return LMSplit(self.input_ids.to(device), self.targets.to(device), self.answers.to(device))

    def batches(self, batch_size: int, generator: torch.Generator | None = None) -> list[Tensor]:
        """Row indices of each batch; shuffled with ``generator`` when given."""
        n = len(self)
        order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
        order = order.to(self.input_ids.device)  # the generator stays on the CPU: same order on any device
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def lm_split(task: Task, split: str, tokenizer: Any = None) -> LMSplit:
    """The whole ``split`` of an ``lm`` task whose prompts all have the same length."""
    if task.kind != "lm":
        raise SubnetlabError(f"task {task.name} is not a language-model task; transfer training needs one (e.g. arith:a^2+ab)")
    tokenizer = tokenizer if tokenizer is not None else task.tokenizer
    if tokenizer is None:
        raise SubnetlabError(f"task {task.name} has no tokenizer of its own; pass the model's")
    n = len(task.examples(split))
    if n == 0:
        raise SubnetlabError(f"task {task.name}: split {split!r} is empty")
    batch = task.batch_at(tokenizer, split, range(n))
    if not bool(batch["attention_mask"].all()):
        raise SubnetlabError(f"task {task.name}: prompts of split {split!r} differ in length; tensor training needs equal lengths")
    answers = batch["answer_token_ids"][0].clone()
    return LMSplit(batch["input_ids"].clone(), batch["target_ids"].clone(), answers)


__all__ = ["LMSplit", "lm_split"]
