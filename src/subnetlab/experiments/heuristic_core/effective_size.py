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
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from subnetlab.analysis.core import core_heads, expected_random_intersection
from subnetlab.analysis.effective_size import compare_heads, data_accuracy, effective_size, generalization_onset
from subnetlab.analysis.scores import mean_of, ood_columns, score_columns
from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job
from subnetlab.io import read_json
from subnetlab.runs.prune import level_name, prune_sweep
from subnetlab.subnetwork import Subnetwork


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
    cols = score_columns(scores, id_splits, subcases)
    return mean_of(cols, list(id_splits)), mean_of(cols, ood_columns(cols, id_splits))


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
) -> dict[str, Any]:
    """Effective size per checkpoint for each choice of data, the onset of OOD rise, and its heads.

    ``on[0]`` picks the subnetworks whose shared heads are compared with ``core``
    at the checkpoint just before OOD accuracy starts to rise.
    """
    rows: list[dict[str, Any]] = []
    for step, _ in checkpoints:
        where = out / f"step-{step}"
        model_id, model_ood = _columns(read_json(where / "full-model" / "metrics.json")["eval"], id_splits, subcases)
        per_level: dict[float, list[tuple[float, float]]] = {}
        kept: dict[float, list[Subnetwork]] = {}
        for level in levels:
            for seed in seeds:
                lvl = where / "staircase" / f"seed-{seed}" / "levels" / level_name(level)
                per_level.setdefault(level, []).append(_columns(read_json(lvl / "metrics.json")["eval"], id_splits, subcases))
                kept.setdefault(level, []).append(Subnetwork.load(lvl / "subnetwork.safetensors"))
        sizes = {}
        for choice in on:
            model_acc = data_accuracy(model_id, model_ood, choice)
            accs = {lvl: [data_accuracy(i, o, choice) for i, o in pairs] for lvl, pairs in per_level.items()}
            sizes[choice] = effective_size(accs, model_acc, faithfulness).to_dict()
        best = sizes[on[0]]["sparsity"]
        shared = core_heads(kept[best]) if best in kept else []
        # chance that a head survives in every one of these subnetworks were they random of the same sizes
        n_heads = kept[levels[0]][0].heads.numel()
        chance = (expected_random_intersection(n_heads, [int(s.heads.sum()) for s in kept[best]]) / n_heads
                  if best in kept else 1.0)
        rows.append({"step": step, "id_accuracy": model_id, "ood_accuracy": model_ood, "effective_size": sizes,
                     "heads_in_all_at_effective_size": shared, "chance_head_in_all": chance})
    onset = generalization_onset([r["ood_accuracy"] for r in rows])
    before = None
    if onset is not None:
        row = rows[onset]
        before = {"step": row["step"], "on": on[0],
                  **compare_heads(row["heads_in_all_at_effective_size"], core or [], row["chance_head_in_all"])}
    return {"checkpoints": rows, "on": list(on), "faithfulness": faithfulness, "levels": list(levels),
            "seeds": list(seeds), "id_splits": list(id_splits), "subcases": list(subcases) if subcases else None,
            "onset_index": onset, "before_onset": before}
