"""Subtask Induction's headline claims against a finished run, read from its saved results (nothing recomputed).

Reads ``OUT/metrics.json`` (``summary``: per condition and N the mean, s.d. and
count over seeds of test accuracy; ``discovery``: the transferred subnetwork per
depth) and ``OUT/config.json`` (the settings). A result that is absent gives a
"not measurable" row naming it, never an error.

Rules (``experiments.demo.verdicts``), each over every measured point:

* the subnetwork beats a control at low N (0 < N <= max_number, about the
  paper's N <= 1,000): shown when its mean is ahead at every low N and ahead by
  more than the sum of the two seed standard deviations at one or more; not
  measurable without a low N or with fewer than ``MIN_SEEDS`` seeds on a side;
* beats scratch needs the empty-mask control too: under reinit "masked" the
  embeddings, layer norms, biases and head are copied whatever the mask, so a
  lead over scratch that the empty mask also has is the copies', not the
  subnetwork's. Shown only when the subnetwork beats both; without the
  empty-mask runs, not measurable;
* the row quotes this run's own level next to the paper's (the subnetwork's
  best mean over N against the paper's near-perfect accuracy);
* near-perfect accuracy at low N: shown when the subnetwork's mean reaches
  ``NEAR_PERFECT`` at some low N;
* at least as good as the whole model (every N, not only low N): not shown
  when ``full`` is ahead by more than the seed spread at some N, with the lead
  in words (a row that goes against the paper);
* density: shown when the transferred subnetwork keeps between 3% and 8% of
  the masked weights (the paper's Table 3: 3.20-7.68%) at every depth;
* the subnetwork computes the subtask (not in the paper): at the chosen
  lambda, the discovered masks (``control_seeds``) beat the same search on a
  re-initialised model and on shuffled labels by more than the seed spread
  (test accuracy, ``L<depth>/discover/controls/metrics.json``), at every depth;
* unconverged inputs: a comparison any of whose transfer runs was still
  improving when training stopped (``report.still_improving``: under plateau
  stopping, a run that reached its cap with its evaluation accuracy still
  rising; under fixed epochs, best evaluation in the last 20% of its training),
  and a density whose transferred lambda's mask training had not converged
  (``runs.health``: under plateau stopping, its held-out objective reached the
  cap still falling), are not measurable: more training could change them.
"""

from __future__ import annotations

import math
from pathlib import Path

from subnetlab.experiments.demo.verdicts import (
    NOT_MEASURABLE,
    NOT_SHOWN,
    SEARCH_CONTROLS,
    SHOWN,
    Finding,
    Missing,
    ahead_at_low_n,
    beats_controls,
    control_scores,
    get,
    in_band,
    missing,
    not_behind,
    number,
    read_json_or_missing,
    section_link,
    unconverged,
)

PAPER = "Subtask Induction"
CONTROLS = {
    "scratch": ("Transferring the subnetwork beats training from scratch at low N",
                "near-perfect accuracy by about N = 1,000; scratch averages 50.6% over sizes and never reaches it "
                "(Figure 3)"),
    "empty-mask": ("... and beats the empty-mask control (the copied embeddings, norms, biases and head alone)",
                   "not in the paper: the released code copies these into every transferred model (reinit masked)"),
    "random-matched": ("... and beats a random subnetwork of the same size (k weights per matrix, the text)",
                       "random subnetworks need about 6x more data (Figure 3)"),
    "random-released": ("... and beats the released code's random control (n - k weights kept)",
                        "random subnetworks need about 6x more data (Figure 3)"),
}
CONTRAST_SECTION = "Does the subnetwork beat its controls at low N?"
LEVEL = ("The subnetwork reaches near-perfect accuracy by about N = 1,000",
         "all configurations near-perfect with about 1,000 disambiguation samples (section 4.3, Figure 3)")
FULL = ("Transferring the subnetwork is at least as good as transferring the whole model",
        "at least as good generalisation accuracy and sample efficiency as the entire model, across sample sizes "
        "(section 4.3, Figure 3)")
FIGURE_SECTION = "Transfer (Figure 3)"
NEAR_PERFECT = 0.95  # "near-perfect": a mean test accuracy of at least 95% (the report's lower threshold)
DENSITY = ("The subnetwork keeps a few percent of the masked weights",
           "3.20-7.68% of masked parameters over 2-12 layers; 7.68% at 2 layers (Table 3)",
           "Discovery: density per lambda")
