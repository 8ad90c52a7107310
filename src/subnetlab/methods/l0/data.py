"""Training data for pruning: examples addressed by index, and a resumable order over them.

Pruning needs three things from data: a batch of given examples (so the order
can be replayed exactly after a restart, and full-model outputs can be cached
per example), the task's output distribution (``task_logits``: classification
logits, or the next-token logits of the answers for a language model), and a
key naming the data (for the mean-activation cache). ``PruningData.from_task``
builds them from a ``subnetlab.tasks`` Task; tests build them from tensors.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError

MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "pixel_values")


def model_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The keys a Hugging Face model's forward takes."""
    return {k: v for k, v in batch.items() if k in MODEL_INPUT_KEYS}


def to_device(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    """The batch's tensors on ``device`` (a no-op on the CPU)."""
    return {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}


def output_logits(outputs: Any, batch: dict[str, Tensor]) -> Tensor:
    """Default task logits: the model's ``logits`` (classification heads)."""
    return outputs.logits if hasattr(outputs, "logits") else outputs[0]


@dataclass
class PruningData:
    """``size`` training examples; ``batch_at(indices)`` collates them into one batch."""

    size: int
    batch_at: Callable[[Sequence[int]], dict[str, Tensor]]
    task_logits: Callable[[Any, dict[str, Tensor]], Tensor] = output_logits
    model_inputs: Callable[[dict[str, Tensor]], dict[str, Tensor]] = model_inputs
    key: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise SubnetlabError("pruning needs at least one training example")

    @classmethod
    def from_task(cls, task: Any, tokenizer: Any, split: str = "train", max_length: int = 128,
                  limit: int | None = None) -> "PruningData":
        """The first ``limit`` examples of ``split`` of a ``subnetlab.tasks`` Task."""
        size = len(task.examples(split))
        if size == 0:
            raise SubnetlabError(f"task {task.name}: split {split!r} has no examples to prune on")
        if limit is not None:
            size = min(size, int(limit))

        def batch_at(indices: Sequence[int]) -> dict[str, Tensor]:
            return task.batch_at(tokenizer, split, list(indices), max_length=max_length)

        key = {"task": task.name, "options": getattr(task, "options", {}), "split": split, "size": size,
               "max_length": max_length, "tokenizer": str(getattr(tokenizer, "name_or_path", type(tokenizer).__name__))}
        return cls(size, batch_at, task.task_logits, task.model_inputs, key)

    @classmethod
    def from_tensors(cls, inputs: dict[str, Tensor], task_logits: Callable | None = None,
                     name: str = "tensors") -> "PruningData":
        """Rows of pre-made model inputs (every tensor's first axis is the example)."""
        sizes = {v.shape[0] for v in inputs.values()}
        if len(sizes) != 1:
            raise SubnetlabError(f"input tensors disagree on the number of examples: {sorted(sizes)}")

        def batch_at(indices: Sequence[int]) -> dict[str, Tensor]:
            idx = torch.as_tensor(list(indices), dtype=torch.long)
            return {k: v[idx] for k, v in inputs.items()}

        digest = hashlib.sha256()
        for k in sorted(inputs):
            digest.update(k.encode() + inputs[k].contiguous().numpy().tobytes())
        return cls(sizes.pop(), batch_at, task_logits or output_logits, model_inputs,
                   {"name": name, "digest": digest.hexdigest()[:16]})

    def key_text(self) -> str:
        return json.dumps(self.key, sort_keys=True, default=str)

    def batches(self, batch_size: int, limit: int | None = None):
        """Consecutive batches over the first ``limit`` examples (means, cached outputs)."""
        n = self.size if limit is None else min(limit, self.size)
        for start in range(0, n, batch_size):
            yield list(range(start, min(start + batch_size, n)))


class DataOrder:
    """Micro-batch ``m`` -> example indices; each epoch is a permutation seeded by ``(seed, epoch)``.

    Stateless given ``m``, so a resumed run replays exactly the same batches.
    The last incomplete batch of an epoch is dropped, so every batch has
    ``batch_size`` rows.
    """

    def __init__(self, size: int, batch_size: int, seed: int) -> None:
        if batch_size > size:
            raise SubnetlabError(f"batch size {batch_size} is larger than the {size} training examples")
        self.size, self.batch_size, self.seed = size, batch_size, int(seed)
        self.per_epoch = size // batch_size
        self._cache: tuple[int, list[int]] | None = None

    def _permutation(self, epoch: int) -> list[int]:
        if self._cache is None or self._cache[0] != epoch:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + 7919 * epoch + 17) % (2**63))
            self._cache = (epoch, torch.randperm(self.size, generator=g).tolist())
        return self._cache[1]

    def indices(self, micro: int) -> list[int]:
        epoch, position = divmod(micro, self.per_epoch)
        perm = self._permutation(epoch)
        return perm[position * self.batch_size : (position + 1) * self.batch_size]
