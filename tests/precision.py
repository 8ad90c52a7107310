"""Tolerances that follow from float32, for tests that compare a command's result with the test's own computation.

Two code paths that compute one logit difference in float32 (another batch order, fused or unfused attention)
agree to about 1e-5 of its size, not to float64's 1e-9; a faithfulness ``(m - empty) / (full - empty)`` (and an
area under such a curve) carries that error divided by ``full - empty``.
"""

from __future__ import annotations

FLOAT32_RELATIVE = 3e-5  # a few float32 roundings (1.2e-7 each) accumulated over a small model's forward


def faithfulness_tolerance(full: float, empty: float, *others: float) -> float:
    """The absolute tolerance of a faithfulness (or its area) whose logit differences are ``full``, ``empty`` and
    ``others``, computed in float32 along two code paths."""
    scale = max(abs(full), abs(empty), *(abs(o) for o in others), 1.0)
    return FLOAT32_RELATIVE * scale / max(abs(full - empty), 1e-12)
