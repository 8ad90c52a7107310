"""Attribution scores over several step counts and pair samples, and how much their circuits agree.

EAP-IG's circuits move with the integration's step count and with the pairs scored (arXiv 2510.00845). A sweep
scores the edges once per (step count, seed), each a full attribution run (``runs.attribution``), and compares
the circuits they give: at each target sparsity, each run's top ``edges_kept`` edges by ``|score|``, their
per-edge frequency, pairwise Jaccard, the edges every run / any run keeps (``analysis.stability.mask_stability``),
and the mean Jaccard between runs that differ only in the step count or only in the seed.

A seed draws which ``limit`` training pairs a run scores (``AttributionJobConfig.sample_seed``); without seeds
every run scores the first ``limit`` pairs, so the runs differ only by their step counts.

Layout of DIR::

    DIR/
      steps-5/seed-0/          one attribution run per (steps, seed) (``seed-all`` without seeds)
      metrics.json             per target sparsity, the circuits' stability (the shape ``runs.controls`` writes)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError, check_count
from subnetlab.methods.attribution.scores import MAX_IG_STEPS
from subnetlab.runs.attribution import SCORES_FILE, AttributionJobConfig
from subnetlab.runs.job_config import check_seeds, check_targets

DEFAULT_TARGET = 0.95  # the circuits compared when no target sparsity is given: the top 5% of the edges


def check_step_counts(steps: Sequence[int]) -> list[int]:
    """Step counts as given, each a whole number of at least 1, none twice."""
    counts = list(steps)
    if not counts:
        raise SubnetlabError("ig_steps: give at least one step count", setting="ig_steps")
    check_count("ig_steps", len(counts), listed=True)
    for k in counts:
        if isinstance(k, bool) or not isinstance(k, int):
            raise SubnetlabError(f"ig_steps {k!r}: a step count is a whole number", setting="ig_steps")
        if not 1 <= k <= MAX_IG_STEPS:
            raise SubnetlabError(f"integrated-gradient steps {k} must be between 1 and {MAX_IG_STEPS}",
                                 setting="ig_steps")
    repeated = sorted({k for k in counts if counts.count(k) > 1})
    if repeated:
        raise SubnetlabError(f"ig_steps {', '.join(map(str, repeated))} given twice: each step count once",
                             setting="ig_steps")
    return counts


def check_sweep_targets(method: str, steps: Sequence[int], seeds: Sequence[int] | None,
                        targets: Sequence[float] | None) -> bool:
    """Whether the run is a sweep (several step counts, or seeds); target sparsities are refused without one: they
    only pick the circuits a sweep compares."""
    check_step_counts(steps)
    if seeds is not None:
        check_seeds(seeds)
    if targets is not None:
        check_targets(targets)
    sweep = len(steps) > 1 or seeds is not None
    if targets is not None and not sweep:
        raise SubnetlabError(f"sparsity: under {method} it sets the circuits compared across step counts or seeds; "
                             "give several step counts or seeds", setting="sparsity")
    return sweep


def run_name(steps: int, seed: int | None) -> str:
    return f"steps-{steps}/seed-{'all' if seed is None else seed}"


def sweep_jobs(base: AttributionJobConfig, steps: Sequence[int], seeds: Sequence[int] | None
               ) -> list[tuple[str, AttributionJobConfig]]:
    """One checked job per (step count, seed); ``seeds`` None scores the same pairs in every run."""
    counts = check_step_counts(steps)
    if seeds is not None:
        check_seeds(seeds)
    jobs = [replace(base, ig_steps=k, sample_seed=s) for k in counts for s in (list(seeds) if seeds is not None
                                                                               else [None])]
    return [(run_name(job.ig_steps, job.sample_seed), job) for job in jobs]  # eap and exact: one step, whatever given


def attribution_sweep(base: AttributionJobConfig, out: Path, *, steps: Sequence[int], seeds: Sequence[int] | None,
                      targets: Sequence[float] = (DEFAULT_TARGET,)) -> dict[str, Any]:
    """Score every (step count, seed) into ``out/steps-K/seed-S`` and write the circuits' stability into
    ``out/metrics.json``; returns that file's content, with each run's metrics under ``runs``."""
    from subnetlab.io import write_json
    from subnetlab.runs.attribution import attribution_run

    jobs = sweep_jobs(base, steps, seeds)
    for t in targets:
        if not 0.0 < float(t) < 1.0:
            raise SubnetlabError(f"sparsity {t}: a target sparsity is in (0, 1)", setting="sparsity")
    runs = {name: attribution_run(job, out / name) for name, job in jobs}
    labels = [(job.ig_steps, job.sample_seed) for _, job in jobs]
    comparison = score_stability([out / name / SCORES_FILE for name, _ in jobs], labels, targets)
    record = {"command": "circuit", "method": base.method, "controls": [], "over": "steps and seeds",
              "steps": sorted({k for k, _ in labels}), "seeds": None if seeds is None else list(seeds),
              "pairs": base.limit, "targets": comparison}
    write_json(out / "metrics.json", record)
    return {**record, "runs": runs}


def score_stability(files: Sequence[Path], labels: Sequence[tuple[int, int | None]], targets: Sequence[float]
                    ) -> dict[str, Any]:
    """Per target sparsity: the stability of the top-|score| circuits of each scores file (``labels``: each
    file's step count and seed), keyed as ``runs.controls`` keys its targets. Node scores (nap, nap-ig): the
    circuits are the top heads and MLPs (``L0.H0 ... L0.MLP``), as circuit-eval's node curves take them."""
    from subnetlab.analysis.circuit_evaluation import node_vector
    from subnetlab.analysis.stability import mask_stability
    from subnetlab.io import load_tensors
    from subnetlab.models.circuit import Circuit, edges_kept, top_k_mask
    from subnetlab.subnetwork.subnetwork import component_index

    tensors = [load_tensors(f) for f in files]
    if "edges" in tensors[0]:
        scores = [t["edges"] for t in tensors]
        names = list(Circuit.load(Path(files[0]).parent / "graph.json").graph.edge_names)  # the run's graph, beside it
    else:
        scores = [node_vector(t["heads"], t["mlps"]) for t in tensors]
        layers, heads = tensors[0]["heads"].shape
        names = list(component_index(int(layers), int(heads)))
    out: dict[str, Any] = {}
    for target in sorted(targets):
        k = edges_kept(float(target), scores[0].numel())
        masks = [top_k_mask(s, k, absolute=True) for s in scores]
        stab = mask_stability(masks, names)
        stab["runs"] = [run_name(steps, seed) for steps, seed in labels]
        stab["seeds"] = [seed for _, seed in labels]
        stab["steps"] = [steps for steps, _ in labels]
        stab.update(split_jaccard(stab["pairwise_jaccard"], labels))
        out[f"{float(target):.3f}"] = {"score": "attribution", "stability": stab}
    return out


def split_jaccard(pairwise: Sequence[Sequence[float]], labels: Sequence[tuple[int, int | None]]) -> dict[str, float]:
    """Mean Jaccard over the pairs of runs that differ only in the step count (same seed) and over those that
    differ only in the seed (same step count); NaN where there is no such pair."""
    same_seed, same_steps = [], []
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            if labels[i][1] == labels[j][1]:
                same_seed.append(pairwise[i][j])
            elif labels[i][0] == labels[j][0]:
                same_steps.append(pairwise[i][j])
    return {"mean_jaccard_across_steps": sum(same_seed) / len(same_seed) if same_seed else math.nan,
            "mean_jaccard_across_seeds": sum(same_steps) / len(same_steps) if same_steps else math.nan}


__all__ = ["DEFAULT_TARGET", "attribution_sweep", "check_step_counts", "check_sweep_targets", "run_name", "score_stability",
           "split_jaccard", "sweep_jobs"]
