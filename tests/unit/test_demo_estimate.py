"""The demo's estimate: work read off the presets (changing with them), bounds where the data decides and the
ablation counted again from its line, the plan's sum of counts x rates and its re-scaling on a fake clock. No test
reads the time."""

from __future__ import annotations

import copy

import pytest

from subnetlab.experiments.circuits.reproduce import PRESETS as CIRCUITS
from subnetlab.experiments.demo import estimate
from subnetlab.experiments.demo.estimate import (
    Plan,
    Stage,
    circuits_stages,
    heuristic_core_stages,
    lottery_stages,
    minutes,
    subtask_induction_stages,
)
from subnetlab.experiments.heuristic_core.reproduce import PRESETS as HC
from subnetlab.experiments.heuristic_core.reproduce import plan as hc_plan
from subnetlab.experiments.lottery.reproduce import PRESETS as LOTTERY
from subnetlab.experiments.subtask_induction.reproduce import PRESETS as SI


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(autouse=True)
def minilm_shape(monkeypatch):
    """MiniLM's 6 layers x 12 heads, without reading its config."""
    monkeypatch.setattr(estimate, "model_shape", lambda model: (6, 12))


def _by_key(stages):
    return {s.key: s for s in stages}


def test_jobs_go_to_the_first_free_worker_after_the_serial_start():
    rates = {"u": 1.0, "s": 3.0}
    assert Stage("d", "a", "A", "", ({"u": 10},) * 3, parallel=2).predicted(rates) == 20.0  # 3 jobs, 2 workers
    jobs = ({"u": 10}, {"u": 10}, {"u": 10}, {"u": 2})
    assert Stage("d", "a", "A", "", jobs, parallel=2).predicted(rates) == 20.0
    assert Stage("d", "a", "A", "", jobs, parallel=1).predicted(rates) == 32.0
    assert Stage("d", "a", "A", "", jobs, parallel=2, serial={"s": 1}).predicted(rates) == 23.0


def _fake_si() -> dict:
    """A small Subtask Induction preset, counted by hand below."""
    s = copy.deepcopy(SI["demo"])
    s.update(layers=[2], base_train=100, base_epochs=3, n_eval=10, n_test=20, cs_samples=50, cs_epochs=4,
             lambdas=[1e-6, 2e-6], sizes=[10], seeds=[0], conditions=["subnetwork", "scratch"], secondary_reinit=None,
             max_number=30, transfer_epochs=5, transfer_min_steps=0, transfer_batch=40, transfer_evals=0, eval_every=2,
             backend="processes", jobs=2)
    s.pop("controls", None), s.pop("control_seeds", None)
    return s


def test_estimate_is_counts_times_rates_for_a_fake_preset():
    stages = subtask_induction_stages(_fake_si(), cores=2)
    assert [s.key for s in stages] == ["L2/base", "L2/discover", "transfer"]
    rates = {"gpt2_train_row": 0.01, "gpt2_mask_row": 0.02, "gpt2_eval_row": 0.001, "sweep_start": 5.0}
    # base: 100 rows x 3 epochs, two evaluations of 10 rows
    base = 300 * 0.01 + 20 * 0.001
    # discovery: one job per lambda (2 on 2 workers: one round) of 50 x 4 mask rows and (4 + 2) x 10 rows, after a start
    discover = 5.0 + 200 * 0.02 + 60 * 0.001
    # transfer: 2 conditions x 1 seed, 5 epochs of 30 + 10 rows, an evaluation every 2 epochs (3) and the test rows
    transfer = 5.0 + 5 * 40 * 0.01 + (3 * 10 + 20) * 0.001
    assert Plan(stages, rates).total() == pytest.approx(base + discover + transfer)


def test_counts_follow_the_preset():
    before = _by_key(subtask_induction_stages(_fake_si(), cores=2))
    changed = _fake_si()
    changed.update(cs_epochs=8, seeds=[0, 1])
    after = _by_key(subtask_induction_stages(changed, cores=2))
    assert after["L2/discover"].jobs[0]["gpt2_mask_row"] == 2 * before["L2/discover"].jobs[0]["gpt2_mask_row"]
    assert len(after["transfer"].jobs) == 2 * len(before["transfer"].jobs)
    local = _by_key(subtask_induction_stages({**_fake_si(), "backend": "local"}, cores=2))
    assert local["transfer"].parallel == 1 and local["transfer"].serial == {}


def test_search_controls_are_counted_as_discoveries_of_the_chosen_lambda():
    plain = _by_key(subtask_induction_stages(_fake_si(), cores=2))
    stages = _by_key(subtask_induction_stages({**_fake_si(), "controls": ["random-weights", "shuffled-labels"],
                                               "control_seeds": [0, 1, 2]}, cores=2))
    assert list(stages) == ["L2/base", "L2/discover", "L2/controls", "transfer"]
    # seeds 1 and 2 of the real search, and 2 controls x 3 seeds: 8 discoveries, each one lambda's job
    assert stages["L2/controls"].jobs == (plain["L2/discover"].jobs[0],) * 8
    assert stages["L2/controls"].match == "search controls: " and stages["L2/controls"].parallel == 2


