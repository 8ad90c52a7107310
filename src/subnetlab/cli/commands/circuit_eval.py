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
    if "fractions" not in result:
        table = Table(title=f"{result['level']} circuit: {result['kept']} of {result['items']} kept, "
                            f"{result['pairs']} pairs")
        table.add_column("metric")
        table.add_column("faithfulness", justify="right")
        for name, f in result["faithfulness"].items():
            table.add_row(name, "n/a" if f is None else f"{f:.3f}")
        return table
    table = Table(title=f"{result['level']}: CPR {result['cpr']:.3f}, CMD {result['cmd']:.3f} ({metric}, "
                        f"{result['pairs']} pairs)")
    for col in ("size", "kept", metric, f"f({metric})", "kl"):
        table.add_column(col, justify="right")
    for i, fraction in enumerate(result["fractions"]):
        f = result["faithfulness"][metric][i]
        table.add_row(f"{100 * fraction:g}%", str(result["counts"][i]), f"{result['values'][metric][i]:.4g}",
                      "n/a" if f is None else f"{f:.3f}", f"{result['values']['kl'][i]:.4g}")
    return table


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
                                 "the corrupted prompt (patching, as MIB) or zero."),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="Circuit sizes in percent of the items, comma-separated "
                                        "[0.1,0.2,0.5,1,2,5,10,20,50,100, MIB's]."),
    selection: str = typer.Option("topn", "--selection", help="How each size's circuit is taken from --scores: topn "
                                  "(the best k edges or nodes) or greedy (EAP-IG's apply_greedy: best-first from the "
                                  "logits, edges only)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Prompt pairs per forward pass."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Measure on the first N pairs of the split."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
) -> None:
    """Measure circuits as the MIB benchmark does: f = (m(C) - m(empty)) / (m(N) - m(empty)) at each size, CPR
    (area under f, higher is better) and CMD (area under |1 - f|, lower is better)."""
    from rich.console import Console

    from subnetlab.analysis.faithfulness import CIRCUIT_SIZES
    from subnetlab.cli.commands._options import parse_task_options
    from subnetlab.runs.circuit_eval import CircuitEvalJobConfig, circuit_eval_run
    from subnetlab.tasks.spec import TaskSpec

    job = CircuitEvalJobConfig(
        model=model, task=TaskSpec(task, with_data_options(task, parse_task_options(task_option, None, "eval"),
                                                           **data_flags)),
        scores=str(scores) if scores else None, circuits=tuple(str(c) for c in circuits), split=split, metric=metric,
        ablation=ablation, sizes=_sizes(sizes) or CIRCUIT_SIZES, batch_size=batch_size, limit=limit, device=device,
        selection=selection)
    result = circuit_eval_run(job, out, figure=_figure)
    console = Console()
    console.print(_table(result))
    console.print(f"written: {out / 'faithfulness.json'}")


def _figure(result: dict[str, Any], out: Path) -> None:
    """``faithfulness.png``: f of the headline metric over the circuit sizes (a curve only)."""
    from subnetlab.report.plots import curves

    if "fractions" not in result:
        return
    metric = result["metric"]
    curves([100 * x for x in result["fractions"]], {f"f({metric})": result["faithfulness"][metric]},
           out / "faithfulness.png", xlabel=f"circuit size (% of {result['items']} {result['level']})",
           ylabel="faithfulness", title=f"CPR {result['cpr']:.3f}, CMD {result['cmd']:.3f}")


def register(app: typer.Typer) -> None:
    app.command("circuit-eval")(data_flag_options(circuit_eval))
