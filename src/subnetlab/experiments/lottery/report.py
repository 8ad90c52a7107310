"""The lottery-ticket report: pruning, good / random / bad re-fine-tuning, stability, pattern types.

Takes the measured numbers that ``experiments.lottery`` collected and writes
``report.md`` with its figures. Every number is read from a run's metrics.
"""

from __future__ import annotations

import platform
import statistics
from pathlib import Path
from typing import Any

import torch

from subnetlab.analysis.attention_types import TYPES, HeadTypes
from subnetlab.analysis.stability import pearson
from subnetlab.experiments.lottery.figures import pattern_types_plot, pruning_curves_plot, survival_plot, tickets_plot
from subnetlab.experiments.lottery.settings import LotterySettings
from subnetlab.report.markdown import MarkdownReport, num, pct

GROUP = {"magnitude": "m", "importance": "s"}


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return pct(values[0])
    return f"{pct(statistics.mean(values))} ± {100 * statistics.stdev(values):.1f}"


def _job_time(results: dict[str, Any]) -> str:
    """The jobs' own wall times, as recorded when they ran (a rerun that skips them does not change them)."""
    times = [m.get("wall_seconds") for r in results.values() for part in ("finetune", "prune", "retrain")
             for m in r[part].values()]
    known = [t for t in times if t is not None]
    if not known:
        return "job times not recorded"
    missing = f", {len(times) - len(known)} of {len(times)} jobs unrecorded" if len(known) < len(times) else ""
    return f"the {len(known)} jobs ran for {sum(known) / 60:.1f} min in total{missing}"


def metric_name(r: dict[str, Any]) -> str:
    """The metric the task was pruned on (and is reported in): the prune jobs record it."""
    return str(next(iter(r["prune"].values())).get("metric_name", "accuracy"))


def score(metrics: dict[str, Any], split: str, name: str = "accuracy") -> float:
    """A run's final ``name`` metric on ``split`` (accuracy when a split's scores do not hold it), a fraction;
    the report's tables and the demo's findings rows (``lottery.findings``) read runs through it."""
    score = metrics["final"][split]
    return float(score[name] if name in score else score["accuracy"])


def _setup(doc: MarkdownReport, settings: LotterySettings, results: dict[str, Any], elapsed: float) -> None:
    first = next(iter(results.values()))
    ft = next(iter(first["finetune"].values()))
    doc.section("Setup").bullets([
        f"preset `{settings.preset}`; model `{settings.model}`; tasks {', '.join(f'`{t}`' for t in settings.tasks)}",
        f"task options: `{settings.task_options}`; {ft['train_examples'] if 'train_examples' in ft else '?'} training examples, "
        f"{ft['steps']} steps per fine-tuning run (lr {settings.lr}, batch {settings.batch_size}, "
        f"warmup {settings.warmup_ratio:.0%}, weight decay {settings.weight_decay}, max length {settings.max_length})",
        f"fine-tuning seeds {settings.seeds}; m-pruned seeds {settings.magnitude_seeds}; "
        f"good / random / bad re-fine-tuned for seeds {settings.retrain_seeds}",
        f"pruning on split `{settings.split}` ({settings.eval_limit or 'all'} examples; importance from "
        f"{settings.importance_limit or settings.eval_limit or 'all'}), {settings.fraction:.0%} per step, "
        f"stop before {settings.threshold:.0%} of the full model's {'task metric' if settings.stop_metric == 'task' else 'accuracy'}; "
        f"criterion `{settings.criterion}` (importance batches of {settings.importance_batch_size or settings.batch_size})"
        f"{', then heads-only and MLP-only refinement' if settings.refine else ''}",
        f"controls: m-pruning random / bad drawn `{settings.control_scope}`; bad s-subnetworks filled "
        f"`{settings.bad_fill}`; pattern types counted `{settings.pattern_counting}` "
        f"over seeds `{settings.pattern_seeds}`, super-survivors read in the "
        f"`{settings.super_survivor_maps}` model",
        f"machine: {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, device "
        f"`{settings.device}`; {_job_time(results)}; this invocation took {elapsed / 60:.1f} min "
        f"(finished jobs are skipped on rerun)",
    ])


