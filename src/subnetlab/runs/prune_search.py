"""The effective-size search job: the seeds of one checkpoint climb a staircase together and stop early.

Why one job holds every seed: the effective size is decided on the seed-mean
accuracy of a level, and the stop rule (``analysis.effective_size.StopRule``:
stop once every chosen data has had two unfaithful levels in a row) needs that
mean after each level, which no one seed's job can see. The seeds also share
what depends only on the checkpoint and the data: the loaded model, the mean
activations (``cache_dir``) and the full model's outputs on the
training pool (``objective.full_model_table``, computed once here and cached
beside the means for walk-down stages and reruns). The price is that the seeds
of a checkpoint run one after another in one process instead of as parallel
jobs; parallelism is left to the checkpoints (and only without a warm start).

The job advances each seed to the end of a level (``train.prune(stop_at=...)``,
which checkpoints there), evaluates it, and after the last seed applies the
rule; a killed job resumes from the seeds' checkpoints and the levels'
``metrics.json``. Since resuming is bit-identical, every level it reaches is
the level the uninterrupted staircase (the ``staircase`` path of
``runs.prune``) reaches with the same settings and seed. Layout::

    <dir>/config.json, metrics.json            (metrics: per level the seed-mean ID / OOD accuracy and the seeds'
                                                health problems counted (runs.health), where it stopped)
    <dir>/seed-<s>/checkpoint.*, history.json
    <dir>/seed-<s>/levels/<level>/{subnetwork.safetensors, subnetwork-threshold.safetensors, metrics.json,
                                   gates.safetensors}   (the log-alphas at the end of the level's hold)

With ``init_gates`` (a stage directory of an earlier checkpoint) and
``init_level``, each seed starts from that stage's gates of the same seed at that
level (``train.prune(start_gates=...)``) instead of from ``init_log_alpha``;
the caller then drops the first ramp (``first_ramp_steps=0``): the gates are
already near the level, and the stage holds it before climbing.

The full model's accuracy the rule compares with comes in the config
(``stop.model``), measured once per checkpoint by ``runs.prune.full_model_job``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from subnetlab.analysis.effective_size import StopRule, id_ood_accuracy
from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job
from subnetlab.io import load_tensors, read_json, save_tensors, write_json
from subnetlab.methods.head_pruning.config import PruneConfig, preset_config
from subnetlab.methods.head_pruning.select import GateSelection
from subnetlab.methods.head_pruning.train import gate_tensors, prune
from subnetlab.methods.l0.objective import full_model_table
from subnetlab.models.circuit_files import GATES_FORMAT
from subnetlab.progress import stage
from subnetlab.run_directory import absolute_inputs, resolve_run_path, run_relative
from subnetlab.runs.job_config import JobConfig
from subnetlab.runs.prune import level_name, write_selections
from subnetlab.runs.prune_setup import ModelAndTask, PruneJobConfig, PruningSetup
from subnetlab.runs.prune_summary import health_counts

SEARCH_JOB = "subnetlab.runs.prune_search:search_job"
GATES = "gates.safetensors"  # a level's log-alphas, per seed: where a later checkpoint's warm gates come from


def stage_dir_name(first_level: float) -> str:
    """``search-from-0.40``: a stage is named by the level its staircase starts at."""
    return f"search-from-{level_name(first_level)}"


@dataclass(frozen=True)
class StopSettings(JobConfig):
    """The ``stop`` key: the rule, the full model's accuracy, and which evaluation columns make ID and OOD."""

    what = "stop setting"
    model: dict[str, float]
    on: list[str] = field(default_factory=lambda: ["ood"])
    faithfulness: float = 0.03
    consecutive: int = 2
    id_splits: list[str] = field(default_factory=lambda: ["id"])
    subcases: list[str] | None = None

    def __post_init__(self) -> None:
        self.rule  # checks on, faithfulness, consecutive
        if not isinstance(self.model, Mapping) or set(self.model) != {"id", "ood"}:
            raise SubnetlabError(f"model: expected the full model's accuracy as {{id: ..., ood: ...}}, got {self.model!r}",
                                 setting="model")
        if not self.id_splits:
            raise SubnetlabError("id_splits: at least one in-domain split", setting="id_splits")

    @property
    def rule(self) -> StopRule:
        return StopRule(float(self.faithfulness), tuple(self.on), self.consecutive)

    @property
    def model_accuracy(self) -> tuple[float, float]:
        return float(self.model["id"]), float(self.model["ood"])


