"""A deep model's plan from the same model at a few layer counts, fitted in the number of layers.

A fake operation costs about a millisecond, and an edge-pruning step has operations in proportion to the layers
and, in its edge sums, to the layers squared; a 32-layer model's step takes minutes to count. Every quantity of a
step is a polynomial of degree at most two in the layer count ``L`` at fixed widths: weights and stored
activations grow with ``L``, edges (masks, the edge sums' FLOPs, the scores of EAP) with ``L`` squared. So the
model is built at three layer counts (``2, 3, 4`` by default), each is planned, and a quadratic through the three
gives the value at ``L`` (exact for weights and FLOPs).

The peak is the maximum over the step, and where it falls moves as the model deepens (the top of the backward,
where the logits' gradients are alive, on a shallow model; inside a layer's backward on a deep one), so it is not
one polynomial. Each place a storage is made (``plan.memory.LiveBytes.phase_peaks``: the phase, and the autograd
node or operator) has its own peak, which is; the plan's peak is the largest of the places' fitted peaks.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from subnetlab.errors import SubnetlabError

DEFAULT_SAMPLES = (2, 3, 4)
SAMPLED_ABOVE = 8  # by default a model with more layers than this is planned from DEFAULT_SAMPLES


def layer_count(config: Any) -> int:
    return int(config.num_hidden_layers)


def with_layers(config: Any, layers: int) -> Any:
    """A copy of ``config`` with ``layers`` layers (GPT-2's ``n_layer`` through its attribute map)."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = layers
    for name in ("layer_types", "mlp_only_layers"):  # per-layer lists some families carry
        value = getattr(config, name, None)
        if isinstance(value, list) and len(value) > layers:
            setattr(config, name, value[:layers])
    return config


def default_samples(config: Any) -> tuple[int, ...] | None:
    """``DEFAULT_SAMPLES`` for a model deeper than ``SAMPLED_ABOVE`` layers, else None (plan it whole)."""
    return DEFAULT_SAMPLES if layer_count(config) > SAMPLED_ABOVE else None


def check_samples(samples: tuple[int, ...], layers: int) -> tuple[int, ...]:
    """Three or more distinct layer counts, each at least 1 and fewer than the model's ``layers``."""
    chosen = tuple(sorted({int(n) for n in samples}))
    if len(chosen) < 3 or chosen[0] < 1:
        raise SubnetlabError(f"layers sampled {list(samples)}: need three distinct layer counts of at least 1 (a "
                             "quadratic in the layer count is fitted through them)", setting="layers_sampled")
    if chosen[-1] >= layers:
        raise SubnetlabError(f"layers sampled {list(samples)}: each must be fewer than the model's {layers} layers",
                             setting="layers_sampled")
    return chosen


def quadratic_at(points: dict[int, int], x: int) -> int:
    """The value at ``x`` of the quadratic through the first three ``(layers, value)`` points (exact arithmetic);
    with more points, the quadratic through the three largest layer counts."""
    xs = sorted(points)[-3:]
    total = Fraction(0)
    for i, xi in enumerate(xs):
        term = Fraction(points[xi])
        for j, xj in enumerate(xs):
            if j != i:
                term *= Fraction(x - xj, xi - xj)
        total += term
    return round(total)


def fitted_peak(places: dict[int, dict[Any, int]], layers: int, persistent: dict[int, int] | None = None) -> int:
    """The largest fitted peak over the places present at every sampled layer count. Not the fit of the step's own
    peak: where its place changes between the samples (120, 130, 160) a quadratic through it is not the step's.

    A place's own peak is linear in the layer count once the model is deep enough for the top and bottom layers'
    special cases (the logits, the embedding) not to set it; at 2 layers they often do, and a quadratic through 2,
    3, 4 takes that kink for curvature (Llama-3.1-8B's edge pruning: 160.7 GB at 32 layers for a step whose
    direct plan is 69.7 GB). What is genuinely quadratic in the layers is what grows with the edges (masks,
    their optimiser state), alive from the set-up on: ``persistent`` (layer count -> bytes alive between steps).
    So each place's curvature is held between 0 and the persistent bytes' own (0 without ``persistent``), and its
    line drawn through the two deepest samples once that curvature is taken off."""
    return max(fitted_places(places, layers, persistent).values())


def fitted_places(places: dict[int, dict[Any, int]], layers: int,
                  persistent: dict[int, int] | None = None) -> dict[Any, int]:
    """Each place's peak at ``layers`` (``fitted_peak``'s fit), for the places present at every sampled count."""
    ns = sorted(places)[-3:]
    limit = max(0.0, float(quadratic_coefficient(persistent, ns))) if persistent else 0.0
    common = set.intersection(*(set(p) for p in places.values()))
    return {key: bounded_fit({n: places[n][key] for n in ns}, layers, limit) for key in common}


def quadratic_coefficient(points: dict[int, int], xs: list[int]) -> Fraction:
    """The ``x^2`` coefficient of the quadratic through ``points`` at the three ``xs`` (0 with fewer)."""
    if len(xs) < 3:
        return Fraction(0)
    a, b, c = xs[-3:]
    return (Fraction(points[c] - points[b], c - b) - Fraction(points[b] - points[a], b - a)) / (c - a)


def bounded_fit(points: dict[int, int], x: int, curvature: float) -> int:
    """The value at ``x`` of the quadratic through the two deepest of ``points`` whose ``x^2`` coefficient is the
    points' own (the three deepest) held within ``[0, curvature]``."""
    xs = sorted(points)
    a = min(max(quadratic_coefficient(points, xs), Fraction(0)), Fraction(curvature))
    if len(xs) < 2:
        return points[xs[-1]]
    lo, hi = xs[-2], xs[-1]
    rest = {n: points[n] - a * n * n for n in (lo, hi)}
    value = rest[hi] + (rest[hi] - rest[lo]) * Fraction(x - hi, hi - lo) + a * x * x
    return round(value)


__all__ = ["DEFAULT_SAMPLES", "SAMPLED_ABOVE", "bounded_fit", "check_samples", "default_samples", "fitted_peak", "fitted_places",
           "layer_count", "quadratic_at", "quadratic_coefficient", "with_layers"]