def test_heuristic_core_pruning_steps_are_the_study_plans():
    settings = copy.deepcopy(HC["tour"])
    planned = hc_plan(settings, ".")["steps"]["nli"]["prune"]["config_by_sparsity"]
    stages = _by_key(heuristic_core_stages(settings, real_hans=False, cores=2))
    assert list(stages) == ["nli/finetune", "nli/prune", "nli/curves", "nli/ablation", "nli/effective-size",
                            "nli/attention"]
    per_seed = sum(c["total_steps"] for c in planned.values())
    steps = [job.get("minilm_job_gate_step", 0) for job in stages["nli/prune"].jobs]
    assert sum(steps) == len(settings["seeds"]) * per_seed and len(steps) == 3 * 2 + 1  # and the full model's job
    # max_steps x batch_size; evaluated at the start and the end on 300 ID rows and 30 subcases x 10
    assert stages["nli/finetune"].jobs == ({"minilm_train_row": 200 * 16, "minilm_eval_row": 2 * (300 + 30 * 10)},)
    held = _by_key(heuristic_core_stages({**settings, "prune_hold_steps": 125}, real_hans=False, cores=2))
    assert sum(j.get("minilm_job_gate_step", 0) for j in held["nli/prune"].jobs) > sum(steps)


def test_heuristic_core_effective_size_is_counted_per_checkpoint_and_seed():
    """The tour's Figure 6: 3 checkpoints x (the full model + 3 staircases of 25 + 10 + 3 x (15 + 10) = 110 steps)."""
    settings = copy.deepcopy(HC["tour"])
    stage = _by_key(heuristic_core_stages(settings, real_hans=False, cores=2))["nli/effective-size"]
    rows = 300 + 4 * 40  # ID rows and the 4 chosen OOD subcases; the curves read no real HANS
    climb = {"minilm_load": 1, "minilm_job_gate_step": 110, "minilm_job_eval_row": 4 * rows + 800}
    full = {"minilm_load": 1, "minilm_job_eval_row": rows + 128}
    assert stage.jobs == (full, climb, climb, climb) * 3 and stage.parallel == 2
    assert stage.match == "[nli] effective size"
    skipped = _by_key(heuristic_core_stages({**settings, "effective_size": None}, real_hans=False, cores=2))
    assert "nli/effective-size" not in skipped


def test_heuristic_core_ablation_counts_a_core_bound_by_the_sparsity():
    """Top-k at 70% keeps 78 - round(0.7 x 78) = 23 of MiniLM's 72 heads and 6 MLPs: the core has at most 23."""
    settings = copy.deepcopy(HC["tour"])
    stage = _by_key(heuristic_core_stages(settings, real_hans=False, cores=2))["nli/ablation"]
    assert stage.bound == "a core of at most 23 heads"
    # none, 10 sampled others, 23 singles, the joint row, all jointly, one control x (23 singles + joint)
    rows = 1 + 10 + 23 + 1 + 1 + 1 * (23 + 1)
    # per pass (160 rows at most per split): ID 160 of 300, OOD 4 x 40, the 3 heuristics' 5 entailment subcases x 10
    per_pass = 160 + 160 + 3 * 5 * 10
    assert stage.jobs == ({"minilm_eval_row": rows * per_pass},)
    # counted again for a core of 7: 16 fewer singles and 16 fewer control rows
    rates = {"minilm_eval_row": 0.001}
    assert stage.predicted(rates, 7) == pytest.approx((rows - 16 * 2) * per_pass * 0.001)
    settings["studies"][0]["sparsities"] = [0.5, 0.9]
    assert _by_key(heuristic_core_stages(settings, real_hans=False))["nli/ablation"].bound == \
        "a core of at most 8 heads"


def test_lottery_pruning_is_counted_at_its_loops_bounds():
    stages = _by_key(lottery_stages(LOTTERY["tour"], cores=2))
    prune = stages["nli-synthetic/prune"]
    # s-pruning: 7 heads a joint step, 3 a heads-only step, one MLP at a time: at most 1 + 71 // 3 + 1 + 6 + 1 = 32
    assert prune.bound == "at most 32 s-pruning and 10 m-pruning steps"
    s_job, m_job = prune.jobs[0], prune.jobs[-1]
    assert s_job == {"minilm_load": 1, "minilm_job_importance_row": 32 * 96, "minilm_job_eval_row": (32 + 3) * 200}
    assert m_job == {"minilm_load": 1, "minilm_job_eval_row": (10 + 3) * 200}
    assert len(prune.jobs) == 3 + 1 and prune.serial == {"sweep_start": 1}
    capped = _by_key(lottery_stages({**LOTTERY["tour"], "prune_max_steps": 5}, cores=2))["nli-synthetic/prune"]
    assert capped.bound == "at most 5 s-pruning and 5 m-pruning steps"
    tuning = {"minilm_load": 1, "minilm_job_train_row": 2000, "minilm_job_eval_row": 400}  # 1 epoch; 200 + 200 rows
    assert stages["nli-synthetic/finetune"].jobs == (tuning,) * 3
    # the subnetworks are re-fine-tuned for the paper's 3 epochs
    assert stages["nli-synthetic/retrain"].jobs == ({**tuning, "minilm_job_train_row": 3 * 2000},) * 6
    same = _by_key(lottery_stages({**LOTTERY["tour"], "retrain_epochs": None}, cores=2))
    assert same["nli-synthetic/retrain"].jobs == (tuning,) * 6