@dataclass(frozen=True)
class SearchJobConfig(ModelAndTask):
    """``search_job``'s config: model and task, the cache, the staircase settings, the seeds, the stop rule.

    ``prune`` is the staircase's ``PruneConfig`` (its ``seed`` is the first seed's;
    the other seeds differ in nothing else).
    """

    cache_dir: str | None = None
    preset: str | None = None
    prune: dict[str, Any] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    stop: dict[str, Any] = field(default_factory=dict)
    init_gates: str | None = None  # a stage directory whose seeds' gates at ``init_level`` start this stage
    init_level: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.init_gates is None) != (self.init_level is None):
            raise SubnetlabError("init_gates and init_level come together (a stage directory and a level in it)",
                                 setting="init_gates")
        if not self.seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in self.seeds):
            raise SubnetlabError(f"seeds: expected a non-empty list of seeds, got {self.seeds!r}", setting="seeds")
        if len(set(self.seeds)) != len(self.seeds):
            raise SubnetlabError(f"seeds: {self.seeds} repeats a seed", setting="seeds")
        if self.settings.schedule != "staircase":
            raise SubnetlabError("schedule: the effective-size search climbs a staircase", setting="schedule")
        self.stop_settings  # checks the rule

    @cached_property
    def settings(self) -> PruneConfig:
        return PruneConfig.from_dict(self.prune)

    @cached_property
    def stop_settings(self) -> StopSettings:
        return StopSettings.from_dict(self.stop)

    def seed_job(self, seed: int) -> PruneJobConfig:
        """The ordinary pruning job config of one seed (what the staircase path would run)."""
        common = ModelAndTask.to_dict(self)
        keep = {k: common[k] for k in ("model", "task", "task_options", "eval_data", "splits")}
        return PruneJobConfig(**keep, cache_dir=self.cache_dir, preset=self.preset,
                              prune=replace(self.settings, seed=seed).to_dict())


def search_stage_job(base: Mapping[str, Any], out: Path, *, levels: Sequence[float], seeds: Sequence[int], preset: str,
                     overrides: Mapping[str, Any], stop: Mapping[str, Any], cache_dir: Path,
                     name: str | None = None, init: tuple[Path, float] | None = None) -> Job:
    """One stage of a checkpoint's search: all ``seeds`` up a staircase over ``levels``, in ``out/search-from-<first>``.

    ``init``: (an earlier stage directory, a level it measured): the seeds start from those gates and the
    staircase has no first ramp (``first_ramp_steps=0``: the first level's hold starts at once).
    """
    if not levels:
        raise SubnetlabError("levels: a search stage needs at least one level", setting="levels")
    if not seeds:
        raise SubnetlabError("seeds: at least one seed", setting="seeds")
    overrides = {**overrides, "first_ramp_steps": 0} if init is not None else dict(overrides)
    cfg = preset_config(preset, max(levels), seed=seeds[0], schedule="staircase", levels=tuple(levels), **overrides)
    common = ModelAndTask.from_dict(absolute_inputs(base))  # input files stored absolute, the cache run-relative
    run_dir = out / stage_dir_name(min(levels))
    warm = {} if init is None else {"init_gates": run_relative(init[0], run_dir), "init_level": float(init[1])}
    job = SearchJobConfig(**common.to_dict(), cache_dir=run_relative(cache_dir, run_dir), preset=preset,
                          prune=cfg.to_dict(), seeds=list(seeds), stop=StopSettings.from_dict(stop).to_dict(), **warm)
    return Job(SEARCH_JOB, job.to_dict(), run_dir, name=name)


def gates_at(stage_dir: Path, seed: int, level: float) -> Path:
    """Where a search stage keeps ``seed``'s log-alphas at the end of ``level``."""
    return Path(stage_dir) / f"seed-{seed}" / "levels" / level_name(level) / GATES


