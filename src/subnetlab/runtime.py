"""Where and how a computation runs: the device, the number of CPU threads, the seeds.

One home for these so that every method, job and study agrees on them:

* ``resolve_device("auto" | "cpu" | "cuda[:N]" | "mps")`` turns a user's device
  name into a ``torch.device``, refusing one this machine does not have;
* ``model_device(model)`` is where a model's parameters live (tensors a method
  makes go there);
* ``torch_threads(n)`` runs a block with ``n`` torch threads and restores the
  caller's count afterwards (jobs run in the caller's process on the local
  backend, so a job must not leave its thread count behind);
* ``generator(seed, device)`` and ``seed_globals(seed)``: every random choice
  draws from an explicit generator; the process-global streams are reseeded
  only so that accidental global sampling is reproducible too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from subnetlab.errors import SubnetlabError

if TYPE_CHECKING:  # torch is imported inside the functions: the CLI and the executor start without it
    import torch

DEVICE_NAMES = "auto, cpu, cuda, cuda:N or mps"


def resolve_device(name: str | torch.device | None = "auto") -> torch.device:
    """The ``torch.device`` for ``name``; ``auto`` (or None) picks CUDA, then MPS, then the CPU."""
    import torch

    if isinstance(name, torch.device):
        return name
    text = (name or "auto").strip().lower()
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    if text == "mps":
        if not _mps_available():
            raise SubnetlabError("device 'mps': no Apple GPU here", setting="device")
        return torch.device("mps")
    if text == "cuda" or text.startswith("cuda:"):
        index = text.partition(":")[2]
        if index and not index.isdigit():
            raise SubnetlabError(f"device {name!r}: expected {DEVICE_NAMES}", setting="device")
        if not torch.cuda.is_available():
            raise SubnetlabError(f"device {name!r}: no CUDA device here", setting="device")
        if index and int(index) >= torch.cuda.device_count():
            raise SubnetlabError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)", setting="device")
        return torch.device(text)
    raise SubnetlabError(f"device {name!r}: expected {DEVICE_NAMES}", setting="device")


def _mps_available() -> bool:
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (the CPU for a model without parameters)."""
    import torch

    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch threads (None or 0: unchanged), then restore the caller's count."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def generator(seed: int, device: torch.device | str | None = None) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` (default the CPU) seeded with ``seed``."""
    import torch

    return torch.Generator(device=device or "cpu").manual_seed(int(seed))


def seed_globals(seed: int) -> None:
    """Seed Python's, NumPy's and torch's process-global random streams from one integer."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


__all__ = ["DEVICE_NAMES", "generator", "model_device", "resolve_device", "seed_globals", "torch_threads"]