def _pruning_table(doc: MarkdownReport, task: str, r: dict[str, Any], split: str) -> None:
    rows = []
    for key, m in sorted(r["prune"].items()):
        accepted = sum(1 for s in m["steps"] if s["accepted"])
        kept = f"{m['heads_kept']} heads, {m['mlps_kept']} MLPs" if m["kind"] == "structured" else f"{m['kept']:,} weights"
        health = (", ".join(m["health"]["problems"]) or "ok") if isinstance(m.get("health"), dict) else "-"
        rows.append([key, pct(m["full_metric"]), pct(m["metric"]), pct(m["sparsity"]), pct(m["parameter_sparsity"]),
                     f"{accepted} / {len(m['steps'])}", kept, health])
    doc.table(["run", f"full {split}", "pruned", "removed", "removed params", "steps kept / tried", "kept", "health"], rows,
              caption=f"{task}: pruning the fine-tuned models (no re-fine-tuning). {metric_name(r)} in %; "
                      "'removed' counts weights (m) or heads + MLPs (s); health: degenerate when a subnetwork keeps "
                      "nothing or everything (subnetlab.runs.health; '-': run written before health was recorded).")


def _tickets(doc: MarkdownReport, task: str, r: dict[str, Any], split: str, figdir: Path, out: Path) -> None:
    seeds = sorted({k.rsplit("-seed", 1)[1] for k in r["retrain"]})
    other = [s for s in next(iter(r["retrain"].values()))["final"] if s != split]
    name = metric_name(r)
    full = [score(r["finetune"][s], split, name) for s in seeds]
    rows = [["full model", "-", "-", _mean_sd(full)] + [_mean_sd([score(r["finetune"][s], o, name) for s in seeds]) for o in other]]
    dots: dict[str, list[float]] = {}
    for method in ("magnitude", "importance"):
        for control in ("good", "random", "bad"):
            runs = [r["retrain"][f"{method}-{control}-seed{s}"] for s in seeds]
            prune = [r["prune"][f"{method}-seed{s}"] for s in seeds]
            pruned = [p["metric"] if control == "good" else p.get("controls_metric", {}).get(control) for p in prune]
            pruned = [x for x in pruned if x is not None]
            sub = runs[0]["subnetwork"]
            label = f"{GROUP[method]} {control}"
            dots[label] = [score(x, split, name) for x in runs]
            rows.append([label, pct(sub["sparsity"]), _mean_sd(pruned), _mean_sd(dots[label])]
                        + [_mean_sd([score(x, o, name) for x in runs]) for o in other])
    doc.table(["subnetwork", "removed", f"pruned, {split}", f"re-fine-tuned, {split}"] + [f"re-fine-tuned, {o}" for o in other],
              rows, caption=f"{task}: good, random and bad subnetworks, applied to the fine-tuned model ('pruned') and "
                            f"re-fine-tuned from the pre-trained weights with the mask fixed (Table 2 of the paper; "
                            f"mean ± sd over seeds {', '.join(seeds)}; {name} %).")
    path = tickets_plot(dots, statistics.mean(full), figdir / f"{task}-tickets.png", split=split, metric=name)
    doc.figure(path, "Each dot is one re-fine-tuned subnetwork and the red line the full fine-tuned model: "
                     "look for how far random and bad fall below good (the paper: not far for s-pruning).", base=out)
    s0 = seeds[0]
    hist = {f"{GROUP[m]}-pruning (seed {s0})": r["prune"][f"{m}-seed{s0}"]["steps"] for m in ("magnitude", "importance")}
    m0 = r["prune"][f"importance-seed{s0}"]
    path = pruning_curves_plot(hist, m0["full_metric"], m0["threshold"], figdir / f"{task}-pruning.png", metric=name)
    doc.figure(path, f"Development {name} after each accepted pruning step; hollow circles are candidate steps that "
                     "fell below the dashed threshold and were rejected, so each subnetwork is its line's last point.", base=out)


