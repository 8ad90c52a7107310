"""The Subtask Induction report: setup, base models, discovery (Table 3), Figure 3, and the paper's claims.

Every number written here is measured by the run; the paper's own figures
appear only in the column that says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from subnetlab.io import write_json
from subnetlab.report.markdown import MarkdownReport, pct
from subnetlab.experiments.subtask_induction.figures import accuracy_grid, figure3

PAPER_TABLE3 = {2: 7.68, 4: 7.00, 6: 4.70, 8: 3.55, 10: 3.56, 12: 3.20}  # % of masked parameters kept
PAPER_SCRATCH_MEAN = 0.506
THRESHOLDS = (0.99, 0.95)
MASKED = ", reinit masked"  # label suffix of the released-code variant (subnetlab.experiments.subtask_induction.reproduce)


def first_size_reaching(by_size: dict[int, list[float]], threshold: float) -> int | None:
    """Smallest size whose mean test accuracy over seeds reaches ``threshold`` (None: never)."""
    for size in sorted(by_size):
        if statistics.fmean(by_size[size]) >= threshold:
            return size
    return None


def summarise(runs: Sequence[dict]) -> dict[str, Any]:
    """Per condition: mean / s.d. per size, the first size reaching each threshold, the overall mean."""
    grid = accuracy_grid(runs)
    out: dict[str, Any] = {}
    for condition, by_size in grid.items():
        every = [a for accs in by_size.values() for a in accs]
        out[condition] = {
            "by_size": {str(s): {"mean": statistics.fmean(v), "sd": statistics.pstdev(v), "n": len(v)}
                        for s, v in sorted(by_size.items())},
            "mean_over_sizes": statistics.fmean(every),
            "max_mean": max(statistics.fmean(v) for v in by_size.values()),
            **{f"first_size_{int(t * 100)}": first_size_reaching(by_size, t) for t in THRESHOLDS},
        }
    return out


def _first(summary: dict, condition: str, percent: int) -> str:
    if condition not in summary:
        return "-"
    size = summary[condition][f"first_size_{percent}"]
    return "never (in the sizes run)" if size is None else str(size)


def _ratio(summary: dict, condition: str, key: str, reference: str = "subnetwork") -> str:
    """How many times the reference's data ``condition`` needs to reach a threshold (``key``)."""
    sub, other = summary.get(reference, {}).get(key), summary.get(condition, {}).get(key)
    if condition not in summary or reference not in summary:
        return "-"
    if sub is None:
        return "the subnetwork never reaches it"
    if other is None:
        return f"{condition} never reaches it (subnetwork: N={sub})"
    if sub == 0:
        return f"{other} vs 0 samples"
    return f"{other / sub:.1f}x"


