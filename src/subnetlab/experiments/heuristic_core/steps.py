"""The Heuristic Core analyses as run-directory steps, shared by the CLI and the reproduction.

Each step reads its inputs, writes ``config.json``, ``metrics.json``, its
figures and a short ``report.md`` into ``out``, and returns its metrics. A step
whose ``metrics.json`` exists with the same configuration is skipped, so a
rerun resumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from subnetlab.analysis.ablation import ablation_table, parse_heads
from subnetlab.analysis.attention_stats import (
    attention_maps,
    attention_statistics,
    layout_from_tokenizer,
    pattern_masks,
)
from subnetlab.analysis.core import analyse_core
from subnetlab.analysis.effective_size import size_bound
from subnetlab.analysis.scores import PAPER_SUBCASES, score_columns
from subnetlab.errors import SubnetlabError
from subnetlab.experiments.heuristic_core import sections
from subnetlab.experiments.heuristic_core.plots import effective_size_plot, frequency_heatmap_plot, frequency_maps_plot
from subnetlab.io import read_json, write_json
from subnetlab.models.adapters import head_name
from subnetlab.progress import stage
from subnetlab.report.markdown import MarkdownReport
from subnetlab.report.plots import attention_map
from subnetlab.run_directory import finished_metrics
from subnetlab.runs.prune_summary import health_counts
from subnetlab.runs.pruned_runs import two_groups
from subnetlab.tasks.base import Task


def resolve_heads(spec: str, num_layers: int, num_heads: int) -> list[tuple[int, int]]:
    """``L4.H0,L2.H5``, ``core:DIR`` (the core that ``subnetlab core`` wrote to DIR) or ``all``."""
    spec = spec.strip()
    if spec == "all":
        return [(l, h) for l in range(num_layers) for h in range(num_heads)]
    if spec.startswith("core:"):
        where = Path(spec[5:])
        metrics = read_json(where / "metrics.json" if where.is_dir() else where)
        if "core" not in metrics:
            raise SubnetlabError(f"heads {spec}: {where} holds no core (run `subnetlab core` with output directory "
                                 f"{where} first)", setting="heads")
        if not metrics["core"]:
            raise SubnetlabError(f"heads {spec}: the core found there is empty", setting="heads")
        return parse_heads(metrics["core"], num_layers, num_heads)
    return parse_heads([s for s in spec.split(",") if s.strip()], num_layers, num_heads)


# -- core ---------------------------------------------------------------------------------

def core_step(dirs: Sequence[str | Path], out: Path) -> dict:
    """Frequencies, Figure 5 heatmap, core, Spearman's rho and random baseline of two groups of runs."""
    (la, runs_a), (lb, runs_b) = two_groups(dirs)
    config = {"command": "core", "runs": [str(d) for d in dirs],
              "groups": {la: [str(r.path) for r in runs_a], lb: [str(r.path) for r in runs_b]}}
    done = finished_metrics(out, config, redo_other=True)
    if done is not None:
        return done
    stage(f"core of {len(runs_a)} subnetworks at {la} and {len(runs_b)} at {lb}")
    analysis = analyse_core([r.subnetwork for r in runs_a], [r.subnetwork for r in runs_b], (la, lb))
    out.mkdir(parents=True, exist_ok=True)
    heat = frequency_heatmap_plot(analysis, out / "heatmap.png")
    freq = frequency_maps_plot(analysis, out / "frequencies.png")
    metrics = {**analysis.to_dict(), "seeds": {la: [r.seed for r in runs_a], lb: [r.seed for r in runs_b]},
               "health": {la: health_counts([r.metrics.get("health") for r in runs_a]),  # the runs' own judgements
                          lb: health_counts([r.metrics.get("health") for r in runs_b])}}
    doc = MarkdownReport(f"Heuristic core: {la} vs {lb}")
    sections.core_section(doc, metrics, heat, freq, base=out)
    doc.write(out / "report.md")
    write_json(out / "config.json", config)
    write_json(out / "metrics.json", metrics)
    return metrics


# -- ablation -----------------------------------------------------------------------------

