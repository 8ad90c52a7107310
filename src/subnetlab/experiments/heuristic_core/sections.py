"""Markdown sections of the Heuristic Core study, rendered from the steps' saved metrics.

Each function takes a ``MarkdownReport`` and plain dicts (what the steps wrote
to ``metrics.json``), so a resumed run renders the same report without
recomputing anything. Captions say what to look for; numbers are measured.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from subnetlab.analysis.attention_stats import PATTERNS, SPLIT
from subnetlab.analysis.effective_size import size_bound
from subnetlab.analysis.scores import short_name
from subnetlab.report.markdown import MarkdownReport, delta_pct, num, pct

CONTROL_WORDS = {"zero": "set to zero", "resample": "taken from another example of the batch"}

def core_section(doc: MarkdownReport, core: Mapping[str, Any], heatmap: str | os.PathLike,
                 frequencies: str | os.PathLike, base: str | os.PathLike) -> None:
    la, lb = core["labels"]
    heads = core["num_layers"] * core["num_heads"]
    names = ", ".join(core["core"]) or "none"
    doc.para(
        f"Over {core['n_a']} subnetworks at {la} and {core['n_b']} at {lb} sparsity, **{core['core_size']} of {heads} "
        f"heads are kept by every one of them**: {names}. Independent random subnetworks keeping as many heads "
        f"would share {num(core['expected_random_intersection'])} heads on average "
        f"(probability of sharing {core['core_size']} or more: {num(core['p_random_intersection_at_least_core'])}). "
        f"The frequencies of the heads at the two sparsities agree with Spearman's rho = {num(core['spearman_rho'], 2)} "
        f"(p = {num(core['spearman_p'])})."
    )
    if core.get("mlps_in_all"):
        doc.para(f"MLPs kept by every subnetwork: {', '.join(core['mlps_in_all'])}.")
    judged = {label: counts for label, counts in (core.get("health") or {}).items() if counts.get("judged")}
    if judged:
        from subnetlab.runs.prune_summary import format_health

        doc.para("Health of the pruned runs (subnetlab.runs.health): "
                 + "; ".join(f"at {label}, {format_health(counts)}" for label, counts in judged.items()) + ".")
    doc.figure(heatmap, f"Number of heads kept by i of the {la} subnetworks (rows) and j of the {lb} ones (columns); "
               "the top-right cell is the core, and mass along the diagonal means the two sparsities favour the same heads.",
               base=base)
    doc.figure(frequencies, f"How often each head (column) of each layer (row) is kept at {la} and at {lb}; "
               "the bright cells of the right map should be bright on the left too.", base=base)


def _is_entailed(column: str) -> bool:
    return column.split(":")[0].endswith("entailed") or column.endswith("entailed (mean)")


def ablation_section(doc: MarkdownReport, table: Mapping[str, Any], caption: str | None = None) -> None:
    columns: list[str] = table["columns"]
    base = table["rows"][0]["accuracy"]
    id_cols = table.get("id_columns", [])
    entailed = [c for c in columns if _is_entailed(c)]
    rows = []
    for r in table["rows"]:
        cells = [r["label"]]
        for c in columns:
            acc = r["accuracy"][c]
            cells.append(pct(acc) if r["label"] == "None" else f"{pct(acc)} {delta_pct(acc, base[c])}")
        rows.append(cells)
    n_avg = len(table.get("averaged_heads") or [])
    controls = sorted({r.get("replacement", "mean") for r in table["rows"]} - {"mean"})
    ood = [c for c in columns if c not in id_cols and not _is_entailed(c)]
    doc.table(["Ablated head", *[short_name(c) for c in columns]], rows, caption=caption or (
        "Accuracy (%) with heads mean-ablated from the full model, one at a time and jointly; "
        "arrows give the change from no ablation. " + averaged_sentence(n_avg)
        + (f"The joint row (A & B & C) ablates together the listed heads with the largest single drops on the "
           f"{joint_basis(table.get('rank_columns') or ood or columns, id_cols, entailed)}; the 'all listed heads' row ablates every one. "
           if any(r.get("kind") == "joint" for r in table["rows"]) else "")
        + (f"Columns {', '.join(short_name(c) for c in entailed)} hold the same heuristics' entailment subcases, "
           "where following the heuristic gives the right answer: read them beside the non-entailment columns to tell "
           "'the ablated heads carry the heuristic' from 'the ablation pushes the model toward non-entailment' "
           "(the latter raises the non-entailment columns and lowers these together). " if entailed else "")
        + (f"Rows marked ({', '.join(controls)}) repeat an ablation with the outputs "
           + " / ".join(CONTROL_WORDS.get(c, c) for c in controls) + " instead of the mean." if controls else "")))
    for key, what in (("super_additivity", "the joint heads"), ("super_additivity_all", "all listed heads")):
        verdict = table.get(key) or {}
        if verdict:
            doc.para(super_additivity_sentence(verdict, what, ood or [c for c in columns if not _is_entailed(c)],
                                               out_of_domain=bool(ood)))


def averaged_sentence(n_avg: int) -> str:
    """The caption's words for the Avg. (non-HC) row: the mean of how many single ablations, or that there is none
    (every head listed, or none averaged), never "single ablations of 0 heads"."""
    if n_avg == 0:
        return ("There is no Avg. (non-HC) row: no head outside the listed ones was ablated alone (every head is "
                "listed, or none was asked for). ")
    return (f"Avg. (non-HC) is the mean of the single ablations of {n_avg} head{'' if n_avg == 1 else 's'} outside "
            "the listed ones (HC: the Heuristic Core heads, or the heads you listed). ")


def joint_basis(ranked: Sequence[str], id_columns: Sequence[str], entailed: Sequence[str]) -> str:
    """The columns the joint row's heads were chosen on (``ranked``), named as the table has them: the paper's
    out-of-domain non-entailment columns where entailment columns stand beside them, out-of-domain columns where
    none do, else (your own data: its held-out split, an in-domain column) those columns by name."""
    names = ", ".join(short_name(c) for c in ranked)
    if ranked and not any(c in id_columns for c in ranked):
        if entailed:
            return "out-of-domain (non-entailment) columns, as the paper's Table 3 does"
        return f"out-of-domain columns ({names})"
    return f"columns {names} (this data has no out-of-domain split)" if ranked else "table's columns"


def super_additivity_sentence(verdict: Mapping[str, Mapping[str, Any]], what: str, judged: Sequence[str],
                              out_of_domain: bool = True) -> str:
    """Whether ablating ``what`` together drops accuracy by more than its single ablations summed, on ``judged``.

    The paper judges the out-of-domain columns; your own data may have only its evaluation column (then that one
    is judged, and named). One column gets a sentence stating its joint and summed drops.
    """
    judged = [c for c in judged if c in verdict]
    if not judged:
        return f"No column to judge whether ablating {what} together is super-additive."
    if len(judged) == 1:
        c = judged[0]
        v = verdict[c]
        return (f"Ablating {what} together lowers {short_name(c)} accuracy by {pct(v['joint_drop'])} points, against "
                f"{pct(v['sum_single_drops'])} for the single ablations of the same heads summed: "
                + ("super-additive." if v["super_additive"] else "not super-additive (super-additive means a larger "
                                                                 "joint drop than the summed single ones)."))
    hits = [c for c in judged if verdict[c]["super_additive"]]
    scope = "out-of-domain columns" if out_of_domain else "columns"
    return (f"Ablating {what} together is super-additive (it lowers accuracy by more than the single ablations of the "
            f"same heads together) on {len(hits)} of {len(judged)} {scope}"
            + (f" ({', '.join(short_name(c) for c in hits)})" if hits else "") + "; joint vs summed single drops, in points: "
            + ", ".join(f"{short_name(c)} {pct(verdict[c]['joint_drop'])} vs {pct(verdict[c]['sum_single_drops'])}"
                        for c in judged) + ".")


def identification_section(doc: MarkdownReport, identified: Mapping[str, Mapping[str, Sequence]]) -> dict[str, float]:
    """Per sparsity: the share of gates still undecided at the end of pruning and the top-k / threshold Jaccard."""
    from subnetlab.runs.health import MAX_UNDECIDED_SHARE, TARGET_TOLERANCE
    from subnetlab.runs.prune_summary import format_health, health_counts

    rows, shares = [], {}
    for label, r in identified.items():
        pairs = [(u, g) for u, g in zip(r["undecided"], r["gates"]) if u is not None and g]
        jac = [j for j in r["jaccard"] if j is not None]
        if not pairs:
            continue
        share = sum(u for u, _ in pairs) / sum(g for _, g in pairs)
        shares[label] = share
        counts = health_counts(r.get("health") or [])
        judged = format_health(counts, share=False) if counts["judged"] else "-"
        rows.append([label, ", ".join(str(u) for u, _ in pairs) + f" of {pairs[0][1]}", pct(share),
                     f"{min(jac):.2f} to {max(jac):.2f}" if jac else "-", judged])
    if rows:
        doc.table(["Sparsity", "undecided gates per seed", "undecided (%)", "Jaccard top-k vs threshold", "health"], rows,
                  caption=(
            "How firmly each run's subnetwork is identified: gates still undecided at the end of pruning "
            "(0.05 < P(gate open) < 0.95), and the overlap of the two ways of reading a subnetwork off the gates "
            "(top-k by log-alpha, the paper's threshold). Many undecided gates or a low Jaccard mean the core rests on "
            f"small log-alpha differences. Health (subnetlab.runs.health): a run is undecided with more than "
            f"{MAX_UNDECIDED_SHARE:.0%} of its gates undecided, off target when its gates' expected sparsity misses the "
            f"target by more than {TARGET_TOLERANCE:g}, unconverged when its KL was still falling at the end."))
    return shares


def attention_section(doc: MarkdownReport, attention: Mapping[str, Any], base: str | os.PathLike,
                      root: str | os.PathLike, max_maps: int = 3) -> None:
    """The Figure 9 table for the selected heads, and maps of the ``max_maps`` heads that attend most to repeated words."""
    if all("split" in r for r in attention["selected"]):
        parts = list(attention.get("split_parts") or SPLIT)
        rows = [[r["head"], *[pct(r["split"][p]) for p in parts], pct(r["repeated"]), r["dominant"]]
                for r in attention["selected"]]
        doc.table(["Head", *[f"{p} (%)" for p in parts], "repeated, tokens with a partner (%)", "dominant"], rows,
                  caption=(
            f"Where each head's attention goes from a sentence token, over {attention['examples']} sentence pairs "
            "(Figure 9 of the paper): itself, [CLS]/[SEP], the same word in the other sentence, the previous and next "
            "token, and anything else. The first six columns split each token's attention so that they sum to 100%: "
            "a key is counted once, in the first of these it belongs to (a neighbour that is [SEP] counts as "
            "special, a neighbour that is the repeated word as repeated). The last share is not part of that sum: "
            f"the attention to the repeated word averaged over the {int(attention['query_counts'][0])} tokens whose "
            "word occurs in the other sentence, the pattern's strength where it can occur (the split's repeated "
            "column averages over every token, most of which have no partner)."))
    else:  # an attention step written before the split: overlapping patterns, each over its own tokens
        rows = [[r["head"], *[pct(r[p]) for p in PATTERNS], r["dominant"]] for r in attention["selected"]]
        doc.table(["Head", *[f"{p} (%)" for p in PATTERNS], "dominant"], rows, caption=(
            f"Share of attention (%) each head sends from a sentence token to the same word in the other sentence "
            f"(over the {int(attention['query_counts'][0])} tokens that have one), to the previous and next token, to "
            f"[CLS]/[SEP], and to itself, over {attention['examples']} sentence pairs (Figure 9 of the paper). The "
            "shares overlap and need not sum to 100%: a neighbour can be [SEP] (counted as previous or next and as "
            "special), and the repeated share is averaged over fewer tokens than the others."))
    shown = attention.get("maps") or []
    by_repeat = sorted(attention["selected"], key=lambda r: -(r["repeated"] if r["repeated"] == r["repeated"] else -1))
    top = {r["head"] for r in by_repeat[:max_maps]}
    for rel in shown:
        head = Path(rel).stem.split("-")[-1]
        if head not in top:
            continue
        share = next(r["repeated"] for r in attention["selected"] if r["head"] == head)
        doc.figure(Path(root) / rel, f"Attention of {head} (on average {pct(share)}% of a token's attention goes to the "
                   "same word in the other sentence) on a pair with many shared words; cells linking a word to its copy "
                   "in the other sentence are the lexical-overlap pattern.", base=base)


def effective_size_section(doc: MarkdownReport, result: Mapping[str, Any], plot: str | os.PathLike,
                           base: str | os.PathLike, accuracy: Mapping[str, Sequence] | None = None) -> None:
    """The effective-size table (Table 4) and Figure 6. ``accuracy`` (the study's ``curves``: ``step``, ``id``,
    ``ood``): the report's one source of a checkpoint's accuracy, used for the accuracy columns when it has the step
    (the sweep's own full-model evaluation scores the same rows at the same settings)."""
    at = {s: (i, o) for s, i, o in zip(accuracy["step"], accuracy["id"], accuracy["ood"])} if accuracy else {}
    rows = []
    capped = False
    for c in result["checkpoints"]:
        id_acc, ood_acc = at.get(c["step"], (c["id_accuracy"], c["ood_accuracy"]))
        cells = []
        for on in result["on"]:
            value, hit, seeds = size_bound(c["effective_size"][on], result["levels"])
            capped = capped or hit > 0
            cells.append(f"> {pct(value)}" + (f" ({hit} of {seeds} seeds capped)" if 0 < hit < seeds else "")
                         if hit else pct(value))
        rows.append([c["step"], pct(id_acc), pct(ood_acc), *cells])
    top = 1.0 - min(result["levels"])
    doc.table(["step", "ID acc.", "OOD acc.", *[f"eff. size {on} (%)" for on in result["on"]]], rows, caption=(
        f"Effective size (% of components in the smallest subnetwork within {pct(result['faithfulness'])} points of the "
        f"model's accuracy, levels {result['levels'][0]:.2f} to {result['levels'][-1]:.2f}, mean over "
        f"{len(result['seeds'])} seeds) at each checkpoint."
        + (f" \"> {pct(top)}\": no tested level was faithful (for the seeds named), so the size is above the "
           f"{pct(top)}% the least sparse level keeps, not measured; a mean with capped seeds is a lower bound. A capped "
           "value is not a rise." if capped else "")))
    doc.figure(plot, "ID and OOD accuracy (solid, left axis) and effective size (dashed, right axis; a capped size, "
               "where no tested level was faithful, is left out) over training; "
               "under competing subnetworks the OOD size would fall as OOD accuracy rises, the paper finds it rises.",
               base=base)
    searched = [c for c in result["checkpoints"] if c.get("search")]
    if searched:
        doc.para(
            "Levels searched rather than all pruned: the seeds of a checkpoint climbed one staircase together and "
            "stopped once every chosen data had had its unfaithful levels in a row (a warm-started checkpoint "
            "starts below the previous one's answer). Levels measured per checkpoint: " + "; ".join(
                f"step {c['step']}: {', '.join(f'{x:.2f}' for x in c['search']['levels_measured'])} "
                f"({c['search']['steps_per_seed']} steps per seed)" for c in searched) + ".")
    before = result.get("before_onset")
    if before:
        frac = before["fraction_of_core_present"]
        chance = before.get("expected_by_chance")
        doc.para(
            f"OOD accuracy starts to rise after step {before['step']}. The heads kept by every {before['on']} "
            f"effective-size subnetwork there ({len(before['before'])} heads) contain {len(before['core_in_before'])} of "
            f"the {len(before['core'])} final core heads" + (f" ({pct(frac, 0)}%)" if not math.isnan(frac) else "")
            + (f"; random subnetworks of the same sizes would contain {chance:.1f} of them" if chance is not None else "")
            + (f"; missing: {', '.join(before['core_missing_before'])}." if before["core_missing_before"] else ".")
        )
    else:
        doc.para("OOD accuracy does not rise measurably over these checkpoints, so there is no onset checkpoint to compare.")


def seeds_table(doc: MarkdownReport, model: Mapping[str, float], by_sparsity: Mapping[str, Mapping[str, Sequence[float]]],
                columns: Sequence[str], caption: str) -> None:
    """Table 5: the full model and min / max / mean / std over the seeds' subnetworks, per evaluation column."""
    headers = ["Eval set", "Model"]
    for label in by_sparsity:
        headers += [f"{label} min", "max", "mean", "std"]
    rows = []
    for c in columns:
        cells: list[Any] = [short_name(c), pct(model.get(c))]
        for values in by_sparsity.values():
            v = [x for x in values.get(c, []) if x is not None]
            if v:
                m = sum(v) / len(v)
                sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
                cells += [pct(min(v)), pct(max(v)), pct(m), pct(sd)]
            else:
                cells += ["-"] * 4
        rows.append(cells)
    doc.table(headers, rows, caption=caption)