def _stability(doc: MarkdownReport, task: str, r: dict[str, Any], figdir: Path, out: Path) -> None:
    st = r["stability"]
    n = len(st["seeds"])
    doc.bullets([
        f"heads kept by s-pruning per seed: {st['heads_kept']}; MLPs kept: {st['mlps_kept']}",
        f"pairwise Jaccard overlap of the surviving heads: mean {num(st['mean_jaccard'])}, "
        f"min {num(st['min_jaccard'])}, max {num(st['max_jaccard'])}",
        f"super-survivors (kept in all {n} seeds): {len(st['super_survivor_heads'])} heads "
        f"({', '.join(st['super_survivor_heads']) or 'none'}); MLPs: {', '.join(st['super_survivor_mlps']) or 'none'}",
    ])
    rows = [[f"seed {st['seeds'][i]}"] + [num(v) for v in row] for i, row in enumerate(st["pairwise_jaccard"])]
    doc.table(["Jaccard"] + [f"seed {s}" for s in st["seeds"]], rows,
              caption=f"{task}: overlap of the heads that s-pruning kept, for every pair of fine-tuning seeds.")
    path = survival_plot(st["head_frequency"], figdir / f"{task}-survival.png", n)
    doc.figure(path, "Share of seeds in which each head survived s-pruning; cells at 1.00 are the super-survivors, "
                     "and a map without a clear block of bright cells means the good subnetworks are unstable.", base=out)


CNN_UNAVAILABLE = ("The paper types maps with a six-layer CNN trained on 400 raw + 600 normed annotated maps. Those "
                   "annotations (`data/head_classification_data.tar.gz` in sai-prasanna/bert-experiments) could not "
                   "be fetched: the file is absent from the repository snapshot available to subnetlab, so the CNN "
                   "classifier is not offered and maps are typed by rules on measured attention shares "
                   "(`subnetlab.analysis.attention_types`).")


def _super_survivors(st: dict[str, Any]) -> torch.Tensor:
    """[L, H]: 1 where the head survived s-pruning in every seed."""
    L, H = len(st["head_frequency"]), len(st["head_frequency"][0])
    sup = torch.zeros(L, H)
    for name in st["super_survivor_heads"]:
        layer, head = name[1:].split(".H")
        sup[int(layer), int(head)] = 1.0
    return sup


def super_survivor_correlations(r: dict[str, Any], counting: str) -> dict[str, float] | None:
    """Pearson r between being a super-survivor and a head's heterogeneous share (fine-tuned model, full), raw and
    normed; None without super-survivors (undefined)."""
    st = r["stability"]
    if not st["super_survivor_heads"]:
        return None
    full = HeadTypes.from_dict(r["patterns"]["finetuned"])
    sup = _super_survivors(st)
    return {kind: float(pearson(sup, full.type_fraction(kind, "heterogeneous", counting))) for kind in ("raw", "normed")}


def pattern_shares(r: dict[str, Any], counting: str) -> dict[tuple[str, str, str], dict[str, float]]:
    """The pattern table's numbers: ``(model, attention, group) -> {type: share}`` for the fine-tuned and
    pre-trained models, raw and normed attention, all heads and the super-survivors (their maps read where the run
    read them). The report's table and the demo's verdict (``lottery.findings.patterns_row``) both read these."""
    st, pats = r["stability"], r["patterns"]
    sup = _super_survivors(st)
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for which in ("finetuned", "pretrained"):
        full = HeadTypes.from_dict(pats[which])
        pruned = pats.get(f"{which}_super")
        inside = HeadTypes.from_dict(pruned) if pruned else full
        for kind in ("raw", "normed"):
            for group, ht, mask in (("all heads", full, None), ("super-survivors", inside, sup)):
                out[(which, kind, group)] = ht.shares(kind, mask, counting=counting)
    return out


