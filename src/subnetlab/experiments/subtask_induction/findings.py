"""Subtask Induction's headline claims against a finished run, read from its saved results (nothing recomputed).

Reads ``OUT/metrics.json`` (``summary``: per condition and N the mean, s.d. and
count over seeds of test accuracy; ``discovery``: the transferred subnetwork per
depth) and ``OUT/config.json`` (the settings). A result that is absent gives a
"not measurable" row naming it, never an error.

Rules (``experiments.demo.verdicts``):

* the subnetwork beats a control at low N (0 < N <= max_number, about the
  paper's N <= 1,000): shown when its mean is ahead at every low N and ahead by
  more than the sum of the two seed standard deviations at one or more; not
  measurable without a low N or with fewer than two seeds on a side;
* density: shown when the transferred subnetwork keeps between 3% and 8% of
  the masked weights (the paper's Table 3: 3.20-7.68%) at every depth.
"""

from __future__ import annotations

from pathlib import Path

from subnetlab.experiments.demo.verdicts import (
    SHOWN,
    Finding,
    Missing,
    ahead_at_low_n,
    get,
    in_band,
    missing,
    number,
    read_json_or_missing,
    section_link,
)

PAPER = "Subtask Induction"
CONTROLS = {
    "scratch": ("Transferring the subnetwork beats training from scratch at low N",
                "near-perfect accuracy by about N = 1,000; scratch averages 50.6% over sizes and never reaches it "
                "(Figure 3)"),
    "random-matched": ("... and beats a random subnetwork of the same size (k weights per matrix, the text)",
                       "random subnetworks need about 6x more data (Figure 3)"),
    "random-released": ("... and beats the released code's random control (n - k weights kept)",
                        "random subnetworks need about 6x more data (Figure 3)"),
}
CONTRAST_SECTION = "Does the subnetwork beat its controls at low N?"
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


def control_row(summary: dict, control: str, low: list[str], reference: str = "subnetwork") -> tuple[str, str, str]:
    ref = get(summary, reference, "by_size", what="metrics.json summary")
    other = get(summary, control, "by_size", what="metrics.json summary")
    cells: dict[str, tuple[float, float, int]] = {}
    parts = []
    for s in low:
        if s not in ref or s not in other:
            continue
        a, b = ref[s], other[s]
        diff = number(a, "mean") - number(b, "mean")
        spread = number(a, "sd") + number(b, "sd")
        n = int(min(number(a, "n"), number(b, "n")))
        cells[s] = (diff, spread, n)
        parts.append(f"N={s}: {100 * number(a, 'mean'):.1f} vs {100 * number(b, 'mean'):.1f} "
                     f"({100 * diff:+.1f}, spread {100 * spread:.1f}, {n} seeds)")
    verdict, why = ahead_at_low_n(cells)
    return ("; ".join(parts) or "no low N run") + " (% test accuracy, subnetwork vs control)", verdict, why


def density_row(discovery: dict) -> tuple[str, str, str]:
    if not isinstance(discovery, dict) or not discovery:
        raise Missing("no discovery results")
    parts, verdicts = [], []
    for layers, d in sorted(discovery.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
        kept = number(d, "kept_percent")
        sweep = [x.get("kept_percent") for x in d.get("sweep") or [] if isinstance(x.get("kept_percent"), (int, float))]
        extra = f" (lambdas: {min(sweep):.1f}-{max(sweep):.1f}%)" if len(sweep) > 1 else ""
        parts.append(f"{layers} layers: {kept:.2f}%{extra}")
        verdicts.append(in_band(kept, *BAND))
    text = "; ".join(parts) + " kept, one discovery seed"
    bad = [(v, why) for v, why in verdicts if v != SHOWN]
    if bad:
        return text, bad[0][0], "; ".join(why for _, why in bad) + " (percent)"
    return text, SHOWN, "; ".join(why for _, why in verdicts) + " (percent)"


def findings(run_dir: str | Path, relative_to: str | Path) -> list[Finding]:
    """One row per claim of the Subtask Induction run in ``run_dir``; links relative to ``relative_to``."""
    run_dir, relative_to = Path(run_dir), Path(relative_to)
    report = run_dir / "report.md"
    contrast_link = section_link(report, CONTRAST_SECTION, relative_to)
    density_link = section_link(report, DENSITY[2], relative_to)
    rows: list[Finding] = []
    try:
        metrics = read_json_or_missing(run_dir / "metrics.json")
    except Missing as e:
        return [*(missing(PAPER, c, f, contrast_link, str(e)) for c, f in CONTROLS.values()),
                missing(PAPER, DENSITY[0], DENSITY[1], density_link, str(e))]
    try:
        settings = read_json_or_missing(run_dir / "config.json")
        summary = get(metrics, "summary", what="metrics.json")
        low = _low_sizes(settings, summary)
    except Missing as e:
        rows += [missing(PAPER, c, f, contrast_link, str(e)) for c, f in CONTROLS.values()]
    else:
        for control, (claim, fig) in CONTROLS.items():
            try:
                text, verdict, why = control_row(summary, control, low)
            except Missing as e:
                rows.append(missing(PAPER, claim, fig, contrast_link, str(e)))
                continue
            rows.append(Finding(PAPER, claim, fig, text, verdict, why, contrast_link))
    try:
        text, verdict, why = density_row(get(metrics, "discovery", what="metrics.json"))
        rows.append(Finding(PAPER, DENSITY[0], DENSITY[1], text, verdict, why, density_link))
    except Missing as e:
        rows.append(missing(PAPER, DENSITY[0], DENSITY[1], density_link, str(e)))
    return rows


__all__ = ["BAND", "CONTROLS", "DENSITY", "PAPER", "control_row", "density_row", "findings"]
