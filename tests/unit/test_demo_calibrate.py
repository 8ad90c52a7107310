"""Calibration: the timing loop on a fake clock, and the GPT-2 rates on a one-layer arithmetic model."""

from __future__ import annotations

import copy

from subnetlab.experiments.demo.calibrate import _median_time, calibrate, gpt2_rates
from subnetlab.experiments.demo.estimate import UNITS
from subnetlab.experiments.subtask_induction.reproduce import PRESETS as SI


class StepClock:
    """Each call to the timed function advances the clock by the next of ``durations``."""

    def __init__(self, durations):
        self.t, self.durations, self.calls = 0.0, list(durations), 0

    def __call__(self) -> float:
        return self.t

    def step(self, _i: int) -> None:
        self.t += self.durations[self.calls]
        self.calls += 1


def test_median_after_a_warm_up_call():
    clock = StepClock([10.0, 1.0, 3.0, 2.0])
    assert _median_time(clock.step, 3, clock) == 2.0  # the 10 s warm-up is not counted
    assert clock.calls == 4


def test_budget_stops_early_but_times_at_least_once():
    clock = StepClock([5.0, 4.0, 1.0, 1.0])
    assert _median_time(clock.step, 3, clock, budget=2.0) == 4.0
    assert clock.calls == 2


def _tiny() -> dict:
    s = copy.deepcopy(SI["demo"])
    s.update(layers=[1], n_eval=64, cs_batch=16, transfer_batch=16, max_number=20)
    return s


def test_gpt2_rates_are_positive_per_row():
    rates = gpt2_rates(_tiny(), batches=2)
    assert set(rates) == {"gpt2_eval_row", "gpt2_mask_row", "gpt2_train_row"} <= set(UNITS)
    assert all(r > 0 for r in rates.values())


def test_calibrate_only_the_demos_asked_for():
    cal = calibrate({"subtask-induction": {**_tiny(), "backend": "local"}})
    assert set(cal.rates) == {"gpt2_eval_row", "gpt2_mask_row", "gpt2_train_row"}
    assert cal.seconds > 0 and "gpt2_seconds" in cal.details


def test_minilm_rates_time_one_thread_jobs_when_the_sweeps_run_in_processes():
    """The Heuristic Core demo's sweeps run as one-thread jobs: calibration times those units too (MiniLM, a few
    steps), and only then; the threads are restored afterwards."""
    import torch

    from subnetlab.experiments.demo.calibrate import minilm_rates
    from subnetlab.experiments.heuristic_core.reproduce import PRESETS as HC

    hc = copy.deepcopy(HC["demo"])
    hc["studies"][0]["task_options"] = {**hc["studies"][0]["task_options"], "n_train": 64}
    threads = torch.get_num_threads()
    rates = minilm_rates(hc, steps=1)
    assert set(rates) == {"minilm_gate_step", "minilm_finetune_step", "minilm_eval_example", "minilm_job_gate_step",
                          "minilm_job_eval_example"} <= set(UNITS)
    assert all(r > 0 for r in rates.values()) and torch.get_num_threads() == threads
    hc["backend"] = "local"
    assert set(minilm_rates(hc, steps=1)) == {"minilm_gate_step", "minilm_finetune_step", "minilm_eval_example"}


def test_circuits_rates_are_positive_per_unit():
    from subnetlab.experiments.circuits.reproduce import PRESETS as CIRCUITS
    from subnetlab.experiments.demo.calibrate import circuits_rates

    s = copy.deepcopy(CIRCUITS["demo"])
    s["circuit"] = {**s["circuit"], "batch_size": 8}
    rates = circuits_rates(s)
    assert set(rates) == {"tiny_train_step", "tiny_prune_step", "tiny_node_step", "tiny_eval_pair"} <= set(UNITS)
    assert all(r >= 0 for r in rates.values()) and rates["tiny_eval_pair"] > 0


def test_lottery_rates_cover_every_lottery_unit_and_restore_the_threads():
    """The lottery demo's units on MiniLM (a few steps), with the threads restored afterwards."""
    import torch

    from subnetlab.experiments.demo.calibrate import lottery_rates
    from subnetlab.experiments.lottery.reproduce import PRESETS

    before = torch.get_num_threads()
    small = {**PRESETS["demo"], "batch_size": 4}
    rates = lottery_rates({**small, "backend": "local"})
    assert set(rates) == {u for u in UNITS if u.startswith("lottery_")}
    assert all(r > 0 for r in rates.values())
    assert torch.get_num_threads() == before


def test_a_sweep_start_is_timed_only_when_a_study_runs_worker_processes(monkeypatch):
    import subnetlab.experiments.demo.calibrate as cal

    monkeypatch.setattr(cal, "sweep_start_rate", lambda clock=None: 2.5)
    assert calibrate({"subtask-induction": {**_tiny(), "backend": "local"}}).rates.get("sweep_start") is None
    assert calibrate({"subtask-induction": {**_tiny(), "backend": "processes"}}).rates["sweep_start"] == 2.5
