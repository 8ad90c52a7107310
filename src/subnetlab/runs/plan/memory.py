"""Counting a step's memory without running it (fake tensors), and measuring it when it does run.

``LiveBytes`` is a dispatch mode that adds up the bytes of every tensor storage an operation creates and
subtracts them when the storage is freed (a weak-reference finaliser), keeping the peak. Under PyTorch's
``FakeTensorMode`` storages have sizes but no memory, so the peak of a step on a model built from its config
is known in seconds on a CPU, whatever the model's size. Views share their storage, so they cost nothing;
parameters count once.

Code that reads a value back into Python (a logged loss, a finiteness check, Adam's step counter, a shuffled
data order) cannot do so from a fake tensor. Under ``fake=True`` the mode answers those reads: a scalar read
gives 1 (``True`` for a boolean), which is finite and keeps Adam's bias correction non-zero, and a random
permutation is computed for real (it is an index list the code iterates over, not model memory).

With ``count_flops`` set, the mode also adds up the FLOPs of the operations it sees by the formulas of
``torch.utils.flop_counter`` (matrix products, convolutions, attention), so one pass gives a step's peak and its
FLOPs: ``FlopCounterMode`` itself keeps every module's outputs alive while it runs, so it needs a step of its own.

``phase_peaks`` keeps the peak per place a storage was made: ``(phase, operation)``, the phase a name the
caller sets (``live.phase = "step0"``) and the operation the autograd node running (backward) or the operator
(forward). A plan from fewer layers fits each place's peak across layer counts (``runs.plan.layers``): the
step's peak moves between places as the model deepens (the logits' gradients at the top of the backward on a
shallow model, a layer's backward on a deep one), and each place's own peak is smooth in the layer count.

``measured_peak(fn)`` runs ``fn`` on real tensors and returns the allocator's peak above what was allocated
when it started: on a GPU ``torch.cuda.max_memory_allocated``, on the CPU the profiler's allocation events
(every allocation and free of PyTorch's CPU allocator, in order), so the counter is checked against a
measurement it shares nothing with.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten
REAL_OPS = (aten.randperm.default, aten.randperm.generator)  # index lists the Python code iterates over


class LiveBytes(TorchDispatchMode):
    """``with FakeTensorMode(), LiveBytes(fake=True) as live: ...``: ``live.live`` and ``live.peak`` in bytes."""

    def __init__(self, fake: bool = False) -> None:
        super().__init__()
        self.fake = fake
        self.live = 0
        self.peak = 0
        self.tracked: dict[int, weakref.finalize] = {}
        self.phase = ""
        self.phase_peaks: dict[tuple[str, str], int] = {}
        self.between_steps = 0  # bytes alive after the last step measured (runs.plan.core.measure_step)
        self.count_flops = False  # while True, ``flops`` adds each operation's FLOPs (torch's own formulas)
        self.flops = 0
        self.step_flops: list[int] = []  # runs.plan.core.measure_step: the FLOPs of each step it counted

    def reset_peak(self) -> None:
        """Start a new peak (and new peaks per place) from what is alive now."""
        self.peak = self.live
        self.phase_peaks = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.fake and func is aten._local_scalar_dense.default:
            return True if args[0].dtype == torch.bool else 1
        if self.fake and func in REAL_OPS:
            with _disable_current_modes():
                return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if self.count_flops and func._overloadpacket in flop_registry:
            self.flops += int(flop_registry[func._overloadpacket](*args, **kwargs, out_val=out))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.count(t, str(func))
        return out

    def count(self, tensor: torch.Tensor, where: str = "") -> None:
        """Add ``tensor``'s storage if it is new; its finaliser takes it off when the storage is freed."""
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self.tracked:
            return
        size = storage.nbytes()
        self.live += size
        self.peak = max(self.peak, self.live)
        node = torch._C._current_autograd_node()
        place = (self.phase, node.name() if node is not None else where)
        self.phase_peaks[place] = max(self.phase_peaks.get(place, 0), self.live)
        self.tracked[key] = weakref.finalize(storage, self.freed, key, size)

    def freed(self, key: int, size: int) -> None:
        self.live -= size
        self.tracked.pop(key, None)


def built_for_real() -> Any:
    """``with built_for_real():`` creates real tensors inside a fake run: a trainer's masks, multipliers and
    optimiser (small; count them with ``LiveBytes.count``). ``nn.Module.to`` cannot move a fake parameter in torch
    2.13 (``swap_tensors`` refuses a tensor the fake mode's memo refers to), and the methods move their masks to the
    model's device; a fake mode that allows real inputs turns them into fake tensors where the step uses them."""
    return _disable_current_modes()


def storage_bytes(tensors: Any) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a model's parameters and buffers: tied weights once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr() or id(storage)] = storage.nbytes()
    return sum(seen.values())


def measured_peak(fn: Callable[[], Any], device: torch.device | str = "cpu") -> int:
    """Peak bytes the allocator held while ``fn()`` ran, above what it held when ``fn`` started (real tensors)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]" and e.device_type() ==
              torch.autograd.DeviceType.CPU]
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()  # negative for a free
        peak = max(peak, live)
    return peak


__all__ = ["LiveBytes", "built_for_real", "measured_peak", "storage_bytes"]
