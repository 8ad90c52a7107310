"""`subnetlab view RUN_DIR... --out PAGE.html`: one self-contained page to explore circuits in a browser."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def view(
    runs: list[Path] = typer.Argument(..., metavar="RUN...", help="Circuit runs, a circuit sweep, circuit-eval runs, "
                                      "graph.json scores files, or pruning runs (two paths: side by side; a sweep or "
                                      "three or more: each edge's frequency)."),
    out: Path = typer.Option(..., "--out", help="The HTML page to write (opens from file://, works offline)."),
    title: Optional[str] = typer.Option(None, "--title", help="The page's title [the paths given]."),
    tracer_json: Optional[Path] = typer.Option(None, "--tracer-json", help="Also write the (first) edge circuit as "
                                               "circuit-tracer / Neuronpedia graph JSON to this file."),
) -> None:
    """Write an interactive page: a slider over the number of edges (faithfulness read off the run's curve), click
    a node for its edges, health warnings, two runs side by side, seeds as frequencies, head/MLP subnetworks."""
    from subnetlab.errors import SubnetlabError
    from subnetlab.io import write_json, write_text
    from subnetlab.run_directory import check_distinct_outputs, check_output_file
    from subnetlab.view.page import page_data, render
    from subnetlab.view.runs import read_all, read_stability
    from subnetlab.view.tracer import tracer_graph

    if out.is_dir():
        raise SubnetlabError(f"{out} is a directory; --out names the page's file (e.g. circuit.html)", setting="out")
    check_output_file(out, "out")  # every output checked before any work, and no two the same file
    if tracer_json is not None:
        check_output_file(tracer_json, "tracer_json")
    check_distinct_outputs({"out": out, "tracer_json": tracer_json, **{f"run {p}": p for p in runs}})
    groups = read_all(runs)
    first = groups[0][0]
    if tracer_json is not None and first.circuit is None:
        raise SubnetlabError("circuit-tracer graph JSON is written for edge circuits; these are head/MLP subnetworks",
                             setting="tracer_json")
    data = page_data(groups, title or " vs ".join(str(p) for p in runs),
                     stability=[entry for p in runs for entry in read_stability(p)])
    write_text(out, render(data))
    print(f"written: {out} ({out.stat().st_size / 1e6:.2f} MB; {data['mode']} view of "
          f"{sum(len(g) for g in groups)} run(s))")
    if tracer_json is not None:
        write_json(tracer_json, tracer_graph(first.circuit, first.label))
        print(f"written: {tracer_json} (circuit-tracer graph JSON)")


def register(app: typer.Typer) -> None:
    app.command("view")(view)
