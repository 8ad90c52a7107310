"""The Subtask Induction report: setup, base models, discovery (Table 3), Figure 3, and the paper's claims.

Every number written here is measured by the run; the paper's own figures
appear only in the column that says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from subnetlab.experiments.subtask_induction.figures import accuracy_grid, figure3
from subnetlab.experiments.subtask_induction.settings import SubtaskInductionSettings
from subnetlab.io import write_json
from subnetlab.report.markdown import MarkdownReport, pct
from subnetlab.report.search_controls import controls_table
from subnetlab.runs.health import stopping_verdict

PAPER_TABLE3 = {2: 7.68, 4: 7.00, 6: 4.70, 8: 3.55, 10: 3.56, 12: 3.20}  # % of masked parameters kept
PAPER_SCRATCH_MEAN = 0.506
THRESHOLDS = (0.99, 0.95)
LOW_N_MAX = 1.0  # "low N": up to this many times max_number disambiguation rows (the paper's N <= 1,000)

# The paper/code comparison, one entry per difference: (topic number, what differs and the released file it comes
# from, in Rock-Z/instilling-inductive-bias with its bundled NeuroSurgeon; a function of the settings saying what this
# run did). ``code_notes(settings)`` writes them into the report.
CODE_NOTES: list[tuple[int, str, Any]] = [
    (1, "Dropout during discovery: NeuroSurgeon's `Models/circuit_model.py` (`CircuitModel.train`) keeps every "
        "non-mask layer of the frozen model in eval mode; subnetlab does the same.",
     lambda s: "frozen model in eval mode (always)"),
    (2, "L0 weight and which lambda: appendix B.1 runs lambda in {1e-7, 5e-7, 1e-8} for 50 epochs "
        "(`math/configs/ablate_base.yaml`: `l0_lambda` 1e-7, 50 epochs, batch 500, 50,000 rows, whole-sequence loss) "
        "and says all are (near-)perfect; the released transfer configs (`math/configs/transfer_base.yaml`, "
        "`math/checkpoints/*layers_val/transfer_1e-7_*/configs.yaml`) all load `subnet_1e-7`, so Table 3 is lambda "
        "1e-7's density; no released code compares the sweep. Appendix A's principle (the sparser among similar "
        "performance) is the `sparsest` selection rule; a shorter, last-token discovery needs a larger lambda to reach "
        "the same density.",
     lambda s: f"lambda in {{{', '.join(f'{float(x):g}' for x in s.lambdas)}}}, {s.cs_epochs} epochs, "
               f"selection `{s.selection}`"),
    (2, "Which epoch's mask: Algorithm 1 keeps the last; `math/ablate.py` saves `best_circuit_model.pt` whenever "
        "`eval_acc >= best_acc` (the latest epoch at the best accuracy), and `math/transfer.py` loads that file.",
     lambda s: f"`cs_keep` = `{s.cs_keep}`"),
    (3, "Which weights are re-initialised: section 3.2 re-initialises everything outside the subnetwork; "
        "`math/transfer.py` (`transfer_model.init_subnet_transfer()`, NeuroSurgeon `Masking/contsparse_layer.py` "
        "`ContSparseGPTConv1D._init_subnet_transfer`) re-initialises only the masked GPT-2 `Conv1D` weights and keeps "
        "the copied embeddings, layer norms, biases and head trainable; the `empty-mask` control (not in the paper) "
        "measures what those copies carry alone.",
     lambda s: f"main table reinit `{s.reinit}`"
               + (f", secondary `{s.secondary_reinit}`" if s.secondary_reinit else "")),
    (4, "Random control: footnote 2 keeps as many weights per matrix as the subnetwork (k); "
        "`Masking/contsparse_layer.py` `_sample_mask_randomly`, applied in `math/transfer.py` (`subnet_sampled`) as "
        "`2 * mask - 1`, keeps n - k (a mask of ones with k random zeros), so the paper's weak random curve is a "
        "mostly frozen copy of the base model.",
     lambda s: "both run: `random-matched` (k, the text, the better control) and `random-released` (n - k)"),
    (4, "Complement control: appendix B.2 samples from outside the subnetwork; `_sample_mask_from_complement` "
        "(`subnet_sampled_complement` in `math/transfer.py`) zeroes k weights outside it and keeps the rest, the "
        "subnetwork included (n - k kept).",
     lambda s: "`complement-matched` keeps k weights outside the subnetwork (the text)"),
    (5, "Data and training length: `math/configs/transfer_base.yaml` uses 1,000 numbers, 17 sizes from 0 to 10,000, "
        "100 epochs at batch 50 whatever N; `math/transfer.py` draws the disambiguation rows per N with "
        "`utils.generate_samples`, and scores on freshly drawn 1,000-row sets from which training pairs are not "
        "excluded, keeping (and reporting) the epoch best on `original_unambiguous` (no separate test set). "
        "subnetlab's evaluation and test sets exclude training pairs and the best-on-evaluation epoch is scored "
        "on the test set. With fewer numbers each number is disambiguated more often for one N (about 2N/max_number "
        "rows), so a small preset's N is comparable to the paper's N x 1000/max_number.",
     lambda s: f"max_number {s.max_number}, N in {s.sizes}, {len(s.seeds)} seeds, at least "
               f"{s.transfer_epochs} epochs and {s.transfer_min_steps} optimiser steps per run"),
    (6, "Training objective: `math/ablate.py` and `math/transfer.py` pass `labels=input_ids`, so GPT-2's loss covers "
        "the whole sequence (predicting b, `<sep>` and c); subnetlab's earlier choice is the answer token alone.",
     lambda s: f"`cs_loss` = `{s.cs_loss}`, `transfer_loss` = `{s.transfer_loss}`"),
    (6, "Accuracy: `math/ablate.py` (`compute_metrics`) and `math/transfer.py` take `np.argmax(predictions[:, -2, :])` "
        "over the whole vocabulary (a number token "
        "counts as wrong); subnetlab's earlier choice is the argmax over the 7 answer tokens.",
     lambda s: f"`cs_accuracy` = `{s.cs_accuracy}`, "
               f"`transfer_accuracy` = `{s.transfer_accuracy}`"),
    (6, "Transfer optimiser: `math/configs/transfer_base.yaml` trains 100 epochs with AdamW lr 2e-4 at batch 50 "
        "(not in the text); the demo trains 80 epochs (raised to a minimum number of steps) at lr 1e-3.",
     lambda s: f"lr {float(s.transfer_lr):g}, {s.transfer_epochs} epochs, batch {s.transfer_batch}"),
    (6, "Fresh weights of the masked matrices: `_init_subnet_transfer` (`Masking/contsparse_layer.py`) draws every "
        "masked `Conv1D` weight from N(0, 0.02^2), `c_proj` included; transformers' GPT-2 initialisation draws "
        "`c_proj` at 0.02 / sqrt(2 x n_layer). The released `random` (scratch) condition is `GPT2LMHeadModel(config)`, "
        "transformers' initialisation.",
     lambda s: ("masked matrices at std " + f"{float(s.transfer_init_std):g}") if s.transfer_init_std
               else "the model's own initialisation"),
    (6, "Ties between epochs: `math/transfer.py` replaces its best model whenever `eval_acc >= best_acc`, so the latest "
        "of equally good epochs is kept; subnetlab's earlier choice is the earliest.",
     lambda s: f"`transfer_ties` = `{s.transfer_ties}`"),
]


def code_notes(settings: SubtaskInductionSettings) -> list[str]:
    """The notes section: every paper/code difference, its released file, and what this run did."""
    return [f"{text} This run: {did(settings)}." for _, text, did in CODE_NOTES]


def first_size_reaching(by_size: dict[int, list[float]], threshold: float) -> int | None:
    """Smallest size whose mean test accuracy over seeds reaches ``threshold`` (None: never)."""
    for size in sorted(by_size):
        if statistics.fmean(by_size[size]) >= threshold:
            return size
    return None


def spread(values: Sequence[float]) -> float:
    """The sample standard deviation over seeds (0 for a single run)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(runs: Sequence[dict]) -> dict[str, Any]:
    """Per label: mean / s.d. (over seeds, n-1) / range per size, the first size reaching each threshold, the
    overall mean."""
    grid = accuracy_grid(runs)
    out: dict[str, Any] = {}
    for condition, by_size in grid.items():
        every = [a for accs in by_size.values() for a in accs]
        out[condition] = {
            "by_size": {str(s): {"mean": statistics.fmean(v), "sd": spread(v), "min": min(v), "max": max(v), "n": len(v)}
                        for s, v in sorted(by_size.items())},
            "mean_over_sizes": statistics.fmean(every),
            "max_mean": max(statistics.fmean(v) for v in by_size.values()),
            **{f"first_size_{int(t * 100)}": first_size_reaching(by_size, t) for t in THRESHOLDS},
        }
    return out


