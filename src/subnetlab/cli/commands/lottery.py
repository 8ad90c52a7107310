"""`subnetlab lottery-prune`, `lottery-retrain`, `lottery-stability`, `lottery-patterns` (Prasanna et al., 2020).

``lottery-prune`` finds the "good" subnetwork of a fine-tuned checkpoint by
magnitude or importance pruning and writes it with its random and bad
controls; ``lottery-retrain`` fine-tunes the pre-trained model with one of
those masks fixed. Each is one executor job run in this process, so the run
directory holds ``config.json`` and ``metrics.json`` and a rerun of a finished
command is skipped. ``lottery-stability`` compares the subnetworks of several
seeds (super-survivors); ``lottery-patterns`` types every head's attention.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import typer

from subnetlab.cli.commands._controls import CONTROL_HELP
from subnetlab.cli.commands._options import DEVICE_HELP, check_max_length_option, data_flag_options, dtype_option

LOTTERY_PRUNE_JOB = "subnetlab.runs.lottery:prune_job"


def run_one(fn: str, config: dict[str, Any], out: Path) -> dict[str, Any]:
    """Run job ``fn`` into ``out`` here and now, or return its metrics if it already finished."""
    from subnetlab.executor import Job, execute
    from subnetlab.executor.job import check_existing_config, load_metrics
    from subnetlab.progress import stage
    from subnetlab.run_directory import absolute_inputs

    job = Job(fn, absolute_inputs(config), out)  # input files absolute: the same run from any working directory
    check_existing_config(job)  # a different config in --out is an error, not an overwrite
    if job.is_done:
        stage(f"{out}: already finished")
        return load_metrics(job)
    return execute(job)


def lottery_prune(
    model: str = typer.Option(..., "--model", help="The fine-tuned checkpoint (a model directory)."),
    task: str = typer.Option(..., "--task", help="Task name: nli-synthetic, mnli, qqp, ..., file:PATH (your own data), "
                             "hub:NAME[:CONFIG]."),
    method: str = typer.Option(..., "--method", help="magnitude (m-pruning: individual weights, smallest magnitude first) or importance (s-pruning: whole heads and MLPs, least important first), the paper's two kinds."),
    out: Path = typer.Option(..., "--out", help="Run directory; a finished run is skipped."),
    data: Optional[str] = typer.Option(None, "--data", help="Development file for file-based tasks (mnli, qqp, ...)."),
    eval_data: list[str] = typer.Option([], "--eval-data", help="Extra split, FORMAT=FILE or SPLIT:FORMAT=FILE (repeatable)."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable)."),
    split: Optional[str] = typer.Option(None, "--split", help="Development split to evaluate on [the task's first]."),
    eval_limit: Optional[int] = typer.Option(None, "--eval-limit", help="Development examples used [paper: all, quick 300]."),
    importance_limit: Optional[int] = typer.Option(None, "--importance-limit", help="Examples for importance scores [--eval-limit]."),
    preset: str = typer.Option("paper", "--preset", help="paper (batch 32, 128 tokens, every development example) or "
                               "quick (your own small model on a CPU: batches of 16 of 64 tokens, at most 300 development "
                               "examples and 10 pruning steps); the options below override it."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Examples per importance batch [paper 32, quick 16]."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Tokens per example [paper 128, quick 64]."),
    threshold: float = typer.Option(0.9, "--threshold", help="Stop before the metric falls below this share of the full model's."),
    fraction: float = typer.Option(0.1, "--fraction", help="Share removed per step: of the remaining weights, or of all heads."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="At most this many steps [magnitude: 10; importance: no limit; quick: 10]."),
    criterion: str = typer.Option("sensitivity", "--criterion", help="Importance: sensitivity (per example, Michel et al.), "
                                  "sensitivity-per-batch (the authors' code), taylor or grad-x-activation."),
    importance_batch_size: Optional[int] = typer.Option(None, "--importance-batch-size", help="Importance: examples per batch [--batch-size; the authors: 64]."),
    stop_metric: str = typer.Option("accuracy", "--stop-metric", help="accuracy, or task: the task's own metric (MCC for CoLA, Pearson/Spearman for STS-B ...)."),
    control_scope: str = typer.Option("per-matrix", "--control-scope", help="Magnitude controls: per-matrix counts, or global (the authors)."),
    bad_fill: str = typer.Option("least-important", "--bad-fill", help="Importance bad control, too few removed: least-important or random (the authors)."),
    refine: bool = typer.Option(True, "--refine/--no-refine", help="Importance: continue with heads alone, then MLPs alone."),
    control_seed: int = typer.Option(0, "--control-seed", help="Seed of the random and bad controls."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    dtype: Optional[str] = dtype_option(),
    control: list[str] = typer.Option([], "--control", help=CONTROL_HELP.replace("seeds", "seed").replace(
        "DIR/metrics.json", "DIR/controls/metrics.json")),
    data_flags: dict = None,
) -> None:
    """Prune a fine-tuned model and write subnetwork.safetensors plus random.safetensors and bad.safetensors."""
    from subnetlab.cli.commands._controls import parse_controls

    controls = parse_controls(control)
    from subnetlab.cli.commands._options import parse_task_options, with_data_options
    from subnetlab.errors import preset_values
    from subnetlab.runs.lottery import LOTTERY_PRUNE_PRESETS, prune_config
    from subnetlab.runs.splits import held_out_options, held_out_task
    from subnetlab.tasks.spec import TaskSpec

    preset_values(LOTTERY_PRUNE_PRESETS, preset, {})  # an unknown preset: refused before the task is read

    options = held_out_options(model, task, with_data_options(task, parse_task_options(task_option, data, "eval"),
                                                              **data_flags))  # your own data: its fine-tuning's split
    if task.startswith(("file:", "hub:")):
        held_out_task(TaskSpec(task, options, tuple(eval_data)), model)  # its training rows are never evaluation rows
    config = prune_config(
        preset, model=model, task=task, method=method,
        task_options=options,
        eval_data=list(eval_data), split=split, eval_limit=eval_limit, importance_limit=importance_limit,
        batch_size=batch_size, max_length=max_length, threshold=threshold, fraction=fraction, max_steps=max_steps,
        criterion=criterion, refine=refine, control_seed=control_seed, device=device, dtype=forward_dtype(dtype, device),
        importance_batch_size=importance_batch_size, stop_metric=stop_metric, control_scope=control_scope,
        bad_fill=bad_fill,
    )
    check_max_length_option(model, config["max_length"])
    from subnetlab.methods.controls import SHUFFLED_LABELS, check_shufflable

    if SHUFFLED_LABELS in controls:
        check_shufflable(TaskSpec(task, options, tuple(eval_data)).build())
    metrics = run_one(LOTTERY_PRUNE_JOB, config, out)
    print(f"full model ({metrics.get('metric_name', 'accuracy')}): {metrics['full_metric']:.4f}; subnetwork: {metrics['metric']:.4f} "
          f"at sparsity {metrics['sparsity']:.1%} ({len(metrics['steps'])} steps tried)")
    print(f"subnetwork: {out / 'subnetwork.safetensors'} (controls: random.safetensors, bad.safetensors)")
    if controls:
        from subnetlab.cli.commands._controls import show_comparison
        from subnetlab.executor import Job
        from subnetlab.methods.controls import CONTROLS_DIR
        from subnetlab.runs.controls import control_jobs, lottery_measure, write_comparison

        finished = [SimpleNamespace(metrics=metrics)]  # what the comparison reads of a run: its metrics
        for job in control_jobs([Job(LOTTERY_PRUNE_JOB, config, out)], out, controls, LOTTERY_PRUNE_JOB):
            finished.append(SimpleNamespace(metrics=run_one(job.fn, job.config, job.out_dir)))
        compared = write_comparison(out / CONTROLS_DIR, finished, "lottery-prune",
                                    controls=controls, measure=lottery_measure, score_name=metrics["metric_name"],
                                    group=lambda m: m.get("method"))
        show_comparison(compared, lambda key: f"{key} pruning", out / CONTROLS_DIR / "metrics.json")
    from subnetlab.cli.commands._health import report_health
    from subnetlab.runs.health import read_health

    report_health([(f"subnetwork {out / 'subnetwork.safetensors'}", read_health(metrics))])


def lottery_retrain(
    model: str = typer.Option(..., "--model", help="The PRE-TRAINED model (alias, directory or hub id)."),
    subnetwork: Path = typer.Option(..., "--subnetwork", help="Subnetwork file (from lottery-prune) to keep fixed."),
    task: str = typer.Option(..., "--task", help="Task name: nli-synthetic, mnli, qqp, ..., file:PATH (your own data), "
                             "hub:NAME[:CONFIG]."),
    out: Path = typer.Option(..., "--out", help="Run directory; a finished run is skipped."),
    data: Optional[str] = typer.Option(None, "--data", help="Training file for file-based tasks."),
    eval_data: list[str] = typer.Option([], "--eval-data", help="Extra split, FORMAT=FILE or SPLIT:FORMAT=FILE (repeatable)."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable)."),
    preset: Optional[str] = typer.Option(None, "--preset", help="A fine-tuning preset (see subnetlab finetune)."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Peak learning rate [2e-5]."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Examples per step [32]."),
    epochs: Optional[float] = typer.Option(None, "--epochs", help="Passes over the training set [3]."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after this many steps (overrides --epochs)."),
    warmup_ratio: Optional[float] = typer.Option(None, "--warmup-ratio", help="Warmup as a fraction of the steps [0]."),
    weight_decay: Optional[float] = typer.Option(None, "--weight-decay", help="AdamW weight decay [0]."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Tokens per example [128]."),
    eval_limit: Optional[int] = typer.Option(None, "--eval-limit", help="Examples per evaluation split (default: all)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the new classifier, dropout and data order [0]."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    dtype: Optional[str] = dtype_option(),
    save_model: bool = typer.Option(True, "--save-model/--no-save-model", help="Write the trained weights to DIR/model."),
    data_flags: dict = None,
) -> None:
    """Fine-tune the pre-trained model with a subnetwork's pruned parts held at zero; evaluate it."""
    from subnetlab.cli.commands._options import parse_task_options, with_data_options
    from subnetlab.methods.finetune.config import resolve_config
    from subnetlab.runs.lottery import check_retrain_subnetwork

    cfg = resolve_config(
        preset, model=model, task=task,
        task_options=with_data_options(task, parse_task_options(task_option, data, "train"), **data_flags),
        eval_data=list(eval_data), lr=lr, batch_size=batch_size, epochs=epochs, max_steps=max_steps,
        warmup_ratio=warmup_ratio, weight_decay=weight_decay, max_length=max_length, eval_limit=eval_limit,
        seed=seed, device=device, dtype=dtype,
    )
    forward_dtype(cfg.dtype, cfg.device)  # float16 on the CPU: refused before the job
    check_retrain_subnetwork(model, subnetwork)  # readable and of this architecture, before --out is written
    check_max_length_option(model, max_length)
    config = {"finetune": cfg.to_json(), "subnetwork": str(subnetwork.resolve()), "save_model": save_model}
    metrics = run_one("subnetlab.runs.lottery:retrain_job", config, out)
    sub = metrics["subnetwork"]
    print(f"{sub['control']} {sub['method']} subnetwork, sparsity {sub['sparsity']:.1%}:")
    for split_name, score in metrics["final"].items():
        shown = ", ".join(f"{k} {score[k]:.4f}" for k in ("accuracy", "mcc", "f1", "corr") if k in score)
        print(f"  {split_name}: {shown} (n={score['n']})")


