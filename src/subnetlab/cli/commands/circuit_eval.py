"""`subnetlab circuit-eval`: the faithfulness curve, CPR and CMD (MIB) of edge or node scores, or of circuits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from subnetlab.cli.commands._options import DEVICE_HELP, data_flag_options, with_data_options


def _sizes(text: Optional[str]) -> tuple[float, ...] | None:
    from subnetlab.errors import SubnetlabError

    if text is None:
        return None
    try:
        return tuple(float(x) / 100 for x in text.split(","))
    except ValueError:
        raise SubnetlabError(f"sizes {text!r}: expected percentages separated by commas, e.g. 1,10,100",
                             setting="sizes") from None


def _table(result: dict[str, Any]) -> Any:
    from rich.table import Table

    metric = result["metric"]
    if result.get("definition") == "mib":
        return _mib_table(result)
    if "fractions" not in result:
        table = Table(title=f"{result['level']} circuit: {result['kept']} of {result['items']} kept, "
                            f"{result['pairs']} pairs, ablation {result['ablation']}")
        table.add_column("metric")
        table.add_column("faithfulness", justify="right")
        for name, f in result["faithfulness"].items():
            table.add_row(name, "n/a" if f is None else f"{f:.3f}")
        return table
    null = result.get("random_circuits")
    table = Table(title=f"{result['level']}: {_areas(result)} ({metric}, {result['pairs']} pairs, ablation "
                        f"{result['ablation']}, selection {result['selection']})")
    for col in ("size", "kept", metric, f"f({metric})", "kl", *(_NULL_COLUMNS if null else ())):
        table.add_column(col, justify="right")
    for i, fraction in enumerate(result["fractions"]):
        f = result["faithfulness"][metric][i]
        table.add_row(f"{100 * fraction:g}%", str(result["counts"][i]), f"{result['values'][metric][i]:.4g}",
                      "n/a" if f is None else f"{f:.3f}", f"{result['values']['kl'][i]:.4g}",
                      *(_null_cells(null["sizes"][i], "circuit") if null else ()))
    return table


_NULL_COLUMNS = ("random f: mean ± sd", "kept", "percentile", "p")


def _null_cells(size: dict[str, Any], curve: str) -> tuple[str, ...]:
    """A size's random circuits: their mean and sd, their realised size, the circuit's percentile and p-value."""
    sd = "" if size["std"] is None else f" ± {size['std']:.3f}"
    realised = size["realised"]
    kept = (str(realised["min"]) if realised["min"] == realised["max"] else
            f"{realised['mean']:.1f} ({realised['min']}-{realised['max']})")
    pct, p = size["percentile"][curve], size["p_value"][curve]
    return (f"{size['mean']:.3f}{sd}", kept, "n/a" if pct is None else f"{pct:.0f}", "n/a" if p is None else f"{p:.3g}")


def _measured_under(result: dict[str, Any]) -> str:
    """The line naming what every number above was measured under: the ablation, the selection and ranking."""
    ranking = f", {result['ranking']} ranking" if result.get("ranking") and result.get("definition") != "mib" else ""
    mib = f", {result['ranking']}" if result.get("definition") == "mib" else ""
    return (f"measured under ablation {result['ablation']} (removed items deliver "
            f"{_ABLATION_WORDS.get(result['ablation'], result['ablation'])} at every position); selection "
            f"{result['selection']}"
            f"{ranking}{mib}; {result['pairs']} pairs of {result['split']}")


_ABLATION_WORDS = {"corrupted": "their output on the corrupted prompt", "zero": "zero",
                   "mean": "their mean output over the clean prompts"}


def _null_lines(result: dict[str, Any]) -> list[str]:
    """The nulls under the table: random circuits' mean curve, other ablations, permuted pairs."""
    lines = []
    null = result.get("random_circuits")
    if null is not None:
        sizes = "exact sizes" if null["exact_sizes"] else "realised sizes in the table"
        lines.append(f"random circuits: {null['draws']} per size, seed {null['seed']}, ablation {null['ablation']}; "
                     f"{null['rule']} ({sizes})")
        if "mean_curve" in null:
            mean = null["mean_curve"]
            for name, areas in null.get("method_areas", {}).items():
                label = "" if name == "circuit" else f" ({name} ranking)"
                lines.append(f"  CPR {areas['cpr']:.3f} (p {areas['cpr_p_value']:.3g}), CMD {areas['cmd']:.3f} "
                             f"(p {areas['cmd_p_value']:.3g}){label} vs the random mean curve's CPR {mean['cpr']:.3f}, "
                             f"CMD {mean['cmd']:.3f}")
        if result.get("definition") == "mib" or "fractions" not in result:
            for size in null["sizes"]:
                for curve, p in size["p_value"].items():
                    f = size["method"][curve]
                    label = "" if curve == "circuit" else f" {curve}"
                    lines.append(f"  {size['count']} items{label}: f {'n/a' if f is None else f'{f:.3f}'} vs random "
                                 f"{' '.join(_null_cells(size, curve)[:1])} (kept {_null_cells(size, curve)[1]}); "
                                 f"percentile {_null_cells(size, curve)[2]}, p {_null_cells(size, curve)[3]}")
    side = result.get("ablations")
    if side is not None:
        for name, numbers in side["by_ablation"].items():
            lines.append(f"ablation {name}: {_numbers(numbers)}")
        worst = side.get("worst_cpr") or side.get("worst_faithfulness")
        if worst is not None:
            key = "cpr" if "cpr" in worst else "faithfulness"
            lines.append(f"  lowest {key.upper() if key == 'cpr' else 'f'} under {worst['ablation']}: {worst[key]:.3f}")
    permuted = result.get("permuted_pairs")
    if permuted is not None:
        lines.append(f"permuted pairs (seed {permuted['seed']}, {permuted['moved']} of {permuted['pairs']} re-paired, "
                     f"ablation {result['ablation']}): "
                     f"{permuted['undefined'] if 'undefined' in permuted else _numbers(permuted)}; real pairing: "
                     f"{_numbers(_real(result))}"
                     f"{'; its baseline: ' + ', '.join(permuted['health']['problems']) if permuted['health']['problems'] else ''}")
    return lines


