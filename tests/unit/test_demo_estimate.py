"""The demo's time estimate: work counted from the settings (by hand here), a plan re-calibrated on a fake clock."""

from __future__ import annotations

import copy

import pytest

from subnetlab.experiments.demo.estimate import (
    ABLATED_HEADS_GUESS,
    ENTAILMENT_SUBCASES,
    HANS_SUBCASES,
    M_PRUNING_STEPS_GUESS,
    S_PRUNING_STEPS_GUESS,
    Plan,
    Stage,
    heuristic_core_stages,
    like_jobs,
    lottery_stages,
    minutes,
    subtask_induction_stages,
)
from subnetlab.experiments.heuristic_core.reproduce import PRESETS as HC
from subnetlab.experiments.lottery.reproduce import PRESETS as LOTTERY
from subnetlab.experiments.subtask_induction.reproduce import PRESETS as SI


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _hc() -> dict:
    s = copy.deepcopy(HC["demo"])
    s["finetune"] = {"max_steps": 100, "eval_every": 50, "save_every": 50, "batch_size": 16, "max_length": 64}
    s["studies"] = [{"name": "nli", "task": "nli-synthetic", "sparsities": [0.5, 0.7],
                     "task_options": {"n_eval": 300, "hans_per_subcase": 10},
                     "ood": {"per_subcase": 40}, "real_ood": {"per_subcase": 40, "curve_per_subcase": 10}}]
    s["seeds"] = [0, 1, 2]
    s["n_ood_subcases"] = 4
    s["prune_preset"] = "demo"
    s["prune_steps_scale"] = None
    s["prune_hold_steps"] = None
    s["prune"] = {"eval_limit": None, "train_limit": 800, "means_examples": 128}
    s["ablation"] = {"non_listed": 6}
    s["effective_size"] = {"seeds": [0, 1], "levels": "0.1,0.3,0.5", "checkpoints": 3,
                           "prune": {"ramp_steps": 15, "hold_steps": 10, "first_ramp_steps": 25}}
    s["attention"] = {"examples": 60}
    return s


def test_heuristic_core_work_by_hand():
    """The demo's sweeps run as one-thread jobs two at a time: pruning and effective size count job units."""
    stages = {s.key: s for s in heuristic_core_stages(_hc(), real_hans=True, cores=2)}
    assert list(stages) == ["nli/finetune", "nli/prune", "nli/curves", "nli/ablation", "nli/effective_size",
                            "nli/attention"]
    # fine-tuning: 100 steps; evaluations at 0, 50, 100 of ID 300 + synthetic HANS 30 x 10 + real HANS 30 x 10
    assert stages["nli/finetune"].work == {"minilm_finetune_step": 100,
                                           "minilm_eval_example": 3 * (300 + 10 * HANS_SUBCASES + 10 * HANS_SUBCASES)}
    # demo steps: 50% -> warm-up 60 + 4 x 50 = 260, total 260 + 25 = 285; 70% -> 340 + 35 = 375; 3 seeds each
    eval_rows = 300 + 4 * 40 + 4 * 40
    assert stages["nli/prune"].work == {"minilm_job_gate_step": 3 * (285 + 375),
                                        "minilm_job_eval_example": (6 + 1) * eval_rows + 800 + 128}
    assert stages["nli/prune"].parallel == 2
    # Figure 1's curve: the 2 saved checkpoints (steps 50, 100) on the report's rows, as sweep jobs
    assert stages["nli/curves"].work == {"minilm_job_eval_example": 2 * eval_rows}
    assert stages["nli/curves"].parallel == 2
    # every ablation row also reads 3 heuristics x 5 entailment subcases x 40 rows, synthetic and real
    entailed = 3 * ENTAILMENT_SUBCASES * (40 + 40)
    assert stages["nli/ablation"].work == {"minilm_eval_example": (1 + ABLATED_HEADS_GUESS + 1 + 6) * (eval_rows + entailed)}
    assert stages["nli/ablation"].parallel == 1
    # staircase of 3 levels: first ramp 25 + hold 10 + 2 x (ramp 15 + hold 10) = 85 steps, per checkpoint and seed
    assert stages["nli/effective_size"].work == {
        "minilm_job_gate_step": 3 * 2 * 85,
        "minilm_job_eval_example": 3 * (2 * 3 + 1) * (300 + 160) + 3 * (800 + 128)}
    assert stages["nli/effective_size"].parallel == 2


def test_heuristic_core_in_process_counts_in_process_units():
    s = _hc()
    s["backend"], s["jobs"] = "local", None
    stages = {x.key: x for x in heuristic_core_stages(s, real_hans=False, cores=2)}
    assert set(stages["nli/prune"].work) == {"minilm_gate_step", "minilm_eval_example"}
    assert stages["nli/prune"].parallel == stages["nli/effective_size"].parallel == 1


