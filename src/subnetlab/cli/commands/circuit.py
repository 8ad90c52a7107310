"""`subnetlab circuit`: find a circuit on a circuit task. Here the attribution methods (EAP, EAP-IG) that score
every edge; ``--method edge-pruning`` (learned edge masks) is the edge-pruning command's (branch ``edges``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.cli.commands._options import DEVICE_HELP, data_flag_options, with_data_options


def circuit(
    model: str = typer.Option(..., "--model", help="A causal language model directory or hub id (pre-LN: GPT-2, "
                              "Llama, Mistral, Qwen)."),
    task: str = typer.Option(..., "--task", help="A circuit task: circuit:ioi, circuit:greater-than, circuit:arith:<op>, "
                             "or file:PATH with --corrupted-column (your own prompt pairs)."),
    out: Path = typer.Option(..., "--out", help="Where scores.safetensors, graph.json and metrics.json go."),
    method: str = typer.Option("eap", "--method", help="eap (edge attribution patching: one forward per prompt and "
                               "one backward) or eap-ig (integrated gradients over --ig-steps interpolations of the "
                               "input embeddings)."),
    ig_steps: int = typer.Option(5, "--ig-steps", help="EAP-IG's interpolation steps k (k forward+backward passes)."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable), e.g. n_train=100."),
    data_flags: dict = None,
    split: str = typer.Option("train", "--split", help="The split of prompt pairs to attribute on."),
    metric: str = typer.Option("logit_diff", "--metric", help="The metric differentiated: logit_diff, answer_prob or kl."),
    batch_size: int = typer.Option(16, "--batch-size", help="Prompt pairs per forward pass."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Attribute on the first N pairs of the split."),
    embedding_nodes: Optional[int] = typer.Option(None, "--embedding-nodes", help="1 joins token and position "
                                                  "embeddings into one writer (default: the family's, 2 for GPT-2)."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
) -> None:
    """Score every edge of the model's graph by gradient attribution (EAP, Syed et al. 2023; EAP-IG, Hanna et al.
    2024); `subnetlab circuit-eval --scores DIR/scores.safetensors` measures the circuits the scores pick."""
    from rich.console import Console

    from subnetlab.cli.commands.finetune import parse_task_options
    from subnetlab.errors import SubnetlabError
    from subnetlab.runs.attribution import SCORES_FILE, AttributionJobConfig, attribution_run
    from subnetlab.tasks.spec import TaskSpec

    if method == "edge-pruning":
        raise SubnetlabError("--method edge-pruning is not in this build of subnetlab circuit (only eap and eap-ig)")
    job = AttributionJobConfig(
        model=model, task=TaskSpec(task, with_data_options(task, parse_task_options(task_option, None, "train"),
                                                           **data_flags)),
        method=method, ig_steps=ig_steps, split=split, metric=metric, batch_size=batch_size, limit=limit,
        embedding_nodes=embedding_nodes, device=device)
    metrics = attribution_run(job, out)
    console = Console()
    console.print(f"{metrics['method']}: {metrics['edges']} edges scored on {metrics['pairs']} pairs in "
                  f"{metrics['seconds']:.2f}s; largest: " +
                  ", ".join(f"{e['edge']} {e['score']:+.3g}" for e in metrics["top_edges"][:5]))
    console.print(f"written: {out / SCORES_FILE}")


def register(app: typer.Typer) -> None:
    app.command("circuit")(data_flag_options(circuit))
