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

Peak memory grows linearly with the micro-batch, so the largest micro-batch that fits a memory comes from one
more measurement, at half the micro-batch: each place's peak is a line through the two (``MicroBatchLines``).

What the plan leaves out: the CUDA context and the allocator's fragmentation (add a few GB on a GPU), data
loading, and the full model's outputs of training examples beyond one optimiser step (the method keeps them
for the whole run: the classes of a classification task, the vocabulary of a language-model task, in float32).
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from subnetlab.errors import SubnetlabError
from subnetlab.runs.plan.fake import fake_model
from subnetlab.runs.plan.settings import ATTRIBUTION, UNACCUMULATED, PlanSettings

MAX_MICRO_BATCH = 1 << 16  # the largest micro-batch a plan answers
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

    @property
    def verdict(self) -> str:
        """One line: the peak, whether it fits ``memory_limit`` and, if not, the micro-batch that does
        (``plan.report.verdict``)."""
        from subnetlab.runs.plan.report import verdict

        return verdict(self)

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
                "fits": self.fits(), "fit_micro_batch": self.fit_micro_batch, "fit_peak_bytes": self.fit_peak_bytes,
                "verdict": self.verdict}


def plan_run(config: Any, settings: PlanSettings, name: str = "model", memory: int | None = None,
             layers_sampled: tuple[int, ...] | None = None) -> Plan:
    """The plan of ``settings`` on the model of ``config`` (module docstring); with ``memory`` (bytes), also the
    largest micro-batch whose peak fits it (``MicroBatchLines``: one more measurement, at half the micro-batch).
    With ``layers_sampled`` (three or more layer counts below the model's), the model is planned at those depths
    and each quantity fitted to its own (``runs.plan.layers``)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from subnetlab.models.graph import Graph
    from subnetlab.runs.plan.circuit import exact_patched
    from subnetlab.runs.plan.layers import check_samples, fitted_places, layer_count, quadratic_at, with_layers
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
        graphs = {n: Graph.from_adapter(b[1]) for n, b in built.items()} if settings.method == "exact" else {}
        edges = {n: g.num_edges for n, g in graphs.items()}
        total_edges = (quadratic_at(edges, layers) if samples else edges[layers]) if edges else 0
        if samples and graphs and settings.copies is None:  # the model's own copies a forward, not a sample's
            from dataclasses import replace

            from subnetlab.methods.attribution.exact import copies_per_forward

            model = next(iter(built.values()))[0]
            writers = quadratic_at({n: len(g.writers) for n, g in graphs.items()}, layers)
            readers = max(len(b.readers) for b in next(iter(graphs.values())).reader_blocks)
            settings = replace(settings, copies=copies_per_forward(
                readers, writers, settings.batch, settings.length, int(model.config.hidden_size), int(model.config.vocab_size),
                torch.finfo(next(model.parameters()).dtype).bits // 8))
        if settings.edges is not None and settings.edges > total_edges:
            raise SubnetlabError(f"edges {settings.edges:,} is more than the model's {total_edges:,} edges",
                                 setting="edges")
        gc.collect()
        gc.freeze()  # the models and the modules imported: no garbage, so the collections between steps skip them
        try:
            def exact_flops(n: int, s: PlanSettings, one: int, two: int) -> int:
                """FLOPs of exact patching of the run's edges at the sample of ``n`` layers: the clean and
                corrupted forwards (``2 f``) and a forward of the batch per edge (``p``), from step 0's forward
                of ``c`` patched copies (``2 f + c p``) and step 1's two (``2 f + 2 c p``)."""
                copies = exact_patched(built[n][0], graphs[n], s)
                per_edge = Fraction(two - one, copies) if two != one else Fraction(0)
                return round(one - copies * per_edge + (s.edges or total_edges) * per_edge) if two != one else two

            def places_at(s: PlanSettings, flops: bool) -> tuple[dict[Any, int], int]:
                """Each place's peak (``LiveBytes.phase_peaks``, its own weights' included, not the other samples')
                and the step's FLOPs at the model's depth: measured, or fitted from the samples."""
                places, persistent, counted, exact_counts = {}, {}, {}, {}
                for n, (model, adapter, weights) in built.items():
                    others = live.live - weights
                    peak, counted[n] = measure_step(model, adapter, s, live, flops)
                    exact_counts[n] = list(live.step_flops)
                    places[n] = {key: value - others for key, value in live.phase_peaks.items()}
                    if not samples:  # the step's own peak, at least every place's (sampled: not one polynomial)
                        places[n][("", "step")] = peak - others
                    persistent[n] = live.between_steps - others
                if s.method == "exact" and flops:  # step 0 patches one forward of edges, step 1 two
                    counted = {n: exact_flops(n, s, *exact_counts[n]) for n in counted}
                if samples:
                    return fitted_places(places, layers, persistent), quadratic_at(counted, layers)
                return places[layers], counted[layers]

            at_micro, flops = places_at(settings, True)
            peak = max(at_micro.values())
            largest = fit_micro = fit_peak = None
            if memory is not None:
                found = {settings.micro: at_micro}
                largest, fit_micro, fit_peak = fitting_micro_batch(
                    settings, memory, lambda m: found.get(m) or found.setdefault(
                        m, places_at(settings.with_micro(m), False)[0]))
        finally:
            gc.unfreeze()
    weights = quadratic_at({n: b[2] for n, b in built.items()}, layers) if samples else built[layers][2]
    return Plan(settings, name, weights, peak, flops, steps, largest, memory, layers, samples, steps_from, fit_micro,
                fit_peak)


