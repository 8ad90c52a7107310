"""Seeded choices for the data generators, drawn from an explicit torch.Generator.

All generators in ``subnetlab.tasks`` sample through this one class, so the
same generator state always yields the same data on every platform.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch

T = TypeVar("T")


class Sampler:
    """Uniform choices from an explicit ``torch.Generator``."""

    def __init__(self, generator: torch.Generator) -> None:
        if not isinstance(generator, torch.Generator):
            raise TypeError("Sampler needs a torch.Generator (seed it explicitly)")
        self.generator = generator

    def index(self, n: int) -> int:
        """An integer in ``[0, n)``."""
        return int(torch.randint(n, (1,), generator=self.generator).item())

    def choice(self, items: Sequence[T]) -> T:
        return items[self.index(len(items))]

    def distinct(self, items: Sequence[T], k: int) -> list[T]:
        """``k`` different items (positions), in random order."""
        if k > len(items):
            raise ValueError(f"cannot draw {k} distinct items from {len(items)}")
        return [items[i] for i in torch.randperm(len(items), generator=self.generator)[:k].tolist()]

    def coin(self, p: float = 0.5) -> bool:
        return bool(torch.rand(1, generator=self.generator).item() < p)

    def permutation(self, n: int) -> list[int]:
        return torch.randperm(n, generator=self.generator).tolist()


def seeded(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(int(seed))