def test_entailed_rows_per_subcase_count():
    """``entailed_per_subcase`` 16 (the demo's) replaces ``per_subcase`` for the entailment columns only."""
    s = _hc()
    s["studies"][0]["ood"]["entailed_per_subcase"] = 16
    s["studies"][0]["real_ood"]["entailed_per_subcase"] = 16
    stages = {x.key: x for x in heuristic_core_stages(s, real_hans=True, cores=2)}
    rows = 1 + ABLATED_HEADS_GUESS + 1 + 6
    assert stages["nli/ablation"].work == {"minilm_eval_example": rows * (300 + 4 * 40 + 4 * 40 + 3 * 5 * (16 + 16))}
    assert stages["nli/attention"].work == {"minilm_eval_example": 60}


def test_heuristic_core_ablation_rows_with_controls():
    """None + 24 sampled others + the guessed singles + joint + all jointly, and 2 controls x (singles + joint)."""
    s = _hc()
    s["ablation"] = {"non_listed": 24, "joint_heads": "top-3", "all_jointly": True, "controls": ["zero", "resample"]}
    stages = {x.key: x for x in heuristic_core_stages(s, real_hans=False)}
    assert stages["nli/ablation"].work == {
        "minilm_eval_example": (1 + 24 + ABLATED_HEADS_GUESS + 1 + 1 + 2 * (ABLATED_HEADS_GUESS + 1))
        * (300 + 160 + 3 * ENTAILMENT_SUBCASES * 40)}


def test_heuristic_core_hold_steps_count():
    """``prune_hold_steps`` 125: totals 260 + 125 and 340 + 125 per seed."""
    s = _hc()
    s["prune_hold_steps"] = 125
    stages = {x.key: x for x in heuristic_core_stages(s, real_hans=True)}
    assert stages["nli/prune"].work["minilm_job_gate_step"] == 3 * (385 + 465)


def test_heuristic_core_without_real_hans_evaluates_less():
    with_real = {s.key: s for s in heuristic_core_stages(_hc(), real_hans=True)}
    without = {s.key: s for s in heuristic_core_stages(_hc(), real_hans=False)}
    assert without["nli/prune"].work["minilm_job_eval_example"] == 7 * (300 + 160) + 928
    assert without["nli/finetune"].work["minilm_eval_example"] < with_real["nli/finetune"].work["minilm_eval_example"]


def test_subtask_induction_work_by_hand():
    stages = {s.key: s for s in subtask_induction_stages(SI["demo"], cores=2)}
    assert list(stages) == ["L2/base", "L2/discover", "transfer"]
    assert stages["L2/base"].work["gpt2_train_row"] == 5000 * 30
    assert stages["L2/discover"].work["gpt2_mask_row"] == 3 * 5000 * 30
    assert stages["L2/discover"].parallel == 2
    # 6 conditions (Figure 3's controls and empty-mask), no secondary table, 3 seeds; rows = 100 + N per epoch, epochs raised to >= 500 steps of 64:
    # N=10: 110 rows, 2 steps/epoch, 250 epochs; N=100: 200 rows, 4 steps, 125; N=300: 400 rows, 7 steps, 80 (the
    # preset's 80 epochs already give 560 steps)
    runs = 6 * 3
    assert stages["transfer"].work["gpt2_train_row"] == runs * (250 * 110 + 125 * 200 + 80 * 400)
    # about 25 evaluations per run of 500 rows (every 10, 5, 3 epochs: 25, 25, 27) and one test pass of 500 rows
    assert stages["transfer"].work["gpt2_eval_row"] == runs * ((25 + 25 + 27) * 500 + 3 * 500)
    assert stages["transfer"].parallel == 2
    one_core = {s.key: s for s in subtask_induction_stages(SI["demo"], cores=1)}
    assert one_core["transfer"].parallel == 1
    in_process = {s.key: s for s in subtask_induction_stages({**SI["demo"], "backend": "local"}, cores=2)}
    assert in_process["transfer"].serial == {} and stages["transfer"].serial == {"sweep_start": 1}


def test_heuristic_core_tour_skips_effective_size_and_caps_the_ablation():
    """The tour: 3 seeds, no effective-size stage, 10 sampled heads, one control, 160 rows per split."""
    stages = {x.key: x for x in heuristic_core_stages(HC["tour"], real_hans=True, cores=2)}
    assert list(stages) == ["nli/finetune", "nli/prune", "nli/curves", "nli/ablation", "nli/attention"]
    rows = 1 + 10 + ABLATED_HEADS_GUESS + 1 + 1 + 1 * (ABLATED_HEADS_GUESS + 1)
    # ID 300 -> 160; synthetic and real OOD 4 x 40 = 160 each; entailed 3 x 5 x 10 = 150 each (under the cap)
    assert stages["nli/ablation"].work == {"minilm_eval_example": rows * (160 + 160 + 160 + 150 + 150)}
    assert stages["nli/prune"].work["minilm_job_gate_step"] == 3 * (285 + 375)
    assert len(stages["nli/prune"].jobs) == 6