BAND = (3.0, 8.0)  # percent: the paper's "about 3-8%" (Table 3: 3.20-7.68)


def _low_sizes(settings: dict, summary: dict) -> list[str]:
    from subnetlab.experiments.subtask_induction import report

    low_max = float(getattr(report, "LOW_N_MAX", 1.0))
    max_number = number(settings, "max_number", what="config.json")
    sizes = {s for cond in summary.values() if isinstance(cond, dict) for s in (cond.get("by_size") or {})}
    return [s for s in sorted(sizes, key=lambda x: float(x)) if 0 < float(s) <= low_max * max_number]


def _cells(summary: dict, control: str, sizes: list[str], reference: str = "subnetwork"
           ) -> tuple[dict[str, tuple[float, float, int]], list[str]]:
    """Per size both sides have: ``(reference mean - control mean, sum of their s.d., fewer seeds)`` and a text."""
    ref = get(summary, reference, "by_size", what="metrics.json summary")
    other = get(summary, control, "by_size", what="metrics.json summary")
    cells: dict[str, tuple[float, float, int]] = {}
    parts = []
    for s in sizes:
        if s not in ref or s not in other:
            continue
        a, b = ref[s], other[s]
        diff = number(a, "mean") - number(b, "mean")
        spread = number(a, "sd") + number(b, "sd")
        n = int(min(number(a, "n"), number(b, "n")))
        cells[s] = (diff, spread, n)
        lead = "level" if round(100 * diff, 1) == 0 else f"{100 * abs(diff):.1f} {'ahead' if diff > 0 else 'behind'}"
        parts.append(f"N={s}: {100 * number(a, 'mean'):.1f} vs {100 * number(b, 'mean'):.1f} "
                     f"({lead}, spread {100 * spread:.1f}, {n} seeds)")
    return cells, parts


def own_level(summary: dict) -> str:
    """This run's level beside the paper's: the subnetwork's best mean test accuracy over every N."""
    by = get(summary, "subnetwork", "by_size", what="metrics.json summary")
    best = max(by, key=lambda s: number(by[s], "mean"))
    top = number(by[best], "mean")
    bar = math.floor(20 * top + 1) / 20  # the next 5% step above the best mean
    never = f", never passes {100 * bar:.0f}%" if bar <= 0.95 else ""
    return (f"this run's subnetwork peaks at {100 * top:.1f}% (N={best}){never}; the paper's is near-perfect "
            f"(>= 99%) by N = 1,000")


def improving_flags(runs: list | None, labels: tuple[str, ...], sizes: list[str] | None = None) -> list[bool]:
    """Per transfer run of ``labels`` (at ``sizes``; every size when None): still improving at the end."""
    from subnetlab.experiments.subtask_induction.report import still_improving

    return [still_improving(r) for r in runs or [] if isinstance(r, dict)
            and (r.get("label") or r.get("condition")) in labels
            and (sizes is None or str(r.get("size")) in sizes) and "best_epoch" in r]


def converged_or(verdict: tuple[str, str], flags: list[bool]) -> tuple[str, str]:
    """``verdict`` when every run it rests on converged; else not measurable (``verdicts.unconverged``)."""
    stop = unconverged(flags, "transfer runs compared")
    return verdict if stop is None else (stop[0], f"{stop[1]}; otherwise: {verdict[0]} ({verdict[1]})")


def control_row(summary: dict, control: str, low: list[str], reference: str = "subnetwork",
                runs: list | None = None) -> tuple[str, str, str]:
    cells, parts = _cells(summary, control, low, reference)
    verdict, why = converged_or(ahead_at_low_n(cells), improving_flags(runs, (reference, control), low))
    return ("; ".join(parts) or "no low N run") + " (% test accuracy, subnetwork vs control)", verdict, why