def summary_table(summary: Mapping[str, Any], sizes: Sequence[int]) -> str:
    """The text table ``subnetlab transfer`` prints: mean test accuracy per condition (rows) and number of
    disambiguation rows (columns); with one size (your own data, or one arithmetic size) one column that says so."""
    if len(sizes) == 1:
        size = sizes[0]
        head = "test accuracy" + (f" ({size} disambiguation rows)" if size else "")
        lines = ["condition".ljust(20) + head]
        for c, entry in summary.items():
            cell = entry["by_size"].get(str(size))
            lines.append(c.ljust(20) + (f"{100 * cell['mean']:.1f}%" + (f" (s.d. {100 * cell['sd']:.1f} over "
                                        f"{cell['n']} seeds)" if cell["n"] > 1 else "") if cell else "-"))
        return "\n".join(lines) + "\n"
    lines = ["condition \\ disambiguation rows".ljust(34) + "".join(f"{s:>9}" for s in sizes)]
    for c, entry in summary.items():
        cells = entry["by_size"]
        lines.append(c.ljust(34) + "".join(f"{100 * cells[str(s)]['mean']:8.1f}%" if str(s) in cells else f"{'-':>9}"
                                           for s in sizes))
    return "\n".join(lines) + "\n"


def still_improving(run: dict, tail: float = 0.2) -> bool:
    """A transfer run that had not converged: under plateau stopping, one that reached its cap still improving
    (its recorded stopping reason, ``runs.health.stopping_verdict``); under fixed epochs (or a run written before
    the reason was recorded), one whose best evaluation came in the last ``tail`` of its training."""
    converged = stopping_verdict(run.get("stopping"))
    if converged is not None:
        return not converged
    epochs = run["sequences"] // max(int(run.get("train_rows") or 0), 1) if run.get("train_rows") else None
    return epochs is not None and run["best_epoch"] + 1 > (1 - tail) * epochs


