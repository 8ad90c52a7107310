"""Target-sparsity schedules and the learning-rate decay for hard-concrete pruning.

``LinearSchedule`` is the paper's: the target rises linearly from 0 to the final
sparsity over ``warmup_steps``, then holds until ``total_steps``. The paper's
step counts (Appendix B) are ``paper_steps``.

``StaircaseSchedule`` serves the effective-size analysis: one run climbs through
a list of levels (``0.05, 0.10, ..., 0.70``), ramping linearly to each level over
``ramp_steps`` (the first over ``first_ramp_steps``) and holding it for
``hold_steps``; when a hold ends, the trainer saves that level's subnetwork.
One staircase run replaces one independent run per level.
"""

from __future__ import annotations

from dataclasses import dataclass

from subnetlab.errors import SubnetlabError, check_count


def paper_steps(sparsity: float) -> tuple[int, int]:
    """``(warmup_steps, total_steps)`` from Appendix B of Bhaskar et al. (2024).

    ``warmup_steps = 6500 + 50 * sp`` and ``total_steps = warmup_steps + 6 * sp``
    with ``sp`` the target in percent: 50% -> (9000, 9300), as the paper states.
    (For 70% the formula gives (10000, 10420); the paper's text says 10500 total.)
    """
    sp = 100.0 * sparsity
    warmup = round(6500 + 50 * sp)
    return warmup, warmup + round(6 * sp)


@dataclass(frozen=True)
class LinearSchedule:
    """Target ``sparsity * step / warmup_steps`` during warm-up, then ``sparsity``."""

    sparsity: float
    warmup_steps: int
    total_steps: int

    def __post_init__(self) -> None:
        _check_fraction(self.sparsity, "target sparsity")
        if self.total_steps < 1:
            raise SubnetlabError(f"total_steps {self.total_steps} must be at least 1", setting="total_steps")
        if self.warmup_steps < 0:
            raise SubnetlabError(f"warmup_steps {self.warmup_steps} must not be negative", setting="warmup_steps")
        if self.warmup_steps > self.total_steps:  # a preset's warm-up with a shorter run given: name the other one
            raise SubnetlabError(f"total_steps {self.total_steps} is shorter than the warm-up, warmup_steps "
                                 f"{self.warmup_steps}: the target is reached at the warm-up's end, so lower "
                                 f"warmup_steps to at most {self.total_steps} too (or give more total_steps)",
                                 setting="total_steps")
        check_count("total_steps", self.total_steps)

    def target(self, step: int) -> float:
        if step >= self.warmup_steps:
            return self.sparsity
        return self.sparsity * step / self.warmup_steps

    def level_ends(self) -> dict[int, float]:
        """Steps (completed) after which a level's subnetwork is saved: only the final one."""
        return {self.total_steps: self.sparsity}


@dataclass(frozen=True)
class StaircaseSchedule:
    """Ramp to each level in turn and hold it; a level is done when its hold ends."""

    levels: tuple[float, ...]
    ramp_steps: int
    hold_steps: int
    first_ramp_steps: int | None = None

    def __post_init__(self) -> None:
        if not self.levels:
            raise SubnetlabError("levels: a staircase needs at least one level", setting="levels")
        for level in self.levels:
            _check_fraction(level, "levels")
        if any(b <= a for a, b in zip(self.levels, self.levels[1:])):
            raise SubnetlabError(f"levels must increase: {list(self.levels)}", setting="levels")
        first = self.ramp_steps if self.first_ramp_steps is None else self.first_ramp_steps
        if self.ramp_steps < 0 or first < 0 or self.hold_steps < 1:
            raise SubnetlabError(f"staircase needs ramp_steps >= 0 and hold_steps >= 1, got {self.ramp_steps}, {self.hold_steps}")
        check_count("total_steps", self.total_steps)

    @property
    def sparsity(self) -> float:
        return self.levels[-1]

    @property
    def _first(self) -> int:
        return self.ramp_steps if self.first_ramp_steps is None else self.first_ramp_steps

    def _starts(self) -> list[int]:
        """Step at which each level's ramp begins."""
        starts, step = [], 0
        for i in range(len(self.levels)):
            starts.append(step)
            step += (self._first if i == 0 else self.ramp_steps) + self.hold_steps
        return starts

    @property
    def total_steps(self) -> int:
        return self._first + self.hold_steps + (len(self.levels) - 1) * (self.ramp_steps + self.hold_steps)

    def target(self, step: int) -> float:
        starts = self._starts()
        for i in reversed(range(len(self.levels))):
            if step >= starts[i]:
                ramp = self._first if i == 0 else self.ramp_steps
                previous = self.levels[i - 1] if i else 0.0
                into = step - starts[i]
                if into >= ramp:
                    return self.levels[i]
                return previous + (self.levels[i] - previous) * into / ramp
        return 0.0

    def level_ends(self) -> dict[int, float]:
        starts = self._starts() + [self.total_steps]
        return {starts[i + 1]: level for i, level in enumerate(self.levels)}


def parse_levels(text: str) -> tuple[float, ...]:
    """``0.05:0.70:0.05`` (start:stop:step, inclusive) or ``0.1,0.3,0.5``."""
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if step <= 0 or stop < start:
                raise ValueError
            n = int(round((stop - start) / step)) + 1
            levels = tuple(round(start + i * step, 6) for i in range(n) if start + i * step <= stop + 1e-9)
        else:
            levels = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise SubnetlabError(f"levels: malformed value {text!r} (expected e.g. 0.05:0.70:0.05 or 0.1,0.3,0.5)",
                             setting="levels") from None
    for level in levels:
        _check_fraction(level, "levels")
    return levels


def _check_fraction(value: float, name: str) -> None:
    if not 0.0 < value < 1.0:
        raise SubnetlabError(f"{name}: {value} is outside (0, 1)", setting=name)