def scratch_row(summary: dict, low: list[str], runs: list | None = None) -> tuple[str, str, str]:
    """Beats scratch, with the empty-mask control deciding whether the subnetwork or the copies explain it."""
    text, verdict, why = control_row(summary, "scratch", low, runs=runs)
    text = f"{text}; {own_level(summary)}"
    if verdict != SHOWN:
        return text, verdict, why
    if "empty-mask" not in summary:
        return text, NOT_MEASURABLE, (f"{why} against scratch, but no empty-mask runs: the copied embeddings, norms, "
                                      "biases and head alone could explain the lead")
    empty_verdict, empty_why = control_row(summary, "empty-mask", low, runs=runs)[1:]
    if empty_verdict == SHOWN:
        return text, SHOWN, f"{why} against scratch; against the empty mask too ({empty_why})"
    return text, NOT_SHOWN if empty_verdict == NOT_SHOWN else NOT_MEASURABLE, (
        f"{why} against scratch, but against the empty mask: {empty_why}; the copied embeddings, norms, biases and "
        "head alone may explain the lead")


def level_row(summary: dict, low: list[str], runs: list | None = None) -> tuple[str, str, str]:
    by = get(summary, "subnetwork", "by_size", what="metrics.json summary")
    at = [s for s in low if s in by]
    if not at:
        return "no low N run", NOT_MEASURABLE, "no low N in this run"
    means = {s: number(by[s], "mean") for s in at}
    text = ("; ".join(f"N={s}: {100 * m:.1f}% ({int(number(by[s], 'n'))} seeds)" for s, m in means.items())
            + f" (subnetwork, mean test accuracy); {own_level(summary)}")
    reached = [s for s, m in means.items() if m >= NEAR_PERFECT]
    if reached:
        return text, SHOWN, f"mean >= {100 * NEAR_PERFECT:.0f}% at N = {', '.join(reached)}"
    best = max(means, key=means.get)
    return (text, *converged_or((NOT_SHOWN, f"the mean stays below {100 * NEAR_PERFECT:.0f}% at every low N (highest "
                                            f"{100 * means[best]:.1f}% at N={best})"),
                                improving_flags(runs, ("subnetwork",), at)))


def full_row(summary: dict, runs: list | None = None) -> tuple[str, str, str]:
    """At least as good as transferring the whole model, at every N (the row that may go against the paper)."""
    sizes = sorted(get(summary, "subnetwork", "by_size", what="metrics.json summary"), key=lambda x: float(x))
    cells, parts = _cells(summary, "full", sizes)
    verdict, why = converged_or(not_behind(cells, "full"), improving_flags(runs, ("subnetwork", "full"), sizes))
    return ("; ".join(parts) or "no N in common") + " (% test accuracy, subnetwork vs full)", verdict, why


