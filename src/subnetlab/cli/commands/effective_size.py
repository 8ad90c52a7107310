"""`subnetlab effective-size`: the smallest faithful subnetwork at every fine-tuning checkpoint (Figure 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.cli.commands._executor_options import executor_options
from subnetlab.cli.commands._options import DEVICE_HELP, PRUNE_PRESET_HELP, data_flag_options
from subnetlab.executor import ExecutorOptions


def effective_size(
    checkpoints: Path = typer.Option(..., "--checkpoints", help="A `subnetlab finetune` run directory (its checkpoints/step-N)."),
    task: str = typer.Option(..., "--task", help="Task name (the fine-tuning task, e.g. nli-synthetic, or your own "
                             "data: file:PATH, hub:NAME[:CONFIG])."),
    out: Path = typer.Option(..., "--out", help="Sweep directory; a rerun skips finished runs."),
    seeds: int = typer.Option(3, "--seeds", help="Pruning seeds per checkpoint (0..N-1)."),
    faithfulness: float = typer.Option(0.03, "--faithfulness", help="Largest accuracy gap to the model (0.03 = 3 points)."),
    on: str = typer.Option("ood", "--on", help="Evaluation data: id, ood or mixed (comma list for several; the first picks the heads)."),
    levels: str = typer.Option("0.05:0.70:0.05", "--levels", help="Sparsity levels: start:stop:step or a list."),
    every: int = typer.Option(1, "--every", help="Use every N-th checkpoint (the last is always used)."),
    preset: str = typer.Option("paper", "--preset", help="Pruning preset: " + PRUNE_PRESET_HELP),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable)."),
    eval_data: list[str] = typer.Option([], "--eval-data", help="Extra evaluation split [SPLIT:]FORMAT=FILE (repeatable)."),
    id_split: list[str] = typer.Option(["id"], "--id-split", help="In-domain split(s); the others are out-of-domain."),
    subcases: Optional[str] = typer.Option(None, "--subcases", help="OOD subcases averaged for OOD accuracy (comma list, or all) [the paper's four when present]."),
    core: Optional[Path] = typer.Option(None, "--core", help="A `subnetlab core --out` directory to compare the pre-generalization heads with."),
    set_: list[str] = typer.Option([], "--set", help="Override a pruning setting KEY=VALUE (repeatable)."),
    early_stop: bool = typer.Option(False, "--early-stop/--no-early-stop", help="Seeds climb one staircase together "
                                    "and stop after two levels in a row unfaithful on every --on data (off: every level is pruned)."),
    warm_start: bool = typer.Option(False, "--warm-start/--no-warm-start", help="Start each checkpoint two levels below "
                                    "the previous one's effective size, walking down only if that level is unfaithful "
                                    "(checkpoints then run one at a time)."),
    warm_gates: bool = typer.Option(False, "--warm-gates/--no-warm-gates", help="With --warm-start: each checkpoint's "
                                    "gates start from the previous checkpoint's at the nearest measured level, with no "
                                    "first ramp (its subnetworks then inherit from the earlier checkpoint's)."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    data_flags: dict = None,
    executor: ExecutorOptions = None,
) -> None:
    """Per checkpoint: the smallest subnetwork (at the levels' resolution) within --faithfulness of the
    model's accuracy, mean over seeds; the Figure 6 plot; the heads before OOD accuracy rises.
    --early-stop and --warm-start search the levels instead of pruning them all (far fewer steps)."""
    from subnetlab.analysis.effective_size import ON_CHOICES
    from subnetlab.cli.commands._heuristic_core import parse_subcases, task_from_flags
    from subnetlab.cli.commands._options import parse_key_values, parse_task_options
    from subnetlab.errors import SubnetlabError
    from subnetlab.experiments.heuristic_core.effective_size import (
        SearchSettings,
        analyse_sweep,
        check_sweep,
        find_checkpoints,
        search_sweep,
        sweep_jobs,
    )
    from subnetlab.experiments.heuristic_core.steps import default_subcases, effective_size_outputs
    from subnetlab.io import read_json
    from subnetlab.methods.l0.schedule import parse_levels
    from subnetlab.runtime import resolve_device

    resolve_device(device)  # an unknown or absent device is refused before anything loads
    choices = [c.strip() for c in on.split(",") if c.strip()]
    bad = [c for c in choices if c not in ON_CHOICES]
    if bad or not choices:
        raise SubnetlabError(f"--on {on!r}: expected id, ood or mixed (or a comma list of them)")
    if seeds < 1:
        raise SubnetlabError(f"--seeds {seeds} must be at least 1")
    if not 0.0 <= faithfulness < 1.0:
        raise SubnetlabError(f"--faithfulness {faithfulness} is outside [0, 1)")
    if every < 1:
        raise SubnetlabError(f"--every {every} must be at least 1")
    level_list = list(parse_levels(levels))
    overrides = parse_key_values(set_, "--set")
    check_overrides(overrides, preset, level_list)
    found = find_checkpoints(checkpoints, every)
    t = task_from_flags(task, None, eval_data, task_option, model=str(checkpoints), **data_flags)
    missing = [s for s in id_split if s not in t.eval_splits]
    if missing:
        raise SubnetlabError(f"--id-split {', '.join(missing)}: task {t.name} has splits {', '.join(t.eval_splits)}")
    ood = [s for s in t.eval_splits if s not in id_split]
    if not ood and any(c in ("ood", "mixed") for c in choices):
        raise SubnetlabError(f"--on {on}: every split of task {t.name} ({', '.join(t.eval_splits)}) is an --id-split, "
                             "so there is no out-of-domain data; use --on id or name fewer --id-split")
    chosen = parse_subcases(subcases) if subcases is not None else default_subcases(t, id_split)
    if chosen is not None:
        known = {ex.subcase for s in ood for ex in t.eval_splits[s] if ex.subcase}
        unknown = [c for c in chosen if c not in known]
        if unknown:
            raise SubnetlabError(f"--subcases {', '.join(unknown)}: not a subcase of the out-of-domain split(s) "
                                 f"{', '.join(ood) or '(none)'}" + (f"; they have {', '.join(sorted(known))}" if known
                                                                      else "; they have no subcases (use all)"))
    core_heads = read_json(core / "metrics.json").get("core") if core is not None else None
    from subnetlab.cli.commands._options import with_data_options
    from subnetlab.runs.splits import held_out_options

    options = with_data_options(task, parse_task_options(task_option, None, "eval"), **data_flags)
    options = held_out_options(str(checkpoints), task, options)  # your own data: the split of the fine-tuning run
    base = {"task": task, "task_options": options, "eval_data": list(eval_data), "splits": None, "device": device}
    search = (SearchSettings(early_stop=early_stop, warm_start=warm_start, warm_gates=warm_gates)
              if early_stop or warm_start or warm_gates else None)
    dirs = None
    if search is None:
        jobs = sweep_jobs(found, base, list(range(seeds)), level_list, preset, overrides, out)
        check_sweep(executor.run(jobs, sweep_dir=out))
    else:
        dirs = search_sweep(found, base, list(range(seeds)), level_list, preset, overrides, out, search=search,
                            run=lambda jobs, where: executor.run(jobs, sweep_dir=where), on=choices,
                            faithfulness=faithfulness, id_splits=id_split, subcases=chosen)
    result = analyse_sweep(found, list(range(seeds)), level_list, out, on=choices, faithfulness=faithfulness,
                           id_splits=id_split, subcases=chosen, core=core_heads, search=dirs)
    effective_size_outputs(result, out, config={"command": "effective-size", "checkpoints": str(checkpoints), "task": task,
                                                "task_options": options,
                                                "seeds": seeds, "levels": level_list, "on": choices, "preset": preset,
                                                **({"search": search.to_dict()} if search else {})})
    print((out / "report.md").read_text(encoding="utf-8"))


# pruning settings this command sets itself, and the option that does
OWN_SETTINGS = {"seed": "--seeds", "sparsity": "--levels", "levels": "--levels", "schedule": "--levels (a staircase)"}


def check_overrides(overrides: dict, preset: str, levels: list[float]) -> None:
    """``--set`` may not name what the command's own options set, and must make valid pruning settings."""
    from subnetlab.errors import SubnetlabError
    from subnetlab.methods.head_pruning.config import preset_config

    clash = [k for k in overrides if k in OWN_SETTINGS]
    if clash:
        raise SubnetlabError(f"--set {clash[0]}: set by {OWN_SETTINGS[clash[0]]}, not by --set")
    preset_config(preset, max(levels), seed=0, schedule="staircase", levels=tuple(levels), **overrides)


def register(app: typer.Typer) -> None:
    app.command("effective-size")(executor_options(data_flag_options(effective_size)))
