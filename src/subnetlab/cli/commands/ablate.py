"""`subnetlab ablate`: Table 3 of the Heuristic Core paper for any heads of any fine-tuned model."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.cli.commands._options import DEVICE_HELP, check_max_length_option, data_flag_options


def ablate(
    model: str = typer.Option(..., "--model", help="Fine-tuned model directory (e.g. runs/ft/model)."),
    task: str = typer.Option(..., "--task", help="Task name: nli-synthetic, hans, mnli, paws-qqp, ..."),
    heads: str = typer.Option(..., "--heads", help="L4.H0,L2.H5 or core:DIR (the core from `subnetlab core --out DIR`)."),
    out: Path = typer.Option(..., "--out", help="Where config.json, metrics.json and report.md go."),
    joint_heads: str = typer.Option("top-3", "--joint-heads", help="Heads ablated together: top-K (the K listed heads "
                                    "with the largest single OOD drops, the paper's row), none, or L0.H1,L2.H3."),
    all_jointly: bool = typer.Option(True, "--all-jointly/--no-all-jointly", help="Also ablate every listed head together."),
    controls: str = typer.Option("", "--controls", help="Repeat the single and joint rows with other replacements: "
                                 "zero, resample or zero,resample (default: none)."),
    data: Optional[str] = typer.Option(None, "--data", help="Evaluation file for file-based tasks."),
    eval_data: list[str] = typer.Option([], "--eval-data", help="Extra evaluation split, [SPLIT:]FORMAT=FILE (repeatable)."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable)."),
    data_flags: dict = None,
    id_split: list[str] = typer.Option(["id"], "--id-split", help="In-domain split(s); the others are out-of-domain."),
    subcases: Optional[str] = typer.Option(None, "--subcases", help="OOD subcases to tabulate (comma list, or all) [the paper's four when present]."),
    non_listed: str = typer.Option("all", "--non-listed", help="Heads behind the Avg. (non-HC) row, the mean of single ablations of heads outside the listed ones (HC: Heuristic Core): all, none, or N drawn at random."),
    means_examples: int = typer.Option(512, "--means-examples", help="Training examples averaged for mean ablation."),
    batch_size: int = typer.Option(64, "--batch-size"),
    max_length: int = typer.Option(128, "--max-length"),
    limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate the first N examples of each split."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random non-listed heads."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
) -> None:
    """Accuracy in-domain and per OOD subcase with no head, each listed head, the non-listed heads
    (on average), the top-3 heads and all listed heads mean-ablated; says whether the joint drop is
    super-additive over exactly the jointly ablated heads."""
    from subnetlab.cli.commands._heuristic_core import parse_non_listed, parse_subcases, task_from_flags
    from subnetlab.errors import SubnetlabError
    from subnetlab.experiments.heuristic_core.steps import ablation_step, default_subcases, parse_joint, resolve_heads
    from subnetlab.methods.head_pruning.ablation import mean_activations
    from subnetlab.methods.l0.data import PruningData
    from subnetlab.runs.prune_setup import load_pruning_model
    from subnetlab.runtime import resolve_device

    runs_on = resolve_device(device)  # an unknown or absent device is refused before anything loads
    check_max_length_option(model, max_length)
    t = task_from_flags(task, data, eval_data, task_option, model=model, **data_flags)
    missing = [s for s in id_split if s not in t.eval_splits]
    if missing:
        raise SubnetlabError(f"--id-split {', '.join(missing)}: task {t.name} has splits {', '.join(t.eval_splits)}")
    loaded = load_pruning_model(model, t)
    loaded.model.to(runs_on)  # means, evaluations and ablations follow the model's device
    a = loaded.adapter
    listed = resolve_heads(heads, a.num_layers, a.num_heads)
    joint = parse_joint(joint_heads, a.num_layers, a.num_heads)
    chosen_controls = [c.strip() for c in controls.split(",") if c.strip()]
    bad = [c for c in chosen_controls if c not in ("zero", "resample")]
    if bad:
        raise SubnetlabError(f"--controls {controls}: expected zero, resample or zero,resample", setting="controls")
    chosen = parse_subcases(subcases) if subcases is not None else default_subcases(t, id_split)
    source = "train" if t.train else id_split[0]
    tokenizer = loaded.tokenizer if loaded.tokenizer is not None else t.tokenizer
    means = mean_activations(loaded.model, a, PruningData.from_task(t, tokenizer, source, max_length), means_examples, batch_size)
    from subnetlab.run_directory import absolute_inputs

    config = {"command": "ablate", "model": model, "task": t.options, "eval_data": eval_data, "heads": heads,
              "listed": [f"L{l}.H{h}" for l, h in listed], "joint_heads": joint_heads,
              "all_jointly": all_jointly, "controls": chosen_controls, "id_splits": id_split, "subcases": chosen,
              "non_listed": non_listed, "means": {"split": source, "examples": means_examples},
              "batch_size": batch_size, "max_length": max_length, "limit": limit, "seed": seed}
    config = absolute_inputs(config)  # input files absolute: the same run from any working directory
    ablation_step(loaded, t, listed, out, joint=joint, all_jointly=all_jointly, controls=chosen_controls, config=config, means=means, id_splits=id_split,
                            subcases=chosen, batch_size=batch_size, max_length=max_length, limit=limit,
                            non_listed=parse_non_listed(non_listed), seed=seed)
    print((out / "report.md").read_text(encoding="utf-8"))


def register(app: typer.Typer) -> None:
    app.command("ablate")(data_flag_options(ablate))