def density_row(discovery: dict) -> tuple[str, str, str]:
    if not isinstance(discovery, dict) or not discovery:
        raise Missing("no discovery results")
    parts, verdicts, flags = [], [], []
    for layers, d in sorted(discovery.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
        kept = number(d, "kept_percent")
        problems = (d.get("health") or {}).get("problems") if isinstance(d.get("health"), dict) else None
        flags.append(bool(problems) and "unconverged" in problems)
        sweep = [x.get("kept_percent") for x in d.get("sweep") or [] if isinstance(x.get("kept_percent"), (int, float))]
        extra = f" (lambdas: {min(sweep):.1f}-{max(sweep):.1f}%)" if len(sweep) > 1 else ""
        parts.append(f"{layers} layers: {kept:.2f}%{extra}")
        verdicts.append(in_band(kept, *BAND))
    text = "; ".join(parts) + " kept, one discovery seed"
    stop = unconverged(flags, "transferred subnetworks' mask trainings")
    if stop is not None:
        return text, stop[0], stop[1] + "; the density would still change with training"
    bad = [(v, why) for v, why in verdicts if v != SHOWN]
    if bad:
        return text, bad[0][0], "; ".join(why for _, why in bad) + " (percent)"
    return text, SHOWN, "; ".join(why for _, why in verdicts) + " (percent)"


COMPUTES = (f"The discovered subnetwork computes the subtask: it {SEARCH_CONTROLS} labels",
            "not in the paper: masks over random networks can fit a task (Zhou et al. 2019; Ramanujan et al. 2020)")


def computes_row(comparisons: dict[str, dict]) -> tuple[str, str, str]:
    """Per depth (``{layers: DIR/L<layers>/discover/controls/metrics.json}``) the chosen lambda's masks against the
    search controls (``beats_controls`` on test accuracy); shown only when shown at every depth."""
    if not comparisons:
        raise Missing("no search controls in this run (settings controls: none)")
    parts, verdicts = [], []
    for layers, comparison in sorted(comparisons.items(), key=lambda kv: int(kv[0])):
        key, real, controls, density = control_scores(comparison, f"L{layers}/discover/controls/metrics.json")
        text, verdict, why = beats_controls(real, controls, what=f"{layers} layers, test accuracy", scale=100.0,
                                            unit="%")
        kept = ", ".join(f"{k} {100 * d:.1f}%" for k, d in density.items() if d is not None)
        parts.append(text + (f" (weights kept: {kept})" if kept else ""))
        verdicts.append((verdict, why))
    order = [NOT_MEASURABLE, NOT_SHOWN, SHOWN]
    verdict, why = min(verdicts, key=lambda v: order.index(v[0]))
    return "; ".join(parts), verdict, why


def findings(run_dir: str | Path, relative_to: str | Path) -> list[Finding]:
    """One row per claim of the Subtask Induction run in ``run_dir``; links relative to ``relative_to``."""
    run_dir, relative_to = Path(run_dir), Path(relative_to)
    report = run_dir / "report.md"
    contrast_link = section_link(report, CONTRAST_SECTION, relative_to)
    density_link = section_link(report, DENSITY[2], relative_to)
    figure_link = section_link(report, FIGURE_SECTION, relative_to)
    rows: list[Finding] = []
    try:
        metrics = read_json_or_missing(run_dir / "metrics.json")
    except Missing as e:
        return [*(missing(PAPER, c, f, contrast_link, str(e)) for c, f in CONTROLS.values()),
                missing(PAPER, LEVEL[0], LEVEL[1], contrast_link, str(e)),
                missing(PAPER, FULL[0], FULL[1], figure_link, str(e)),
                missing(PAPER, COMPUTES[0], COMPUTES[1], density_link, str(e)),
                missing(PAPER, DENSITY[0], DENSITY[1], density_link, str(e))]
    try:
        settings = read_json_or_missing(run_dir / "config.json")
        summary = get(metrics, "summary", what="metrics.json")
        low = _low_sizes(settings, summary)
    except Missing as e:
        rows += [missing(PAPER, c, f, contrast_link, str(e)) for c, f in CONTROLS.values()]
        rows += [missing(PAPER, LEVEL[0], LEVEL[1], contrast_link, str(e)), missing(PAPER, FULL[0], FULL[1], figure_link, str(e))]
    else:
        runs = metrics.get("runs") if isinstance(metrics.get("runs"), list) else None
        makers = {claim: (fig, (lambda c=control: scratch_row(summary, low, runs) if c == "scratch"
                                else control_row(summary, c, low, runs=runs)), contrast_link)
                  for control, (claim, fig) in CONTROLS.items()}
        makers[LEVEL[0]] = (LEVEL[1], lambda: level_row(summary, low, runs), contrast_link)
        makers[FULL[0]] = (FULL[1], lambda: full_row(summary, runs), figure_link)
        for claim, (fig, make, link) in makers.items():
            try:
                text, verdict, why = make()
            except Missing as e:
                rows.append(missing(PAPER, claim, fig, link, str(e)))
                continue
            rows.append(Finding(PAPER, claim, fig, text, verdict, why, link))
    try:
        comparisons = {p.parents[2].name[1:]: read_json_or_missing(p)
                       for p in sorted(run_dir.glob("L*/discover/controls/metrics.json"))}
        text, verdict, why = computes_row(comparisons)
        rows.append(Finding(PAPER, COMPUTES[0], COMPUTES[1], text, verdict, why, density_link))
    except Missing as e:
        rows.append(missing(PAPER, COMPUTES[0], COMPUTES[1], density_link, str(e)))
    try:
        text, verdict, why = density_row(get(metrics, "discovery", what="metrics.json"))
        rows.append(Finding(PAPER, DENSITY[0], DENSITY[1], text, verdict, why, density_link))
    except Missing as e:
        rows.append(missing(PAPER, DENSITY[0], DENSITY[1], density_link, str(e)))
    return rows


__all__ = ["BAND", "COMPUTES", "CONTROLS", "DENSITY", "FULL", "LEVEL", "NEAR_PERFECT", "PAPER", "computes_row", "control_row",
           "converged_or",
           "density_row", "findings", "full_row", "improving_flags", "level_row", "own_level", "scratch_row"]