def late_best(runs: Sequence[dict], tail: float = 0.2) -> dict[str, tuple[int, int]]:
    """Per label, ``(runs whose best epoch lies in the last ``tail`` of training, runs)``."""
    out: dict[str, list[int]] = {}
    for r in runs:
        label = r.get("label") or r["condition"]
        hit = still_improving(r, tail)
        counts = out.setdefault(label, [0, 0])
        counts[0] += int(hit)
        counts[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def contrasts(summary: dict, reference: str, others: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{other: {size: {difference, spread, exceeds}}}``: the reference's mean minus the other's, per size.

    ``spread`` is the sum of the two seed standard deviations; ``exceeds`` says the
    difference is larger than that (a conservative reading of "beyond the seed spread";
    never with a single seed on either side).
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if reference not in summary:
        return out
    ref = summary[reference]["by_size"]
    for other in others:
        if other not in summary or other == reference:
            continue
        cells = {}
        for size, r in ref.items():
            o = summary[other]["by_size"].get(size)
            if o is None:
                continue
            diff, sp = r["mean"] - o["mean"], r["sd"] + o["sd"]
            # one seed has no spread to exceed: never "beyond the spread" then
            cells[size] = {"difference": diff, "spread": sp, "exceeds": diff > sp and min(r["n"], o["n"]) > 1}
        out[other] = cells
    return out


def verdict(cells: dict[str, dict[str, Any]], low: Sequence[str]) -> str:
    """One sentence on a reference-vs-control contrast at the ``low`` sizes, from the numbers."""
    at = [s for s in low if s in cells]
    if not at:
        return "not run at these sizes"
    ahead = [s for s in at if cells[s]["difference"] > 0]
    clear = [s for s in at if cells[s]["exceeds"]]
    diffs = ", ".join(f"N={s}: {100 * cells[s]['difference']:+.1f} (spread {100 * cells[s]['spread']:.1f})" for s in at)
    if clear:
        head = f"ahead beyond the seed spread at N = {', '.join(clear)}"
    elif len(ahead) == len(at):
        head = "ahead at every low N, but within the seed spread"
    elif ahead:
        head = f"ahead at N = {', '.join(ahead)} only, within the seed spread"
    else:
        head = "not ahead at any low N"
    return f"{head} ({diffs} points)"


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


def _best(summary: dict, label: str) -> str:
    """A condition's best mean test accuracy over the sizes run, and where ("64.3% at N=300")."""
    by = summary.get(label, {}).get("by_size", {})
    if not by:
        return "-"
    size = max(by, key=lambda s: by[s]["mean"])
    return f"{pct(by[size]['mean'])}% at N={size}"


def _leads(cells: dict[str, dict[str, Any]], other: str) -> str:
    """Per N, who is ahead of whom and by how much, in words ("; full beats the subnetwork by 30.0 points at N=10
    (beyond the seed spread)")."""
    parts = []
    for size, c in cells.items():
        d = c["difference"]
        if round(100 * d, 1) == 0:
            parts.append(f"level at N={size}")
            continue
        who = "the subnetwork beats " + other if d > 0 else other + " beats the subnetwork"
        parts.append(f"{who} by {100 * abs(d):.1f} points at N={size}"
                     + (" (beyond the seed spread)" if abs(d) > c["spread"] else ""))
    return "; " + ", ".join(parts) if parts else ""


def _cells(summary: dict, label: str, sizes: Sequence[int]) -> list[str]:
    by = summary.get(label, {}).get("by_size", {})
    return [f"{100 * by[str(s)]['mean']:.1f} ± {100 * by[str(s)]['sd']:.1f}" if str(s) in by else "-" for s in sizes]


def write_report(out: Path, settings: SubtaskInductionSettings, bases: dict, discovered: dict, runs: list[dict]) -> Path:
    """``report.md``, ``figure3.png`` and ``metrics.json`` in ``out``; returns the report's path."""
    out = Path(out)
    summary = summarise(runs)
    figure = figure3(runs, out / "figure3.png")
    preset = settings.preset or "custom"
    main, secondary = settings.reinit, settings.secondary_reinit
    main_labels = [c for c in settings.conditions if c in summary]
    second_labels = [f"{c}, reinit {secondary}" for c in settings.secondary_conditions or []
                     if secondary and secondary != main and f"{c}, reinit {secondary}" in summary]
    sizes = sorted({int(r["size"]) for r in runs})
    doc = MarkdownReport(f"Subtask Induction ({preset} preset)")
    doc.para("Zhang, Lepori & Pavlick (2024), section 4: a subnetwork computing `ab mod 7`, found in a model trained on "
             "`a+ab mod 7`, is copied frozen into re-initialised models that learn `a^2+ab mod 7` from an ambiguous "
             "training set (`a = b` rows) plus N disambiguation rows. All numbers below are measured by this run.")
    epochs = {int(r["size"]): r["sequences"] // max(int(r["train_rows"]), 1) for r in runs if r.get("train_rows")}
    plan = ", ".join(f"N={s}: {epochs[s]} epochs" for s in sizes if s in epochs)
    chosen = next((d.get("selection") for d in discovered.values() if d.get("selection")), "see settings")
    doc.section("Setup").bullets([
        f"model: GPT-2 built from a config, {', '.join(map(str, settings.layers))} layer(s), 4 heads, width 128, MLP 512; "
        f"vocabulary: the numbers 0..{settings.max_number - 1}, `<sep>`, `<pad>`, `<unk>`",
        f"data: numbers in [0, {settings.max_number}), modulus {settings.modulus}; base task `{settings.base_op}` "
        f"({settings.base_train} training rows); subtask `{settings.sub_op}` ({settings.cs_samples} rows); target "
        f"`{settings.target_op}`: the {settings.max_number} ambiguous rows plus N disambiguation rows; "
        f"evaluation and test sets of {settings.n_eval} and {settings.n_test} rows",
        f"base training: AdamW lr {settings.base_lr:g}, batch {settings.base_batch}, {settings.base_epochs} epochs "
        f"({settings.base_scheduler} schedule; epochs, batch and schedule are not stated in the paper)",
        f"discovery: continuous sparsification over the frozen model in eval mode (dropout off), masks over "
        f"{' and '.join(settings.cs_include)} weight matrices, s init -0.1, beta 1 -> 100, lambda in "
        f"{{{', '.join(f'{float(x):g}' for x in settings.lambdas)}}}, AdamW lr {settings.cs_lr:g}, "
        f"batch {settings.cs_batch}, {settings.cs_epochs} epochs, mask kept per run: {settings.cs_keep} epoch on "
        f"evaluation; subnetwork transferred: {chosen}",
        f"transfer: main table with reinit `{main}` "
        f"({'only the masked matrices re-initialised; embeddings, layer norms, biases and head copied and trained, as the released code' if main == 'masked' else 'everything outside the subnetwork re-initialised, as the paper text'}): "
        f"{', '.join(settings.conditions)}"
        + (f"; secondary table with reinit `{secondary}`: {', '.join(settings.secondary_conditions or [])}"
           if secondary and secondary != main and settings.secondary_conditions else ""),
        f"N in {settings.sizes}; seeds {settings.seeds}; AdamW lr {settings.transfer_lr:g}, batch "
        f"{settings.transfer_batch}; at least {settings.transfer_epochs} epochs and {settings.transfer_min_steps} "
        f"optimiser steps per run ({plan}); model best on evaluation; transferred weights "
        f"{'frozen' if settings.freeze else 'trainable'}",
        f"objective and scoring (see the notes): discovery loss `{settings.cs_loss}`, "
        f"accuracy over the `{settings.cs_accuracy}`; transfer loss "
        f"`{settings.transfer_loss}`, accuracy over the `{settings.transfer_accuracy}`, "
        f"ties between epochs to the `{settings.transfer_ties}`, fresh masked matrices "
        + (f"at std {float(settings.transfer_init_std):g}" if settings.transfer_init_std
           else "from the model's own initialisation"),
        f"scale: preset `{preset}`; {len(runs)} transfer runs",
    ])

    doc.section("Discovery: density per lambda")
    rows = []
    for layers in settings.layers:
        d = discovered[layers]
        for m in d.get("sweep", []):
            health = (", ".join(m["health"]) or "ok") if "health" in m else "-"  # "-": a sweep written before health
            rows.append([layers, f"{m['l0_lambda']:g}", pct(m["eval_accuracy"]), pct(m["test_accuracy"]),
                         f"{m['kept_percent']:.2f}", m["epoch"], health,
                         "yes" if m["l0_lambda"] == d["l0_lambda"] else ""])
    doc.table(["layers", "lambda", "subtask eval acc. %", "subtask test acc. %", "params kept %", "epoch kept", "health",
               "transferred"],
              rows, caption=f"Every lambda of the sweep: the share of masked (attention + MLP) weights its mask keeps "
                            f"(paper's Table 3: 3.2-7.7%) and its accuracy on `{settings.sub_op}`; health: the "
                            "problems subnetlab.runs.health found (degenerate: keeps no weight or every one, never "
                            "transferred while another lambda's is not; undecided: masks still between 0.05 and 0.95 "
                            f"at the end). Transferred: {chosen}.")
    rows = []
    for layers in settings.layers:
        d = discovered[layers]
        rows.append([layers, pct(bases[layers].get("test_accuracy")), pct(d["full_model_test_accuracy"]), f"{d['l0_lambda']:g}",
                     pct(d["eval_accuracy"]), pct(d["test_accuracy"]), f"{d['kept_percent']:.2f}",
                     f"{PAPER_TABLE3[layers]:.2f}" if layers in PAPER_TABLE3 else "-"])
    doc.table(["layers", f"base test acc. ({settings.base_op}) %", f"full model on {settings.sub_op} %", "lambda",
               "subnetwork eval acc. %", "subnetwork test acc. %", "params kept % (Table 3)", "paper's Table 3 %"], rows,
              caption="Base models and the transferred subnetwork per depth.")
    layer_rows = [[layers, l, f"{v:.2f}"] for layers in settings.layers
                  for l, v in discovered[layers]["kept_percent_per_layer"].items()]
    doc.table(["model layers", "layer", "params kept %"], layer_rows, caption="Kept parameters per layer.")
    for layers in settings.layers:
        for entry in (discovered[layers].get("controls") or {}).values():
            headers, rows, caption = controls_table(entry, f"{settings.sub_op} test acc. %", scale=100.0, digits=1,
                                                    what=f" ({layers} layers, lambda {discovered[layers]['l0_lambda']:g})")
            doc.table(headers, rows, caption=caption)

    doc.section("Transfer (Figure 3)")
    empty = "empty-mask" in summary
    dashed = f"; dashed: reinit `{secondary}`" if second_labels else ""
    doc.figure(figure, f"Test accuracy after transfer against the number of disambiguation samples (solid: reinit "
               f"`{main}`{dashed}); a `subnetwork` line above `scratch`"
               + (", the random controls and `empty-mask`" if empty else " and the random controls")
               + " at small N is the inductive bias the paper reports.", base=out)
    doc.table(["condition", *[f"N={s}" for s in sizes]], [[c, *_cells(summary, c, sizes)] for c in main_labels],
              caption=f"Main table, reinit `{main}`: mean ± s.d. test accuracy (%) over {len(settings.seeds)} seeds "
                      f"(and depths) per number of disambiguation samples. `random-matched` keeps k weights per matrix "
                      f"(the text), `random-released` n - k (the released code)"
                      + (", `empty-mask` transfers no matrix weight." if empty else "."))
    if second_labels:
        reference = [c for c in ("scratch", "full") if c in summary]
        doc.table(["condition", *[f"N={s}" for s in sizes]],
                  [[c, *_cells(summary, c, sizes)] for c in [*second_labels, *reference]],
                  caption=f"Secondary table, reinit `{secondary}` (the literal reading of section 3.2); `scratch` and "
                          "`full` do not depend on reinit and are the main table's runs.")
    late = late_best(runs)
    rule = (f"under plateau stopping (patience {settings.transfer_patience} evaluations, min gain "
            f"{settings.transfer_min_delta or 0:g} in evaluation accuracy; the cap: the fixed schedule's epochs), runs "
            "that reached the cap still improving" if settings.transfer_patience is not None else
            "under fixed epochs, runs whose best evaluation came in the last 20% of their training")
    doc.para(f"Runs still improving when training stopped ({rule}; more steps could change the ranking): "
             + ", ".join(f"{label} {late[label][0]}/{late[label][1]}" for label in [*main_labels, *second_labels]
                         if label in late) + ".")
    controls = [c for c in ("scratch", "random-matched", "random-released", "complement-matched", "empty-mask", "full")
                if c in summary]
    table_c = contrasts(summary, "subnetwork", controls)
    doc.table(["subnetwork minus", *[f"N={s}" for s in sizes]],
              [[c, *[(f"{100 * table_c[c][str(s)]['difference']:+.1f} / {100 * table_c[c][str(s)]['spread']:.1f}"
                      + (" *" if table_c[c][str(s)]["exceeds"] else "")) if str(s) in table_c[c] else "-" for s in sizes]]
               for c in table_c],
              caption=f"Reinit `{main}`: subnetwork mean minus each control's, in points / the sum of the two seed "
                      "s.d.; * marks a difference larger than that spread.")
    low = [str(s) for s in sizes if 0 < s <= LOW_N_MAX * settings.max_number]
    doc.section("Does the subnetwork beat its controls at low N?")
    doc.bullets([f"vs `{c}` (reinit `{main}`): {verdict(table_c[c], low)}" for c in table_c]
                + ([f"reinit `{secondary}`, vs `random-matched, reinit {secondary}`: "
                    + verdict(contrasts(summary, f"subnetwork, reinit {secondary}", [f"random-matched, reinit {secondary}"])
                              .get(f"random-matched, reinit {secondary}", {}), low)]
                   if f"subnetwork, reinit {secondary}" in summary else []))
    doc.para(f"Low N: 0 < N <= {LOW_N_MAX:g} x max_number (here N in {{{', '.join(low)}}}; with "
             f"{settings.max_number} numbers, each number appears in about 2N/{settings.max_number} disambiguation "
             "rows, so N = max_number corresponds to about the paper's N = 1,000). Spread: the sum of the two seed s.d.")

    doc.section("The paper's claims against this run")
    doc.table(["claim (paper)", "this run"], [
        ["about 3-8% of parameters transferred (Table 3)",
         ", ".join(f"{l} layers: {discovered[l]['kept_percent']:.2f}%" for l in settings.layers)],
        ["Subtask Induction reaches near-perfect accuracy with about 1,000 disambiguation samples",
         f"first N with mean >= 99%: {_first(summary, 'subnetwork', 99)}; >= 95%: {_first(summary, 'subnetwork', 95)}; "
         f"this run's best mean: {_best(summary, 'subnetwork')}"],
        [f"scratch averages {PAPER_SCRATCH_MEAN * 100:.1f}% over sizes and never reaches perfect accuracy",
         f"scratch mean {pct(summary.get('scratch', {}).get('mean_over_sizes'))}%, best mean "
         f"{pct(summary.get('scratch', {}).get('max_mean'))}%"],
        ["random subnetworks need about 6x more data",
         f"data needed relative to the subnetwork to reach 95%: random-matched "
         f"{_ratio(summary, 'random-matched', 'first_size_95')}, random-released "
         f"{_ratio(summary, 'random-released', 'first_size_95')}; mean over sizes: subnetwork "
         f"{pct(summary.get('subnetwork', {}).get('mean_over_sizes'))}%, random-matched "
         f"{pct(summary.get('random-matched', {}).get('mean_over_sizes'))}%, random-released "
         f"{pct(summary.get('random-released', {}).get('mean_over_sizes'))}%"],
        ["transferring the subnetwork is at least as good as transferring the whole model",
         f"mean over sizes: subnetwork {pct(summary.get('subnetwork', {}).get('mean_over_sizes'))}%, "
         f"full {pct(summary.get('full', {}).get('mean_over_sizes'))}%" + _leads(table_c.get("full", {}), "full")],
    ] + ([
        ["(not in the paper) how much do the copied embeddings, norms, biases and head carry alone?",
         f"mean over sizes: empty-mask {pct(summary.get('empty-mask', {}).get('mean_over_sizes'))}%, scratch "
         f"{pct(summary.get('scratch', {}).get('mean_over_sizes'))}%, subnetwork "
         f"{pct(summary.get('subnetwork', {}).get('mean_over_sizes'))}%"],
    ] if "empty-mask" in summary else []), caption=f"Claims quoted from section 4.3 and Table 3; the right column is measured here (reinit `{main}`).")

    doc.section("Notes: where the paper's text and the authors' released code differ")
    doc.bullets(code_notes(settings))
    seconds = sum(r.get("seconds", 0.0) for r in runs)
    cpu = sum(r.get("cpu_seconds", 0.0) for r in runs)
    sequences = sum(r.get("sequences", 0) for r in runs)
    doc.para(f"Transfer training: {sequences} training sequences in {seconds:.0f} s of wall time summed over runs and "
             f"{cpu:.0f} s of CPU time ({sequences / max(cpu, 1e-9):.0f} training sequences per CPU-second, evaluation "
             f"included), {settings.jobs if settings.backend != 'local' else 1} run(s) at a time with "
             f"{settings.threads} thread(s) each.")
    metrics = {"preset": preset, "discovery": {str(k): {kk: v for kk, v in d.items() if kk != "history"} for k, d in discovered.items()},
               "base": {str(k): v for k, v in bases.items()}, "summary": summary,
               "contrasts": {"reinit " + main: table_c},
               "runs": [{k: v for k, v in r.items() if k != "curve"} for r in runs]}
    write_json(out / "metrics.json", metrics)
    return doc.write(out / "report.md")


__all__ = ["CODE_NOTES", "code_notes", "contrasts", "first_size_reaching", "late_best", "spread", "still_improving", "summarise",
           "summary_table", "verdict", "write_report"]