def restrict_subcases(task: Task, id_splits: Sequence[str], subcases: Sequence[str] | None) -> None:
    """Keep only the chosen subcases in the task's OOD splits, so each ablation evaluates just those."""
    if not subcases:
        return
    for split, examples in list(task.eval_splits.items()):
        if split in id_splits or not any(ex.subcase for ex in examples):
            continue
        kept = [ex for ex in examples if ex.subcase in subcases]
        if not kept:
            raise SubnetlabError(f"split {split!r} has none of the subcases {', '.join(subcases)}")
        task.eval_splits[split] = kept


def default_subcases(task: Task, id_splits: Sequence[str]) -> list[str] | None:
    """The paper's four HANS subcases when the OOD splits have them, else every subcase."""
    found = {ex.subcase for s, exs in task.eval_splits.items() if s not in id_splits for ex in exs if ex.subcase}
    chosen = [s for s in PAPER_SUBCASES if s in found]
    return chosen or None


def ablation_columns(scores: dict, id_splits: Sequence[str], subcases: Sequence[str] | None,
                     entailed_splits: Sequence[str] = ()) -> dict[str, float]:
    """The table's columns: ID, the chosen (non-entailment) subcases, then per entailed split one column per heuristic,
    ``SPLIT:HEURISTIC``, the mean over that heuristic's entailment subcases."""
    from subnetlab.experiments.heuristic_core.data import heuristic_of

    columns = score_columns({k: v for k, v in scores.items() if k not in entailed_splits}, id_splits, subcases)
    for split in entailed_splits:
        by: dict[str, list[float]] = {}
        for sub, acc in (scores[split].get("subcases") or {}).items():
            by.setdefault(heuristic_of(sub), []).append(float(acc))
        if not by:
            raise SubnetlabError(f"split {split!r} has no HANS subcases to group by heuristic")
        columns.update({f"{split}:{h}": sum(v) / len(v) for h, v in by.items()})
    return columns


def parse_joint(spec: str | int | Sequence[str] | None, num_layers: int, num_heads: int) -> int | list[tuple[int, int]] | None:
    """``top-K`` (or an int K) -> K; ``none``/None/0 -> None; ``L0.H1,L2.H3`` or a list -> those heads."""
    if spec is None or spec == 0 or spec == "none":
        return None
    if isinstance(spec, bool):
        raise SubnetlabError(f"joint_heads {spec!r}: expected top-K, none or a list of heads", setting="joint_heads")
    if isinstance(spec, int):
        return spec
    if isinstance(spec, str) and spec.startswith("top-"):
        try:
            k = int(spec[4:])
        except ValueError:
            k = 0
        if k < 2:
            raise SubnetlabError(f"joint_heads {spec!r}: expected top-K with K >= 2", setting="joint_heads")
        return k
    names = [x for x in spec.split(",")] if isinstance(spec, str) else list(spec)
    return parse_heads(names, num_layers, num_heads)


def ablation_step(loaded: Any, task: Task, heads: Sequence[tuple[int, int]], out: Path, *, config: dict,
                  means: Any, id_splits: Sequence[str], subcases: Sequence[str] | None, batch_size: int = 64,
                  max_length: int = 128, limit: int | None = None, non_listed: int | str | None = "all",
                  seed: int = 0, joint: int | Sequence[tuple[int, int]] | None = 3, all_jointly: bool = True,
                  controls: Sequence[str] = (), entailed_splits: Sequence[str] = ()) -> dict:
    """Table 3 for ``heads`` on the loaded model; ``config`` identifies the step for resuming.

    ``entailed_splits`` are evaluated too and reported as one column per heuristic (the heuristic-consistent
    subcases), so the table shows whether an ablation removes the heuristic or only pushes the model toward
    non-entailment; the joint heads are ranked on the other OOD columns."""
    import torch

    from subnetlab.intervene.resample import resampling
    from subnetlab.methods.evaluate import evaluate

    done = finished_metrics(out, config, redo_other=True)
    if done is not None:
        return done
    restrict_subcases(task, [*id_splits, *entailed_splits], subcases)
    splits = list(task.eval_splits)
    tokenizer = loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer

    def evaluator() -> dict[str, float]:
        scores = evaluate(loaded.model, tokenizer, task, splits, batch_size, max_length, limit=limit)
        return ablation_columns(scores, id_splits, subcases, entailed_splits)

    def resample(ctl: Any) -> Any:
        return resampling(loaded.model, loaded.adapter, ctl, generator, single=means)

    generator = torch.Generator().manual_seed(seed)
    n_heads = loaded.adapter.num_layers * loaded.adapter.num_heads
    n_singles = n_heads - len(heads) if non_listed == "all" else int(non_listed or 0)
    n_joint = int(joint is not None) + int(all_jointly and len(heads) > 1)
    rows = 1 + n_singles + len(heads) + n_joint + len(controls) * (len(heads) + int(joint is not None))
    stage(f"ablation table: {len(heads)} heads, about {rows} evaluations")
    table = ablation_table(loaded.model, loaded.adapter, heads, evaluator, means, joint=joint, all_jointly=all_jointly,
                           non_listed=non_listed, seed=seed, id_columns=id_splits, controls=controls,
                           resample=resample,
                           rank_columns=lambda c: c not in id_splits and not any(c.startswith(f"{e}:") for e in entailed_splits))
    metrics = table.to_dict()
    doc = MarkdownReport("Ablating heads")
    sections.ablation_section(doc, metrics)
    out.mkdir(parents=True, exist_ok=True)
    doc.write(out / "report.md")
    write_json(out / "config.json", config)
    write_json(out / "metrics.json", metrics)
    return metrics


