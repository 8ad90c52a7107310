"""The circuits demo's headline claims against its run, as rows of ``findings.md`` (``experiments.demo``).

1. The known mechanism (Olsson et al., 2022): the trained model has a layer-0
   previous-token head and layer-1 induction heads (attention scores > 0.5),
   and cutting the previous-token head's edges into the induction heads' keys
   removes most of the task (less than half of the full-minus-corrupted logit
   difference left) while cutting its query and value edges does not (more
   than 90% left).
2. Edge Pruning finds it: the sparsest circuit with faithfulness >= 0.5 (logit
   difference) keeps at least one of those key edges.
3. Edge-level circuits are more faithful than node-level and random ones
   (Bhaskar et al., 2024): edge pruning's CPR exceeds node pruning's and the
   random edge circuits', and its CMD is below both. A claim about methods:
   from one seed it is not measurable ("one run"), and two curves are
   compared only over the same items (edge pruning's and random edges' curves
   are over the graph's edges; node pruning's over heads and MLPs, another
   size axis, so its areas are not compared with the edge curves').
4. The circuit computes the task: at the curve's sparsity, edge pruning's
   circuits (three seeds) beat the same search on a re-initialised model and on
   shuffled answers beyond the seed spread (``controls/metrics.json``, logit
   difference). Row 2 says the found circuit recovers the mechanism, so it is
   shown only when this row is.
"""

from __future__ import annotations

from pathlib import Path

from subnetlab.experiments.demo.verdicts import (
    NOT_MEASURABLE,
    NOT_SHOWN,
    SEARCH_CONTROLS,
    SHOWN,
    Finding,
    Missing,
    beats_controls,
    control_scores,
    get,
    missing,
    read_json_or_missing,
    section_link,
    too_few_runs,
)

OLSSON, EDGE_PRUNING = "Induction heads (Olsson et al.)", "Edge Pruning"
MECHANISM = ("A previous-token head in layer 0 feeds the key of induction heads in layer 1",
             "the two-head induction circuit through K-composition")
FOUND = ("Edge pruning's circuit keeps the previous-token head -> induction head key edge",
         "its circuits recover known mechanisms (the paper checks it on compiled Tracr programs)")
COMPUTES = (f"Edge pruning's circuit computes the task: it {SEARCH_CONTROLS} answers",
            "not in the paper: masks over random networks can fit a task (Zhou et al. 2019; Ramanujan et al. 2020)")
CPR = ("Edge circuits are more faithful than node-level and random ones",
       "edge circuits more faithful than other methods' at equal sparsity")


def mechanism_row(scores: dict, mechanism: dict) -> tuple[str, str, str]:
    prev = get(scores, "previous_token_head", "score", what="head_scores.json")
    heads = get(scores, "induction_heads", what="head_scores.json")
    full, empty = get(mechanism, "full", "logit_diff"), get(mechanism, "corrupted", "logit_diff")
    n = len(get(mechanism, "key_edges"))

    def left(kind: str) -> float:
        return (get(mechanism, "cut", f"all {n} {kind} edges", "logit_diff") - empty) / (full - empty)

    if not heads or n == 0 or full <= empty:
        return (f"previous-token score {prev:.2f}, {len(heads)} induction heads", NOT_SHOWN,
                "no induction head (score >= threshold) or the model does not do the task")
    k, q, v = left("k"), left("q"), left("v")
    text = (f"previous-token score {prev:.2f}; {len(heads)} induction heads (best {max(h['score'] for h in heads):.2f});"
            f" logit difference left with the key / query / value edges cut: {k:.0%} / {q:.0%} / {v:.0%}")
    ok = prev > 0.5 and max(h["score"] for h in heads) > 0.5 and k < 0.5 and q > 0.9 and v > 0.9
    return text, SHOWN if ok else NOT_SHOWN, "scores > 0.5, key cut < 50% left, query and value cuts > 90% left"


def controls_row(comparison: dict) -> tuple[str, str, str]:
    """The real circuits' logit difference per seed against each search control's (``beats_controls``), with the
    kinds' densities."""
    key, real, controls, density = control_scores(comparison, "controls/metrics.json")
    text, verdict, why = beats_controls(real, controls, what=f"logit difference at target sparsity {float(key):g}")
    kept = ", ".join(f"{k} {100 * d:.0f}%" for k, d in density.items() if d is not None)
    return text + (f" (edges kept: {kept})" if kept else ""), verdict, why


def gated(row: tuple[str, str, str], computes: tuple[str, str, str] | None) -> tuple[str, str, str]:
    """A row that says the found circuit recovers something stays shown only when the circuit beats both search
    controls (``computes``: the controls row, None when the run has none)."""
    text, verdict, why = row
    if verdict != SHOWN:
        return row
    if computes is None:
        return text, NOT_MEASURABLE, why + "; not measurable: no search controls to show the circuit computes the task"
    if computes[1] != SHOWN:
        return text, computes[1], why + "; but the circuit does not beat both search controls (" + computes[2] + ")"
    return text, SHOWN, why + "; and the circuit beats both search controls"


