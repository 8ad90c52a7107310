"""The Heuristic Core reproduction's ``report.md`` and ``metrics.json``, from the studies' saved results.

The report states what produced it (model, data, scale, preset), shows only
measured numbers, and says in one line per figure what to look for. It also
states, per study, whether the paper's two headline patterns appear at this
scale: subnetworks alike in-domain but spread out of domain, and core heads
whose ablation hurts OOD more than ID (and more than other heads).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from subnetlab.experiments.heuristic_core import sections
from subnetlab.experiments.heuristic_core.effective_size import NOT_RUN
from subnetlab.experiments.heuristic_core.plots import seed_accuracy_plot
from subnetlab.experiments.heuristic_core.settings import HeuristicCoreSettings
from subnetlab.io import write_json
from subnetlab.report.markdown import MarkdownReport, moves, pct, points
from subnetlab.report.plots import curves
from subnetlab.runs.health import MAX_UNDECIDED_SHARE

NAME_OF = {"ood": "OOD (chosen subcases)", "real": "real HANS (chosen subcases)", "id": "in-domain"}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


REAL = "real HANS (mean)"
REAL_ENTAILED = "real HANS entailed (mean)"


def is_entailed(column: str) -> bool:
    """A heuristic-consistent (entailment) column of the ablation table."""
    return column == REAL_ENTAILED or column.split(":")[0].endswith("entailed")


def compact(acc: dict[str, float]) -> dict[str, float]:
    """Report columns: ID, each chosen OOD subcase, the real HANS subcases folded into one mean, then the
    entailment columns (per heuristic on the generated data, one mean on real HANS)."""
    out: dict[str, float] = {}
    real = [v for c, v in acc.items() if c.startswith("real/") or c == "real"]
    real_entailed = [v for c, v in acc.items() if c.startswith("real-entailed:")]
    entailed: dict[str, float] = {}
    for c, v in acc.items():
        if c.startswith("real/") or c == "real" or c.startswith("real-entailed:"):
            continue
        if c.startswith("ood-entailed:"):
            entailed["entailed:" + c.split(":", 1)[1]] = v
            continue
        out[c[4:] if c.startswith("ood/") else c] = v
    if real:
        out[REAL] = _mean(real)
    out.update(entailed)
    if real_entailed:
        out[REAL_ENTAILED] = _mean(real_entailed)
    return out


def compact_table(table: dict) -> dict:
    """Table 5 data with compact columns (per seed, the real HANS mean is taken per subnetwork)."""
    model = compact(table["model"])
    by = {}
    for label, cols in table["by_sparsity"].items():
        n = len(cols["id"])
        seeds = [compact({c: cols[c][i] for c in cols}) for i in range(n)]
        by[label] = {c: [s[c] for s in seeds] for c in model}
    return {"model": model, "by_sparsity": by, "columns": list(model)}


def compact_ablation(ablation: dict) -> dict:
    """Table 3 data with compact columns and super-additivity recomputed on them."""
    from subnetlab.analysis.ablation import AblationTable

    table = AblationTable.from_dict(ablation)
    for r in table.rows:
        r.accuracy = compact(r.accuracy)
    table.columns = list(table.rows[0].accuracy)
    table.rank_columns = [c for c in table.columns if c not in table.id_columns and not is_entailed(c)]
    return table.to_dict()


def spread(table: dict, label: str) -> dict[str, float]:
    """ID vs OOD spread across seeds at one sparsity: std and range of ID and of mean OOD accuracy."""
    cols = table["by_sparsity"][label]
    ood_cols = [c for c in cols if c not in ("id", REAL)]
    n = len(cols["id"])
    ood_means = [_mean([cols[c][i] for c in ood_cols]) for i in range(n)]
    per_subcase_sd = _mean([_sd(cols[c]) for c in ood_cols])
    return {"id_sd": _sd(cols["id"]), "id_range": max(cols["id"]) - min(cols["id"]),
            "ood_mean_sd": _sd(ood_means), "ood_mean_range": max(ood_means) - min(ood_means),
            "ood_subcase_sd": per_subcase_sd, "id_mean": _mean(cols["id"]), "ood_mean": _mean(ood_means)}


def ablation_effects(ablation: dict) -> dict[str, float]:
    """Mean drops (points, positive = worse) on ID, the OOD (non-entailment) columns and the entailment columns:
    of the single core-head ablations, of the non-HC average, of the joint (top-k) row and of the all-heads row,
    with mean ablation and with each control replacement."""
    from subnetlab.analysis.ablation import AblationTable

    ablation = AblationTable.from_dict(ablation).to_dict()  # kinds inferred for tables written without them
    base = next(r for r in ablation["rows"] if r["kind"] == "none")["accuracy"]
    id_cols = ablation["id_columns"]
    ood_cols = [c for c in ablation["columns"] if c not in id_cols and not is_entailed(c)]
    ent_cols = [c for c in ablation["columns"] if is_entailed(c)]

    def drops(acc: dict) -> tuple[float, float, float]:
        return tuple(_mean([base[c] - acc[c] for c in cols]) for cols in (id_cols, ood_cols, ent_cols))  # type: ignore

    out: dict[str, float] = {}
    kinds = {"single": "core", "average": "other", "joint": "joint", "all": "all"}
    replacements = sorted({r.get("replacement", "mean") for r in ablation["rows"]})
    for kind, name in kinds.items():
        for rep in replacements:
            rows = [r for r in ablation["rows"] if r.get("kind") == kind and r.get("replacement", "mean") == rep]
            if not rows:
                continue
            d = [drops(r["accuracy"]) for r in rows]
            key = name if rep == "mean" else f"{name}_{rep}"
            out[f"{key}_id_drop"] = _mean([x[0] for x in d])
            out[f"{key}_ood_drop"] = _mean([x[1] for x in d])
            if ent_cols:
                out[f"{key}_entailed_drop"] = _mean([x[2] for x in d])
            if kind == "single":
                out[f"{key}_max_ood_drop"] = max(x[1] for x in d)
    return out


def ablation_paragraph(eff: dict[str, float], hurts: bool, joint_hurts: bool) -> str:
    """The ablation table's summary in words (``ablation_effects``' drops: positive = accuracy falls), every
    change as "rises" or "falls" so a rise never reads as a negative drop."""
    def both(key: str) -> str:
        return f"{moves('ID', -eff[f'{key}_id_drop'])}, {moves('OOD', -eff[f'{key}_ood_drop'])}"

    entailed = (f", {moves('accuracy on the entailment subcases', -eff['core_entailed_drop'])}" if "core_entailed_drop" in eff else "")
    largest = eff["core_max_ood_drop"]
    return ("Ablating one core head, on average: " + both("core") + entailed
            + " (OOD: the chosen non-entailment subcases; "
            + (f"the largest OOD fall {points(largest)} points)" if largest > 0 else
               f"no core head lowers OOD, the smallest change: {moves('OOD', -largest)})")
            + (f". Ablating one other head: {both('other')}" if "other_ood_drop" in eff else "")
            + (f". Ablating the joint heads: {both('joint')}"
               + (f", {moves('accuracy on the entailment subcases', -eff['joint_entailed_drop'])}" if "joint_entailed_drop" in eff else "")
               if "joint_ood_drop" in eff else "")
            + ". " + "".join(f"With {rep} instead of mean ablation, one core head: {both(f'core_{rep}')}. "
                            for rep in ("zero", "resample") if f"core_{rep}_ood_drop" in eff)
            + f"**Pattern 'ablating core heads hurts OOD more than ID and more than other heads (by at least one point)': "
            f"{'seen' if hurts else 'not seen'}** at this scale (the joint heads: "
            f"{'seen' if joint_hurts else 'not seen'}).")


def training_curves(ft_dir: Path, subcases: list[str] | None, ood_split: str | None) -> dict[str, list]:
    """ID and OOD accuracy at every evaluation of the fine-tuning run (``metrics.jsonl``)."""
    steps, id_acc, ood_acc, real_acc = [], [], [], []
    for line in (ft_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        splits = rec["splits"]
        steps.append(rec["step"])
        id_acc.append(splits["id"]["accuracy"])
        for target, name in ((ood_acc, ood_split), (real_acc, "hans")):
            score = splits.get(name or "", {})
            subs = score.get("subcases") or {}
            chosen = [subs[s] for s in (subcases or []) if s in subs]
            target.append(_mean(chosen) if chosen else score.get("accuracy"))
    out = {"step": steps, "id": id_acc, "ood": ood_acc}
    if any(v is not None for v in real_acc):
        out["real"] = real_acc
    return out


def _setup(doc: MarkdownReport, settings: HeuristicCoreSettings, results: dict, seconds: list[float]) -> None:
    doc.section("Setup")
    items = [f"preset: **{settings.preset}**; model: `{settings.model}`",
             f"pruning: {len(settings.seeds)} seeds per sparsity, `{settings.prune_preset}` pruning preset "
             f"(hard-concrete gates, mean ablation, KL to the full model, Lagrangian target sparsity)"]
    for name, r in results.items():
        study = next(s for s in settings.studies if s["name"] == name)
        ft = r["finetune"]
        rule = r["data"].get("rule")
        items.append(f"{study['title']}: `{study['task']}` {json.dumps(study.get('task_options') or {})}; fine-tuned "
                     f"{ft['steps']} steps on {ft['train_examples']} examples; OOD subcases "
                     f"{', '.join(r['data']['subcases'] or ['(none)'])} (rule: {rule}); sparsities "
                     f"{', '.join(f'{100 * s:g}%' for s in study['sparsities'])}; real HANS: "
                     f"{'yes' if 'real' in r['data']['files'] else 'not available'}")
    es = settings.effective_size
    items.append(f"effective size: {len(es['seeds'])} seeds x levels {es['levels']} x {es['checkpoints']} checkpoints, "
                 f"faithfulness {pct(es['faithfulness'])} points" if es is not None else
                 f"effective size: not run by this preset ({NOT_RUN})")
    first = f"wall time: {seconds[0] / 60:.1f} min for the first invocation"
    rest = f", {sum(seconds[1:]) / 60:.1f} min for {len(seconds) - 1} later one(s) (a rerun skips finished stages)" if len(seconds) > 1 else ""
    items.append(first + rest + " on this machine")
    doc.bullets(items)


def _study(doc: MarkdownReport, study: dict, r: dict, out: Path) -> dict[str, Any]:
    sd = Path(r["dir"])
    subcases = r["data"]["subcases"]
    doc.section(study["title"])
    # training
    one_source = bool(r.get("curves"))
    cur = r["curves"] if one_source else training_curves(sd / "finetune", subcases,
                                                          (study.get("ood") or {}).get("choose_from"))
    series = {"ID": cur["id"], "OOD (chosen subcases)": cur["ood"]}
    if "real" in cur:
        series["real HANS (chosen subcases)"] = cur["real"]
    plot = curves(cur["step"], series, sd / "training.png", xlabel="training step", ylabel="accuracy (%)", percent=True)
    doc.section("Training", 3)
    doc.figure(plot, "Accuracy over fine-tuning; in the paper ID accuracy saturates early while OOD accuracy rises much "
               "later. " + ("Every saved checkpoint scored on the rows every table below uses (the same evaluation as "
                            "the full model of the next table and the accuracy columns of the effective-size table), "
                            "so one model has one accuracy throughout this report." if one_source else
                            "Scored by the fine-tuning's own evaluation (other rows than the tables below: its "
                            "numbers for the same model differ from theirs); rerun to score the checkpoints on the "
                            "tables' rows."), base=out)
    # Table 5 + Figure 2
    doc.section("Subnetworks across seeds", 3)
    table = compact_table(r["seeds_table"])
    sections.seeds_table(doc, table["model"], table["by_sparsity"], table["columns"],
                         caption="Accuracy (%) of the full model and of the pruned subnetworks across seeds (Table 5 of the paper).")
    labels = list(table["by_sparsity"])
    spreads = {label: spread(table, label) for label in labels}
    for label in labels:
        dots = seed_accuracy_plot(table["columns"], table["by_sparsity"][label], table["model"],
                                  sd / f"seeds-{label.rstrip('%')}.png", f"{len(table['by_sparsity'][label]['id'])} subnetworks at {label}")
        doc.figure(dots, f"One dot per subnetwork at {label} sparsity, the full model as a red bar; the paper's pattern is "
                   "dots bunched together in-domain and scattered on the OOD subcases.", base=out)
    # every sparsity, as the findings table's rule: the pattern is seen only when it holds at each of them
    alike = all(spreads[label]["ood_subcase_sd"] > 2 * spreads[label]["id_sd"] for label in labels)
    doc.para(" ".join(
        f"At {label}: ID accuracy varies by {pct(s['id_sd'])} points (std over seeds; range {pct(s['id_range'])}), "
        f"an OOD subcase by {pct(s['ood_subcase_sd'])} points on average (mean OOD accuracy: std "
        f"{pct(s['ood_mean_sd'])}, range {pct(s['ood_mean_range'])})." for label, s in spreads.items())
        + f" **Pattern 'alike in-domain, spread out of domain': {'seen' if alike else 'not seen'}** at this scale "
        "(criterion: OOD subcase std > 2 x ID std at every sparsity).")
    undecided = sections.identification_section(doc, r["identification"]) if r.get("identification") else {}
    # core
    doc.section("Shared heads: the core", 3)
    core = r["core"]
    sections.core_section(doc, core, sd / "core" / "heatmap.png", sd / "core" / "frequencies.png", base=out)
    if undecided:
        worst = max(undecided, key=undecided.get)
        firm = undecided[worst] <= MAX_UNDECIDED_SHARE  # runs.health: undecided above this share
        doc.para(f"The subnetworks behind the core leave up to {pct(undecided[worst])}% of their gates undecided at the "
                 f"end of pruning (at {worst}; the table above); {'within' if firm else 'above'} the "
                 f"{pct(MAX_UNDECIDED_SHARE)}% that `subnetlab.runs.health` allows, so the core is "
                 + ("identified by gates that pruning decided." if firm else
                    "**weakly identified**: which heads it holds rests partly on small log-alpha differences, and "
                    "another set of seeds may share other heads."))
    # ablation
    doc.section("Ablating the core heads", 3)
    if r["heads_studied"] != "core":
        doc.para(f"The core is empty, so the ablation and attention analyses use the {r['heads_studied']} heads.")
    ablation = compact_ablation(r["ablation"])
    sections.ablation_section(doc, ablation)
    eff = ablation_effects(ablation)
    margin = 0.01  # one point: smaller mean differences are within a few examples at these evaluation sizes
    hurts = (eff["core_ood_drop"] >= eff["core_id_drop"] + margin
             and eff["core_ood_drop"] >= eff.get("other_ood_drop", float("-inf")) + margin)
    joint_hurts = ("joint_ood_drop" in eff and eff["joint_ood_drop"] >= eff["joint_id_drop"] + margin)
    doc.para(ablation_paragraph(eff, hurts, joint_hurts))
    # effective size
    doc.section("Effective size over training", 3)
    if r["effective_size"] is None:
        doc.para(f"Not run by this preset: {NOT_RUN}.")
    else:
        sections.effective_size_section(doc, r["effective_size"], sd / "effective_size" / "effective_size.png",
                                        base=out, accuracy=cur if one_source else None)
    # attention
    doc.section("Attention patterns of the core heads", 3)
    sections.attention_section(doc, r["attention"], base=out, root=sd / "attention")
    return {"core": core["core"], "core_size": core["core_size"], "spearman_rho": core["spearman_rho"],
            "spearman_p": core["spearman_p"], "expected_random_intersection": core["expected_random_intersection"],
            "spread": spreads, "alike_id_spread_ood": alike, "ablation": eff, "core_hurts_ood_more": hurts,
            "joint_hurts_ood_more": joint_hurts, "undecided_share": undecided,
            "subcases": subcases, "effective_size": None if r["effective_size"] is None else [
                {"step": c["step"], **{on: c["effective_size"][on]["size"] for on in r["effective_size"]["on"]}}
                for c in r["effective_size"]["checkpoints"]], "seconds": r.get("seconds")}


def write_report(settings: HeuristicCoreSettings, results: dict, out: Path, seconds: list[float]) -> Path:
    """Render ``out/report.md`` and ``out/metrics.json`` from the studies' results."""
    doc = MarkdownReport(f"The Heuristic Core, reproduced ({settings.preset} preset)")
    doc.para("Bhaskar, Friedman and Chen (2024) prune a fine-tuned model many times and find that subnetworks match the "
             "model in-domain but generalize differently, and that all of them share a small set of attention heads (the "
             "heuristic core) that attend between repeated words and that the generalizing heads build on. This report "
             "repeats the study with subnetlab; every number below was measured by the run that wrote it.")
    _setup(doc, settings, results, seconds)
    summary = {}
    for study in settings.studies:
        summary[study["name"]] = _study(doc, study, results[study["name"]], out)
    doc.section("Rerun or scale up")
    doc.para(f"`subnetlab reproduce heuristic-core` with the {settings.preset} preset and output directory {out} "
             "resumes this run; the paper preset runs the paper's setting (bert-base-cased, MNLI / HANS and QQP / "
             "PAWS-QQP, 12 seeds; needs "
             "a GPU and the Hugging Face hub). Each stage is also a command: `subnetlab finetune`, `prune`, `core`, "
             "`ablate`, `effective-size`, `attention`.")
    write_json(out / "metrics.json", {"reproduction": "heuristic-core", "preset": settings.preset,
                                      "seconds_per_invocation": seconds, "studies": summary})
    return doc.write(out / "report.md")

