"""`subnetlab plan`: peak memory, FLOPs per step, steps and the largest micro-batch that fits, before a run.

    subnetlab plan prune --model src/subnetlab/models/configs/bert-base.json --batch 128 --micro-batch 32 --length 128
    subnetlab plan circuit --method edge-pruning --model DIR --batch 8 --length 256 --dtype bfloat16 --memory 80GB

The method's own step runs on the model built from its config under fake tensors (``subnetlab.runs.plan``):
no weights are read or allocated, nothing is downloaded, seconds on a CPU.
"""

from __future__ import annotations

from typing import Optional

import typer

from subnetlab.errors import SubnetlabError

COMMANDS = {"prune": ("head-pruning",), "circuit": ("edge-pruning", "eap", "eap-ig")}


def plan(
    command: str = typer.Argument(..., metavar="COMMAND", help="The command to plan: prune (heads and MLPs) or "
                                  "circuit (with --method)."),
    model: str = typer.Option(..., "--model", help="A config.json file, a model directory holding one, or a hub "
                              "id already in the local cache (nothing is downloaded)."),
    method: str = typer.Option("edge-pruning", "--method", help="circuit: edge-pruning, eap or eap-ig."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Examples per optimiser step (attribution: pairs "
                                        "per batch) [prune 128, circuit 32]."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Examples per forward; the batch is "
                                              "accumulated over micro-batches [the batch]."),
    length: Optional[int] = typer.Option(None, "--length", help="Tokens per example [prune 128, circuit 64]."),
    dtype: str = typer.Option("float32", "--dtype", help="The frozen weights' dtype: float32, bfloat16 or float16 "
                              "(masks, multipliers and the objective stay float32)."),
    memory: Optional[str] = typer.Option(None, "--memory", help="Device memory, e.g. 80GB or 24GiB: also find the "
                                         "largest micro-batch whose peak fits it."),
    preset: str = typer.Option("paper", "--preset", help="The method's preset whose steps are counted."),
    sparsity: Optional[float] = typer.Option(None, "--sparsity", help="Target sparsity (sets the paper's steps of "
                                             "prune) [prune 0.5, edge-pruning 0.95]."),
    ig_steps: int = typer.Option(5, "--ig-steps", help="eap-ig: interpolation steps."),
    examples: Optional[int] = typer.Option(None, "--examples", help="eap / eap-ig: the pairs scored (the steps are "
                                           "their batches) [one batch]."),
    layers_sampled: str = typer.Option("auto", "--layers-sampled", help="Plan the model at these layer counts "
                                       "(e.g. 2,3,4) and fit each quantity in the number of layers; 'all' plans "
                                       "every layer; 'auto' samples 2,3,4 for models of more than 8 layers."),
) -> None:
    """Plan a run: peak memory per device, FLOPs per step, the number of steps, and with --memory the largest
    micro-batch that fits, from the method's real step on fake tensors (no weights allocated)."""
    from subnetlab.runs.plan import PlanSettings, parse_memory, plan_run, plan_table, read_model_config
    from subnetlab.runs.plan.layers import default_samples

    if command not in COMMANDS:
        raise SubnetlabError(f"COMMAND {command!r}: plan one of {', '.join(COMMANDS)}")
    chosen = COMMANDS[command][0] if command == "prune" else method
    if chosen not in COMMANDS[command]:
        raise SubnetlabError(f"--method {method!r}: choose one of {', '.join(COMMANDS['circuit'])}")
    limit = parse_memory(memory) if memory is not None else None
    default_batch = 128 if command == "prune" else 32
    micro = micro_batch if micro_batch is not None else (32 if command == "prune" and batch is None else None)
    settings = PlanSettings(chosen, batch=default_batch if batch is None else batch,
                            length=(128 if command == "prune" else 64) if length is None else length,
                            micro_batch=micro, dtype=dtype, preset=preset, sparsity=sparsity, ig_steps=ig_steps,
                            examples=examples)
    config = read_model_config(model)
    if layers_sampled == "auto":
        samples = default_samples(config)
    elif layers_sampled == "all":
        samples = None
    else:
        try:
            samples = tuple(int(n) for n in layers_sampled.split(","))
        except ValueError:
            raise SubnetlabError(f"--layers-sampled {layers_sampled!r}: expected auto, all or layer counts such as "
                                 "2,3,4") from None
    typer.echo(plan_table([plan_run(config, settings, model, limit, samples)]), nl=False)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
