"""A plan before the run: peak memory, FLOPs per step, steps, and the largest batch that fits a memory.

The model is built from its config under PyTorch's ``FakeTensorMode`` (no weights allocated) and the command's
own step runs on it: ``Pruner.step`` (head/MLP pruning), ``EdgePruner.step`` (edge pruning), ``attribute_batch``
(EAP, EAP-IG), ``ContinuousSparsification.step`` (discover), ``transfer.train.train_step`` (transfer),
``methods.finetune.step.train_step`` (finetune), the importance criterion (lottery-prune), with the set-up
(the full model's outputs, installed masks, the ablation's values, the optimiser) and two optimiser steps (the
second holds the first's optimiser state and the previous batch's corrupted values while it captures its own).
``plan.memory.LiveBytes`` counts the bytes alive and their peak; ``torch.utils.flop_counter.FlopCounterMode`` the
FLOPs of one step (matrix products and attention).

    p = plan_run(read_model_config("configs/llama-3.1-8b.json"), PlanSettings("edge-pruning", batch=8, length=256,
                 dtype="bfloat16", micro_batch=2))
    p.peak_bytes, p.flops_per_step, p.steps

Peak memory grows linearly with the micro-batch, so ``largest_micro_batch`` fits a line through two micro-batch
sizes, then checks the batch it solves for (and steps down while it does not fit).

What the plan leaves out: the CUDA context and the allocator's fragmentation (add a few GB on a GPU), data
loading, and the full model's outputs of training examples beyond one optimiser step (the method keeps them
for the whole run: the classes of a classification task, the vocabulary of a language-model task, in float32).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable

from subnetlab.errors import SubnetlabError
from subnetlab.runs.plan.fake import fake_model
from subnetlab.runs.plan.settings import UNACCUMULATED, PlanSettings

MAX_MICRO_BATCH = 1 << 16  # the largest micro-batch the search tries
H100_BF16_DENSE = 989e12  # FLOP/s: an H100 SXM's dense bf16 tensor-core peak, for a time lower bound


@dataclass
class Plan:
    settings: PlanSettings
    model: str
    weights_bytes: int
    peak_bytes: int
    flops_per_step: int
    steps: int
    largest_micro_batch: int | None = None
    memory_limit: int | None = None
    layers: int | None = None
    layers_sampled: tuple[int, ...] | None = None  # planned at these depths and fitted (runs.plan.layers)
    steps_from: str = ""  # what the steps rest on, where a number of training rows (``steps_of``)
    fit_micro_batch: int | None = None  # where the peak is over ``memory_limit``: the micro-batch that fits it
    fit_peak_bytes: int | None = None  # (a divisor of the batch where the method accumulates) and its peak

    def fits(self) -> bool | None:
        """Whether the peak fits ``memory_limit`` (None without one)."""
        return None if self.memory_limit is None else self.peak_bytes <= self.memory_limit

    def time_bound(self, flops_per_second: float = H100_BF16_DENSE) -> float:
        """Seconds the run's steps take at least at ``flops_per_second`` (a lower bound, not an estimate)."""
        return self.flops_per_step * self.steps / flops_per_second

    def to_dict(self) -> dict[str, Any]:
        s = self.settings
        return {"model": self.model, "method": s.method, "dtype": s.dtype, "batch": s.batch, "micro_batch": s.micro,
                "length": s.length, "weights_bytes": self.weights_bytes, "peak_bytes": self.peak_bytes,
                "flops_per_step": self.flops_per_step, "steps": self.steps, "memory_limit": self.memory_limit,
                "largest_micro_batch": self.largest_micro_batch, "layers": self.layers,
                "layers_sampled": list(self.layers_sampled) if self.layers_sampled else None,
                "time_bound_s_at_h100_bf16_peak": self.time_bound(), "steps_from": self.steps_from,
                "fits": self.fits(), "fit_micro_batch": self.fit_micro_batch, "fit_peak_bytes": self.fit_peak_bytes}