def write_report(out: Path, settings: dict, bases: dict, discovered: dict, runs: list[dict]) -> Path:
    """``report.md``, ``figure3.png`` and ``metrics.json`` in ``out``; returns the report's path."""
    out = Path(out)
    summary = summarise(runs)
    figure = figure3(runs, out / "figure3.png")
    preset = settings.get("preset", "custom")
    doc = MarkdownReport(f"Subtask Induction ({preset} preset)")
    doc.para("Zhang, Lepori & Pavlick (2024), section 4: a subnetwork computing `ab mod 7`, found in a model trained on "
             "`a+ab mod 7`, is copied frozen into re-initialised models that learn `a^2+ab mod 7` from an ambiguous "
             "training set (`a = b` rows) plus N disambiguation rows. All numbers below are measured by this run.")
    doc.section("Setup").bullets([
        f"model: GPT-2 built from a config, {', '.join(map(str, settings['layers']))} layer(s), 4 heads, width 128, MLP 512; "
        f"vocabulary: the numbers 0..{settings['max_number'] - 1}, `<sep>`, `<pad>`, `<unk>`",
        f"data: numbers in [0, {settings['max_number']}), modulus {settings['modulus']}; base task `{settings['base_op']}` "
        f"({settings['base_train']} training rows); subtask `{settings['sub_op']}` ({settings['cs_samples']} rows); target "
        f"`{settings['target_op']}`: the {settings['max_number']} ambiguous rows plus N disambiguation rows; "
        f"evaluation and test sets of {settings['n_eval']} and {settings['n_test']} rows",
        f"base training: AdamW lr {settings['base_lr']:g}, batch {settings['base_batch']}, {settings['base_epochs']} epochs "
        f"({settings['base_scheduler']} schedule; epochs, batch and schedule are not stated in the paper)",
        f"discovery: continuous sparsification, masks over {' and '.join(settings['cs_include'])} weight matrices, "
        f"s init -0.1, beta 1 -> 100, lambda in {{{', '.join(f'{float(x):g}' for x in settings['lambdas'])}}}, AdamW lr {settings['cs_lr']:g}, "
        f"batch {settings['cs_batch']}, {settings['cs_epochs']} epochs, mask kept: {settings['cs_keep']} epoch on evaluation",
        f"transfer: conditions {', '.join(settings['conditions'])}; N in {settings['sizes']}; seeds {settings['seeds']}; "
        f"AdamW lr {settings['transfer_lr']:g}, batch {settings['transfer_batch']} (batch not stated in the paper), "
        f"{settings['transfer_epochs']} epochs, model best on evaluation (checked every {settings['eval_every']} epoch(s)); "
        f"re-initialised: {'everything outside the subnetwork' if settings['reinit'] == 'all' else 'the masked matrices only'}; "
        f"transferred weights {'frozen' if settings['freeze'] else 'trainable'}"
        + (f"; also with only the masked matrices re-initialised (the released code; embeddings, biases and norms "
           f"copied and trained): {', '.join(settings['also_reinit_masked'])}"
           if settings.get("also_reinit_masked") and settings["reinit"] != "masked" else ""),
        f"scale: preset `{preset}`; {len(runs)} transfer runs",
    ])
    doc.section("Base models and discovered subnetworks")
    rows = []
    for layers in settings["layers"]:
        d = discovered[layers]
        rows.append([layers, pct(bases[layers].get("test_accuracy")), pct(d["full_model_test_accuracy"]), f"{d['l0_lambda']:g}",
                     pct(d["eval_accuracy"]), pct(d["test_accuracy"]), f"{d['kept_percent']:.2f}",
                     f"{PAPER_TABLE3[layers]:.2f}" if layers in PAPER_TABLE3 else "-"])
    doc.table(["layers", f"base test acc. ({settings['base_op']}) %", f"full model on {settings['sub_op']} %", "lambda",
               "subnetwork eval acc. %", "subnetwork test acc. %", "params kept % (Table 3)", "paper's Table 3 %"], rows,
              caption="Base models, the selected subnetwork per depth, and the share of masked (attention + MLP) parameters it keeps.")
    layer_rows = [[layers, l, f"{v:.2f}"] for layers in settings["layers"]
                  for l, v in discovered[layers]["kept_percent_per_layer"].items()]
    doc.table(["model layers", "layer", "params kept %"], layer_rows, caption="Kept parameters per layer.")
    doc.section("Transfer (Figure 3)")
    doc.figure(figure, "Test accuracy after transfer against the number of disambiguation samples; a line above "
               "`scratch` and `random-matched` at small N is the inductive bias the paper reports.", base=out)
    sizes = sorted({int(r["size"]) for r in runs})
    doc.table(["condition", *[str(s) for s in sizes]],
              [[c, *[(f"{100 * summary[c]['by_size'][str(s)]['mean']:.1f} ± {100 * summary[c]['by_size'][str(s)]['sd']:.1f}"
                      if str(s) in summary[c]["by_size"] else "-") for s in sizes]] for c in summary],
              caption="Mean ± s.d. test accuracy (%) over seeds (and depths) per number of disambiguation samples.")
    doc.section("The paper's claims against this run")
    doc.table(["claim (paper)", "this run"], [
        ["about 3-8% of parameters transferred (Table 3)",
         ", ".join(f"{l} layers: {discovered[l]['kept_percent']:.2f}%" for l in settings["layers"])],
        ["Subtask Induction reaches near-perfect accuracy with about 1,000 disambiguation samples",
         f"first N with mean >= 99%: {_first(summary, 'subnetwork', 99)}; >= 95%: {_first(summary, 'subnetwork', 95)}"],
        [f"scratch averages {PAPER_SCRATCH_MEAN * 100:.1f}% over sizes and never reaches perfect accuracy",
         f"scratch mean {pct(summary.get('scratch', {}).get('mean_over_sizes'))}%, best mean "
         f"{pct(summary.get('scratch', {}).get('max_mean'))}%"],
        ["random-matched subnetworks need about 6x more data",
         f"data needed by random-matched relative to the subnetwork, to reach 95%: "
         f"{_ratio(summary, 'random-matched', 'first_size_95')}; to reach 99%: {_ratio(summary, 'random-matched', 'first_size_99')}"],
        ["transferring the subnetwork is at least as good as transferring the whole model",
         f"mean over sizes: subnetwork {pct(summary.get('subnetwork', {}).get('mean_over_sizes'))}%, "
         f"full {pct(summary.get('full', {}).get('mean_over_sizes'))}%"],
        *([["(released code's variant: only the masked matrices re-initialised) random-matched needs more data",
            f"to reach 95%: {_ratio(summary, 'random-matched' + MASKED, 'first_size_95', 'subnetwork' + MASKED)}; mean over "
            f"sizes: subnetwork {pct(summary['subnetwork' + MASKED]['mean_over_sizes'])}%, random-matched "
            f"{pct(summary.get('random-matched' + MASKED, {}).get('mean_over_sizes'))}%"]]
          if "subnetwork" + MASKED in summary else []),
        *([["(not in the paper) how much do the trained embeddings alone carry?",
            f"mean over sizes: embeddings only {pct(summary['embeddings']['mean_over_sizes'])}%, scratch "
            f"{pct(summary.get('scratch', {}).get('mean_over_sizes'))}%, subnetwork "
            f"{pct(summary.get('subnetwork', {}).get('mean_over_sizes'))}%"]] if "embeddings" in summary else []),
    ], caption="Claims quoted from section 4.3 and Table 3; the right column is measured here.")
    seconds = sum(r.get("seconds", 0.0) for r in runs)
    cpu = sum(r.get("cpu_seconds", 0.0) for r in runs)
    sequences = sum(r.get("sequences", 0) for r in runs)
    doc.para(f"Transfer training: {sequences} training sequences (plus an evaluation every {settings['eval_every']} "
             f"epoch(s)) in {seconds:.0f} s of wall time summed over runs and {cpu:.0f} s of CPU time "
             f"({sequences / max(cpu, 1e-9):.0f} training sequences per CPU-second, evaluation included), "
             f"{settings['jobs'] if settings['backend'] != 'local' else 1} run(s) at a time with {settings['threads']} thread(s) each.")
    metrics = {"preset": preset, "discovery": {str(k): {kk: v for kk, v in d.items() if kk != "history"} for k, d in discovered.items()},
               "base": {str(k): v for k, v in bases.items()}, "summary": summary,
               "runs": [{k: v for k, v in r.items() if k != "curve"} for r in runs]}
    write_json(out / "metrics.json", metrics)
    return doc.write(out / "report.md")


__all__ = ["first_size_reaching", "summarise", "write_report"]
