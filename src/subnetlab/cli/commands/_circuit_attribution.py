"""`subnetlab circuit --method eap|eap-ig`: attribution scores of every edge (``runs.attribution``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from subnetlab.cli.commands._options import with_data_options


def attribution_command(*, model: str, task: str, out: Path, method: str, ig_steps: int, task_option: list[str],
                        data_flags: dict[str, Any], metric: str, embedding_nodes: Optional[int], limit: Optional[int],
                        device: str, batch_size: int = 16) -> None:
    """Score every edge on the training pairs, write DIR, print the largest edges."""
    from rich.console import Console

    from subnetlab.cli.commands._options import parse_task_options
    from subnetlab.runs.attribution import SCORES_FILE, AttributionJobConfig, attribution_run
    from subnetlab.tasks.spec import TaskSpec

    job = AttributionJobConfig(
        model=model, task=TaskSpec(task, with_data_options(task, parse_task_options(task_option, None, "train"),
                                                           **data_flags)),
        method=method, ig_steps=ig_steps, split="train", metric=metric, batch_size=batch_size, limit=limit,
        embedding_nodes=embedding_nodes, device=device)
    metrics = attribution_run(job, out)
    console = Console()
    console.print(f"{metrics['method']}: {metrics['edges']} edges scored on {metrics['pairs']} pairs in "
                  f"{metrics['seconds']:.2f}s; largest: " +
                  ", ".join(f"{e['edge']} {e['score']:+.3g}" for e in metrics["top_edges"][:5]))
    console.print(f"written: {out / SCORES_FILE}; measure it with subnetlab circuit-eval --scores")