def search_job(config: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Executor job: every seed up the staircase level by level; stop when the rule says so."""
    out_dir = Path(out_dir)
    job = SearchJobConfig.from_dict({**config, "cache_dir": resolve_run_path(config.get("cache_dir"), out_dir),
                                     "init_gates": resolve_run_path(config.get("init_gates"), out_dir)})
    cfg0, stop = job.settings, job.stop_settings
    start_gates: dict[int, dict[str, Any]] = {}
    if job.init_gates is not None:  # checked before any training: every seed's file must be there
        for seed in job.seeds:
            path = gates_at(Path(job.init_gates), seed, float(job.init_level))
            if not path.is_file():
                raise SubnetlabError(f"{path}: no gates to start seed {seed} from (init_gates, init_level)",
                                     setting="init_gates")
            start_gates[seed] = load_tensors(path)
    rule, model_acc = stop.rule, stop.model_accuracy
    seed_jobs = {seed: job.seed_job(seed) for seed in job.seeds}
    setup = PruningSetup.from_job(seed_jobs[job.seeds[0]])  # seed-independent: model, data, means (cached)
    began = time.perf_counter()
    table = None
    if cfg0.teacher == "cache":
        table = full_model_table(setup.loaded.model, setup.loaded.adapter, setup.data, cfg0.eval_batch_size,
                                 job.cache_dir)
    teacher_seconds = time.perf_counter() - began
    ends = sorted(cfg0.make_schedule().level_ends().items())  # (step at which the level's hold ends, level)
    stage(f"search: seeds {', '.join(map(str, job.seeds))} up {len(ends)} levels from {ends[0][1]:.2f}, "
          f"stopping after {rule.consecutive} unfaithful levels in a row on {', '.join(rule.on)}"
          if rule.consecutive else f"search: seeds {', '.join(map(str, job.seeds))} up all {len(ends)} levels")
    climbed: list[tuple[float, float]] = []
    levels: dict[str, Any] = {}
    histories: dict[int, list] = {}
    stopped_after = None
    steps = 0
    train_seconds = 0.0
    for end, level in ends:
        per_seed: dict[str, list[float]] = {}
        healths: list[dict | None] = []
        for seed, seed_job in seed_jobs.items():
            cfg = seed_job.settings
            run_dir = out_dir / f"seed-{seed}"
            where = run_dir / "levels" / level_name(level)

            def on_level(lvl: float, selections: dict[str, GateSelection], step: int, where: Path = where,
                         cfg: PruneConfig = cfg, seed_job: PruneJobConfig = seed_job) -> None:
                if (where / "metrics.json").is_file():  # written before a kill; the replay is identical
                    return
                stage(f"seed {cfg.seed}: level {lvl:.2f} reached at step {step}; evaluating")
                write_json(where / "metrics.json", {**write_selections(where, setup, selections, cfg, lvl, seed_job),
                                                    "step": step})

            result = prune(setup.loaded.model, setup.loaded.adapter, setup.data, cfg, ablation=setup.ablation,
                           run_dir=run_dir, on_level=on_level, teacher=table, stop_at=end,
                           start_gates=start_gates.get(seed))
            if result.resumed_from <= end and not (where / GATES).is_file():  # the gates now are those at ``end``
                save_tensors(where / GATES, gate_tensors(result.gates), {"format": GATES_FORMAT})
            train_seconds += result.seconds
            histories[seed] = result.history
            reached = read_json(where / "metrics.json")
            per_seed[str(seed)] = list(id_ood_accuracy(reached["eval"], stop.id_splits, stop.subcases))
            healths.append(reached.get("health"))
        mean = (sum(a[0] for a in per_seed.values()) / len(per_seed), sum(a[1] for a in per_seed.values()) / len(per_seed))
        climbed.append(mean)
        unfaithful = rule.unfaithful_on(mean, model_acc)
        levels[level_name(level)] = {"level": level, "step": end, "id": mean[0], "ood": mean[1], "seeds": per_seed,
                                     "unfaithful_on": unfaithful, "health": health_counts(healths)}
        steps = end
        stage(f"search: level {level:.2f}: seed-mean ID {mean[0]:.3f}, OOD {mean[1]:.3f} (model {model_acc[0]:.3f}, "
              f"{model_acc[1]:.3f}); " + (f"unfaithful on {', '.join(unfaithful)}" if unfaithful else "faithful"))
        if rule.should_stop(climbed, model_acc):
            if end < ends[-1][0]:
                stopped_after = level
                stage(f"search: stopping after level {level:.2f}: every one of {', '.join(rule.on)} has had "
                      f"{rule.consecutive} unfaithful levels in a row")
            break
    for seed, history in histories.items():
        write_json(out_dir / f"seed-{seed}" / "history.json", history)
    first = next(iter(levels.values()))
    return {"seeds": list(job.seeds), "start": ends[0][1], "levels": levels, "stopped_after": stopped_after,
            "first_level_unfaithful_on": first["unfaithful_on"], "model": {"id": model_acc[0], "ood": model_acc[1]},
            "steps_per_seed": steps, "steps": steps * len(job.seeds), "planned_steps_per_seed": ends[-1][0],
            "train_seconds": round(train_seconds, 3), "teacher_seconds": round(teacher_seconds, 3)}


__all__ = ["GATES", "SEARCH_JOB", "SearchJobConfig", "StopSettings", "gates_at", "search_job", "search_stage_job",
           "stage_dir_name"]
