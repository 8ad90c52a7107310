"""``run_demo`` end to end with fake reproductions, a fake calibration and a fake clock (no test reads wall time)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from subnetlab import progress
from subnetlab.experiments import get_reproduction
from subnetlab.experiments.circuits import reproduce as circuits_reproduce
from subnetlab.experiments.demo.estimate import Plan
from subnetlab.experiments.demo.run import plan_stages, run_demo
from subnetlab.experiments.heuristic_core import reproduce as hc_reproduce
from subnetlab.experiments.lottery import reproduce as lottery_reproduce
from subnetlab.experiments.subtask_induction import reproduce as si_reproduce
from subnetlab.progress import Board, Status


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(autouse=True)
def loud(monkeypatch):
    """The suite silences stage lines (tests/conftest.py); these tests read them."""
    monkeypatch.setattr(progress, "_quiet", False)


RATES = {"minilm_train_row": 0.01, "minilm_eval_row": 0.001, "minilm_job_train_row": 0.02,
         "minilm_job_eval_row": 0.0015, "minilm_job_gate_step": 0.15, "minilm_job_importance_row": 0.01,
         "minilm_pattern_pair": 0.02, "minilm_load": 1.0, "gpt2_train_row": 1e-4, "gpt2_mask_row": 1e-4,
         "gpt2_eval_row": 1e-5, "tiny_train_step": 0.01, "tiny_prune_step": 0.02, "tiny_node_step": 0.01,
         "tiny_eval_pair": 1e-4, "sweep_start": 2.0}
LOTTERY_LINES = [("nli-synthetic: fine-tuning 3 seeds", 60.0), ("nli-synthetic: pruning (4 jobs)", 80.0),
                 ("nli-synthetic: re-fine-tuning good / random / bad subnetworks (6 jobs)", 120.0),
                 ("nli-synthetic: attention pattern types of finetuned-seed0 (full) on 40 pairs", 8.0)]


def _fake(name: str, presets: dict, lines: list[tuple[str, float]], clock: FakeClock, log: list):
    """A reproduction that announces its stages (each taking the given fake seconds) and writes a report."""

    def run(settings, out):
        out = Path(out)
        for line, seconds in lines:
            progress.stage(line)
            clock.t += seconds
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(f"# {name}\n", encoding="utf-8")
        log.append(("ran", name))
        return out / "report.md"

    return SimpleNamespace(NAME=name, PRESETS=presets, Settings=get_reproduction(name).Settings, run=run)


def test_run_demo_estimates_tracks_stages_and_writes_findings(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("subnetlab.experiments.demo.run._real_hans", lambda: False)
    clock, log = FakeClock(), []
    modules = {
        "heuristic-core": _fake("heuristic-core", hc_reproduce.PRESETS, [
            ("heuristic-core: study nli", 1.0), ("[nli] fine-tuning minilm on nli-synthetic", 30.0),
            ("[nli] pruning: 3 seeds x 2 sparsities", 300.0),
            ("[nli] accuracy curves: 5 checkpoints on the report's evaluation rows", 10.0), ("[nli] ablating 3 heads", 20.0),
            ("[nli] effective size: 3 checkpoints x 3 seeds x 4 levels", 60.0),
            ("attention patterns of 72 heads over 60 sentence pairs", 5.0)], clock, log),
        "subtask-induction": _fake("subtask-induction", si_reproduce.PRESETS, [
            ("base model: 2-layer GPT-2 on a+ab mod 7", 20.0), ("sweep: 3 jobs, 0 already done, running 3", 40.0),
            ("search controls: 8 discovery runs at lambda=6e-06 (random-weights, shuffled-labels; seeds 0, 1, 2)", 30.0),
            ("sweep: 8 jobs, 0 already done, running 8", 0.0), ("transfer: 36 runs", 200.0)], clock, log),
        "lottery": _fake("lottery", lottery_reproduce.PRESETS, LOTTERY_LINES, clock, log),
        "circuits": _fake("circuits", circuits_reproduce.PRESETS, [
            ("training a 2-layer llama model (4 heads, width 64, attention only) on repeated random spans", 25.0),
            ("scoring every head's attention: previous-token and induction scores", 2.0),
            ("the circuit task on the trained model: full model, corrupted prompts, the mechanism's edges cut", 3.0),
            ("faithfulness curves: random edge and node circuits", 6.0),
            ("node-level pruning (Heuristic Core) of heads and MLPs", 10.0),
            ("edge pruning to 80% of the edges removed", 8.0), ("edge pruning to 90% of the edges removed", 8.0),
            ("search controls: edge pruning at 90% with seeds 0, 1, 2 on the real model and as random-weights, "
             "shuffled-labels", 12.0),
            ("IOI: training a 2-layer llama model on 5000 prompts for 1000 steps", 40.0),
            ("edge pruning to 90% of the edges removed", 9.0)], clock, log),
    }
    calibrated = []

    def calibrate(settings):
        calibrated.append(sorted(settings))
        clock.t += 9.0
        return dict(RATES)

    result = run_demo(tmp_path, get_reproduction=modules.__getitem__, calibrate=calibrate, clock=clock,
                      interactive=False, cores=2, cpu_clock=lambda: 1.5 * clock.t,  # 1.5 cores busy throughout
                      beside=())
    assert calibrated == [["circuits", "heuristic-core", "lottery", "subtask-induction"]]
    captured = capsys.readouterr()
    first = captured.out.splitlines()[0]
    # the exactly counted stages' time, then the bounded ones' (at their bound) with what the data decides
    stages = plan_stages({name: m.PRESETS["tour" if "tour" in m.PRESETS else "demo"] for name, m in modules.items()},
                         tmp_path, 2)
    plan = Plan(stages, RATES)
    assert first == (f"The demo should take about {round(plan.total(exact=True) / 60)} min on this machine for the 17 "
                     f"stages its settings fix, and up to {math.ceil(plan.total(exact=False) / 60)} min more for the 4 "
                     "whose size the data decides (heuristic-core: a core of at most 23 heads; lottery: at most 32 "
                     "s-pruning and 10 m-pruning steps; lottery: at most 8 attention readings; circuits: at most 4 "
                     "induction heads); calibrated in 9 s.")
    # each report's path printed as soon as its demo returned, in order, then the findings
    lines = captured.out.splitlines()
    at = [lines.index(f"{name} report: {tmp_path / name / 'report.md'}")
          for name in ("heuristic-core", "subtask-induction", "lottery", "circuits")]
    assert at == sorted(at) and at[-1] < lines.index(f"findings: {tmp_path / 'findings.md'}")
    # plain stage lines with the estimate, one per stage change
    board_lines = [line for line in captured.err.splitlines() if line.startswith("[subnetlab] demo: ")]
    assert board_lines[0].startswith("[subnetlab] demo: heuristic-core: nli: fine-tuning (0% done, ")
    assert len(board_lines) == 21 + 4  # one per stage, one as each demo ends
    assert board_lines[6].startswith("[subnetlab] demo: heuristic-core: done (")
    assert "[subnetlab] demo: heuristic-core: nli: pruning 6 subnetworks (" in captured.err
    assert "[subnetlab] demo: lottery: nli-synthetic: re-fine-tuning 6 subnetworks (" in captured.err
    assert "min left)" in captured.err or "under a minute left)" in captured.err
    timings = json.loads((tmp_path / "demo-timings.json").read_text())
    measured = {f"{r['demo']}:{r['stage']}": r["measured_seconds"] for r in timings["stages"]}
    assert measured == {"heuristic-core:nli/finetune": 31.0, "heuristic-core:nli/prune": 300.0,
                        "heuristic-core:nli/curves": 10.0, "heuristic-core:nli/ablation": 20.0,
                        "heuristic-core:nli/effective-size": 60.0,
                        "heuristic-core:nli/attention": 5.0, "subtask-induction:L2/base": 20.0,
                        "subtask-induction:L2/discover": 40.0, "subtask-induction:L2/controls": 30.0,
                        "subtask-induction:transfer": 200.0,
                        "lottery:nli-synthetic/finetune": 60.0, "lottery:nli-synthetic/prune": 80.0,
                        "lottery:nli-synthetic/retrain": 120.0, "lottery:nli-synthetic/patterns": 8.0,
                        # the mechanism stage spans the head scores and the cuts; IOI's own edge pruning is in "ioi"
                        "circuits:train": 25.0, "circuits:mechanism": 5.0, "circuits:random": 6.0,
                        "circuits:node": 10.0, "circuits:edge": 16.0, "circuits:controls": 12.0,
                        "circuits:ioi": 49.0}
    # predicted = each stage's counted work at the fake rates (counts are checked by hand in test_demo_estimate.py);
    # the ablation counted again with the 3 heads its line names
    by_key = {f"{s.demo}:{s.key}": s for s in stages}
    predicted = {k: round(s.predicted(RATES, 3 if s.count else None), 1) for k, s in by_key.items()}
    assert {f"{r['demo']}:{r['stage']}": r["predicted_seconds"] for r in timings["stages"]} == predicted
    assert predicted["heuristic-core:nli/ablation"] < round(by_key["heuristic-core:nli/ablation"].predicted(RATES), 1)
    assert timings["predicted_seconds"] == pytest.approx(sum(s.predicted(RATES) for s in stages), abs=0.1)
    assert timings["wall_seconds"] == pytest.approx(9.0 + 426.0 + 290.0 + 268.0 + 123.0)  # with the calibration
    # CPU seconds per stage and in all, from the CPU clock at the same stage boundaries
    assert {f"{r['demo']}:{r['stage']}": r["cpu_seconds"] for r in timings["stages"]} == pytest.approx(
        {k: 1.5 * v for k, v in measured.items()})
    assert timings["cpu_seconds"] == pytest.approx(1.5 * timings["wall_seconds"]) and timings["cores"] == 2
    assert lines[-1] == ("The demo took 1116 s (about 19 min) and 1674 CPU-seconds: on 2 cores no arrangement of the "
                         "same work takes under 837 s.")
    assert timings["calibration"]["rates"] == RATES
    # the studies wrote no results: every claim is "not measurable", none crashes
    findings = (tmp_path / "findings.md").read_text()
    # 4 Heuristic Core claims, 8 Subtask Induction, 4 lottery, 4 circuits (a control row each in the last two)
    assert findings.count("not measurable at this scale |") == 20
    assert result["findings"] == str(tmp_path / "findings.md")


def test_finished_demos_are_not_estimated_again(tmp_path, monkeypatch):
    monkeypatch.setattr("subnetlab.experiments.demo.run._real_hans", lambda: False)
    clock, log = FakeClock(), []
    (tmp_path / "heuristic-core").mkdir()
    (tmp_path / "heuristic-core" / "metrics.json").write_text("{}")
    modules = {"heuristic-core": _fake("heuristic-core", hc_reproduce.PRESETS, [], clock, log),
               "subtask-induction": _fake("subtask-induction", si_reproduce.PRESETS, [], clock, log),
               "lottery": _fake("lottery", lottery_reproduce.PRESETS, [], clock, log),
               "circuits": _fake("circuits", circuits_reproduce.PRESETS, [], clock, log)}
    seen = []
    out = io.StringIO()
    run_demo(tmp_path, get_reproduction=modules.__getitem__,
             calibrate=lambda s: seen.append(sorted(s)) or dict(RATES), clock=clock,
             echo=lambda text: out.write(text + "\n"), interactive=False, cores=2, beside=())
    assert seen == [["circuits", "lottery", "subtask-induction"]]  # only the unfinished demos are calibrated and planned
    assert "for the 12 stages its settings fix" in out.getvalue()
    assert log == [("ran", "heuristic-core"), ("ran", "subtask-induction"), ("ran", "lottery"), ("ran", "circuits")]  # a finished one still re-renders


def test_board_plain_lines_only_when_the_stage_changes():
    state = {"stage": "a", "done": 0.0, "left": 125.0}
    buffer = io.StringIO()
    with Board("demo", lambda: Status(state["stage"], state["done"], state["left"]), interactive=False,
               out=buffer) as board:
        board.update()
        state.update(stage="b", done=0.5, left=30.0)
        board.update()
        state.update(left=None)
        board.update()
    assert buffer.getvalue().splitlines() == ["[subnetlab] demo: a (0% done, about 2 min left)",
                                              "[subnetlab] demo: b (50% done, under a minute left)"]


def test_board_on_a_terminal_renders_the_time_left():
    buffer = io.StringIO()
    with Board("demo", lambda: Status("pruning", 0.25, 600.0), interactive=True, out=buffer) as board:
        board._progress.refresh()
    assert "about 10 min left" in buffer.getvalue() and "pruning" in buffer.getvalue()


def test_listeners_hear_stage_lines_while_listening():
    heard = []
    with progress.listen(heard.append):
        progress.stage("one")
    progress.stage("two")
    assert heard == ["one"]


def _fakes(clock: FakeClock, log: list) -> dict:
    return {name: _fake(name, module.PRESETS, [], clock, log)
            for name, module in (("heuristic-core", hc_reproduce), ("subtask-induction", si_reproduce),
                                 ("lottery", lottery_reproduce), ("circuits", circuits_reproduce))}


def _child(script: str):
    """A ``launch`` that runs ``script`` (a real child process) instead of the study; argv[1] is its run directory."""
    import sys

    from subnetlab.experiments.demo import beside

    def launch(name, preset, out, log):
        assert (name, preset) == ("circuits", "demo")
        argv = [sys.executable, "-c", script, str(out), str(beside.usage_path(log))]
        return beside.launch(name, preset, out, log, argv=argv)
    return launch


SPIN_AND_REPORT = ("import json, pathlib, sys, time\n"
                   "out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True)\n"
                   "until = time.process_time() + 0.3\n"
                   "while time.process_time() < until: pass\n"
                   "print('circuits: working'); (out / 'report.md').write_text('# circuits')\n"
                   "pathlib.Path(sys.argv[2]).write_text(json.dumps({'wall_seconds': 1.5, 'cpu_seconds': 12.5}))\n")


def test_the_one_thread_study_runs_beside_the_others_in_its_own_process(tmp_path, monkeypatch):
    monkeypatch.setattr("subnetlab.experiments.demo.run._real_hans", lambda: False)
    import torch

    clock, log, out = FakeClock(), [], io.StringIO()
    modules = _fakes(clock, log)
    first, threads = modules["heuristic-core"].run, []
    modules["heuristic-core"].run = lambda s, o: threads.append(torch.get_num_threads()) or first(s, o)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = run_demo(tmp_path, get_reproduction=modules.__getitem__, calibrate=lambda s: dict(RATES),
                          clock=clock, echo=lambda text: out.write(text + "\n"), interactive=False, cores=2,
                          launch=_child(SPIN_AND_REPORT))
        assert threads == [1] and torch.get_num_threads() == 2  # a core left to the child while it ran, then back
    finally:
        torch.set_num_threads(before)
    assert ("ran", "circuits") not in log and len(log) == 3  # not run in this process
    text = out.getvalue()
    # the plan counts only the studies run here, and names the one beside them with its log
    here = plan_stages({n: m.PRESETS["tour" if "tour" in m.PRESETS else "demo"] for n, m in modules.items()
                        if n != "circuits"}, tmp_path, 2)
    assert f"for the {sum(not s.bound for s in here)} stages its settings fix" in text
    assert f"circuits runs beside them in its own process (its log: {tmp_path / 'circuits.log'})" in text
    assert (tmp_path / "circuits.log").read_text() == "circuits: working\n"
    assert result["reports"]["circuits"] == str(tmp_path / "circuits" / "report.md")
    timings = result["timings"]
    assert timings["beside"]["circuits"] == {"exit_status": 0, "wall_seconds": 1.5, "cpu_seconds": 12.5}
    assert timings["cpu_seconds"] >= 12.5  # the child's figure is counted in the demo's CPU time
    assert {s["demo"] for s in timings["stages"]} == {"heuristic-core", "subtask-induction", "lottery"}


def test_a_failed_study_beside_the_others_is_named_after_they_finish(tmp_path, monkeypatch):
    from subnetlab.errors import SubnetlabError

    monkeypatch.setattr("subnetlab.experiments.demo.run._real_hans", lambda: False)
    clock, log = FakeClock(), []
    with pytest.raises(SubnetlabError, match=r"the circuits study failed \(exit status 3\); its log: .*circuits\.log"):
        run_demo(tmp_path, get_reproduction=_fakes(clock, log).__getitem__, calibrate=lambda s: dict(RATES),
                 clock=clock, echo=lambda text: None, interactive=False, cores=2,
                 launch=_child("import sys; print('no such thing'); sys.exit(3)"))
    assert len(log) == 3 and all((tmp_path / n / "report.md").is_file()  # the others finished and kept
                                 for n in ("heuristic-core", "subtask-induction", "lottery"))
    assert (tmp_path / "demo-timings.json").is_file() and (tmp_path / "findings.md").is_file()


def test_the_child_runs_the_reproduction_with_its_preset(tmp_path, monkeypatch):
    import subprocess

    from subnetlab.experiments import settings_for
    from subnetlab.experiments.demo import beside

    ran = []
    fake = SimpleNamespace(NAME="circuits", PRESETS=circuits_reproduce.PRESETS, Settings=circuits_reproduce.Settings,
                           run=lambda settings, out: ran.append((settings, out)) or out / "report.md")
    monkeypatch.setattr("subnetlab.experiments.get_reproduction", lambda name: fake)
    assert beside.main(["circuits", "demo", str(tmp_path / "c"), str(tmp_path / "c.usage.json")]) == 0
    assert ran == [(settings_for(fake, "demo"), tmp_path / "c")]
    usage = json.loads((tmp_path / "c.usage.json").read_text())
    assert usage["cpu_seconds"] >= 0 and usage["wall_seconds"] >= 0
    # the real command line runs this module; an unknown study is one error line and exit status 2, its usage kept
    argv = beside.command("no-such-study", "demo", tmp_path / "x", tmp_path / "x.usage.json")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert argv[1:3] == ["-m", "subnetlab.experiments.demo.beside"]
    assert done.returncode == 2 and done.stderr.strip().startswith("error: unknown reproduction 'no-such-study'")
    assert json.loads((tmp_path / "x.usage.json").read_text())["cpu_seconds"] > 0  # its imports, at least
