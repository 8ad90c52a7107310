"""The Heuristic Core's headline claims against a finished run, read from its saved results (nothing recomputed).

Reads ``OUT/metrics.json`` (the report's summary per study), ``OUT/config.json``
(the settings), and per study ``core/metrics.json`` and
``effective_size/metrics.json``. A result that is absent or renamed gives a
"not measurable" row naming it, never an error.

Rules (``experiments.demo.verdicts``), each over every measured point:

* core: shown when at least one head is in every subnetwork and random
  subnetworks of the same sizes would share that many with probability < 0.05,
  and the gates are decided: when the report's largest undecided-gate share
  (over its sparsities) is above ``runs.health.MAX_UNDECIDED_SHARE`` (the share
  above which ``runs.health`` calls a run undecided), the verdict is "shown,
  weakly identified";
* alike in-domain, spread out of domain: shown when, at every sparsity, the
  mean standard deviation of an OOD subcase over seeds exceeds twice the ID one
  and one point; fewer than ``MIN_SEEDS`` seeds: not measurable;
* ablating a core head hurts OOD more than ID: shown when the mean OOD fall
  exceeds the mean ID fall by more than one point and the non-core heads' mean
  OOD fall by more than one point (a single model: the non-core heads are the
  reference for noise); a rise is written as a rise;
* effective size: needs at least ``MIN_SEEDS`` seeds and three checkpoints, and
  OOD accuracy rising over every checkpoint (no fall between neighbours beyond
  the faithfulness threshold, more than the threshold in all; otherwise there
  is no generalisation to accompany: not measurable). A size where no tested
  level was faithful is capped ("> 90%" on a grid whose lowest sparsity is 10%)
  and never counts as a rise: not measurable. Shown when the OOD size rises
  over every checkpoint (never falls) by at least one level step in all while
  the ID size stays within one level step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subnetlab.analysis.effective_size import size_bound
from subnetlab.experiments.demo.verdicts import (
    MIN_SEEDS,
    NOT_MEASURABLE,
    NOT_SHOWN,
    SHOWN,
    Finding,
    Missing,
    Reading,
    compare,
    get,
    identified,
    missing,
    moves,
    number,
    read_json_or_missing,
    section_link,
    trend,
)
from subnetlab.experiments.heuristic_core.effective_size import NOT_RUN
from subnetlab.runs.health import MAX_UNDECIDED_SHARE

PAPER = "Heuristic Core"
CLAIMS = {
    "core": ("A small core of heads is shared by every subnetwork, across seeds and sparsities",
             "9 of 144 heads in all 24 MNLI subnetworks (12 seeds x 50% / 70%); Spearman rho 0.82 (Figure 5)",
             "Shared heads: the core"),
    "spread": ("Subnetworks agree in-domain but generalise differently out of domain",
               "ID within 2-3 points of the full model; Embed-If from 4.1% to 50.2% across 12 seeds at 50% "
               "(Figures 2a, 3)", "Subnetworks across seeds"),
    "ablation": ("Ablating a core head hurts OOD accuracy much more than ID accuracy",
                 "ID changes at most 2.3 points; OOD drops up to 41.3 (L4.H0 on SO-Swap); non-core heads 0.1 ID / "
                 "<= 0.5 OOD (Table 3)", "Ablating the core heads"),
    "effective_size": ("Effective size grows with OOD generalisation while the ID size stays flat",
                       "ID size flat over training; OOD and mixed sizes rise steeply as OOD accuracy rises "
                       "(Figure 6, 3 seeds)", "Effective size over training"),
}
MARGIN = 0.01  # one point: at these evaluation sizes smaller mean differences are a few examples
CHANCE = 0.05


def _pt(x: float) -> str:
    return f"{100 * x:.1f}"


def _undecided(summary: dict) -> float | None:
    """The largest share of undecided gates over the report's sparsities (None when the report has none)."""
    shares = summary.get("undecided_share")
    values = [float(v) for v in (shares or {}).values() if isinstance(v, (int, float))] if isinstance(shares, dict) else []
    return max(values) if values else None


def core_row(summary: dict, core: dict) -> tuple[str, str, str]:
    size = int(number(summary, "core_size"))
    heads = int(number(core, "num_layers")) * int(number(core, "num_heads"))
    n = int(number(core, "n_a")) + int(number(core, "n_b"))
    expected = number(core, "expected_random_intersection")
    names = ", ".join(get(summary, "core")) if size else "none"
    text = f"{size} of {heads} heads in all {n} subnetworks ({names}); random subnetworks would share {expected:.2f}"
    try:
        p = number(core, "p_random_intersection_at_least_core")
        text += f" (p = {p:.2g})"
    except Missing:
        p = None
    rho = summary.get("spearman_rho")
    if isinstance(rho, (int, float)):
        text += f"; Spearman rho {rho:.2f}"
    undecided = _undecided(summary)
    if undecided is not None:
        text += f"; up to {_pt(undecided)}% of gates undecided at the end of pruning"
    if size < 1:
        return text, NOT_SHOWN, "no head is kept by every subnetwork"
    if p is None:
        return text, NOT_MEASURABLE, "no chance probability saved for the core size"
    if p < CHANCE:
        return (text, *identified(SHOWN, f"{size} shared heads; chance of sharing that many p = {p:.2g} < {CHANCE}",
                                  undecided, MAX_UNDECIDED_SHARE))
    return text, NOT_SHOWN, f"chance of sharing {size} heads p = {p:.2g} >= {CHANCE}"