def found_row(curves: dict) -> tuple[str, str, str]:
    runs = get(curves, "key_edges_kept", what="curves.json")
    faithful = [r for r in runs if r["faithfulness"]["logit_diff"] >= 0.5]
    if not faithful:
        return "no edge-pruning circuit reaches faithfulness 0.5", NOT_SHOWN, "needs a circuit with f >= 0.5"
    best = max(faithful, key=lambda r: r["sparsity"])
    kept = [e for e, k in best["key_edges"].items() if k]
    text = (f"at sparsity {best['sparsity']} ({best['kept']} edges, f = {best['faithfulness']['logit_diff']:.2f}): "
            f"{len(kept)} of {len(best['key_edges'])} key edges kept")
    return text, SHOWN if kept else NOT_SHOWN, "the sparsest circuit with f >= 0.5 keeps at least one key edge"


def more_faithful(areas: dict[str, tuple[int, float, float]], seeds: int,
                  reference: str = "edge-pruning") -> tuple[str, str]:
    """``areas``: per method ``(items on the curve's size axis, CPR, CMD)``. Shown when ``reference`` has the
    higher CPR and the lower CMD against every other method whose curve is over the same items; a method over
    other items (node circuits against edge circuits) cannot be compared by areas, which makes the claim not
    measurable; so does one seed (a claim about methods needs their spread)."""
    thin = too_few_runs(seeds, "seed")
    mismatched = [n for n, (items, _, _) in areas.items() if n != reference and items != areas[reference][0]]
    apart = ("; " + ", ".join(f"{n.replace('-', ' ')}'s curve is over {areas[n][0]} items against "
                              f"{areas[reference][0]}: not compared" for n in mismatched)) if mismatched else ""
    if thin:
        return thin[0], thin[1] + apart
    if mismatched:
        return NOT_MEASURABLE, "curves compared only over the same items" + apart
    _, cpr, cmd = areas[reference]
    behind = [f"{'CPR' if which == 1 else 'CMD'} vs {n.replace('-', ' ')}" for n, a in areas.items() if n != reference
              for which in (1, 2) if not (cpr > a[1] if which == 1 else cmd < a[2])]
    rule = f"{reference.replace('-', ' ')}'s CPR above and CMD below every other method's over the same items"
    return (NOT_SHOWN, f"{rule}; not ahead on {', '.join(behind)}") if behind else (SHOWN, rule)


def cpr_row(curves: dict, seeds: int = 1) -> tuple[str, str, str]:
    """CPR (area under f, higher is better) and CMD (area under |1 - f|, lower is better) of the three methods,
    judged by ``more_faithful``."""
    c = get(curves, "curves", what="curves.json")
    names = ("edge-pruning", "node-pruning", "random-edges")
    areas = {n: (int(get(c, n, "items", what="curves.json")), float(get(c, n, "cpr", what="curves.json")),
                 float(get(c, n, "cmd", what="curves.json"))) for n in names}
    text = "CPR / CMD: " + ", ".join(f"{n.replace('-', ' ')} {a[1]:.2f} / {a[2]:.2f} ({a[0]} items)"
                                     for n, a in areas.items())
    return (text, *more_faithful(areas, seeds))


def findings(run_dir: str | Path, relative_to: str | Path) -> list[Finding]:
    """One row per claim of the circuits run in ``run_dir``; links relative to ``relative_to``."""
    run_dir, relative_to = Path(run_dir), Path(relative_to)
    report = run_dir / "report.md"
    links = {"mechanism": section_link(report, "3. The circuit task and the mechanism's edges", relative_to),
             "curves": section_link(report, "4. Faithfulness of the circuit methods (MIB: CPR higher is better, "
                                    "CMD lower is better)", relative_to)}
    try:
        computes: tuple[str, str, str] | None = controls_row(read_json_or_missing(run_dir / "controls" / "metrics.json"))
        absent = ""
    except Missing as e:
        computes, absent = None, str(e)
    rows: list[Finding] = []
    for (claim, fig), paper, link, rule in ((MECHANISM, OLSSON, links["mechanism"], "mechanism"),
                                           (FOUND, EDGE_PRUNING, links["curves"], "found"),
                                           (COMPUTES, EDGE_PRUNING, links["curves"], "computes"),
                                           (CPR, EDGE_PRUNING, links["curves"], "cpr")):
        try:
            if rule == "mechanism":
                text, verdict, why = mechanism_row(read_json_or_missing(run_dir / "head_scores.json"),
                                                   read_json_or_missing(run_dir / "mechanism.json"))
            elif rule == "found":
                text, verdict, why = gated(found_row(read_json_or_missing(run_dir / "curves.json")), computes)
            elif rule == "computes":
                if computes is None:
                    raise Missing(absent)
                text, verdict, why = computes
            else:
                text, verdict, why = cpr_row(read_json_or_missing(run_dir / "curves.json"))
        except Missing as e:
            rows.append(missing(paper, claim, fig, link, str(e)))
            continue
        rows.append(Finding(paper, claim, fig, text, verdict, why, link))
    return rows


__all__ = ["controls_row", "cpr_row", "findings", "gated", "more_faithful"]