def plan_run(config: Any, settings: PlanSettings, name: str = "model", memory: int | None = None,
             layers_sampled: tuple[int, ...] | None = None) -> Plan:
    """The plan of ``settings`` on the model of ``config`` (module docstring); with ``memory`` (bytes), also the
    largest micro-batch whose peak fits it. With ``layers_sampled`` (three or more layer counts below the model's),
    the model is planned at those depths and each quantity fitted to its own (``runs.plan.layers``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from subnetlab.runs.plan.layers import check_samples, fitted_peak, layer_count, quadratic_at, with_layers
    from subnetlab.runs.plan.memory import LiveBytes

    steps, steps_from = steps_of(settings)  # before the long work: a missing number of rows is refused here
    check_length(config, settings.length)
    layers = layer_count(config)
    samples = check_samples(layers_sampled, layers) if layers_sampled is not None else None
    with FakeTensorMode(allow_non_fake_inputs=True), LiveBytes(fake=True) as live:
        built: dict[int, tuple[Any, Any, int]] = {}  # layer count -> (model, adapter, its weights' bytes)
        for n in samples or (layers,):
            before = live.live
            model, adapter = fake_model(with_layers(config, n) if samples else config, settings)
            built[n] = (model, adapter, live.live - before)

        def measured(s: PlanSettings, flops: bool) -> tuple[dict[int, int], dict[int, dict[Any, int]], dict[int, int],
                                                            dict[int, int]]:
            """Per layer count: the peak (its own weights, not the other samples'), the places' peaks, FLOPs, the
            bytes alive between steps."""
            peaks, places, counted, persistent = {}, {}, {}, {}
            for n, (model, adapter, weights) in built.items():
                others = live.live - weights
                peak, counted[n] = measure_step(model, adapter, s, live, flops)
                peaks[n] = peak - others
                places[n] = {key: value - others for key, value in live.phase_peaks.items()}
                persistent[n] = live.between_steps - others
            return peaks, places, counted, persistent

        def peak_at(s: PlanSettings) -> int:
            peaks, places, _, persistent = measured(s, False)
            return fitted_peak(places, layers, persistent) if samples else peaks[layers]

        peaks, places, counted, persistent = measured(settings, True)
        if samples:
            weights = quadratic_at({n: b[2] for n, b in built.items()}, layers)
            peak, flops = fitted_peak(places, layers, persistent), quadratic_at(counted, layers)
        else:
            weights, peak, flops = built[layers][2], peaks[layers], counted[layers]
        largest = fit_micro = fit_peak = None
        if memory is not None:
            seen: dict[int, int] = {settings.micro: peak}

            def at(m: int) -> int:
                if m not in seen:
                    seen[m] = peak_at(settings.with_micro(m))
                return seen[m]

            largest = largest_micro_batch(at, settings.micro, peak, memory)
            if largest and peak > memory:  # the fix: the largest micro-batch that fits and keeps the batch
                from dataclasses import replace

                if settings.method in UNACCUMULATED:
                    fit_micro, fit_peak = largest, at(largest)
                else:
                    fit_micro = max(d for d in range(1, min(largest, settings.batch) + 1) if settings.batch % d == 0)
                    fit_peak = peak_at(replace(settings, micro_batch=fit_micro))
    return Plan(settings, name, weights, peak, flops, steps, largest, memory, layers, samples, steps_from, fit_micro,
                fit_peak)


def check_length(config: Any, length: int) -> None:
    """``length`` tokens fit the model's positions (``max_position_embeddings``, GPT-2's ``n_positions``)."""
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if positions is not None and length > int(positions):
        raise SubnetlabError(f"length {length} is more than the model's {positions} positions "
                             "(max_position_embeddings)", setting="length")


def run_step(model: Any, adapter: Any, settings: PlanSettings, live: Any = None) -> Callable[[int], None]:
    """Set up the command's method on ``model`` and return ``step(i)``, the method's own step; ``step(-1)`` tears
    down. What the set-up builds (masks, optimiser) ``live`` counts."""
    from subnetlab.runs.plan.circuit import attribution_step, pruning_step
    from subnetlab.runs.plan.discover import discover_step
    from subnetlab.runs.plan.finetune import finetune_step
    from subnetlab.runs.plan.lottery import lottery_step
    from subnetlab.runs.plan.transfer import transfer_step

    if settings.method in ("eap", "eap-ig", "nap", "nap-ig"):
        return attribution_step(model, adapter, settings)
    if settings.method == "discover":
        return discover_step(model, adapter, settings, live)
    if settings.method == "finetune":
        return finetune_step(model, adapter, settings, live)
    if settings.method == "transfer":
        return transfer_step(model, adapter, settings, live)
    if settings.method == "lottery-prune":
        return lottery_step(model, adapter, settings, live)
    return pruning_step(model, adapter, settings, live)


def steps_of(settings: PlanSettings) -> tuple[int, str]:
    """The run's optimiser steps (attribution: batches) and, where they rest on a number of training rows, whose."""
    from subnetlab.runs.plan.circuit import circuit_steps
    from subnetlab.runs.plan.discover import discover_steps
    from subnetlab.runs.plan.finetune import finetune_steps
    from subnetlab.runs.plan.lottery import lottery_steps
    from subnetlab.runs.plan.transfer import transfer_steps

    if settings.method == "discover":
        return discover_steps(settings)
    if settings.method == "finetune":
        return finetune_steps(settings)
    if settings.method == "transfer":
        return transfer_steps(settings)
    if settings.method == "lottery-prune":
        return lottery_steps(settings)
    return circuit_steps(settings)