def test_like_jobs_take_whole_rounds_and_unequal_jobs_fill_the_free_worker():
    rates = {"u": 1.0}
    assert Stage("d", "a", "A", {"u": 30}, parallel=2, jobs=like_jobs({"u": 30}, 3)).predicted(rates) == 20.0
    assert Stage("d", "a", "A", {"u": 30}, parallel=2).predicted(rates) == 15.0  # no jobs: the work shared evenly
    # 3 long jobs and a short one on 2 workers: the short one waits for a free worker behind the first two
    jobs = ({"u": 10}, {"u": 10}, {"u": 10}, {"u": 2})
    assert Stage("d", "a", "A", {"u": 32}, parallel=2, jobs=jobs).predicted(rates) == 20.0
    assert Stage("d", "a", "A", {"u": 32}, parallel=1, jobs=jobs).predicted(rates) == 32.0
    # a sweep's start comes first, once
    assert Stage("d", "a", "A", {"u": 32}, parallel=2, jobs=jobs, serial={"u": 3}).predicted(rates) == 23.0


def test_lottery_work_by_hand():
    """The demo: 3 fine-tuning seeds, 3 s-pruning and 1 m-pruning jobs, 6 re-fine-tunings, as two-worker sweeps."""
    stages = {x.key: x for x in lottery_stages(LOTTERY["demo"], cores=2)}
    assert list(stages) == ["nli-synthetic/finetune", "nli-synthetic/prune", "nli-synthetic/retrain",
                            "nli-synthetic/patterns"]
    # one epoch of 2,000 rows; the closing evaluation: ID 300 and the HANS-style split 30 x 10 (eval_limit 300)
    start = {"lottery_model_load": 1}
    tuning = {"lottery_train_row": 2000, "lottery_eval_example": 600, **start}
    assert stages["nli-synthetic/finetune"].jobs == (tuning,) * 3
    assert stages["nli-synthetic/retrain"].jobs == (tuning,) * 6
    s_job = {"lottery_importance_row": S_PRUNING_STEPS_GUESS * 96, "lottery_eval_example": (S_PRUNING_STEPS_GUESS + 3) * 300,
             **start}
    m_job = {"lottery_eval_example": (M_PRUNING_STEPS_GUESS + 3) * 300, **start}
    assert stages["nli-synthetic/prune"].jobs == (s_job,) * 3 + (m_job,)
    assert stages["nli-synthetic/prune"].work["lottery_model_load"] == 4
    assert stages["nli-synthetic/prune"].serial == {"sweep_start": 1}  # one fork server per sweep
    # the fine-tuned seeds and the pre-trained model, each full and pruned to the super-survivors, on 40 pairs
    assert stages["nli-synthetic/patterns"].work == {"lottery_pattern_pair": 8 * 40, "lottery_model_load": 8}
    in_process = {x.key: x for x in lottery_stages({**LOTTERY["demo"], "backend": "local"}, cores=2)}
    assert in_process["nli-synthetic/finetune"].parallel == 1
    assert in_process["nli-synthetic/finetune"].serial == {}
    tour = {x.key: x for x in lottery_stages(LOTTERY["tour"], cores=2)}
    assert tour["nli-synthetic/finetune"].jobs[0]["lottery_eval_example"] == 400  # 200 rows per split


def _plan(clock: FakeClock) -> Plan:
    stages = [Stage("d", "a", "A", {"u": 10}, match="start a", family="x"),
              Stage("d", "b", "B", {"v": 5}, match="start b", family="y"),
              Stage("d", "c", "C", {"u": 40}, match="start c", family="x", parallel=2)]
    return Plan(stages, {"u": 1.0, "v": 2.0}, clock=clock)


