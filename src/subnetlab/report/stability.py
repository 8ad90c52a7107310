"""Stability as Markdown: circuits over seeds or step counts (``analysis.stability.mask_stability`` entries, as
``runs.controls`` and ``runs.attribution_sweep`` write them) and bootstrap intervals over the pairs
(``analysis.mib_faithfulness.mib_bootstrap``). A study's report, or a command's ``stability.md``, includes these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from subnetlab.report.markdown import num, table

TOP_EDGES = 10


def _interval(pair: Any) -> str:
    return f"[{num(pair[0])}, {num(pair[1])}]" if isinstance(pair, (list, tuple)) and len(pair) == 2 else "-"


def stability_tables(targets: Mapping[str, Any]) -> list[str]:
    """Markdown lines: per target sparsity with a stability entry, a summary table (runs, Jaccard, kept by every /
    any run, faithfulness over seeds), the pairwise Jaccard matrix and the most frequent units."""
    lines: list[str] = []
    for key, entry in targets.items():
        stab = entry.get("stability") if isinstance(entry, Mapping) else None
        if not isinstance(stab, Mapping):
            continue
        labels = list(stab.get("runs") or [f"seed {s}" for s in stab.get("seeds", [])])
        rows = [["circuits compared", len(labels)], ["units kept per circuit", ", ".join(map(str, stab["kept"]))],
                ["mean pairwise Jaccard (min)", f"{num(stab['mean_jaccard'])} ({num(stab['min_jaccard'])})"]]
        for part in ("steps", "seeds"):
            if f"mean_jaccard_across_{part}" in stab:
                rows.append([f"mean Jaccard across {part} alone", num(stab[f"mean_jaccard_across_{part}"])])
        rows += [["kept by every circuit / by any", f"{stab['kept_in_every']} / {stab['kept_in_any']}"]]
        if isinstance(stab.get("score"), Mapping):
            score = stab["score"]
            n = f"{score['n']} " if "n" in score else ""
            if score.get("bootstrap_95"):
                rows.append([f"faithfulness, mean over {n}{score.get('over', 'seeds')} (95% bootstrap)",
                             f"{num(score['mean'])} {_interval(score['bootstrap_95'])}"])
            else:
                rows.append([f"faithfulness, mean over {n}{score.get('over', 'seeds')} (range; too few values for "
                             f"an interval)", f"{num(score['mean'])} {_interval(score.get('range'))}"])
        top = sorted(stab.get("frequency", {}).items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_EDGES]
        lines += [f"### Target sparsity {key}", "", table(["quantity", "value"], rows, "lr"), "",
                  "Pairwise Jaccard of the circuits:", "",
                  table(["", *labels], [[label, *row] for label, row in zip(labels, stab["pairwise_jaccard"])]), "",
                  f"Most frequent units (of {stab['kept_in_any']} kept by any circuit):", "",
                  table(["unit", "frequency"], [[name, f] for name, f in top], "lr"), ""]
    return lines


def bootstrap_line(boot: Mapping[str, Any]) -> str:
    """CPR and CMD with their percentile interval over the pairs, in one sentence."""
    cells = [f"{name.upper()} {num(boot['estimate'][name])} {_interval(boot['interval'][name])}"
             for name in boot["interval"]]
    undefined = sum(boot.get("undefined", {}).values())
    return (f"{100 * boot['level']:g}% percentile bootstrap over {boot['pairs']} pairs ({boot['resamples']} "
            f"resamples, seed {boot['seed']}): " + "; ".join(cells)
            + (f" ({undefined} undefined draws left out)" if undefined else ""))


def stability_report(targets: Mapping[str, Any], title: str) -> str:
    """A whole ``stability.md``: ``title``, then ``stability_tables``."""
    return "\n".join([f"# {title}", "", *stability_tables(targets)])


__all__ = ["bootstrap_line", "stability_report", "stability_tables"]
