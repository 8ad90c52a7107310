"""The Heuristic Core's headline claims against a finished run, read from its saved results (nothing recomputed).

Reads ``OUT/metrics.json`` (the report's summary per study), ``OUT/config.json``
(the settings), and per study ``core/metrics.json`` and
``effective_size/metrics.json``. A result that is absent or renamed gives a
"not measurable" row naming it, never an error.

Rules (``experiments.demo.verdicts``):

* core: shown when at least one head is in every subnetwork and random
  subnetworks of the same sizes would share that many with probability < 0.05;
* alike in-domain, spread out of domain: shown when the mean standard
  deviation of an OOD subcase over seeds exceeds twice the ID one and one point;
* ablating a core head hurts OOD more than ID: shown when the mean OOD drop
  exceeds the mean ID drop by more than one point and the non-core heads' mean
  OOD drop by more than one point (a single model: the non-core heads are the
  reference for noise);
* effective size: needs OOD accuracy to rise by more than the faithfulness
  threshold between the first and last checkpoint (otherwise there is no
  generalisation to accompany: not measurable); shown when the OOD effective
  size grows by at least one level step and by at least one step more than
  the ID size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subnetlab.experiments.demo.verdicts import (
    NOT_MEASURABLE,
    NOT_SHOWN,
    SHOWN,
    Finding,
    Missing,
    get,
    missing,
    number,
    read_json_or_missing,
    section_link,
)

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
    if size < 1:
        return text, NOT_SHOWN, "no head is kept by every subnetwork"
    if p is None:
        return text, NOT_MEASURABLE, "no chance probability saved for the core size"
    if p < CHANCE:
        return text, SHOWN, f"{size} shared heads; chance of sharing that many p = {p:.2g} < {CHANCE}"
    return text, NOT_SHOWN, f"chance of sharing {size} heads p = {p:.2g} >= {CHANCE}"


def spread_row(summary: dict, seeds: int) -> tuple[str, str, str]:
    spreads = get(summary, "spread")
    if not isinstance(spreads, dict) or not spreads:
        raise Missing("no `spread` per sparsity")
    label = next(iter(spreads))
    s = spreads[label]
    id_sd, ood_sd = number(s, "id_sd"), number(s, "ood_subcase_sd")
    text = (f"at {label}, over {seeds} seeds: ID s.d. {_pt(id_sd)} points (range {_pt(number(s, 'id_range'))}); "
            f"an OOD subcase's s.d. {_pt(ood_sd)} points on average")
    if seeds < 2:
        return text, NOT_MEASURABLE, "fewer than two seeds: no spread"
    bar = max(2 * id_sd, MARGIN)
    if ood_sd > bar:
        return text, SHOWN, f"OOD subcase s.d. {_pt(ood_sd)} > max(2 x ID s.d., 1 point) = {_pt(bar)}"
    return text, NOT_SHOWN, f"OOD subcase s.d. {_pt(ood_sd)} <= max(2 x ID s.d., 1 point) = {_pt(bar)}"


def ablation_row(summary: dict) -> tuple[str, str, str]:
    eff = get(summary, "ablation")
    id_drop, ood_drop = number(eff, "core_id_drop"), number(eff, "core_ood_drop")
    text = (f"one core head: {_pt(id_drop)} points ID, {_pt(ood_drop)} OOD on average "
            f"(largest OOD {_pt(number(eff, 'core_max_ood_drop'))})")
    try:
        other = number(eff, "other_ood_drop")
        text += f"; a non-core head: {_pt(number(eff, 'other_id_drop'))} ID, {_pt(other)} OOD"
    except Missing:
        other = None
    if "joint_ood_drop" in eff and isinstance(eff["joint_ood_drop"], (int, float)):
        text += f"; jointly: {_pt(eff['joint_ood_drop'])} OOD"
    if int(summary.get("core_size") or 0) < 1:
        return text, NOT_MEASURABLE, "the core is empty: the heads ablated are the most frequent, not a core"
    if other is None:
        return text, NOT_MEASURABLE, "no non-core reference ablation saved"
    vs_id, vs_other = ood_drop - id_drop, ood_drop - other
    why = f"OOD - ID drop {_pt(vs_id)}, OOD drop - non-core OOD drop {_pt(vs_other)} (need > 1 point each)"
    return text, SHOWN if vs_id > MARGIN and vs_other > MARGIN else NOT_SHOWN, why


def effective_size_row(summary: dict, es: dict, seeds: int) -> tuple[str, str, str]:
    rows = get(summary, "effective_size")
    if not isinstance(rows, list) or len(rows) < 2:
        return "fewer than two checkpoints", NOT_MEASURABLE, "fewer than two checkpoints"
    first, last = rows[0], rows[-1]
    d_id = number(last, "id") - number(first, "id")
    d_ood = number(last, "ood") - number(first, "ood")
    levels = sorted(float(x) for x in get(es, "levels", what="effective_size/metrics.json"))
    step = min((b - a for a, b in zip(levels, levels[1:])), default=1.0)
    checkpoints = get(es, "checkpoints", what="effective_size/metrics.json")
    acc_first, acc_last = number(checkpoints[0], "ood_accuracy"), number(checkpoints[-1], "ood_accuracy")
    faith = number(es, "faithfulness")
    text = (f"steps {first.get('step')} -> {last.get('step')}: ID size {_pt(number(first, 'id'))} -> "
            f"{_pt(number(last, 'id'))}%, OOD size {_pt(number(first, 'ood'))} -> {_pt(number(last, 'ood'))}% "
            f"(levels every {_pt(step)} points, {seeds} seeds); OOD accuracy {_pt(acc_first)} -> {_pt(acc_last)}%")
    if acc_last - acc_first <= faith:
        return text, NOT_MEASURABLE, (f"OOD accuracy rises {_pt(acc_last - acc_first)} points, not more than the "
                                      f"faithfulness threshold {_pt(faith)}: no generalisation to accompany")
    grows = d_ood >= step - 1e-9 and d_ood - d_id >= step - 1e-9
    why = f"OOD size change {_pt(d_ood)}, ID change {_pt(d_id)} (need >= one level, {_pt(step)}, and >= one level more than ID)"
    return text, SHOWN if grows else NOT_SHOWN, why


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
    es_seeds = len((settings.get("effective_size") or {}).get("seeds") or [])
    rows: list[Finding] = []
    for name, summary in studies.items():
        def files(rel: str) -> Any:
            return read_json_or_missing(run_dir / name / rel)

        makers = {
            "core": lambda: core_row(summary, files("core/metrics.json")),
            "spread": lambda: spread_row(summary, seeds),
            "ablation": lambda: ablation_row(summary),
            "effective_size": lambda: effective_size_row(summary, files("effective_size/metrics.json"), es_seeds),
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
