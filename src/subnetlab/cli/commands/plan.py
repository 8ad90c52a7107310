"""`subnetlab plan`: peak memory, FLOPs per step, steps and the largest micro-batch that fits, before a run.

    subnetlab plan prune --model src/subnetlab/models/configs/bert-base.json --batch 128 --micro-batch 32 --length 128
    subnetlab plan circuit --method edge-pruning --model DIR --batch 8 --length 256 --dtype bfloat16 --memory 80GB
    subnetlab plan discover --model gpt2-small                  (the paper preset: batch 500 of 3-token prompts)
    subnetlab plan finetune --model bert-base --memory 80GB     (the heuristic-core preset: MNLI, 32 x 128)

The method's own step runs on the model built from its config under fake tensors (``subnetlab.runs.plan``):
no weights are read or allocated, nothing is downloaded, seconds on a CPU.
"""

from __future__ import annotations

from typing import Optional

import typer

from subnetlab.errors import SubnetlabError
from subnetlab.runs.circuit_methods import CIRCUIT_METHODS

COMMANDS = {"prune": ("head-pruning",), "circuit": CIRCUIT_METHODS, "discover": ("discover",),
            "transfer": ("transfer",), "finetune": ("finetune",), "lottery-prune": ("lottery-prune",)}
# the options each command's plan reads beyond --model, --dtype, --memory, --layers-sampled; another one is refused
READS = {"prune": ("--batch", "--micro-batch", "--length", "--preset", "--sparsity"),
         "circuit": ("--method", "--batch", "--micro-batch", "--length", "--preset", "--sparsity", "--ig-steps",
                     "--examples", "--edges"),
         "discover": ("--batch", "--length", "--preset", "--examples"),
         "transfer": ("--batch", "--length", "--preset", "--examples"),
         "finetune": ("--batch", "--length", "--preset", "--examples"),
         "lottery-prune": ("--batch", "--length", "--preset", "--examples")}


def plan(
    command: str = typer.Argument(..., metavar="COMMAND", help="The command to plan: prune (heads and MLPs), "
                                  "circuit (with --method), discover, transfer (one run of the subnetwork "
                                  "condition), finetune or lottery-prune (importance)."),
    model: str = typer.Option(..., "--model", help="A config.json file, a model directory holding one, or a hub "
                              "id already in the local cache (nothing is downloaded)."),
    method: Optional[str] = typer.Option(None, "--method", help=f"circuit: {', '.join(CIRCUIT_METHODS)} "
                                         "[edge-pruning]."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Examples per optimiser step (attribution: pairs "
                                        "per batch) [prune 128, circuit 32; discover, transfer, finetune, "
                                        "lottery-prune: the preset's]."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Examples per forward; the batch is "
                                              "accumulated over micro-batches [the batch]."),
    length: Optional[int] = typer.Option(None, "--length", help="Tokens per example [prune 128, circuit 64, "
                                         "discover and transfer 3 (an arithmetic prompt), finetune and "
                                         "lottery-prune the preset's --max-length]."),
    dtype: str = typer.Option("float32", "--dtype", help="The frozen weights' dtype: float32, bfloat16 or float16 "
                              "(masks, multipliers and the objective stay float32); discover, transfer, finetune, "
                              "lottery-prune: their --dtype, the forward passes' autocast (weights in float32)."),
    memory: Optional[str] = typer.Option(None, "--memory", help="Device memory, e.g. 80GB or 24GiB: also find the "
                                         "largest micro-batch whose peak fits it."),
    preset: Optional[str] = typer.Option(None, "--preset", help="The command's preset, whose steps (and discover's, "
                                         "transfer's and finetune's batch and length) are planned [paper; finetune: "
                                         "heuristic-core]."),
    sparsity: Optional[float] = typer.Option(None, "--sparsity", help="Target sparsity (sets the paper's steps of "
                                             "prune) [prune 0.5, edge-pruning 0.95]."),
    ig_steps: Optional[int] = typer.Option(None, "--ig-steps", help="eap-ig: interpolation steps [5]."),
    examples: Optional[int] = typer.Option(None, "--examples", help="eap / eap-ig: the pairs scored (the steps are "
                                           "their batches) [one batch]; discover / transfer / finetune: the "
                                           "training rows [the preset's task's: discover paper 50,000; transfer an "
                                           "ambiguous arithmetic task's 1,000; finetune heuristic-core MNLI's "
                                           "392,702]."),
    edges: Optional[int] = typer.Option(None, "--edges", help="exact: the edges patched [every edge of the graph]."),
    layers_sampled: str = typer.Option("auto", "--layers-sampled", help="Plan the model at these layer counts "
                                       "(e.g. 2,3,4) and fit each quantity in the number of layers; 'all' plans "
                                       "every layer; 'auto' samples 2,3,4 for models of more than 8 layers."),
) -> None:
    """Plan a run: peak memory per device, FLOPs per step, the number of steps, and with --memory the largest
    micro-batch that fits, from the method's real step on fake tensors (no weights allocated)."""
    from subnetlab.runs.plan import PlanSettings, default_sizes, parse_memory, plan_run, plan_table, read_model_config
    from subnetlab.runs.plan.layers import default_samples

    if command not in COMMANDS:
        raise SubnetlabError(f"COMMAND {command!r}: plan one of {', '.join(COMMANDS)}")
    given = {"--method": method, "--batch": batch, "--micro-batch": micro_batch, "--length": length,
             "--preset": preset, "--sparsity": sparsity, "--ig-steps": ig_steps, "--examples": examples,
             "--edges": edges}
    unread = [flag for flag, value in given.items() if value is not None and flag not in READS[command]]
    if unread:
        raise SubnetlabError(f"plan {command} does not read {', '.join(unread)} (it reads --model, --dtype, "
                             f"--memory, --layers-sampled, {', '.join(READS[command])})")
    chosen = COMMANDS[command][0] if command != "circuit" else method or "edge-pruning"
    if chosen not in COMMANDS[command]:
        raise SubnetlabError(f"--method {method!r}: choose one of {', '.join(COMMANDS['circuit'])}")
    limit = parse_memory(memory) if memory is not None else None
    if command in ("discover", "transfer", "finetune", "lottery-prune"):
        default_batch, default_length = default_sizes(chosen, preset)
    else:
        default_batch, default_length = (128, 128) if command == "prune" else (32, 64)
    micro = micro_batch if micro_batch is not None else (32 if command == "prune" and batch is None else None)
    settings = PlanSettings(chosen, batch=default_batch if batch is None else batch,
                            length=default_length if length is None else length,
                            micro_batch=micro, dtype=dtype, preset=preset, sparsity=sparsity,
                            ig_steps=5 if ig_steps is None else ig_steps, examples=examples, edges=edges)
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
    from subnetlab.runs.plan.report import verdict

    planned = plan_run(config, settings, model, limit, samples)
    typer.echo(plan_table([planned]), nl=False)
    line = verdict(planned)
    typer.echo(line.replace("with micro-batch", "with --micro-batch"))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
