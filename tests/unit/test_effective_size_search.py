"""The effective-size search on a tiny BERT: an early-stopped search is the whole staircase cut short, bit for bit;
a killed search resumes to the same result; the full model's table is computed once and is the one a run computes;
the warm-started sweep starts each checkpoint two levels below the last answer and walks down when it must."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from subnetlab.analysis.effective_size import level_grid
from subnetlab.errors import SubnetlabError
from subnetlab.experiments.heuristic_core.effective_size import SearchSettings, _stage_means, search_sweep
from subnetlab.io import load_tensors, read_json, save_tensors, write_json
from subnetlab.methods.head_pruning.train import Pruner
from subnetlab.methods.l0.checkpoint import load_checkpoint
from subnetlab.methods.l0.objective import full_model_table
from subnetlab.models import resolve
from subnetlab.runs import prune_search
from subnetlab.runs.prune import prune_job, prune_sweep
from subnetlab.runs.prune_search import SEARCH_JOB, SearchJobConfig, search_job, search_stage_job
from subnetlab.runs.prune_setup import PruneJobConfig, PruningSetup
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks import NLI3

LEVELS = (0.1, 0.2, 0.3, 0.4)
SMALL = dict(batch_size=8, train_limit=48, means_examples=16, eval_batch_size=16, max_length=24, ramp_steps=3,
             hold_steps=2, first_ramp_steps=4, checkpoint_every=4, init_log_alpha=1.0, lr=0.3)


@pytest.fixture(autouse=True)
def one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny BERT with MiniLM's tokenizer, saved as a checkpoint the jobs load."""
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3, initializer_range=0.3,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    where = tmp_path_factory.mktemp("tiny") / "model"
    BertForSequenceClassification(config).eval().save_pretrained(where)
    tok.save_pretrained(where)
    return where


def base(model_dir: Path) -> dict:
    return {"model": str(model_dir), "task": "nli-synthetic",
            "task_options": {"n_train": 48, "n_eval": 12, "hans_per_subcase": 1}, "eval_data": [], "splits": None}


def stop(model=(0.5, 0.5), consecutive=2, on=("id", "ood")) -> dict:
    return {"model": {"id": model[0], "ood": model[1]}, "on": list(on), "faithfulness": 0.03,
            "consecutive": consecutive, "id_splits": ["id"], "subcases": None}


def run_job(job, tmp: Path) -> dict:
    out = tmp / job.out_dir.name
    fn = search_job if job.fn == SEARCH_JOB else prune_job
    return fn(job.config, out), out


def test_an_early_stopped_search_is_the_whole_staircase_cut_short(model_dir: Path, tmp_path: Path) -> None:
    seeds = [0, 1]
    whole = prune_sweep(base(model_dir), tmp_path / "stairs", targets=(), seeds=seeds, preset="demo",
                        schedule="staircase", levels=LEVELS, overrides=SMALL)[1:]
    staircase = {seed: prune_job(job.config, job.out_dir) for seed, job in zip(seeds, whole)}
    # every level unfaithful (the model "scores" 5.0): the rule fires after the second level
    job = search_stage_job(base(model_dir), tmp_path / "search", levels=LEVELS, seeds=seeds, preset="demo",
                           overrides=SMALL, stop=stop(model=(5.0, 5.0)), cache_dir=tmp_path / "cache")
    metrics = search_job(job.config, job.out_dir)
    assert list(metrics["levels"]) == ["0.10", "0.20"] and metrics["stopped_after"] == 0.2
    assert metrics["first_level_unfaithful_on"] == ["id", "ood"]
    ends = staircase[0]["levels"]
    assert metrics["steps_per_seed"] == ends["0.20"]["step"] == 4 + 2 + 3 + 2  # first ramp, hold, ramp, hold
    assert metrics["planned_steps_per_seed"] == ends["0.40"]["step"]
    for seed in seeds:
        for level in ("0.10", "0.20"):
            mine = job.out_dir / f"seed-{seed}" / "levels" / level
            theirs = whole[seeds.index(seed)].out_dir / "levels" / level
            a, b = Subnetwork.load(mine / "subnetwork.safetensors"), Subnetwork.load(theirs / "subnetwork.safetensors")
            assert torch.equal(a.heads, b.heads) and torch.equal(a.mlps, b.mlps)
            assert read_json(mine / "metrics.json")["eval"] == read_json(theirs / "metrics.json")["eval"]
            assert read_json(mine / "metrics.json")["health"] == read_json(theirs / "metrics.json")["health"]
        assert not (job.out_dir / f"seed-{seed}" / "levels" / "0.30").exists()
    for level in ("0.10", "0.20"):  # each level counts its seeds' health problems (runs.prune_summary.health_counts)
        problems = [p for seed in seeds for p in
                    read_json(job.out_dir / f"seed-{seed}" / "levels" / level / "metrics.json")["health"]["problems"]]
        assert metrics["levels"][level]["health"]["judged"] == len(seeds)
        assert metrics["levels"][level]["health"]["problems"] == {p: problems.count(p) for p in dict.fromkeys(problems)}
        assert load_checkpoint(job.out_dir / f"seed-{seed}").step == 11  # checkpointed where it stopped
    assert list((tmp_path / "cache").glob("teacher-*.safetensors"))  # the table is kept for other stages