def spread_row(summary: dict, seeds: int) -> tuple[str, str, str]:
    spreads = get(summary, "spread")
    if not isinstance(spreads, dict) or not spreads:
        raise Missing("no `spread` per sparsity")
    parts, passed, failed = [], [], []
    for label, s in spreads.items():
        id_sd, ood_sd = number(s, "id_sd"), number(s, "ood_subcase_sd")
        parts.append(f"at {label}: ID s.d. {_pt(id_sd)} points (range {_pt(number(s, 'id_range'))}), an OOD "
                     f"subcase's s.d. {_pt(ood_sd)} points on average")
        bar = max(2 * id_sd, MARGIN)
        (passed if ood_sd > bar else failed).append(f"{label}: {_pt(ood_sd)} {'>' if ood_sd > bar else '<='} {_pt(bar)}")
    text = f"over {seeds} seeds, " + "; ".join(parts)
    if seeds < MIN_SEEDS:
        return text, NOT_MEASURABLE, f"{seeds} seed(s), fewer than {MIN_SEEDS}: no spread to compare"
    rule = " (OOD subcase s.d. against max(2 x ID s.d., 1 point), at every sparsity)"
    if not failed:
        return text, SHOWN, "; ".join(passed) + rule
    return text, NOT_SHOWN, "; ".join(failed) + rule


def ablation_row(summary: dict) -> tuple[str, str, str]:
    eff = get(summary, "ablation")
    id_drop, ood_drop = number(eff, "core_id_drop"), number(eff, "core_ood_drop")
    largest = number(eff, "core_max_ood_drop")
    text = (f"one core head, on average: {moves('ID', -id_drop)}, {moves('OOD', -ood_drop)} ("
            + (f"the largest OOD fall {_pt(largest)} points" if largest > 0 else
               f"no core head lowers OOD; the smallest OOD change: {moves('OOD', -largest)}") + ")")
    try:
        other = number(eff, "other_ood_drop")
        text += f"; a non-core head: {moves('ID', -number(eff, 'other_id_drop'))}, {moves('OOD', -other)}"
    except Missing:
        other = None
    if "joint_ood_drop" in eff and isinstance(eff["joint_ood_drop"], (int, float)):
        text += f"; jointly: {moves('OOD', -eff['joint_ood_drop'])}"
    if int(summary.get("core_size") or 0) < 1:
        return text, NOT_MEASURABLE, "the core is empty: the heads ablated are the most frequent, not a core"
    if other is None:
        return text, NOT_MEASURABLE, "no non-core reference ablation saved"
    vs_id, vs_other = ood_drop - id_drop, ood_drop - other
    why = (f"{compare('the fall', 'OOD', 'ID', vs_id)}; {compare('the OOD fall', 'a core head', 'a non-core head', vs_other)}"
           " (need larger by more than 1 point each)")
    return text, SHOWN if vs_id > MARGIN and vs_other > MARGIN else NOT_SHOWN, why