# -- attention ----------------------------------------------------------------------------

def _repeats(tokenizer: Any, pair: tuple[str, str], max_length: int) -> int:
    _, layout = layout_from_tokenizer(tokenizer, pair[0], pair[1], max_length)
    _, queries = pattern_masks(layout)
    return int(queries["repeated"].sum())


def attention_step(loaded: Any, pairs: Sequence[tuple[str, str]], heads: Sequence[tuple[int, int]], out: Path, *,
                   config: dict, maps: int = 2, max_length: int = 128) -> dict:
    """Pattern shares of every head over ``pairs``; the Figure 9 table and Figure 7 maps for ``heads``."""
    done = finished_metrics(out, config, redo_other=True)
    if done is not None:
        return done
    a = loaded.adapter
    stage(f"attention patterns of {a.num_layers * a.num_heads} heads over {len(pairs)} sentence pairs")
    stats = attention_statistics(loaded.model, loaded.tokenizer, pairs, a.num_layers, a.num_heads, max_length)
    out.mkdir(parents=True, exist_ok=True)
    # Figure 7: the pairs with the most words repeated across the two sentences
    shown = sorted(range(len(pairs)), key=lambda i: (-_repeats(loaded.tokenizer, pairs[i], max_length), i))[:maps]
    pngs: list[str] = []
    for i in shown:
        inputs, _ = layout_from_tokenizer(loaded.tokenizer, *pairs[i], max_length)
        weights = attention_maps(loaded.model, inputs)
        tokens = loaded.tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])
        for layer, head in heads:
            path = out / "maps" / f"example{i}-{head_name(layer, head)}.png"
            attention_map(weights[layer][0, head].numpy(), tokens, path, title=f"{head_name(layer, head)}, example {i}")
            pngs.append(str(path.relative_to(out)))
    metrics = {**stats.to_dict(), "selected": stats.rows(list(heads)), "maps": pngs, "map_examples": shown}
    doc = MarkdownReport("Attention patterns")
    sections.attention_section(doc, metrics, base=out, root=out)
    doc.write(out / "report.md")
    write_json(out / "config.json", config)
    write_json(out / "metrics.json", metrics)
    return metrics


# -- effective size -------------------------------------------------------------------------

def effective_size_outputs(result: dict, out: Path, config: dict) -> Path:
    """Write the effective-size analysis (metrics, Figure 6, report) beside its sweep; return the plot."""
    rows = result["checkpoints"]
    steps = [r["step"] for r in rows]
    onset = result.get("before_onset")
    plot = effective_size_plot(
        steps, {on: [None if size_bound(r["effective_size"][on], result["levels"])[1] else r["effective_size"][on]["size"]
                     for r in rows] for on in result["on"]},  # a capped size is a bound, not a point to plot
        {"ID": [r["id_accuracy"] for r in rows], "OOD": [r["ood_accuracy"] for r in rows]},
        out / "effective_size.png", onset_step=onset["step"] if onset else None)
    doc = MarkdownReport("Effective size over training")
    sections.effective_size_section(doc, result, plot, base=out)
    doc.write(out / "report.md")
    write_json(out / "config.json", config)
    write_json(out / "metrics.json", result)
    return plot
