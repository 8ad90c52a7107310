"""Where and how a computation runs: the device, the number of CPU threads, the seeds.

One home for these so that every method, job and study agrees on them:

* ``resolve_device("auto" | "cpu" | "cuda[:N]" | "mps")`` turns a user's device
  name into a ``torch.device``, refusing one this machine does not have;
* ``model_device(model)`` is where a model's parameters live (tensors a method
  makes go there);
* ``torch_threads(n)`` runs a block with ``n`` torch threads and restores the
  caller's count afterwards (jobs run in the caller's process on the local
  backend, so a job must not leave its thread count behind);
* ``resolve_dtype(name, device)`` checks the precision of forward passes
  (``float32``; ``bfloat16`` or ``float16`` autocast on accelerators, ``bfloat16``
  also on the CPU) and ``autocast(device, dtype)`` applies it to a block: the
  weights stay float32, matrix products run in the lower precision;
* ``describe_runtime(device, dtype)`` is the line every command prints at its
  start, and ``runtime_record`` what its ``config.json`` keeps (``resolved_device``,
  ``dtype``; the device is not part of a run's identity, so a run resumes on
  another machine);
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


DTYPE_NAMES = ("float32", "bfloat16", "float16")


def resolve_dtype(name: str | None, device: torch.device | str = "cpu") -> torch.dtype:
    """The ``torch.dtype`` of forward passes named ``name`` (None: float32) on ``device``.

    float16 autocast exists only on accelerators (CUDA, mps): on the CPU it is refused
    (bfloat16 autocast works there).
    """
    import torch

    text = (name or "float32").strip().lower()
    if text not in DTYPE_NAMES:
        raise SubnetlabError(f"dtype {name!r}: expected {', '.join(DTYPE_NAMES)}", setting="dtype")
    kind = torch.device(device).type
    if text == "float16" and kind == "cpu":
        raise SubnetlabError("dtype float16: half-precision forward passes run on CUDA or Apple mps only; on the CPU "
                             "use float32 or bfloat16", setting="dtype")
    return getattr(torch, text)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``bfloat16``."""
    return str(dtype).removeprefix("torch.")


@contextmanager
def autocast(device: torch.device | str, dtype: torch.dtype | None) -> Iterator[None]:
    """Run the block's forward passes in ``dtype`` (autocast) on ``device``; float32 or None: unchanged."""
    import torch

    if dtype is None or dtype == torch.float32:
        yield
        return
    with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
        yield


def describe_runtime(device: torch.device, dtype: torch.dtype | None = None) -> str:
    """``device cuda:0 (NVIDIA H100 80GB HBM3), dtype bfloat16 (autocast)``: what a command runs on."""
    import torch

    device = torch.device(device)
    where = str(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        where = f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    name = dtype_name(dtype) if dtype is not None else "float32"
    return f"device {where}, dtype {name}" + (" (autocast)" if name != "float32" else "")


def runtime_record(device: torch.device, dtype: torch.dtype | None = None) -> dict[str, str]:
    """The keys a run's ``config.json`` records about where it ran: ``resolved_device`` and ``resolved_dtype``.

    ``run_directory`` leaves them out when it compares a rerun's config with the
    directory's, so a run started on a GPU machine resumes on a CPU one.
    """
    return {"resolved_device": str(device), "resolved_dtype": dtype_name(dtype) if dtype is not None else "float32"}


def _mps_available() -> bool:
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def model_device(model: torch.nn.Module) -> torch.device:
    """Where ``model`` takes its inputs: its first parameter's device (the CPU for a model without parameters).

    A model placed by a device map (``models.device_map``) runs on its map's main device, the
    first accelerator the map names, else the CPU (accelerate's rule); its first parameter may be
    offloaded to ``meta``.
    """
    import torch

    mapped = getattr(model, "hf_device_map", None)
    if mapped:
        places = [p for p in mapped.values() if str(p) not in ("cpu", "disk", "meta")]
        return torch.device(f"cuda:{places[0]}" if places and isinstance(places[0], int) else
                            places[0] if places else "cpu")
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


__all__ = ["DEVICE_NAMES", "DTYPE_NAMES", "autocast", "describe_runtime", "dtype_name", "generator", "model_device",
           "resolve_device", "resolve_dtype", "runtime_record", "seed_globals", "torch_threads"]