def _real(result: dict[str, Any]) -> dict[str, Any]:
    if "cpr" in result:
        return result
    return {"faithfulness": result["faithfulness"][result["metric"]], "kept": result["kept"]}


def _numbers(numbers: dict[str, Any]) -> str:
    if "cpr" in numbers:
        return f"CPR {numbers['cpr']:.3f}, CMD {numbers['cmd']:.3f}"
    f = numbers["faithfulness"]
    return f"f {'n/a' if f is None else f'{f:.3f}'} ({numbers['kept']} kept)"


def _mib_table(result: dict[str, Any]) -> Any:
    from rich.table import Table

    metric = result["metric"]
    table = Table(title=f"MIB: CPR {result['cpr_printed']} (signed ranking), CMD {result['cmd_printed']} (absolute "
                        f"ranking); {metric}, {result['pairs']} pairs, ablation {result['ablation']}")
    for col in ("size", "top-n", "signed: kept", "f", "absolute: kept", "f"):
        table.add_column(col, justify="right")
    signed, absolute = result["signed"], result["absolute"]
    for i, fraction in enumerate(result["fractions"]):
        fs, fa = signed["faithfulness"][metric][i], absolute["faithfulness"][metric][i]
        table.add_row(f"{100 * fraction:g}%", str(result["counts"][i]), str(signed["edge_counts"][i]),
                      "n/a" if fs is None else f"{fs:.3f}", str(absolute["edge_counts"][i]),
                      "n/a" if fa is None else f"{fa:.3f}")
    return table


def _areas(result: dict[str, Any]) -> str:
    """CPR and CMD, labelled with their span when the curve covers part of the size range."""
    from subnetlab.analysis.faithfulness import describe_areas

    return describe_areas(result["cpr"], result["cmd"], result.get("span"), result["level"])