def default_sizes(method: str, preset: str | None) -> tuple[int, int]:
    """``(batch, length)`` of discover, transfer, finetune and lottery-prune at their preset (``None``: the
    command's default)."""
    from subnetlab.runs.plan.discover import ARITHMETIC_PROMPT, preset_of
    from subnetlab.runs.plan.finetune import finetune_config
    from subnetlab.runs.plan.lottery import lottery_sizes
    from subnetlab.runs.plan.settings import DEFAULT_PRESETS
    from subnetlab.runs.plan.transfer import transfer_preset

    preset = preset or DEFAULT_PRESETS.get(method, "paper")
    if method == "discover":
        return int(preset_of(preset)["batch_size"]), ARITHMETIC_PROMPT
    if method == "transfer":
        return int(transfer_preset(preset)["batch_size"]), ARITHMETIC_PROMPT
    if method == "lottery-prune":
        return lottery_sizes(preset)
    if method == "finetune":
        cfg = finetune_config(preset)
        return cfg.batch_size, cfg.max_length
    raise SubnetlabError(f"{method} has no preset sizes", setting="method")


def count_steps(settings: PlanSettings) -> int:
    """The run's optimiser steps, or batches of pairs (attribution: one batch when ``examples`` is not given)."""
    return steps_of(settings)[0]


def measure_step(model: Any, adapter: Any, settings: PlanSettings, live: Any, flops: bool = True) -> tuple[int, int]:
    """``(peak bytes, FLOPs of one step)``: the peak over the set-up and two steps (``live.phase_peaks`` per
    place, the phases ``setup``, ``step0``, ``step1``), the FLOPs counted on a third (the counter keeps module
    outputs alive while it runs); 0 FLOPs without ``flops`` (a memory search)."""
    from torch.utils.flop_counter import FlopCounterMode

    gc.collect()
    live.reset_peak()
    live.phase = "setup"
    step = run_step(model, adapter, settings, live)
    counted = 0
    try:
        for i in (0, 1):
            live.phase = f"step{i}"
            step(i)
        peak, places = live.peak, dict(live.phase_peaks)
        live.between_steps = live.live  # weights, masks, optimiser state: what stays alive from step to step
        live.phase = "flops"
        if flops:
            with FlopCounterMode(display=False) as counter:
                step(2)
            counted = int(counter.get_total_flops())
    finally:
        step(-1)
    del step
    gc.collect()
    live.phase_peaks = places
    return peak, counted


MAX_PROBES = 12  # micro-batch sizes the search measures at most (each one runs the method's step on fake tensors)


def largest_micro_batch(peak_at: Callable[[int], int], micro: int, peak: int, memory: int) -> int:
    """The largest micro-batch whose peak fits ``memory`` (0 when not even one example fits), in at most
    ``MAX_PROBES`` measurements. A candidate solves the line through the sizes measured (the largest seen to fit
    and the smallest seen not to; beyond them, the two largest, and at most 16 times the largest
    that fits) and is checked with the one above it; between two sizes, line and halving take turns, so a curved peak narrows the range too. Where the budget ends first,
    the answer is the largest size measured to fit: it holds (a bound, never an extrapolation)."""
    known = {micro: peak}

    def fits(m: int) -> bool:
        if m not in known:
            known[m] = peak_at(m)
        return known[m] <= memory

    fits(min(2 * micro, MAX_MICRO_BATCH))
    halve = False
    while True:
        lo = max((m for m, v in known.items() if v <= memory), default=0)
        hi = min((m for m, v in known.items() if v > memory), default=None)
        if (hi is None and lo >= MAX_MICRO_BATCH) or (hi is not None and hi - lo <= 1) or len(known) >= MAX_PROBES:
            return lo
        if hi is None:  # beyond every size measured: extrapolate from the two largest
            a, b = sorted(known)[-2:]
            slope = max(1.0, (known[b] - known[a]) / (b - a))
            guess = min(MAX_MICRO_BATCH, 16 * max(lo, 1), max(lo + 1, int(lo + (memory - known[lo]) // slope)))
        elif halve:
            guess = (lo + hi) // 2
        elif lo == 0:  # not even the smallest measured fits: the line through it and nothing
            guess = max(1, min(hi - 1, int(hi * memory / max(1, known[hi]))))
        else:
            t = (memory - known[lo]) / max(1, known[hi] - known[lo])
            guess = min(hi - 1, max(lo + 1, int(lo + t * (hi - lo))))
        halve = hi is not None and not halve
        if fits(guess) and guess + 1 < (MAX_MICRO_BATCH + 1 if hi is None else hi) and len(known) < MAX_PROBES:
            fits(guess + 1)


__all__ = ["H100_BF16_DENSE", "MAX_MICRO_BATCH", "MAX_PROBES", "Plan", "check_length", "count_steps", "default_sizes",
           "largest_micro_batch", "measure_step", "plan_run", "run_step", "steps_of"]