def test_without_a_stop_the_search_climbs_every_level_and_a_kill_resumes(model_dir: Path, tmp_path: Path,
                                                                         monkeypatch) -> None:
    job = search_stage_job(base(model_dir), tmp_path / "whole", levels=LEVELS, seeds=[0, 1], preset="demo",
                           overrides=SMALL, stop=stop(consecutive=0), cache_dir=tmp_path / "cache")
    whole = search_job(job.config, job.out_dir)
    assert list(whole["levels"]) == ["0.10", "0.20", "0.30", "0.40"] and whole["stopped_after"] is None
    # the gates at the top are those of the ordinary staircase run of the same seed, bit for bit
    stairs = prune_sweep(base(model_dir), tmp_path / "stairs", targets=(), seeds=[1], preset="demo",
                         schedule="staircase", levels=LEVELS, overrides=SMALL)[1]
    prune_job(stairs.config, stairs.out_dir)
    for name in ("log_alpha_heads", "log_alpha_mlps", "lambda1"):
        assert torch.equal(load_checkpoint(stairs.out_dir).tensors[name],
                           load_checkpoint(job.out_dir / "seed-1").tensors[name])

    real, calls = prune_search.prune, {"n": 0}

    def killed_on_the_fifth_part(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:  # seed 0 of the third level
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    again = job.out_dir.parent / "killed" / job.out_dir.name
    monkeypatch.setattr(prune_search, "prune", killed_on_the_fifth_part)
    with pytest.raises(KeyboardInterrupt):
        search_job(job.config, again)
    monkeypatch.setattr(prune_search, "prune", real)
    resumed = search_job(job.config, again)
    drop = ("train_seconds", "teacher_seconds")
    assert {k: v for k, v in resumed.items() if k not in drop} == {k: v for k, v in whole.items() if k not in drop}
    for seed in (0, 1):
        a = load_checkpoint(job.out_dir / f"seed-{seed}").tensors["log_alpha_heads"]
        b = load_checkpoint(again / f"seed-{seed}").tensors["log_alpha_heads"]
        assert torch.equal(a, b)


def test_the_full_model_table_is_computed_once_and_is_the_runs_own(model_dir: Path, tmp_path: Path) -> None:
    job = PruneJobConfig.from_dict({**base(model_dir), "cache_dir": str(tmp_path), "preset": "demo",
                                    "prune": search_stage_job(base(model_dir), tmp_path, levels=LEVELS, seeds=[0],
                                                              preset="demo", overrides=SMALL, stop=stop(),
                                                              cache_dir=tmp_path).config["prune"]})
    setup = PruningSetup.from_job(job)
    model, adapter, data = setup.loaded.model, setup.loaded.adapter, setup.data
    table = full_model_table(model, adapter, data, 16, tmp_path)
    assert table.shape == (data.size, 3)
    with Pruner(model, adapter, data, job.settings, setup.ablation) as own:
        assert torch.equal(own.teacher._table, table)
    (cached,) = tmp_path.glob("teacher-*.safetensors")
    model.train()
    assert torch.equal(full_model_table(model, adapter, data, 16, tmp_path), table)  # read back, not recomputed
    assert model.training  # the model's mode is left as it was
    with pytest.raises(SubnetlabError, match="does not fit"):
        Pruner(model, adapter, data, job.settings, setup.ablation, teacher=table[:3]).__enter__()


def test_search_job_configs_are_checked(model_dir: Path, tmp_path: Path) -> None:
    job = search_stage_job(base(model_dir), tmp_path, levels=LEVELS, seeds=[0, 1], preset="demo", overrides=SMALL,
                           stop=stop(), cache_dir=tmp_path)
    assert job.out_dir.name == "search-from-0.10"
    assert SearchJobConfig.from_dict(job.config).to_dict() == job.config  # config.json round-trips
    for change, setting in (({"seeds": []}, "seeds"), ({"seeds": [1, 1]}, "seeds"),
                            ({"stop": {**stop(), "on": ["all"]}}, "on"),
                            ({"stop": {**stop(), "model": {"id": 0.5}}}, "model")):
        with pytest.raises(SubnetlabError) as refused:
            SearchJobConfig.from_dict({**job.config, **change})
        assert refused.value.setting == setting
    with pytest.raises(SubnetlabError) as refused:
        SearchSettings.from_dict({"early_stop": True, "warmstart": True})
    assert refused.value.setting == "search" and "warmstart" in str(refused.value)
    assert SearchSettings.from_dict(None) is None


# -- the warm-started sweep, on stub jobs whose accuracy curves are known -------------------------------------

ANSWERS = {40: 0.50, 80: 0.60, 120: 0.20}  # the effective sparsity of each checkpoint, on both data
MODEL = 0.80


def stub_runner(calls: list):
    """Runs the sweep's jobs without models: the full model scores MODEL; a level scores MODEL up to the
    checkpoint's answer and 10 points less above it; a stage stops as the real job's rule says."""

    def run(jobs, where):
        calls.append([j.out_dir.name for j in jobs])
        for job in jobs:
            if (job.out_dir / "metrics.json").is_file():
                continue
            step = int(job.out_dir.parent.name.split("-")[1])
            if job.fn != SEARCH_JOB:
                scores = {"id": {"accuracy": MODEL}, "hans-synthetic": {"accuracy": MODEL}}
                write_json(job.out_dir / "metrics.json", {"eval": scores})
                continue
            cfg = SearchJobConfig.from_dict(job.config)
            rule, model = cfg.stop_settings.rule, cfg.stop_settings.model_accuracy
            levels, climbed, steps = {}, [], 0
            for end, level in sorted(cfg.settings.make_schedule().level_ends().items()):
                acc = MODEL if level <= ANSWERS[step] + 1e-9 else MODEL - 0.10
                climbed.append((acc, acc))
                levels[f"{level:.2f}"] = {"level": level, "id": acc, "ood": acc,
                                          "unfaithful_on": rule.unfaithful_on((acc, acc), model)}
                steps = end
                if rule.should_stop(climbed, model):
                    break
            write_json(job.out_dir / "metrics.json", {"levels": levels, "steps_per_seed": steps,
                                                      "first_level_unfaithful_on": next(iter(levels.values()))["unfaithful_on"]})
        return SimpleNamespace(jobs=[SimpleNamespace(status="done") for _ in jobs])

    return run


def test_warm_start_begins_two_levels_below_and_walks_down_only_when_it_must(tmp_path: Path) -> None:
    checkpoints = [(step, tmp_path / "ck" / str(step)) for step in ANSWERS]
    calls: list = []
    base_ = {"task": "nli-synthetic", "task_options": {"n_train": 48, "n_eval": 12, "hans_per_subcase": 1},
             "eval_data": [], "splits": None}
    dirs = search_sweep(checkpoints, base_, [0], level_grid(), "demo", {}, tmp_path / "out",
                        search=SearchSettings(early_stop=True, warm_start=True), run=stub_runner(calls),
                        on=("id", "ood"), subcases=None)
    names = {step: [d.name for d in ds] for step, ds in dirs.items()}
    assert names[40] == ["search-from-0.05"]
    assert names[80] == ["search-from-0.40"]  # two levels below 0.50; 0.40 is faithful, so no walk-down
    # 0.60 -> starts at 0.50, already unfaithful: walks down 0.40-0.45, 0.30-0.35, then 0.20-0.25 is faithful
    assert names[120] == ["search-from-0.50", "search-from-0.40", "search-from-0.30", "search-from-0.20"]
    for step, answer in ANSWERS.items():
        means = _stage_means(dirs[step])
        faithful = [lvl for lvl, acc in means.items() if abs(acc["id"] - MODEL) <= 0.03]
        assert max(faithful) == pytest.approx(answer)
    assert sorted(_stage_means(dirs[80])) == pytest.approx([0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70])
    assert calls[-1] == ["full-model"] * 3 + [n for s in ANSWERS for n in names[s]]  # sweep.json lists every job
    # without the warm start every checkpoint climbs from the bottom, all in one go
    calls.clear()
    dirs = search_sweep(checkpoints, base_, [0], level_grid(), "demo", {}, tmp_path / "cold",
                        search=SearchSettings(early_stop=True), run=stub_runner(calls), on=("id",))
    assert all([d.name for d in ds] == ["search-from-0.05"] for ds in dirs.values())
    assert len(calls) == 3  # full models, every first stage at once, the final listing



def test_the_command_searches_with_its_flags_and_reports_the_levels_it_measured(model_dir: Path, tmp_path: Path,
                                                                                capsys) -> None:
    import shutil

    import typer

    from subnetlab.cli import app, main
    from subnetlab.cli.commands._options import setting_flags

    flags = setting_flags(typer.main.get_command(app).commands["effective-size"])
    assert flags["early_stop"] == "--early-stop" and flags["warm_start"] == "--warm-start"
    assert flags["warm_gates"] == "--warm-gates"
    run = tmp_path / "ft"
    for step in (10, 20):
        shutil.copytree(model_dir, run / "checkpoints" / f"step-{step}")
        (run / "checkpoints" / f"step-{step}" / "trainer_state.json").write_text("{}")
    args = ["effective-size", "--checkpoints", str(run), "--task", "nli-synthetic", "--task-option", "n_train=48",
            "--task-option", "n_eval=12", "--task-option", "hans_per_subcase=1", "--seeds", "2", "--preset", "demo",
            "--levels", "0.1:0.4:0.1", "--on", "id,ood", "--subcases", "all", "--out", str(tmp_path / "es"),
            "--early-stop", "--warm-start", *[x for k, v in SMALL.items() for x in ("--set", f"{k}={v}")]]
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code in (0, None)
    result = read_json(tmp_path / "es" / "metrics.json")
    assert read_json(tmp_path / "es" / "config.json")["search"] == {"early_stop": True, "warm_start": True,
                                                                    "consecutive": 2, "below": 2, "warm_gates": False}
    for row in result["checkpoints"]:
        measured = row["search"]["levels_measured"]
        for on in ("id", "ood"):
            size = row["effective_size"][on]
            assert size["sparsity"] == 0.0 or size["sparsity"] in measured
            assert sorted(float(k) for k in size["mean_accuracy"]) == pytest.approx(measured)
        for stage_name in row["search"]["stages"]:
            assert (tmp_path / "es" / f"step-{row['step']}" / stage_name / "metrics.json").is_file()
    assert "Levels searched rather than all pruned" in (tmp_path / "es" / "report.md").read_text()
    assert not (tmp_path / "es" / "step-10" / "staircase").exists()


# -- warm gates: a checkpoint's stage starts from the previous checkpoint's gates --------------------------------

def test_a_warm_gated_stage_starts_from_the_saved_gates_without_a_first_ramp(model_dir: Path, tmp_path: Path,
                                                                            monkeypatch) -> None:
    seeds = [0, 1]
    first = search_stage_job(base(model_dir), tmp_path / "ck1", levels=LEVELS[:2], seeds=seeds, preset="demo",
                             overrides=SMALL, stop=stop(consecutive=0), cache_dir=tmp_path / "cache1")
    search_job(first.config, first.out_dir)
    for seed in seeds:  # every level keeps each seed's log-alphas at the end of its hold: those of the checkpoint
        saved = load_tensors(prune_search.gates_at(first.out_dir, seed, 0.2))
        assert torch.equal(saved["log_alpha_heads"], load_checkpoint(first.out_dir / f"seed-{seed}").tensors["log_alpha_heads"])
    warm = search_stage_job(base(model_dir), tmp_path / "ck2", levels=LEVELS[1:3], seeds=seeds, preset="demo",
                            overrides=SMALL, stop=stop(consecutive=0), cache_dir=tmp_path / "cache2",
                            init=(first.out_dir, 0.2))
    assert warm.config["prune"]["first_ramp_steps"] == 0 and warm.config["init_level"] == 0.2
    assert warm.config["init_gates"] == "../../ck1/search-from-0.10"  # stored run-relative
    real, given = prune_search.prune, {}

    def recording(*args, start_gates=None, **kwargs):
        given.setdefault(kwargs["cfg"].seed if "cfg" in kwargs else args[3].seed, start_gates)
        return real(*args, start_gates=start_gates, **kwargs)

    monkeypatch.setattr(prune_search, "prune", recording)
    metrics = search_job(warm.config, warm.out_dir)
    assert metrics["steps_per_seed"] == 2 + 3 + 2  # the first level's hold at once, then a ramp and a hold
    for seed in seeds:
        source = load_tensors(prune_search.gates_at(first.out_dir, seed, 0.2))
        assert all(torch.equal(given[seed][k], source[k]) for k in source)
    # prune itself: a run starting at step 0 takes the gates; one resumed from its checkpoint ignores them
    job = SearchJobConfig.from_dict({**warm.config, "init_gates": str(first.out_dir)}).seed_job(0)
    setup = PruningSetup.from_job(job)
    start = load_tensors(prune_search.gates_at(first.out_dir, 0, 0.2))
    result = real(setup.loaded.model, setup.loaded.adapter, setup.data, job.settings, ablation=setup.ablation,
                  run_dir=tmp_path / "direct", stop_at=0, start_gates=start)
    assert torch.equal(result.gates.log_alpha_heads.detach(), start["log_alpha_heads"])
    resumed = real(setup.loaded.model, setup.loaded.adapter, setup.data, job.settings, ablation=setup.ablation,
                   run_dir=warm.out_dir / "seed-0", stop_at=2, start_gates={k: v + 5 for k, v in start.items()})
    assert resumed.resumed_from == 7 and not torch.equal(resumed.gates.log_alpha_heads.detach(), start["log_alpha_heads"] + 5)
    # a missing source is refused before any training, naming the file
    gone = search_stage_job(base(model_dir), tmp_path / "ck3", levels=LEVELS[1:3], seeds=[0, 5], preset="demo",
                            overrides=SMALL, stop=stop(), cache_dir=tmp_path / "cache3", init=(first.out_dir, 0.2))
    with pytest.raises(SubnetlabError, match="seed-5") as refused:
        search_job(gone.config, gone.out_dir)
    assert refused.value.setting == "init_gates" and not (gone.out_dir / "seed-0").exists()
    with pytest.raises(SubnetlabError) as refused:
        SearchJobConfig.from_dict({**warm.config, "init_level": None})
    assert refused.value.setting == "init_gates"


def test_warm_gates_come_from_the_previous_checkpoint_at_or_below_the_start(tmp_path: Path) -> None:
    checkpoints = [(step, tmp_path / "ck" / str(step)) for step in ANSWERS]
    calls: list = []
    base_ = {"task": "nli-synthetic", "task_options": {"n_train": 48, "n_eval": 12, "hans_per_subcase": 1},
             "eval_data": [], "splits": None}
    stub, seen = stub_runner(calls), {}

    def with_gates(jobs, where):  # the stub's stages also save gates at every level they measure
        report = stub(jobs, where)
        for job in jobs:
            if job.fn == SEARCH_JOB:
                seen[job.out_dir] = job.config
                for entry in read_json(job.out_dir / "metrics.json")["levels"].values():
                    save_tensors(prune_search.gates_at(job.out_dir, 0, entry["level"]), {"x": torch.zeros(1)})
        return report

    dirs = search_sweep(checkpoints, base_, [0], level_grid(), "demo", {}, tmp_path / "out",
                        search=SearchSettings(early_stop=True, warm_start=True, warm_gates=True), run=with_gates,
                        on=("id", "ood"), subcases=None)
    configs = {step: [seen[d] for d in ds] for step, ds in dirs.items()}
    assert "init_gates" not in configs[40][0] or configs[40][0]["init_gates"] is None  # the first checkpoint: cold
    assert configs[40][0]["prune"]["first_ramp_steps"] == SMALL_DEMO_FIRST_RAMP
    # 80 starts at 0.40 (two below 0.50), from checkpoint 40's gates at 0.40 (it climbed 0.05 .. 0.60)
    assert configs[80][0]["init_level"] == 0.4 and configs[80][0]["prune"]["first_ramp_steps"] == 0
    assert configs[80][0]["init_gates"].endswith("step-40/search-from-0.05")
    # 120 starts at 0.50 (from 80's gates at 0.50); its walk-down stages start cold, with a first ramp
    assert configs[120][0]["init_level"] == 0.5
    assert all(c.get("init_gates") is None and c["prune"]["first_ramp_steps"] == SMALL_DEMO_FIRST_RAMP
               for c in configs[120][1:])
    with pytest.raises(SubnetlabError) as refused:
        SearchSettings(warm_gates=True)
    assert refused.value.setting == "warm_gates"


SMALL_DEMO_FIRST_RAMP = 60  # the demo preset's first ramp (the stub sweep runs the preset unchanged)