def fitting_micro_batch(settings: PlanSettings, memory: int, places_at: Callable[[int], dict[Any, int]]
                        ) -> tuple[int, int | None, int | None]:
    """``(largest, fix, its peak)``: the largest micro-batch whose peak fits ``memory`` and, where the planned one
    does not fit, the largest that does and keeps the batch (a divisor of it where the method accumulates).

    ``places_at(m)`` is each place's peak at micro-batch ``m``. Between the sizes where the method's step changes
    (``micro_batch_breaks``: blocks checkpointed, positions chunked) every place's peak is a line in ``m``, so two
    sizes of a range give the whole range (``MicroBatchLines``); the ranges are tried from the largest down, and
    the first with a size that fits holds the answer: two measurements, or four across a change."""
    from subnetlab.runs.plan.circuit import micro_batch_breaks

    cuts = sorted({b for b in micro_batch_breaks(settings) if 1 < b <= MAX_MICRO_BATCH})
    ranges = list(zip([1, *cuts], [*(c - 1 for c in cuts), MAX_MICRO_BATCH]))
    lines: dict[tuple[int, int], MicroBatchLines] = {}

    def lines_of(lo: int, hi: int) -> MicroBatchLines:
        if (lo, hi) not in lines:
            m1 = settings.micro if lo <= settings.micro <= hi else lo
            m2 = m1 // 2 if m1 // 2 >= lo else min(hi, 2 * m1)
            lines[lo, hi] = MicroBatchLines.through(m1, places_at(m1), m2, places_at(m2))
        return lines[lo, hi]

    def peak_at(m: int) -> int:
        return lines_of(*next(r for r in ranges if r[0] <= m <= r[1])).peak(m)

    largest = 0
    for lo, hi in reversed(ranges):
        largest = min(hi, lines_of(lo, hi).largest(memory))
        if largest >= lo:
            break
        largest = 0
    if not largest or max(places_at(settings.micro).values()) <= memory:  # measured already
        return largest, None, None
    fix = largest if settings.method in UNACCUMULATED else max(
        d for d in range(1, min(largest, settings.batch) + 1) if settings.batch % d == 0 and peak_at(d) <= memory)
    return largest, fix, peak_at(fix)


@dataclass(frozen=True)
class MicroBatchLines:
    """The step's peak as a function of the micro-batch ``m``: the largest of its places' lines ``a + b m``.

    A place's bytes (a stored activation, a gradient, the logits) are a fixed part (weights, masks, optimiser
    state) plus a part in proportion to the examples of a forward, so two micro-batches give each place's line and
    the largest of the lines is the peak at any other; where the peak's place changes with ``m`` (the set-up's
    evaluation batch at small ones, the step's backward at large ones) the lines' maximum follows it. The test
    against a direct measurement at a size not measured: ``tests/unit/test_plan.py``."""

    lines: dict[Any, tuple[Fraction, Fraction]]  # place -> (bytes at m = 0, bytes per example of a micro-batch)

    @classmethod
    def through(cls, m1: int, at_m1: dict[Any, int], m2: int, at_m2: dict[Any, int]) -> "MicroBatchLines":
        lines = {}
        for key in set(at_m1) & set(at_m2):
            slope = Fraction(at_m2[key] - at_m1[key], m2 - m1) if m2 != m1 else Fraction(0)
            lines[key] = (at_m1[key] - slope * m1, slope)
        return cls(lines)

    def peak(self, m: int) -> int:
        return math.ceil(max(a + b * m for a, b in self.lines.values()))

    def largest(self, memory: int) -> int:
        """The largest micro-batch (at most ``MAX_MICRO_BATCH``) whose peak fits ``memory``; 0 when one does not."""
        if self.peak(1) > memory:
            return 0
        bounds = [math.floor((memory - a) / b) for a, b in self.lines.values() if b > 0]
        m = max(1, min([MAX_MICRO_BATCH, *bounds]))
        while m > 1 and self.peak(m) > memory:  # rounding
            m -= 1
        return m


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

    if settings.method in ATTRIBUTION:
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
    place, the phases ``setup``, ``step0``, ``step1``), the FLOPs of the second counted by ``live`` itself
    (``plan.memory.LiveBytes.count_flops``: it keeps nothing alive, so the same step gives both; each step's in
    ``live.step_flops``); 0 FLOPs without ``flops``."""
    gc.collect()
    live.reset_peak()
    live.phase = "setup"
    step = run_step(model, adapter, settings, live)
    live.step_flops = []
    try:
        for i in (0, 1):
            live.phase = f"step{i}"
            live.count_flops, live.flops = flops, 0
            step(i)
            live.step_flops.append(live.flops)
        live.count_flops = False
        peak, places = live.peak, dict(live.phase_peaks)
        live.between_steps = live.live  # weights, masks, optimiser state: what stays alive from step to step
    finally:
        live.count_flops = False
        step(-1)
    del step
    gc.collect()
    live.phase_peaks = places
    return peak, live.step_flops[1] if flops else 0


__all__ = ["H100_BF16_DENSE", "MAX_MICRO_BATCH", "MicroBatchLines", "Plan", "check_length", "count_steps",
           "default_sizes", "fitting_micro_batch", "measure_step", "plan_run", "run_step", "steps_of"]