def test_plan_total_and_recalibration_on_a_fake_clock():
    clock = FakeClock()
    plan = _plan(clock)
    assert plan.total() == pytest.approx(10 + 10 + 20)
    assert plan.remaining() == pytest.approx(40)
    plan.start("d:a")
    clock.t = 4.0
    assert plan.remaining() == pytest.approx(6 + 10 + 20)
    clock.t = 20.0  # stage a took 20 s for 10 predicted: a factor of 2, for family x and (no own data) for y
    assert plan.on_line("d", "[x] start b now") == "d:b"
    assert plan.measured("d:a") == pytest.approx(20.0)
    assert plan.factor("x") == pytest.approx(2.0)
    assert plan.factor("y") == pytest.approx(2.0)
    assert plan.remaining() == pytest.approx(20 + 40)
    clock.t = 25.0  # b took 5 s for 10 predicted: y's factor 0.5; x keeps its own
    plan.on_line("d", "start c")
    assert plan.factor("y") == pytest.approx(0.5)
    assert plan.factor("x") == pytest.approx(2.0)
    assert plan.factor() == pytest.approx(25 / 20)
    assert plan.remaining() == pytest.approx(40)
    clock.t = 100.0  # c is past its 40 s: a tenth of its elapsed 75 s more
    assert plan.remaining() == pytest.approx(7.5)
    plan.finish_demo("d")
    assert plan.remaining() == 0.0
    assert plan.done_fraction() == pytest.approx(1.0)
    rows = {r["stage"]: r for r in plan.table()}
    assert rows["c"]["measured_seconds"] == pytest.approx(75.0) and rows["c"]["predicted_seconds"] == 20.0


def test_short_stages_do_not_recalibrate_and_lines_match_in_order():
    clock = FakeClock()
    plan = _plan(clock)
    assert plan.on_line("d", "start c") == "d:c"  # a later stage line: earlier stages end unstarted
    assert plan.on_line("d", "start a") == "d:a"  # a stage never started may still match later
    assert plan.on_line("d", "start c") is None  # started once only
    assert plan.on_line("other", "start b") is None  # another demo's line
    clock.t = 0.5
    plan.finish_demo("d")
    assert plan.factor("x") == 1.0  # shorter than min_seconds: a resumed, skipped stage


def test_done_fraction_counts_running_stages_by_elapsed_share():
    clock = FakeClock()
    plan = _plan(clock)
    plan.start("d:a")
    clock.t = 5.0
    assert plan.done_fraction() == pytest.approx(10 * 0.5 / 40)
    assert plan.current().key == "a"


def test_minutes():
    assert minutes(30) == "under a minute"
    assert minutes(14.4 * 60) == "about 14 min"


def test_repeated_stage_keys_refused():
    with pytest.raises(ValueError):
        Plan([Stage("d", "a", "A", {}), Stage("d", "a", "A", {})], {})


def test_circuits_work_by_hand():
    from subnetlab.experiments.circuits.reproduce import PRESETS as CIRCUITS
    from subnetlab.experiments.demo.estimate import circuits_stages

    stages = {s.key: s for s in circuits_stages(CIRCUITS["demo"], cores=2)}
    assert list(stages) == ["train", "mechanism", "random", "node", "edge", "ioi"]
    assert all(s.parallel == 1 and s.family == "circuits" for s in stages.values())
    # 400 steps; held-out evaluations of 256 sequences at step 0 and every 20 steps (20 of them)
    assert stages["train"].work == {"tiny_train_step": 400, "tiny_eval_pair": 21 * 256}
    # 512 scored sequences; the evaluator (2 passes over 200 pairs), full, corrupted, q/k/v cuts, 2 key edges alone
    assert stages["mechanism"].work == {"tiny_eval_pair": 512 + 200 * (2 + 2 + 3 + 2)}
    # two evaluators; the random edge curve (full, empty, 10 sizes) and node curve (full, 10 sizes)
    assert stages["random"].work == {"tiny_eval_pair": 200 * (4 + 12 + 11)}
    # Heuristic Core's demo rule at 70%: 60 + 4 * 70 = 340 warm-up steps + 35; means over the 200 train pairs
    assert stages["node"].work == {"tiny_node_step": 375, "tiny_eval_pair": 200 + 200 * (2 + 11)}
    # Edge Pruning's demo preset: 300 steps at each of 3 sparsities; each circuit's f (2 passes), one curve
    assert stages["edge"].work == {"tiny_prune_step": 900, "tiny_eval_pair": 200 * (2 + 6 + 11)}
    # IOI: 800 steps, 9 held-out evaluations of 200, evaluator, full, random curve; 300 edge steps at one target
    assert stages["ioi"].work == {"tiny_train_step": 800,
                                  "tiny_eval_pair": 200 * (9 + 2 + 1 + 12) + 200 * (2 + 2 + 11),
                                  "tiny_prune_step": 300}
    without = copy.deepcopy(CIRCUITS["demo"])
    without.update(ioi=None, node_pruning=None)
    assert [s.key for s in circuits_stages(without)] == ["train", "mechanism", "random", "edge"]
    assert circuits_stages(CIRCUITS["paper"]) == []  # the GPU preset is not part of the demo
