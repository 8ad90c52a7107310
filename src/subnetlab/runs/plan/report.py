"""A plan in words: memory sizes read from text (``parse_memory``) and the plans' Markdown table."""

from __future__ import annotations

from typing import Any

from subnetlab.errors import SubnetlabError

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


def plan_table(plans: list[Any]) -> str:
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
                     f"{p.steps:,}" + (f" ({p.steps_from})" if p.steps_from else ""),
                     format_seconds(p.time_bound()), fits])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def verdict(plan: Any) -> str:
    """One line: what the peak is, whether it fits the memory given and, if not, the micro-batch that does."""
    what = (f"peak {format_bytes(plan.peak_bytes)}: the step's tensors above the idle process (weights included; "
            "not the CUDA context or the allocator's fragmentation, a few GB on a GPU)")
    if plan.memory_limit is None:
        return what
    limit = format_bytes(plan.memory_limit)
    if plan.fits():
        return f"fits {limit}: {what}"
    if plan.fit_micro_batch:
        return (f"does not fit {limit}: {what}; with micro-batch {plan.fit_micro_batch} it needs "
                f"{format_bytes(plan.fit_peak_bytes)} and fits")
    return f"does not fit {limit} even at one example per forward: {what}"


__all__ = ["verdict", "format_bytes", "format_flops", "format_seconds", "parse_memory", "plan_table"]
