"""`subnetlab circuit --method eap|eap-ig|...|nap|nap-ig`: attribution scores of every edge, or of every node
(nap, nap-ig) (``runs.attribution``), or, over
several step counts or seeds, one run each and the stability of their circuits (``runs.attribution_sweep``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from subnetlab.cli.commands._options import with_data_options


def parse_step_counts(text: str) -> list[int]:
    """``--ig-steps 5`` or ``5,10,20``: whole numbers as given (their bounds and repeats are checked by
    ``runs.attribution_sweep.check_step_counts``)."""
    from subnetlab.errors import SubnetlabError
    from subnetlab.runs.attribution_sweep import check_step_counts

    try:
        counts = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise SubnetlabError(f"--ig-steps {text!r}: whole numbers separated by commas, e.g. 5 or 5,10,20") from None
    return check_step_counts(counts)


def attribution_command(*, model: str, task: str, out: Path, method: str, ig_steps: list[int], task_option: list[str],
                        data_flags: dict[str, Any], metric: str, embedding_nodes: Optional[int], limit: Optional[int],
                        device: str, batch_size: int = 16, seeds: Optional[list[int]] = None,
                        targets: Optional[list[float]] = None, kv_readers: Optional[str] = None,
                        position_chunk: Optional[int] = None, ablation: Optional[str] = None) -> None:
    """Score every edge on the training pairs, write DIR, print the largest edges; over several step counts or
    with seeds, one run per (steps, seed) and the circuits' stability."""
    from rich.console import Console

    from subnetlab.cli.commands._options import parse_task_options
    from subnetlab.runs.attribution import SCORES_FILE, AttributionJobConfig, attribution_run
    from subnetlab.runs.attribution_sweep import check_sweep_targets
    from subnetlab.tasks.spec import TaskSpec

    sweep = check_sweep_targets(method, ig_steps, seeds, targets)
    job = AttributionJobConfig(
        model=model, task=TaskSpec(task, with_data_options(task, parse_task_options(task_option, None, "train"),
                                                           **data_flags)),
        method=method, ig_steps=ig_steps[0], split="train", metric=metric, batch_size=batch_size, limit=limit,
        embedding_nodes=embedding_nodes, device=device, kv_readers=kv_readers,
        position_chunk=position_chunk, ablation=ablation)
    console = Console()
    if sweep:
        from subnetlab.runs.attribution_sweep import DEFAULT_TARGET, attribution_sweep
        from subnetlab.runs.controls import format_comparison

        result = attribution_sweep(job, out, steps=ig_steps, seeds=seeds, targets=targets or [DEFAULT_TARGET])
        for name, metrics in result["runs"].items():
            console.print(f"{name}: {metrics['edges']} edges scored on {metrics['pairs']} pairs in "
                          f"{metrics['seconds']:.2f}s")
        from subnetlab.cli.commands._controls import write_stability_report

        print(format_comparison(result["targets"]), end="")
        console.print(f"written: {out / 'metrics.json'} (per-edge frequency and pairwise Jaccard of the circuits)")
        write_stability_report(out, result["targets"], f"{method}: stability of the top-|score| circuits over step "
                               "counts and seeds")
        return
    metrics = attribution_run(job, out)
    if metrics.get("level") == "nodes":
        console.print(f"{metrics['method']}: {metrics['nodes']} nodes scored on {metrics['pairs']} pairs in "
                      f"{metrics['seconds']:.2f}s; largest: " +
                      ", ".join(f"{n['node']} {n['score']:+.3g}" for n in metrics["top_nodes"][:5]))
        console.print(f"written: {out / SCORES_FILE} (node scores); measure it with subnetlab circuit-eval --scores")
        return
    console.print(f"{metrics['method']}: {metrics['edges']} edges scored on {metrics['pairs']} pairs in "
                  f"{metrics['seconds']:.2f}s; largest: " +
                  ", ".join(f"{e['edge']} {e['score']:+.3g}" for e in metrics["top_edges"][:5]))
    if metrics.get("kv_readers") == "query":
        console.print("grouped-query model: one key and value reader per query head (EAP-IG's and MIB's graph, what "
                      "circuit-eval --mib measures); --kv-readers kv scores one per key/value head (Edge Pruning's)")
    console.print(f"written: {out / SCORES_FILE}; measure it with subnetlab circuit-eval --scores")
