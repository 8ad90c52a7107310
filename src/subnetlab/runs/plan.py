"""A plan before the run: peak memory, FLOPs per step, steps, and the largest batch that fits a memory.

The model is built from its config under PyTorch's ``FakeTensorMode`` (no weights allocated) and the method's
own step runs on it: ``Pruner.step`` (head/MLP pruning), ``EdgePruner.step`` (edge pruning), ``attribute_batch``
(EAP, EAP-IG), with the trainer's set-up (the full model's outputs, installed masks, the ablation's values)
and two optimiser steps (the second holds the first's optimiser state and the previous batch's corrupted
values while it captures its own). ``plan_memory.LiveBytes`` counts the bytes alive and their peak;
``torch.utils.flop_counter.FlopCounterMode`` the FLOPs of one step (matrix products and attention).

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
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from subnetlab.errors import SubnetlabError

METHODS = ("head-pruning", "edge-pruning", "eap", "eap-ig")
DTYPES = ("float32", "bfloat16", "float16")
PACKAGED_CONFIGS = Path(__file__).resolve().parents[1] / "models" / "configs"  # bert-base, gpt2-small, ...
MAX_MICRO_BATCH = 1 << 16  # the largest micro-batch the search tries
H100_BF16_DENSE = 989e12  # FLOP/s: an H100 SXM's dense bf16 tensor-core peak, for a time lower bound
PAPER_SPARSITY = {"head-pruning": 0.5, "edge-pruning": 0.95}


@dataclass(frozen=True)
class PlanSettings:
    """What a run does per step: the method, examples per optimiser step (``batch``, of ``micro_batch`` per
    forward), tokens per example, the frozen weights' dtype. ``examples``: the pairs an attribution run scores
    (its steps are their batches)."""

    method: str
    batch: int
    length: int
    micro_batch: int | None = None
    dtype: str = "float32"
    preset: str = "paper"
    sparsity: float | None = None
    ig_steps: int = 5
    examples: int | None = None
    labels: int = 3  # classes of a classification task (MNLI: 3)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise SubnetlabError(f"method {self.method!r}: choose one of {', '.join(METHODS)}", setting="method")
        for name in ("batch", "length", "ig_steps", "labels"):
            if int(getattr(self, name)) < 1:
                raise SubnetlabError(f"{name} {getattr(self, name)} must be at least 1", setting=name)
        for name in ("micro_batch", "examples"):
            if getattr(self, name) is not None and int(getattr(self, name)) < 1:
                raise SubnetlabError(f"{name} {getattr(self, name)} must be at least 1", setting=name)
        if self.batch % self.micro:
            raise SubnetlabError(f"micro-batch {self.micro} does not divide the batch {self.batch}",
                                 setting="micro_batch")
        if self.method in ("eap", "eap-ig") and self.micro != self.batch:
            raise SubnetlabError("attribution has no optimiser step to accumulate micro-batches into: its batch "
                                 "is the micro-batch", setting="micro_batch")
        if self.dtype not in DTYPES:
            raise SubnetlabError(f"dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}", setting="dtype")
        if self.sparsity is not None and not 0.0 < self.sparsity < 1.0:
            raise SubnetlabError(f"sparsity {self.sparsity} is outside (0, 1)", setting="sparsity")

    @property
    def micro(self) -> int:
        return self.micro_batch or self.batch

    def with_micro(self, micro: int) -> "PlanSettings":
        """The same run at ``micro`` examples per forward (the batch a whole number of micro-batches)."""
        from dataclasses import replace

        batch = micro if self.method in ("eap", "eap-ig") else micro * (self.batch // self.micro)
        return replace(self, batch=batch, micro_batch=micro)


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
    layers_sampled: tuple[int, ...] | None = None  # planned at these depths and fitted (runs.plan_layers)

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
                "time_bound_s_at_h100_bf16_peak": self.time_bound()}


def read_model_config(source: str) -> Any:
    """A model's config from a ``config.json`` file, a directory holding one, a config shipped with subnetlab by
    name (``llama-3.1-8b``: ``PACKAGED_CONFIGS``) or a hub id already in the local cache (nothing is downloaded)."""
    from transformers import AutoConfig

    from subnetlab.models.aliases import resolve

    path = Path(resolve(source)).expanduser()
    packaged = PACKAGED_CONFIGS / f"{source.removesuffix('.json')}.json"
    if not path.exists() and "/" not in source and packaged.is_file():
        path = packaged
    if path.is_dir() and not (path / "config.json").is_file():
        raise SubnetlabError(f"{source}: a directory without a config.json", setting="model")
    if not path.exists() and (source.startswith((".", "/", "~")) or source.endswith(".json") or source.count("/") > 1):
        raise SubnetlabError(f"{source}: no such file or directory", setting="model")
    try:
        if path.is_file():
            config = AutoConfig.from_pretrained(str(path))
        else:
            config = AutoConfig.from_pretrained(str(path) if path.exists() else source, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = "" if path.exists() else " (a hub id is read from the local cache only; plan downloads nothing)"
        raise SubnetlabError(f"{source}: not a model config{where}: {first}", setting="model") from None
    return config


def plan_run(config: Any, settings: PlanSettings, name: str = "model", memory: int | None = None,
             layers_sampled: tuple[int, ...] | None = None) -> Plan:
    """The plan of ``settings`` on the model of ``config`` (module docstring); with ``memory`` (bytes), also the
    largest micro-batch whose peak fits it. With ``layers_sampled`` (three or more layer counts below the model's),
    the model is planned at those depths and each quantity fitted to its own (``runs.plan_layers``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from subnetlab.runs.plan_layers import check_samples, fitted_peak, layer_count, quadratic_at, with_layers
    from subnetlab.runs.plan_memory import LiveBytes

    layers = layer_count(config)
    samples = check_samples(layers_sampled, layers) if layers_sampled is not None else None
    with FakeTensorMode(allow_non_fake_inputs=True), LiveBytes(fake=True) as live:
        built: dict[int, tuple[Any, Any, int]] = {}  # layer count -> (model, adapter, its weights' bytes)
        for n in samples or (layers,):
            before = live.live
            model, adapter = fake_model(with_layers(config, n) if samples else config, settings)
            built[n] = (model, adapter, live.live - before)

        def measured(s: PlanSettings, flops: bool) -> tuple[dict[int, int], dict[int, dict[Any, int]], dict[int, int]]:
            """Per layer count: the peak (its own weights, not the other samples'), the places' peaks, FLOPs."""
            peaks, places, counted = {}, {}, {}
            for n, (model, adapter, weights) in built.items():
                others = live.live - weights
                peak, counted[n] = measure_step(model, adapter, s, live, flops)
                peaks[n] = peak - others
                places[n] = {key: value - others for key, value in live.phase_peaks.items()}
            return peaks, places, counted

        def peak_at(s: PlanSettings) -> int:
            peaks, places, _ = measured(s, False)
            return fitted_peak(places, layers) if samples else peaks[layers]

        peaks, places, counted = measured(settings, True)
        if samples:
            weights = quadratic_at({n: b[2] for n, b in built.items()}, layers)
            peak, flops = fitted_peak(places, layers), quadratic_at(counted, layers)
        else:
            weights, peak, flops = built[layers][2], peaks[layers], counted[layers]
        largest = None
        if memory is not None:
            largest = largest_micro_batch(lambda m: peak_at(settings.with_micro(m)), settings.micro, peak, memory)
    return Plan(settings, name, weights, peak, flops, count_steps(settings), largest, memory, layers, samples)


def fake_model(config: Any, settings: PlanSettings) -> tuple[Any, Any]:
    """The model of ``config`` with the head the method uses (a decoder's language-model head; an encoder's
    classifier), in ``settings.dtype``; under ``FakeTensorMode`` its weights take no memory."""
    import copy

    import torch

    from subnetlab.models.adapters import FAMILIES, attention_for, get_adapter
    from subnetlab.models.loading import HEADS

    kind = next((s.kind for s in FAMILIES.values() if getattr(config, "model_type", None) in s.model_types), None)
    if kind is None:
        get_adapter(type("Unsupported", (), {"config": config})())  # the families' own refusal
    if settings.method != "head-pruning" and kind != "decoder":
        raise SubnetlabError(f"{settings.method} needs a causal language model; {config.model_type} is not one",
                             setting="model")
    config = copy.deepcopy(config)
    if kind != "decoder":
        config.num_labels = settings.labels
    head = "causal-lm" if kind == "decoder" else "classification"
    model = HEADS[head].from_config(config, dtype=getattr(torch, settings.dtype),
                                    attn_implementation=attention_for(config.model_type, "sdpa"))
    model.eval()
    return model, get_adapter(model)


def fake_data(model: Any, adapter: Any, size: int, length: int) -> Any:
    """``size`` examples of ``length`` tokens: prompt pairs for a decoder (the answer at the last position),
    classification rows for an encoder; made when a batch is asked for (under the fake mode: no memory).

    Without padding: a padded batch carries an attention mask, which under fake tensors transformers always
    expands to ``[batch, 1, length, length]`` (it cannot read that the mask is all ones), sending attention to
    the kernel that keeps its weights; real batches of equal length skip the mask."""
    import torch

    from subnetlab.methods.edge_pruning.data import prediction_logits
    from subnetlab.methods.l0.data import PruningData

    decoder = adapter.spec.kind == "decoder"

    def batch_at(indices: Any) -> dict[str, Any]:
        n = len(list(indices))
        ids = torch.zeros(n, length, dtype=torch.long)
        batch = {"input_ids": ids, "attention_mask": None}  # no padding: the causal kernel without a mask
        if decoder:
            batch.update(corrupted_input_ids=torch.zeros(n, length, dtype=torch.long),
                         answer_index=torch.full((n,), length - 1, dtype=torch.long),
                         answer_id=torch.zeros(n, dtype=torch.long), wrong_id=torch.ones(n, dtype=torch.long))
        return batch

    if decoder:
        return PruningData(size, batch_at, prediction_logits, key={"plan": size})
    return PruningData(size, batch_at, key={"plan": size})


def method_config(settings: PlanSettings) -> Any:
    """The method's settings for the run: its preset at the sparsity, the micro-batch and the accumulation."""
    sizes = {"batch_size": settings.micro, "accumulation": settings.batch // settings.micro}
    sparsity = settings.sparsity or PAPER_SPARSITY.get(settings.method, 0.5)
    if settings.method == "head-pruning":
        from subnetlab.methods.head_pruning.config import preset_config

        return preset_config(settings.preset, sparsity, max_length=settings.length, **sizes)
    if settings.method == "edge-pruning":
        from subnetlab.methods.edge_pruning.config import preset_config as edge_preset

        return edge_preset(settings.preset, sparsity, dtype=settings.dtype, **sizes)
    return None


def count_steps(settings: PlanSettings) -> int:
    """Optimiser steps (pruning), or batches of pairs (attribution: one batch when ``examples`` is not given)."""
    config = method_config(settings)
    if config is not None:
        return int(config.total_steps)
    return math.ceil((settings.examples or settings.batch) / settings.batch)


def run_step(model: Any, adapter: Any, settings: PlanSettings, live: Any = None) -> Callable[[int], None]:
    """Set up the method on ``model`` and return ``step(i)``, the method's own step; ``step(-1)`` tears down.

    The trainer (masks, multipliers, optimiser) is built with real tensors (``plan_memory.built_for_real``), which
    ``live`` counts."""
    import torch

    from subnetlab.runs.plan_memory import built_for_real

    config = method_config(settings)
    if settings.method in ("eap", "eap-ig"):
        return attribution_step(model, adapter, settings)
    data = fake_data(model, adapter, max(settings.batch, config.eval_batch_size), settings.length)
    if settings.method == "head-pruning":
        from subnetlab.intervene.activations import collect_means
        from subnetlab.methods.head_pruning.train import Pruner

        means = None
        if config.ablation == "mean":
            means = collect_means(model, adapter, (data.model_inputs(data.batch_at(range(settings.micro))),))
        with built_for_real():
            trainer = Pruner(model, adapter, data, config, ablation=means)
    else:
        from subnetlab.methods.edge_pruning.train import EdgePruner

        with built_for_real():
            trainer = EdgePruner(model, adapter, data, config)
            with torch.no_grad():  # undecided masks (a run's middle): every writer in the products, not a start's none
                trainer.edges.log_alpha.zero_()
    if live is not None:
        for group in trainer.optimizer.param_groups:
            for p in group["params"]:
                live.count(p)
    trainer.__enter__()

    def step(i: int) -> None:
        if i < 0:
            trainer.__exit__(None, None, None)
        else:
            trainer.step(i)

    return step


def attribution_step(model: Any, adapter: Any, settings: PlanSettings) -> Callable[[int], None]:
    from subnetlab.methods.attribution.scores import attribute_batch
    from subnetlab.models.graph import Graph
    from subnetlab.tasks.circuits.metrics import logit_difference
    from subnetlab.tasks.circuits.pairs import clean_inputs, corrupted_inputs

    graph = Graph.from_adapter(adapter)
    data = fake_data(model, adapter, settings.batch, settings.length)
    method = settings.method

    def step(i: int) -> None:
        if i < 0:
            return
        batch = data.batch_at(range(settings.batch))
        attribute_batch(model, adapter, graph, clean_inputs(batch), corrupted_inputs(batch),
                        lambda logits, full: logit_difference(logits, batch), method=method,  # type: ignore[arg-type]
                        steps=settings.ig_steps)

    return step


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


def largest_micro_batch(peak_at: Callable[[int], int], micro: int, peak: int, memory: int) -> int:
    """The largest micro-batch whose peak fits ``memory`` (0 when not even one example fits): a line through the
    peaks at ``micro`` and ``2 micro`` names a candidate, which is checked with the one above it; where the line is
    off, bisection between the largest size seen to fit and the smallest seen not to."""
    known = {micro: peak}

    def fits(m: int) -> bool:
        if m not in known:
            known[m] = peak_at(m)
        return known[m] <= memory

    fits(2 * micro)
    slope = max(1.0, (known[2 * micro] - peak) / micro)
    guess = max(1, int((memory - (peak - slope * micro)) // slope))
    for m in (guess, guess + 1):
        fits(m)
    while True:
        lo = max((m for m, v in known.items() if v <= memory), default=0)
        hi = min((m for m, v in known.items() if v > memory), default=None)
        if hi is None and lo >= MAX_MICRO_BATCH:
            return lo
        if hi is None:  # everything tried fits: the line was pessimistic; double until one does not
            fits(2 * lo)
            continue
        if hi - lo <= 1:
            return lo
        fits((lo + hi) // 2)


UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
         "GIB": 2**30, "TIB": 2**40}


def parse_memory(text: str) -> int:
    """``80GB``, ``80 GiB``, ``512MB`` or bytes -> bytes."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else None
    if match is None or unit not in UNITS or float(match.group(1)) <= 0:
        raise SubnetlabError(f"memory {text!r}: expected a positive size such as 80GB, 24GiB or 512MB",
                             setting="memory")
    return int(float(match.group(1)) * UNITS[unit])


def format_bytes(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def format_flops(n: int) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} FLOP"


def format_seconds(t: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if t >= size:
            return f"{t / size:.3g} {unit}"
    return f"{t:.3g} s"


def plan_table(plans: list[Plan]) -> str:
    """A Markdown table, one row per plan; a row fitted from fewer layers says so in its layers column."""
    head = ["model", "method", "dtype", "batch x length (micro)", "layers", "weights", "peak memory", "FLOPs / step",
            "steps", "time >= (at 989 TFLOP/s)", "largest micro-batch"]
    rows = []
    for p in plans:
        s = p.settings
        fits = "" if p.memory_limit is None else f"{p.largest_micro_batch} in {format_bytes(p.memory_limit)}"
        layers = "" if p.layers is None else str(p.layers)
        if p.layers_sampled:
            layers += f" (fitted from {', '.join(map(str, p.layers_sampled))})"
        rows.append([p.model, s.method, s.dtype, f"{s.batch} x {s.length} ({s.micro})", layers,
                     format_bytes(p.weights_bytes), format_bytes(p.peak_bytes), format_flops(p.flops_per_step),
                     f"{p.steps:,}", format_seconds(p.time_bound()), fits])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


__all__ = ["DTYPES", "H100_BF16_DENSE", "METHODS", "Plan", "PlanSettings", "count_steps", "fake_data", "fake_model", "format_bytes",
           "largest_micro_batch", "measure_step", "parse_memory", "plan_run", "plan_table", "read_model_config",
           "run_step"]
