"""Calibration: the short-and-long timing on a fake clock, which studies are timed, and one real call path (GPT-2,
tiny) returning every unit the estimate counts. No test reads the time."""

from __future__ import annotations

import copy

from subnetlab.experiments.demo import calibrate as cal
from subnetlab.experiments.demo.estimate import subtask_induction_stages
from subnetlab.experiments.subtask_induction.reproduce import PRESETS as SI


class StepClock:
    """``run(n)`` advances the clock by a set-up cost and ``n`` steps of a fixed cost."""

    def __init__(self, setup: float, step: float) -> None:
        self.t, self.setup, self.step, self.calls = 0.0, setup, step, []

    def __call__(self) -> float:
        return self.t

    def run(self, n: int) -> None:
        self.calls.append(n)
        self.t += self.setup + n * self.step


def test_per_unit_cancels_set_up_after_a_warm_up():
    clock = StepClock(setup=7.0, step=0.5)
    assert cal.per_unit(clock.run, 2, 6, clock) == 0.5
    assert clock.calls == [2, 6, 2]  # the warm-up, then the long and the short run


def test_per_unit_is_never_negative():
    clock = StepClock(setup=0.0, step=-1.0)
    assert cal.per_unit(clock.run, 1, 3, clock) == 0.0


def _tiny_si() -> dict:
    s = copy.deepcopy(SI["demo"])
    s.update(layers=[1], n_eval=64, cs_batch=16, transfer_batch=16, max_number=20, backend="local")
    return s


def test_only_the_studies_asked_for_are_timed_minilm_once_and_a_sweep_start_only_for_worker_processes(monkeypatch):
    timed = []
    monkeypatch.setattr(cal, "minilm_rates", lambda hc, lot, clock: timed.append(("minilm", hc, lot)) or {"m": 1.0})
    monkeypatch.setattr(cal, "gpt2_rates", lambda s, clock: timed.append(("gpt2",)) or {"g": 2.0})
    monkeypatch.setattr(cal, "circuits_rates", lambda s, clock: timed.append(("tiny",)) or {"t": 3.0})
    monkeypatch.setattr(cal, "sweep_start_rate", lambda clock=None: 2.5)
    clock = StepClock(0.0, 0.0)
    hc, lot = {"backend": "local", "name": "hc"}, {"backend": "local", "name": "lot"}
    assert cal.calibrate({"circuits": {"backend": "local"}}, clock=clock) == {"t": 3.0} and timed == [("tiny",)]
    timed.clear()
    assert cal.calibrate({"heuristic-core": hc, "lottery": lot}, clock=clock) == {"m": 1.0}
    assert timed == [("minilm", hc, lot)]  # the two MiniLM studies share one timing
    assert cal.calibrate({"lottery": {"backend": "processes"}}, clock=clock) == {"m": 1.0, "sweep_start": 2.5}
    assert timed[-1] == ("minilm", None, {"backend": "processes"})


def test_job_threads_one_for_worker_processes():
    assert cal.job_threads({"backend": "local"}, None) == 0
    assert cal.job_threads(None, {"backend": "processes"}) == 1


def test_gpt2_rates_cover_every_unit_the_estimate_counts():
    """The real call path on a one-layer arithmetic GPT-2: one rate per unit of the study's stages."""
    rates = cal.gpt2_rates(_tiny_si())
    counted = {u for s in subtask_induction_stages(_tiny_si()) for job in (*s.jobs, s.serial) for u in job}
    assert set(rates) == counted and all(r >= 0 for r in rates.values())