def lottery_stability(
    subnetwork: list[Path] = typer.Option(..., "--subnetwork", help="Structured subnetwork file, one per seed (repeatable)."),
    out: Path = typer.Option(..., "--out", help="Writes stability.json and survival.png here."),
) -> None:
    """Overlap of the kept heads across seeds, super-survivors, and a layers x heads survival heatmap."""
    from subnetlab.analysis.stability import stability_summary
    from subnetlab.errors import check_distinct_names
    from subnetlab.experiments.lottery.figures import survival_plot
    from subnetlab.io import write_json
    from subnetlab.subnetwork import Subnetwork

    check_distinct_names("subnetwork", [str(p.expanduser().resolve()) for p in subnetwork])  # one file per seed
    subs = [Subnetwork.load(p) for p in subnetwork]
    summary = stability_summary(subs)
    write_json(out / "stability.json", {"files": [str(p) for p in subnetwork], **summary})
    survival_plot(summary["head_frequency"], out / "survival.png", len(subs))
    print(f"mean pairwise Jaccard of the kept heads: {summary['mean_jaccard']:.3f}")
    print(f"super-survivors: {', '.join(summary['super_survivor_heads'] + summary['super_survivor_mlps']) or 'none'}")


def lottery_patterns(
    model: str = typer.Option(..., "--model", help="Model whose heads are typed (alias, directory or hub id)."),
    task: str = typer.Option(..., "--task", help="Task whose sentence pairs give the attention maps (file:PATH: your own "
                             "data)."),
    out: Path = typer.Option(..., "--out", help="Writes patterns.json (and patterns.png with --subnetwork) here."),
    data: Optional[str] = typer.Option(None, "--data", help="Development file for file-based tasks."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable)."),
    split: Optional[str] = typer.Option(None, "--split", help="Split to take pairs from [the task's first]."),
    pairs: int = typer.Option(100, "--pairs", help="Number of sentence pairs (one attention map each per head)."),
    subnetwork: Optional[Path] = typer.Option(None, "--subnetwork", help="Also report the type shares among its kept heads."),
    counting: str = typer.Option("per-map", "--counting", help="per-map: share of maps (the paper); per-head: one label per head."),
    pruned: bool = typer.Option(False, "--pruned/--full", help="With --subnetwork: read its heads' maps in the model pruned to it."),
    max_length: int = typer.Option(128, "--max-length", help="Tokens per pair."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    data_flags: dict = None,
) -> None:
    """Kovaleva pattern type of every head, from raw and from normed (Kobayashi) attention."""
    from subnetlab.analysis.attention_types import COUNTINGS, TYPES, HeadTypes
    from subnetlab.cli.commands._options import parse_task_options
    from subnetlab.errors import SubnetlabError
    from subnetlab.experiments.lottery.figures import pattern_types_plot
    from subnetlab.experiments.lottery.jobs import pattern_types, sentence_pairs
    from subnetlab.io import write_json
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.tasks.spec import TaskSpec

    if counting not in COUNTINGS:
        raise SubnetlabError(f"--counting {counting!r}: choose one of {', '.join(COUNTINGS)}")
    check_max_length_option(model, max_length)
    sub = None
    if subnetwork is not None:
        sub = Subnetwork.load(subnetwork)
        if sub.kind != "structured":
            raise SubnetlabError(f"{subnetwork}: pattern shares need a structured (heads) subnetwork")
    elif pruned:
        raise SubnetlabError("--pruned needs --subnetwork (the heads to prune to)")
    from subnetlab.cli.commands._options import with_data_options

    options = with_data_options(task, parse_task_options(task_option, data, "eval"), **data_flags)
    task_obj = TaskSpec(task, options).build()
    split = split or next(iter(task_obj.eval_splits))
    chosen, source = sentence_pairs(task_obj, split, pairs, "task", None)
    result = {"source": source, "model": model, "task": task, "task_options": options,
              **pattern_types(model, chosen, max_length, device)}
    types = HeadTypes.from_dict(result)
    shares = {f"all heads, {k}": types.shares(k, counting=counting) for k in ("raw", "normed")}
    if sub is not None:
        inside = types
        if pruned:
            result["pruned"] = pattern_types(model, chosen, max_length, device, sub.gates())
            inside = HeadTypes.from_dict(result["pruned"])
        shares.update({f"kept heads, {k}": inside.shares(k, sub.heads, counting=counting) for k in ("raw", "normed")})
        pattern_types_plot(shares, out / "patterns.png", ylabel=f"share of {'maps' if counting == 'per-map' else 'heads'} (%)")
    write_json(out / "patterns.json", {**result, "counting": counting, "shares": shares})
    for group, share in shares.items():
        print(f"{group}: " + ", ".join(f"{t} {100 * share[t]:.0f}%" for t in TYPES))


def forward_dtype(dtype: Optional[str], device: str) -> Optional[str]:
    """The job's ``dtype`` setting: None for float32 (a float32 run keeps its earlier config), else the name;
    float16 on the CPU is refused here, before any work (the job says the device and precision it runs on)."""
    from subnetlab.runtime import dtype_name, resolve_device, resolve_dtype

    chosen = dtype_name(resolve_dtype(dtype, resolve_device(device)))
    return None if chosen == "float32" else chosen


def register(app: typer.Typer) -> None:
    app.command("lottery-prune")(data_flag_options(lottery_prune))
    app.command("lottery-retrain")(data_flag_options(lottery_retrain))
    app.command("lottery-stability", epilog="It loads no model and takes no task: it compares the structured "
                "subnetwork files that lottery-prune --method importance wrote, one per fine-tuning seed of one "
                "model.")(lottery_stability)
    app.command("lottery-patterns")(data_flag_options(lottery_patterns))