def effective_size_row(es: dict, seeds: int) -> tuple[str, str, str]:
    """Every checkpoint of ``effective_size/metrics.json``: OOD accuracy, and the ID and OOD sizes (capped ones as
    bounds); the verdict from their trends over all checkpoints."""
    checkpoints = get(es, "checkpoints", what="effective_size/metrics.json")
    if not isinstance(checkpoints, list) or len(checkpoints) < 2:
        return "fewer than two checkpoints", NOT_MEASURABLE, "fewer than two checkpoints"
    levels = sorted(float(x) for x in get(es, "levels", what="effective_size/metrics.json"))
    step = min((b - a for a, b in zip(levels, levels[1:])), default=1.0)
    faith = number(es, "faithfulness")
    steps = [c.get("step") for c in checkpoints]
    acc = [number(c, "ood_accuracy") for c in checkpoints]
    sizes = {on: [Reading(*size_bound(get(c, "effective_size", on, what="effective_size/metrics.json"), levels))
                  for c in checkpoints] for on in ("id", "ood")}
    text = (f"steps {' / '.join(str(x) for x in steps)}: OOD accuracy {' / '.join(_pt(a) for a in acc)}%; "
            f"OOD size {' / '.join(r.text() for r in sizes['ood'])}; ID size {' / '.join(r.text() for r in sizes['id'])} "
            f"(levels every {_pt(step)} points up to {_pt(levels[-1])}% sparsity, {seeds} seeds)")
    acc_trend = trend(acc, faith)
    capped = [f"{on.upper()} at step {s}" for on in ("ood", "id") for s, r in zip(steps, sizes[on]) if r.capped]
    ood = [r.value for r in sizes["ood"]]
    ids = [r.value for r in sizes["id"]]
    ood_trend, id_range = trend(ood), max(ids) - min(ids)
    sizes_why = (f"OOD size {ood_trend} over the checkpoints ({moves('it', ood[-1] - ood[0])} in all"
                 + (", a lower bound at the capped ones" if capped else "") + f"); ID size moves within "
                 f"{_pt(id_range)} points")
    # every reason the data cannot decide, not only the first
    unmeasurable = []
    if seeds < MIN_SEEDS:
        unmeasurable.append(f"{seeds} seed(s) per checkpoint, fewer than {MIN_SEEDS}: a size from so few seeds "
                            "moves a level on one seed's luck")
    if len(checkpoints) < 3:
        unmeasurable.append(f"{len(checkpoints)} checkpoints: a trend needs three or more")
    if acc_trend != "rises":
        unmeasurable.append(f"OOD accuracy {acc_trend} over the checkpoints ({moves('it', acc[-1] - acc[0])} in all; "
                            f"tolerance {_pt(faith)} points): no steady generalisation to accompany")
    if capped:
        unmeasurable.append(f"capped: no tested level was faithful for {', '.join(capped)} (the size is above "
                            f"{_pt(1 - levels[0])}%, not measured); a capped size is never counted as a rise")
    if unmeasurable:
        return text, NOT_MEASURABLE, "; ".join(unmeasurable) + f". Sizes: {sizes_why}"
    why = (f"{sizes_why} (need: OOD rising at every checkpoint by at least one level, {_pt(step)} points, in all; "
           "ID within less than one level)")
    grows = ood_trend == "rises" and ood[-1] - ood[0] >= step - 1e-9 and id_range < step - 1e-9
    return text, SHOWN if grows else NOT_SHOWN, why


def not_run_row() -> tuple[str, str, str]:
    """The row of a run whose settings skip the effective-size stage (the ``tour`` preset of ``subnetlab demo``)."""
    return ("not run in this demo (its time budget)", NOT_MEASURABLE, NOT_RUN)


def findings(run_dir: str | Path, relative_to: str | Path) -> list[Finding]:
    """One row per claim and study of the Heuristic Core run in ``run_dir``; links relative to ``relative_to``."""
    run_dir, relative_to = Path(run_dir), Path(relative_to)
    report = run_dir / "report.md"
    try:
        metrics = read_json_or_missing(run_dir / "metrics.json")
        studies = get(metrics, "studies", what="metrics.json")
        if not isinstance(studies, dict) or not studies:
            raise Missing("no study in metrics.json")
    except Missing as e:
        return [missing(PAPER, claim, fig, section_link(report, head, relative_to), str(e))
                for claim, fig, head in CLAIMS.values()]
    try:
        settings = get(read_json_or_missing(run_dir / "config.json"), "settings")
    except Missing:
        settings = {}
    titles = {s.get("name"): s.get("title") for s in settings.get("studies") or [] if isinstance(s, dict)}
    seeds = len(settings.get("seeds") or [])
    es_seeds = len((settings.get("effective_size") or {}).get("seeds") or [])  # None: the stage was skipped
    rows: list[Finding] = []
    for name, summary in studies.items():
        def files(rel: str) -> Any:
            return read_json_or_missing(run_dir / name / rel)

        makers = {
            "core": lambda: core_row(summary, files("core/metrics.json")),
            "spread": lambda: spread_row(summary, seeds),
            "ablation": lambda: ablation_row(summary),
            "effective_size": lambda: (effective_size_row(files("effective_size/metrics.json"), es_seeds)
                                       if settings.get("effective_size", {}) is not None else not_run_row()),
        }
        prefix = f"[{name}] " if len(studies) > 1 else ""
        for key, make in makers.items():
            claim, fig, head = CLAIMS[key]
            link = section_link(report, head, relative_to, after=titles.get(name))
            try:
                text, verdict, why = make()
            except Missing as e:
                rows.append(missing(PAPER, prefix + claim, fig, link, str(e)))
                continue
            rows.append(Finding(PAPER, prefix + claim, fig, text, verdict, why, link))
    return rows


__all__ = ["CLAIMS", "PAPER", "ablation_row", "core_row", "effective_size_row", "findings", "spread_row"]