def circuit_eval(
    model: str = typer.Option(..., "--model", help="A causal language model directory or hub id."),
    task: str = typer.Option(..., "--task", help="A circuit task: circuit:ioi, circuit:greater-than, circuit:arith:<op>, "
                             "or file:PATH with --corrupted-column (your own prompt pairs)."),
    out: Path = typer.Option(..., "--out", help="Where config.json, faithfulness.json and metrics.json go."),
    scores: Optional[Path] = typer.Option(None, "--scores", help="Scores: a graph.json with a score per edge, or a "
                                          ".safetensors with 'edges', or node scores 'heads' and 'mlps' (a Heuristic "
                                          "Core gates.safetensors too)."),
    circuits: list[Path] = typer.Option([], "--circuit", help="A circuit: a graph.json with in_graph per edge, or a "
                                        "structured subnetwork file (repeatable: several sizes make a curve)."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable), e.g. n_eval=100."),
    data_flags: dict = None,
    split: str = typer.Option("eval", "--split", help="The split of prompt pairs to measure on."),
    metric: str = typer.Option("logit_diff", "--metric", help="The headline metric: logit_diff, answer_prob or kl."),
    ablation: str = typer.Option("corrupted", "--ablation", help="What a removed edge or node delivers: its output on "
                                 "the corrupted prompt (corrupted: patching, as MIB), its mean output over the clean "
                                 "prompts measured on (mean) or zero."),
    ablations: Optional[str] = typer.Option(None, "--ablations", help="Also measure the same circuits under each of "
                                            "these ablations (comma-separated: corrupted,mean,zero), side by side."),
    random_circuits: int = typer.Option(0, "--random-circuits", help="Also measure N random circuits of each size, "
                                        "drawn by the method's own selection rule (connected as its circuits are): "
                                        "their mean and spread, the circuit's percentile and p-value, and the random "
                                        "mean curve's CPR / CMD [0: none]."),
    random_seed: int = typer.Option(0, "--random-seed", help="The seed of --random-circuits' draws."),
    permute_pairs: bool = typer.Option(False, "--permute-pairs", help="Also measure with the clean and corrupted "
                                       "prompts re-paired at random (within each token length), so the corruption "
                                       "no longer isolates the task's variable."),
    permute_seed: int = typer.Option(0, "--permute-seed", help="The seed of --permute-pairs' re-pairing."),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="Circuit sizes in percent of the items, comma-separated "
                                        "[0.1,0.2,0.5,1,2,5,10,20,50,100, MIB's]."),
    selection: str = typer.Option("topn", "--selection", help="How each size's circuit is taken from --scores: topn "
                                  "(the best k edges or nodes) or greedy (EAP-IG's apply_greedy: best-first from the "
                                  "logits, edges only)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Prompt pairs per forward pass."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Measure on the first N pairs of the split."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    mib: bool = typer.Option(False, "--mib", help="CPR and CMD exactly as MIB's circuit track computes them: CPR from "
                             "the signed ranking, CMD from the absolute one, EAP-IG's top-n and pruning, MIB's sizes; "
                             "edge scores on a graph with one embedding node (an EAP-IG/MIB .json or .pt file too)."),
    mib_export: Optional[Path] = typer.Option(None, "--mib-export", help="Also write the scores (or the circuit) as "
                                              "an EAP-IG/MIB graph file: .json (Graph.to_json) or .pt (Graph.to_pt)."),
    bootstrap: Optional[int] = typer.Option(None, "--bootstrap", help="With --mib: a 95% percentile bootstrap "
                                            "interval of CPR and CMD over the pairs, from this many resamples."),
    bootstrap_seed: int = typer.Option(0, "--bootstrap-seed", help="The seed of --bootstrap's resamples."),
    mib_submission: Optional[Path] = typer.Option(None, "--mib-submission", help="Also write the scores into this "
                                                  "MIB submission folder (DIR/<task>_<model>/importances.json) and "
                                                  "check the folder."),
) -> None:
    """Measure circuits as the MIB benchmark does: f = (m(C) - m(empty)) / (m(N) - m(empty)) at each size, CPR
    (area under f, higher is better) and CMD (area under |1 - f|, lower is better). Circuits covering part of the
    size range get areas over that part, labelled partial. A degenerate baseline (the full model and the empty
    circuit too close, or the empty circuit better) is a warning, refused under subnetlab --strict (after the
    files are written)."""
    from rich.console import Console

    from subnetlab.analysis.faithfulness import CIRCUIT_SIZES
    from subnetlab.cli.commands._options import parse_task_options
    from subnetlab.errors import SubnetlabError
    from subnetlab.runs.circuit_eval import CircuitEvalJobConfig, circuit_eval_run
    from subnetlab.tasks.spec import TaskSpec

    if mib and sizes is not None:
        raise SubnetlabError("--sizes: MIB's sizes are fixed (0.1 % ... 100 %); leave --sizes out with --mib",
                             setting="sizes")
    job = CircuitEvalJobConfig(
        model=model, task=TaskSpec(task, with_data_options(task, parse_task_options(task_option, None, "eval"),
                                                           **data_flags)),
        scores=str(scores) if scores else None, circuits=tuple(str(c) for c in circuits), split=split, metric=metric,
        ablation=ablation, sizes=_sizes(sizes) or CIRCUIT_SIZES, batch_size=batch_size, limit=limit, device=device,
        definition="mib" if mib else "subnetlab", mib_export=str(mib_export.resolve()) if mib_export else None,
        mib_submission=str(mib_submission.resolve()) if mib_submission else None,
        selection=selection, bootstrap=bootstrap, bootstrap_seed=bootstrap_seed, random_circuits=random_circuits,
        random_seed=random_seed, permute_pairs=permute_pairs, permute_seed=permute_seed,
        ablations=tuple(a.strip() for a in ablations.split(",")) if ablations is not None else ())
    result = circuit_eval_run(job, out, figure=_figure)
    console = Console()
    console.print(_table(result))
    console.print(_measured_under(result))
    for line in _null_lines(result):
        console.print(line)
    if "bootstrap" in result:
        from subnetlab.report.stability import bootstrap_line

        console.print(bootstrap_line(result["bootstrap"]))
    console.print(f"written: {out / 'faithfulness.json'}")
    for key, label in (("export", "EAP-IG graph file"), ("submission_file", "MIB submission file")):
        if key in result.get("mib_files", {}):
            console.print(f"written: {result['mib_files'][key]} ({label})")
    if "submission_check" in result.get("mib_files", {}):
        console.print(f"MIB submission folder checked: {len(result['mib_files']['submission_check'])} task/model "
                      "folder(s) well formed")
    from subnetlab.cli.commands._health import report_health
    from subnetlab.runs.health import read_health

    report_health([(str(out), read_health(result))])


