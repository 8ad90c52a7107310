"""Effective size over training: a staircase pruning sweep per checkpoint and seed, then the analysis.

For each fine-tuning checkpoint, the full model is evaluated and each seed
prunes it up a staircase of sparsity levels (``subnetlab.runs.prune``,
the staircase schedule), evaluating the subnetwork at every level. The effective
size at a checkpoint is the highest level whose seed-mean accuracy stays within
the faithfulness threshold of the model's (``analysis.effective_size``). Layout::

    OUT/step-<n>/full-model/{config,metrics}.json
    OUT/step-<n>/staircase/seed-<s>/levels/<level>/{subnetwork.safetensors,metrics.json}
    OUT/step-<n>/cache/                  mean activations of that checkpoint

All jobs go through ``subnetlab.executor`` (finished ones are skipped).

``SearchSettings`` (off unless given) make the sweep cheaper, as options beside
that default:

* early stop: the seeds of a checkpoint climb one staircase together in one job
  (``runs.prune_search``), sharing the model, the means and the full model's
  outputs, and stop once every chosen data has had two unfaithful levels in a
  row. Exact unless accuracy comes back within the threshold higher up.
* warm start: checkpoints are searched in training order, each starting two
  levels below the previous checkpoint's effective size (the lowest over the
  chosen data); only when its first level is already unfaithful does it walk
  down, two levels at a time, with another short staircase. The trade-off: a
  checkpoint waits for the one before it, so checkpoints do not run in
  parallel; and a checkpoint whose effective size jumped *up* by more than
  the levels it climbs is still found (it climbs until the stop), but one
  whose answer dropped costs a walk-down stage (another first ramp).
* warm gates (with the warm start): each checkpoint's first stage starts every
  seed from that seed's gates of the previous checkpoint at the measured level
  nearest its start (at or below it when there is one) and skips the first ramp,
  holding the start level before it climbs. On the paper's schedule the first
  ramp is 6,500 steps, against 1,300 for each further level. The price:
  a checkpoint's subnetworks then inherit from the earlier checkpoint's (the
  hold re-fits them to this checkpoint's model), so compare the heads before
  the OOD rise with the final core on a sweep without warm gates.

The search writes ``OUT/step-<n>/search-from-<level>/`` (one per stage) instead
of ``staircase/``; ``analyse_sweep`` reads whichever it is told to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from subnetlab.analysis.core import core_heads, expected_random_intersection
from subnetlab.analysis.effective_size import (
    AGGREGATES,
    StopRule,
    compare_heads,
    data_accuracy,
    effective_size,
    generalization_onset,
    id_ood_accuracy,
    per_seed_effective_size,
    warm_start_index,
)
from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job
from subnetlab.io import read_json
from subnetlab.runs.prune import level_name, prune_sweep
from subnetlab.runs.prune_search import gates_at, search_stage_job, stage_dir_name
from subnetlab.subnetwork import Subnetwork

# What a report or findings row says when the settings skip the stage (``effective_size: null``, the ``tour`` preset)
NOT_RUN = ("`subnetlab reproduce heuristic-core` with its demo preset (the default) measures it (3 seeds x 4 levels x "
           "3 checkpoints, about 3 minutes more on a 2-core CPU)")


def find_checkpoints(run_dir: str | Path, every: int = 1) -> list[tuple[int, Path]]:
    """``(step, path)`` of the fine-tuning checkpoints of ``run_dir`` (every ``every``-th, always the last)."""
    from subnetlab.methods.finetune.state import checkpoint_dirs

    found = checkpoint_dirs(run_dir)
    if not found:
        raise SubnetlabError(f"{run_dir}: no checkpoints (expected {Path(run_dir) / 'checkpoints' / 'step-N'}; "
                             "fine-tune with checkpoints saved every N steps, the save_every setting, first)")
    if every < 1:
        raise SubnetlabError(f"every {every} must be at least 1", setting="every")
    chosen = found[::every]
    if chosen[-1] != found[-1]:
        chosen.append(found[-1])
    return chosen


def sweep_jobs(checkpoints: Sequence[tuple[int, Path]], base: dict[str, Any], seeds: Sequence[int],
               levels: Sequence[float], preset: str, overrides: dict[str, Any], out: Path) -> list[Job]:
    """The full-model evaluation and one staircase per seed, for every checkpoint.

    ``base`` holds ``task``, ``task_options``, ``eval_data`` and ``splits`` (the
    pruning job's config keys); ``overrides`` change the preset's pruning settings.
    """
    jobs: list[Job] = []
    for step, path in checkpoints:
        jobs += prune_sweep({**base, "model": str(path)}, out / f"step-{step}", targets=(), seeds=seeds, preset=preset,
                            schedule="staircase", levels=levels, overrides=overrides, name_prefix=f"step-{step}/")
    return jobs


def check_sweep(report: Any) -> None:
    """Raise, naming the first failure, when a job of the sweep failed."""
    failed = [j for j in report.jobs if j.status == "failed"]
    if failed:
        raise SubnetlabError(f"{len(failed)} of {len(report.jobs)} effective-size runs failed; {failed[0].name}: "
                             f"{failed[0].error} (rerun the same command to resume)")


def _columns(scores: dict, id_splits: Sequence[str], subcases: Sequence[str] | None) -> tuple[float, float]:
    return id_ood_accuracy(scores, id_splits, subcases)


@dataclass(frozen=True)
class SearchSettings:
    """How the sweep searches each checkpoint's levels (the ``search`` key of the effective-size settings).

    Absent, the sweep prunes every level of every checkpoint (one staircase per
    seed): the default, and the reference. ``early_stop``: stop a checkpoint's
    staircase after ``consecutive`` unfaithful levels in a row on every chosen
    data; ``warm_start``: start each checkpoint ``below`` levels under the
    previous one's effective size (checkpoints then run one after another);
    ``warm_gates`` (needs ``warm_start``): start its gates from the previous
    checkpoint's, without a first ramp.
    """

    early_stop: bool = True
    warm_start: bool = False
    consecutive: int = 2
    below: int = 2
    warm_gates: bool = False

    def __post_init__(self) -> None:
        for name in ("early_stop", "warm_start", "warm_gates"):
            if not isinstance(getattr(self, name), bool):
                raise SubnetlabError(f"{name} {getattr(self, name)!r}: expected true or false", setting=name)
        if self.warm_gates and not self.warm_start:
            raise SubnetlabError("warm_gates: needs warm_start (the gates come from the previous checkpoint)",
                                 setting="warm_gates")
        for name, low in (("consecutive", 1), ("below", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SubnetlabError(f"{name} {value!r}: expected a whole number >= {low}", setting=name)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "SearchSettings | None":
        """None (or no mapping) keeps the default sweep; unknown keys are refused by name."""
        if data is None:
            return None
        if not isinstance(data, Mapping):
            raise SubnetlabError(f"search: expected a mapping of search settings, got {data!r}", setting="search")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SubnetlabError(f"unknown search setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                                 setting="search")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Runner = Callable[[Sequence[Job], Path], Any]  # (jobs, sweep directory) -> the executor's report


def search_sweep(checkpoints: Sequence[tuple[int, Path]], base: dict[str, Any], seeds: Sequence[int],
                 levels: Sequence[float], preset: str, overrides: Mapping[str, Any], out: Path, *,
                 search: SearchSettings, run: Runner, on: Sequence[str], faithfulness: float = 0.03,
                 id_splits: Sequence[str] = ("id",), subcases: Sequence[str] | None = None) -> dict[int, list[Path]]:
    """Run the searching sweep; return each checkpoint's stage directories (for ``analyse_sweep``).

    First every checkpoint's full model is evaluated (the rule compares with it),
    then the stages: all at once without a warm start, else one checkpoint at a
    time in training order. Rerunning the same call skips what is finished
    (the stages' configs, start levels included, follow from finished results).
    """
    levels = sorted(levels)
    steps = [step for step, _ in checkpoints]
    fulls = {step: prune_sweep({**base, "model": str(path)}, out / f"step-{step}", targets=(), seeds=seeds,
                               preset=preset, schedule="staircase", levels=levels, overrides=dict(overrides),
                               name_prefix=f"step-{step}/")[0] for step, path in checkpoints}
    check_sweep(run(list(fulls.values()), out))
    rule = StopRule(faithfulness, tuple(on), search.consecutive if search.early_stop else 0)
    models = {step: _columns(read_json(out / f"step-{step}" / "full-model" / "metrics.json")["eval"], id_splits, subcases)
              for step in steps}
    paths = dict(checkpoints)

    def stage_job(step: int, first: int, top: int, init: tuple[Path, float] | None = None) -> Job:
        stop = {"model": {"id": models[step][0], "ood": models[step][1]}, "on": list(rule.on),
                "faithfulness": rule.faithfulness, "consecutive": rule.consecutive, "id_splits": list(id_splits),
                "subcases": list(subcases) if subcases else None}
        where = out / f"step-{step}"
        return search_stage_job({**base, "model": str(paths[step])}, where, levels=levels[first:top], seeds=seeds,
                                preset=preset, overrides=overrides, stop=stop, cache_dir=where / "cache",
                                name=f"step-{step}/{stage_dir_name(levels[first])}", init=init)

    stages: dict[int, list[Job]] = {}
    if not search.warm_start:
        stages = {step: [stage_job(step, 0, len(levels))] for step in steps}
        check_sweep(run([j for js in stages.values() for j in js], out))
    else:
        previous: float | None = None
        before: list[Path] = []  # the previous checkpoint's stage directories
        for step in steps:
            first = warm_start_index(levels, previous, search.below) if previous is not None else 0
            top = len(levels)
            stages[step] = []
            init = gate_source(before, levels[first], seeds) if search.warm_gates else None
            while True:
                stages[step].append(stage_job(step, first, top, init))
                init = None  # a walk-down stage starts cold, below what the warm gates gave
                check_sweep(run(stages[step], out / f"step-{step}"))  # the earlier stages are skipped
                done = read_json(stages[step][-1].out_dir / "metrics.json")
                if first == 0 or not done["first_level_unfaithful_on"]:
                    break
                top, first = first, max(0, first - max(1, search.below))  # walk down below this stage's start
            before = [j.out_dir for j in stages[step]]
            measured = _stage_means(before)
            previous = min(effective_size({lvl: [acc[c]] for lvl, acc in measured.items()},
                                          data_accuracy(*models[step], c), faithfulness).sparsity for c in rule.on)
    check_sweep(run([*fulls.values(), *(j for js in stages.values() for j in js)], out))  # sweep.json lists them all
    return {step: [j.out_dir for j in js] for step, js in stages.items()}


def gate_source(stage_dirs: Sequence[Path], level: float, seeds: Sequence[int]) -> tuple[Path, float] | None:
    """The (stage directory, level) whose saved gates start a warm-gated stage at ``level``: the highest level
    at or below it that every seed's gates were saved at, else the lowest saved; None when none was saved."""
    found: dict[float, Path] = {}
    for where in stage_dirs:
        for entry in read_json(where / "metrics.json")["levels"].values():
            lvl = float(entry["level"])
            if all(gates_at(where, seed, lvl).is_file() for seed in seeds):
                found.setdefault(lvl, where)
    if not found:
        return None
    below = [lvl for lvl in found if lvl <= level + 1e-9]
    pick = max(below) if below else min(found)
    return found[pick], pick


def _stage_means(stage_dirs: Sequence[Path]) -> dict[float, dict[str, float]]:
    """Seed-mean accuracy per level measured by a checkpoint's stages: ``{level: {id, ood, mixed}}``."""
    out: dict[float, dict[str, float]] = {}
    for where in stage_dirs:
        for entry in read_json(where / "metrics.json")["levels"].values():
            out[float(entry["level"])] = {c: data_accuracy(entry["id"], entry["ood"], c) for c in ("id", "ood", "mixed")}
    return out


def search_steps(stage_dirs: Sequence[Path]) -> int:
    """Optimisation steps one seed ran over a checkpoint's stages."""
    return sum(int(read_json(where / "metrics.json")["steps_per_seed"]) for where in stage_dirs)


def analyse_sweep(
    checkpoints: Sequence[tuple[int, Path]],
    seeds: Sequence[int],
    levels: Sequence[float],
    out: Path,
    *,
    on: Sequence[str] = ("id", "ood", "mixed"),
    faithfulness: float = 0.03,
    id_splits: Sequence[str] = ("id",),
    subcases: Sequence[str] | None = None,
    core: Sequence[str] | None = None,
    search: Mapping[int, Sequence[Path]] | None = None,
    sides: str = "two",
    aggregate: str = "seed-mean",
) -> dict[str, Any]:
    """Effective size per checkpoint for each choice of data, the onset of OOD rise, and its heads.

    ``on[0]`` picks the subnetworks whose shared heads are compared with ``core``
    at the checkpoint just before OOD accuracy starts to rise. ``search``: each
    checkpoint's stage directories (``search_sweep``); only the levels they
    measured are candidates. Without it every level of ``staircase/`` is read.

    ``sides`` (``two``/``one``) is the faithfulness test (``analysis.effective_size``);
    ``aggregate="per-seed"`` reports the mean of the seeds' own effective sizes
    (the authors' plotting script) instead of thresholding the seed-mean
    accuracy; the heads at the effective size are read at the seed-mean answer.
    """
    if aggregate not in AGGREGATES:
        raise SubnetlabError(f"aggregate {aggregate!r}: expected one of {', '.join(AGGREGATES)}", setting="aggregate")
    rows: list[dict[str, Any]] = []
    for step, _ in checkpoints:
        where = out / f"step-{step}"
        model_id, model_ood = _columns(read_json(where / "full-model" / "metrics.json")["eval"], id_splits, subcases)
        per_level: dict[float, list[tuple[float, float]]] = {}
        kept: dict[float, list[Subnetwork]] = {}
        found = ([(float(entry["level"]), d / f"seed-{seed}" / "levels" / level_name(float(entry["level"])))
                  for d in search[step] for entry in read_json(d / "metrics.json")["levels"].values() for seed in seeds]
                 if search is not None else
                 [(level, where / "staircase" / f"seed-{seed}" / "levels" / level_name(level))
                  for level in levels for seed in seeds])
        for level, lvl in found:
            per_level.setdefault(level, []).append(_columns(read_json(lvl / "metrics.json")["eval"], id_splits, subcases))
            kept.setdefault(level, []).append(Subnetwork.load(lvl / "subnetwork.safetensors"))
        sizes = {}
        for choice in on:
            model_acc = data_accuracy(model_id, model_ood, choice)
            accs = {lvl: [data_accuracy(i, o, choice) for i, o in pairs] for lvl, pairs in per_level.items()}
            sizes[choice] = effective_size(accs, model_acc, faithfulness, sides).to_dict()
            sizes[choice]["level_sparsity"] = sizes[choice]["sparsity"]
            if aggregate == "per-seed":
                seeds_ = per_seed_effective_size(accs, model_acc, faithfulness, sides)
                sizes[choice].update(size=seeds_["mean_size"], sparsity=round(1.0 - seeds_["mean_size"], 6),
                                     per_seed=seeds_)
        best = sizes[on[0]]["level_sparsity"]
        shared = core_heads(kept[best]) if best in kept else []
        # chance that a head survives in every one of these subnetworks were they random of the same sizes
        n_heads = next(iter(kept.values()))[0].heads.numel()
        chance = (expected_random_intersection(n_heads, [int(s.heads.sum()) for s in kept[best]]) / n_heads
                  if best in kept else 1.0)
        row = {"step": step, "id_accuracy": model_id, "ood_accuracy": model_ood, "effective_size": sizes,
               "heads_in_all_at_effective_size": shared, "chance_head_in_all": chance}
        if search is not None:
            row["search"] = {"stages": [d.name for d in search[step]], "levels_measured": sorted(per_level),
                             "steps_per_seed": search_steps(search[step])}
        rows.append(row)
    onset = generalization_onset([r["ood_accuracy"] for r in rows])
    before = None
    if onset is not None:
        row = rows[onset]
        before = {"step": row["step"], "on": on[0],
                  **compare_heads(row["heads_in_all_at_effective_size"], core or [], row["chance_head_in_all"])}
    return {"checkpoints": rows, "on": list(on), "faithfulness": faithfulness, "sides": sides, "aggregate": aggregate,
            "levels": list(levels),
            "seeds": list(seeds), "id_splits": list(id_splits), "subcases": list(subcases) if subcases else None,
            "onset_index": onset, "before_onset": before}
