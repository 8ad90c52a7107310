"""A sweep's search controls and seed stability: the control jobs beside the real ones, and the comparison.

Each real search job ``DIR/<run>`` gets one job per control ``DIR/controls/<control>/<run>``, a full run
directory of its own (config with ``control``, metrics, health), run by the same executor call. Once the
sweep is done, ``sweep_comparison`` groups the runs by target and reports, per target, the found masks' score
(the task's own score: a circuit's logit difference, a subnetwork's accuracy), faithfulness where measured and
density, beside each control's, with ``methods.controls.control_verdict``; and, where masks over the same
units come from several seeds, their stability (``analysis.stability.mask_stability``). The command writes it
to ``DIR/metrics.json`` (``subnetlab results`` reads it) and prints ``format_comparison``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from subnetlab.executor import Job
from subnetlab.methods.controls import CONTROLS_DIR, control_verdict
from subnetlab.run_directory import resolve_run_path, run_relative

Measure = Callable[[Mapping[str, Any]], Mapping[str, float | None]]  # metrics -> score, faithfulness, density


def control_jobs(jobs: Sequence[Job], out: Path, controls: Sequence[str], search_fn: str) -> list[Job]:
    """A copy of every ``search_fn`` job per control, under ``out/controls/<control>/`` (a run-relative cache
    moves to the control's own: a random model's means are not the real model's)."""
    extra = []
    for control in controls:
        root = out / CONTROLS_DIR / control
        for job in jobs:
            if job.fn != search_fn:
                continue
            run_dir = root / Path(job.out_dir).relative_to(out)
            config = {**job.config, "control": control}
            if config.get("cache_dir") is not None:
                cache = Path(resolve_run_path(config["cache_dir"], job.out_dir))
                config["cache_dir"] = run_relative(root / cache.relative_to(out), run_dir)
            name = None if job.name is None else f"{CONTROLS_DIR}/{control}/{job.name}"
            extra.append(Job(job.fn, config, run_dir, name=name))
    return extra


def circuit_measure(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """An edge circuit's logit difference on its evaluation pairs, its faithfulness, its edge density."""
    return {"score": (metrics.get("eval") or {}).get("logit_diff"),
            "faithfulness": (metrics.get("faithfulness") or {}).get("logit_diff"),
            "density": 1.0 - float(metrics["sparsity"])}


def subnetwork_measure(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """A pruned subnetwork's accuracy on its first evaluation split, its density (kept heads and MLPs)."""
    scores = metrics.get("eval") or {}
    split = next((s for s, v in scores.items() if isinstance(v, Mapping) and "accuracy" in v), None)
    return {"score": None if split is None else scores[split]["accuracy"], "split": split,
            "density": 1.0 - float(metrics["sparsity"])}


def discovery_measure(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """A continuous-sparsification mask's test accuracy, its evaluation accuracy, its kept percent and density."""
    kept = metrics.get("kept_percent")
    return {"score": metrics.get("test_accuracy"), "eval_accuracy": metrics.get("eval_accuracy"),
            "kept_percent": kept, "density": None if kept is None else float(kept) / 100.0}


def lottery_measure(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """A lottery-pruned subnetwork's development metric, the full model's (its own: a control's model or labels),
    its density (the kept share of what the method prunes: weights, or heads and MLPs)."""
    return {"score": metrics.get("metric"), "full_metric": metrics.get("full_metric"),
            "density": 1.0 - float(metrics["sparsity"])}


def circuit_masks(job: Any) -> tuple[Any, list[str]]:
    """A finished edge-pruning run's 0/1 edge mask and the graph's edge names (its ``subnetwork.safetensors``)."""
    from subnetlab.subnetwork import Subnetwork

    sub = Subnetwork.load(Path(job.out_dir) / "subnetwork.safetensors")
    return sub.edges, list(sub.graph().edge_names)


def by_target(metrics: Mapping[str, Any]) -> str | None:
    """A sweep run's group: its target sparsity (None for a run that has none, e.g. a staircase's)."""
    if not all(k in metrics for k in ("target_sparsity", "seed", "sparsity")):  # staircases: per level
        return None
    return f"{float(metrics['target_sparsity']):.3f}"


def sweep_comparison(results: Sequence[Any], measure: Measure, *, score_name: str,
                     masks: Callable[[Any], tuple[Any, list[str]] | None] | None = None,
                     seed: int = 0, group: Callable[[Mapping[str, Any]], str | None] = by_target) -> dict[str, Any]:
    """Per group (``group``: a run's metrics -> its key, None to leave it out; by default its target
    sparsity): the real runs' measures over seeds, each control's, the verdict and, with ``masks`` (a
    finished job -> its 0/1 mask and unit names), the real circuits' stability over seeds.

    ``results`` are the executor's job results (``name``, ``metrics``); a control run is one whose metrics
    name its ``control``; a run without a ``seed`` counts as seed 0."""
    from subnetlab.analysis.stability import mask_stability

    groups: dict[str, dict[str, list[Any]]] = {}
    for job in results:
        m = job.metrics
        key = group(m) if m else None
        if key is None:
            continue
        groups.setdefault(key, {}).setdefault(m.get("control") or "real", []).append(job)
    out: dict[str, Any] = {}
    for key, by_kind in sorted(groups.items()):
        table = {kind: _measures(jobs, measure) for kind, jobs in by_kind.items()}
        entry: dict[str, Any] = {"score": score_name, **table}
        controls = {k: v["score"] for k, v in table.items() if k != "real"}
        if controls and "real" in table:
            entry["verdict"] = control_verdict(table["real"]["score"], controls)
        real = sorted(by_kind.get("real", []), key=_seed)
        found = [masks(j) for j in real] if masks is not None else []
        if len(found) > 1 and all(f is not None for f in found):
            entry["stability"] = mask_stability([f[0] for f in found], found[0][1],
                                                [measure(j.metrics).get("faithfulness") for j in real], seed=seed)
            entry["stability"]["seeds"] = [_seed(j) for j in real]
        out[key] = entry
    return out


def _seed(job: Any) -> int:
    return int(job.metrics.get("seed") or 0)


def _measures(jobs: Sequence[Any], measure: Measure) -> dict[str, list[Any]]:
    rows = [dict(measure(j.metrics), seed=_seed(j)) for j in sorted(jobs, key=_seed)]
    keys = [k for k in rows[0] if k != "seed"]
    return {"seeds": [r["seed"] for r in rows], **{k: [r.get(k) for r in rows] for k in keys}}


def format_comparison(comparison: Mapping[str, Any], heading: Callable[[str], str] = "target sparsity {}".format
                      ) -> str:
    """The comparison as plain lines: per group (``heading`` names it), real and control means (sd) and the
    verdict; stability."""
    from subnetlab.analysis.stability import score_over_circuits

    lines = []
    for key, entry in comparison.items():
        name = entry["score"]
        kinds = [k for k in entry if k not in ("score", "verdict", "stability")]
        if len(kinds) > 1:
            lines.append(f"controls at {heading(key)} ({name} of the found mask; density = kept fraction):")
            for kind in kinds:
                row = entry[kind]
                cells = [f"{col} {_mean_sd(row[col])}" for col in ("score", "faithfulness", "density") if col in row]
                lines.append(f"  {kind:<16} seeds {','.join(map(str, row['seeds']))}: " + "; ".join(cells)
                             .replace("score ", f"{name} ", 1))
            verdict = entry.get("verdict")
            if verdict is not None:
                word = {True: "yes", False: "no", None: "undecided"}[verdict["beats"]]
                lines.append(f"  beats both controls beyond the seed spread: {word} ({verdict['reason']})")
        stab = entry.get("stability")
        if stab:
            over = f"seeds {','.join(map(str, stab['seeds']))}"
            if "runs" in stab:  # an attribution sweep: step counts by seeds
                seeds = sorted({s for s in stab["seeds"] if s is not None})
                over = (f"{len(stab['runs'])} runs (steps {','.join(map(str, sorted(set(stab['steps']))))}"
                        f"{' x seeds ' + ','.join(map(str, seeds)) if seeds else ', the same pairs'})")
            line = (f"stability at target sparsity {key} over {over}: mean pairwise Jaccard {stab['mean_jaccard']:.3f} "
                    f"(min {stab['min_jaccard']:.3f}); {stab['kept_in_every']} units kept by every "
                    f"{'run' if 'runs' in stab else 'seed'}, {stab['kept_in_any']} by any")
            for part in ("steps", "seeds"):
                value = stab.get(f"mean_jaccard_across_{part}")
                if value is not None and value == value:  # NaN: no two runs differ in this alone
                    line += f"; across {part} alone {value:.3f}"
            if "score" in stab:
                line += f"; faithfulness {score_over_circuits(stab['score'])}"
            lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")


def _mean_sd(values: Sequence[Any]) -> str:
    from subnetlab.methods.controls import spread

    got = [float(v) for v in values if isinstance(v, (int, float))]
    if not got:
        return "n/a"
    mean = sum(got) / len(got)
    return f"{mean:.3f}" if len(got) == 1 else f"{mean:.3f} (sd {spread(got):.3f})"


def write_comparison(out: Path, results: Sequence[Any], command: str, *, controls: Sequence[str], measure: Measure,
                     score_name: str, masks: Callable[[Any], tuple[Any, list[str]] | None] | None = None,
                     group: Callable[[Mapping[str, Any]], str | None] = by_target) -> dict[str, Any]:
    """The sweep's comparison (``sweep_comparison``), written to ``out/metrics.json`` when there is anything to
    compare (controls, or several seeds of circuits): for a command's controls and ``sl.CMD(controls=)``.
    A command whose ``DIR/metrics.json`` is its own result passes ``out = DIR/controls``."""
    from subnetlab.io import write_json

    comparison = sweep_comparison(results, measure, score_name=score_name, masks=masks, group=group)
    if controls or any("stability" in entry for entry in comparison.values()):
        write_json(out / "metrics.json", {"command": command, "controls": list(controls), "targets": comparison})
    return comparison


__all__ = ["SELECTED", "by_target", "circuit_masks", "circuit_measure", "control_jobs", "discovery_measure",
           "format_comparison", "lottery_measure", "selected_comparison", "subnetwork_measure", "sweep_comparison",
           "write_comparison"]


SELECTED = "selected"  # the one group of a command that keeps one run of its sweep (discover: one lambda)


def selected_comparison(out: Path, results: Sequence[Any], command: str, *, controls: Sequence[str],
                        select: Callable[[list[dict[str, Any]]], Mapping[str, Any]], measure: Measure,
                        score_name: str) -> dict[str, Any]:
    """For a command that keeps one run of its sweep: ``select`` (a kind's runs' metrics -> the kept one, by
    identity) picks among the real runs and among each control's alike, and the picks are compared
    (``write_comparison`` into ``out``; one group, ``SELECTED``)."""
    by_kind: dict[str, list[Any]] = {}
    for job in results:
        if job.metrics:
            by_kind.setdefault(job.metrics.get("control") or "real", []).append(job)
    picked = []
    for jobs in by_kind.values():
        chosen = select([j.metrics for j in jobs])
        picked.append(next(j for j in jobs if j.metrics is chosen))
    return write_comparison(out, picked, command, controls=controls, measure=measure, score_name=score_name,
                            group=lambda metrics: SELECTED)