def _figure(result: dict[str, Any], out: Path) -> None:
    """``faithfulness.png``: f of the headline metric over the circuit sizes (a curve only)."""
    from subnetlab.report.plots import curves

    if "fractions" not in result:
        return
    metric = result["metric"]
    null = result.get("random_circuits")
    random = {} if null is None else {
        f"random circuits (mean of {null['draws']}, {result['ablation']})": [s["mean"] for s in null["sizes"]]}
    if result.get("definition") == "mib":
        curves([100 * x for x in result["fractions"]],
               {"signed ranking (CPR)": result["signed"]["faithfulness"][metric],
                "absolute ranking (CMD)": result["absolute"]["faithfulness"][metric], **random},
               out / "faithfulness.png", xlabel=f"circuit size (% of {result['items']} edges, MIB)",
               ylabel="faithfulness", title=f"MIB: CPR {result['cpr_printed']}, CMD {result['cmd_printed']}")
        return
    curves([100 * x for x in result["fractions"]], {f"f({metric})": result["faithfulness"][metric], **random},
           out / "faithfulness.png", xlabel=f"circuit size (% of {result['items']} {result['level']})",
           ylabel="faithfulness", title=_areas(result))


def register(app: typer.Typer) -> None:
    app.command("circuit-eval")(data_flag_options(circuit_eval))