def test_circuits_counts_follow_the_preset():
    stages = _by_key(circuits_stages(CIRCUITS["demo"], cores=2))
    assert list(stages) == ["train", "mechanism", "random", "node", "edge", "controls", "ioi"]
    assert stages["train"].jobs == ({"tiny_train_step": 400, "tiny_eval_pair": 21 * 256},)
    # seeds 1, 2 of the real search and 2 controls x 3 seeds at 90%: 8 runs of 300 steps, 4 passes of 200 pairs each
    assert stages["controls"].jobs == ({"tiny_prune_step": 8 * 300, "tiny_eval_pair": 8 * 4 * 200},)
    assert stages["mechanism"].bound == "at most 4 induction heads"
    longer = copy.deepcopy(CIRCUITS["demo"])
    longer["training"]["steps"] = 800
    longer.update(ioi=None, node_pruning=None, search_controls=None)
    other = _by_key(circuits_stages(longer))
    assert list(other) == ["train", "mechanism", "random", "edge"]
    assert other["train"].jobs[0]["tiny_train_step"] == 800


def _plan(clock: FakeClock) -> Plan:
    stages = [Stage("d", "a", "A", "start a", ({"u": 10},)), Stage("d", "b", "B", "start b",
                                                                     ({"v": 5},), bound="at most 5 v", count=r"(\d) of",
                                                                     most=5, per={"v": 1}),
              Stage("e", "c", "C", "start c", ({"u": 20},) * 2, parallel=2)]
    return Plan(stages, {"u": 1.0, "v": 2.0}, clock=clock)


def test_plan_total_rescaling_and_recount_on_a_fake_clock():
    clock = FakeClock()
    plan = _plan(clock)
    assert plan.total() == pytest.approx(10 + 10 + 20)
    assert plan.total(exact=True) == 30.0 and plan.total(exact=False) == 10.0 and plan.bounds() == ["d: at most 5 v"]
    assert plan.status().stage == "starting"
    plan.begin("d")
    clock.t = 4.0
    assert plan.remaining() == pytest.approx(6 + 10 + 20)
    assert plan.status().stage == "d: A" and plan.status().done == pytest.approx(4 / 40)
    clock.t = 20.0  # a took 20 s for 10 predicted: factor 2; b's line names 4 of its 5: 8 s predicted
    assert plan.on_line("start b (4 of at most 5)")
    assert plan.measured(0) == pytest.approx(20.0) and plan.predicted[1] == pytest.approx(8.0)
    assert plan.factor() == pytest.approx(2.0)
    assert plan.remaining() == pytest.approx(16 + 40)
    clock.t = 24.0
    plan.end()  # b took 4 s for 8 predicted: the factor (20 + 4) / (10 + 8)
    assert plan.factor() == pytest.approx(24 / 18) and plan.status().stage == "d: done"
    plan.begin("e")
    clock.t = 100.0  # c is past its 20 x 24 / 18 s: a tenth of its elapsed 76 s more
    assert plan.remaining() == pytest.approx(7.6)
    assert plan.status().stage == "e: C"
    plan.end()
    assert plan.remaining() == 0.0 and plan.status().done == pytest.approx(1.0)
    rows = {r["stage"]: r for r in plan.table()}
    assert rows["c"]["measured_seconds"] == pytest.approx(76.0) and rows["c"]["predicted_seconds"] == 20.0
    assert rows["b"]["bound"] == "at most 5 v" and rows["b"]["predicted_seconds"] == 8.0


def test_bounded_and_short_stages_do_not_rescale_and_lines_match_in_order():
    clock = FakeClock()
    plan = _plan(clock)
    plan.demo = "d"
    assert plan.on_line("start b (2 of at most 5)")  # a later line: the earlier stage ends unstarted
    assert plan.on_line("start a")
    assert not plan.on_line("start b")  # started once only
    assert not plan.on_line("start c")  # another demo's stage
    clock.t = 0.5
    plan.end()
    assert plan.factor() == 1.0  # shorter than min_seconds: a resumed, skipped stage
    bounded = _plan(clock)
    bounded.demo = "d"
    bounded.on_line("start b (at most 5)")  # no count on the line: b stays at its bound
    clock.t = 10.0
    bounded.end()
    assert bounded.factor() == 1.0 and bounded.predicted[1] == 10.0


def test_minutes():
    assert minutes(30) == "under a minute"
    assert minutes(14.4 * 60) == "about 14 min"