def _patterns(doc: MarkdownReport, task: str, r: dict[str, Any], figdir: Path, out: Path,
              settings: LotterySettings) -> None:
    counting = settings.pattern_counting
    st, pats = r["stability"], r["patterns"]
    sup = _super_survivors(st)
    unit = "maps" if counting == "per-map" else "heads"
    table = pattern_shares(r, counting)
    rows = [[f"{which}, {kind}", group] + [pct(sh[t]) for t in TYPES] for (which, kind, group), sh in table.items()]
    shares = {f"{group}, {kind}": sh for (which, kind, group), sh in table.items() if which == "finetuned"}
    full = HeadTypes.from_dict(pats["finetuned"])
    corr = [f"{kind}: {num(pearson(sup, full.type_fraction(kind, 'heterogeneous', counting)))}"
            for kind in ("raw", "normed")]
    seeds = pats.get("seeds", [r["pattern_seed"]])
    where = ("read in the model pruned to the super-survivors (heads and MLPs kept in every seed)"
             if pats.get("pruned_to_super_survivors") else "read in the full model")
    doc.para(f"Maps from {pats.get('source', pats['finetuned'].get('source', '?'))}; fine-tuned seeds {seeds} "
             f"({'labels counted per map, summed over heads and seeds' if counting == 'per-map' else 'one label per head from features averaged over its maps'}); "
             f"super-survivors' maps {where}. " + CNN_UNAVAILABLE)
    doc.table(["attention", "heads"] + list(TYPES), rows,
              caption=f"{task}: share (%) of {unit} of each Kovaleva pattern type among all heads and among the "
                      "super-survivors, raw and normed (Kobayashi et al.) attention.")
    path = pattern_types_plot(shares, figdir / f"{task}-patterns.png", ylabel=f"share of {unit} (%)")
    doc.figure(path, "Pattern types of the fine-tuned model's heads: compare super-survivors with all heads; a larger "
                     "heterogeneous share among super-survivors would suggest they carry more linguistic structure.", base=out)
    doc.para("Pearson correlation between being a super-survivor and "
             + ("the share of a head's maps that are heterogeneous" if counting == "per-map" else "having a heterogeneous pattern")
             + " (fine-tuned model, every head's maps read in the full model, the paper's statistic): " + "; ".join(corr)
             + ("" if st["super_survivor_heads"] else " (undefined: there are no super-survivors)")
             + ". The verdict on a preference (the demo's findings) compares the table's heterogeneous shares, "
               "super-survivors against all heads, so it rests on the numbers shown above.")


def _notes(settings: LotterySettings) -> list[str]:
    criterion = settings.criterion
    scope = settings.control_scope
    fill = settings.bad_fill
    notes = [
        ("s-pruning importance is |d(batch-mean loss)/d gate| per batch (the authors' code), averaged over batches"
         if criterion == "sensitivity-per-batch" else
         "s-pruning importance is E_x |dL(x)/dgate| per example (Michel et al.)" if criterion == "sensitivity" else
         f"s-pruning importance criterion `{criterion}`")
        + ", normalised per layer by the L2 norm; pruned components are gated at zero, in pruning and in re-fine-tuning.",
        "pruning stops before " + ("the task's own metric (MCC for CoLA, Pearson/Spearman mean for STS-B, accuracy "
                                   "otherwise)" if settings.stop_metric == "task" else "accuracy")
        + f" falls below {settings.threshold:.0%} of the full model's; tables show that metric.",
        "bad structured subnetworks are drawn from the removed heads / MLPs; when fewer were removed than kept, all removed "
        "ones are used and the rest are " + ("a random sample of the good ones (the authors' rule)" if fill == "random"
                                             else "the least important good ones")
        + " (recorded as `bad_fill` in each bad.safetensors).",
        ("random weight-level subnetworks keep as many weights as the good one in total, uniformly over all prunable "
         "weights; bad ones keep the globally smallest-magnitude weights of the fine-tuned model (the authors' rule)"
         if scope == "global" else
         "bad weight-level subnetworks keep, per matrix, the smallest-magnitude weights of the fine-tuned model; random "
         "ones draw the same number per matrix uniformly") + ".",
    ]
    if settings.preset == "demo":
        notes.append("demo numbers come from a small model and a synthetic corpus: they exercise the method; they are not "
                     "the paper's GLUE results.")
    return notes


def write_report(settings: LotterySettings, results: dict[str, Any], out: Path, elapsed: float) -> Path:
    out = Path(out)
    figdir = out / "figures"
    split = settings.split
    doc = MarkdownReport(f"When BERT plays the lottery: {settings.preset} preset")
    doc.para("Reproduces Prasanna, Rogers and Rumshisky (2020), sections 3 to 5, at the scale stated below. "
             "All numbers are measured in this run. In the paper's terms, m-pruning removes individual weights by "
             "magnitude and s-pruning (structured) removes whole attention heads and MLPs by importance; good "
             "subnetworks are what pruning kept, random ones as many components drawn at random, bad ones the "
             "least important.")
    _setup(doc, settings, results, elapsed)
    for task, r in results.items():
        doc.section(f"{task}: pruning and re-fine-tuning")
        _pruning_table(doc, task, r, split)
        _tickets(doc, task, r, split, figdir, out)
        doc.section(f"{task}: stability across fine-tuning seeds")
        _stability(doc, task, r, figdir, out)
        doc.section(f"{task}: attention pattern types")
        _patterns(doc, task, r, figdir, out, settings)
    doc.section("Notes")
    doc.bullets(_notes(settings))
    return doc.write(out / "report.md")
