"""`subnetlab transfer`: subtask induction, a frozen subnetwork in a re-initialised model, with its controls."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.cli.commands._executor_options import executor_options
from subnetlab.cli.commands._options import DEVICE_HELP, data_flag_options, dtype_option
from subnetlab.errors import SubnetlabError
from subnetlab.executor import ExecutorOptions, Job

PAPER_SIZES = [0, 10, 16, 25, 40, 64, 100, 160, 250, 400, 640, 1000, 1600, 2500, 4000, 6400, 10000]


def parse_sizes(text: str) -> list[int]:
    """``0,10,100``, a range ``0-3``, or ``paper`` (the released code's 0 and 16 sizes from 10 to 10^4)."""
    from subnetlab.cli.commands._options import parse_int_list

    return list(PAPER_SIZES) if text.strip() == "paper" else parse_int_list(text, "--disambiguation")


def parse_conditions(text: str) -> list[str]:
    """``subnetwork,scratch``: transfer conditions (``subnetlab.transfer.CONDITIONS``), comma-separated."""
    from subnetlab.transfer import check_conditions

    return [c.name for c in check_conditions(c.strip() for c in text.split(","))]


def transfer(
    model: str = typer.Option(..., "--model", help="The trained model's directory (where the subnetwork was found)."),
    task: str = typer.Option(..., "--task", help="The new task, e.g. arith:a^2+ab (ambiguous set plus N disambiguation "
                             "rows), or your own data with --answer-column: file:PATH or hub:NAME[:CONFIG] (its "
                             "training rows; held-out eval and test rows the same for every seed and command)."),
    out: Path = typer.Option(..., "--out", help="Sweep directory: one run directory per condition, size and seed; a rerun resumes."),
    condition: str = typer.Option("subnetwork", "--condition", help="subnetwork, random-matched, random-released, complement-matched, empty-mask, scratch, full, embeddings (comma-separated)."),
    subnetwork: Optional[Path] = typer.Option(None, "--subnetwork", help="Subnetwork file from `subnetlab discover` (masked conditions)."),
    disambiguation: Optional[str] = typer.Option(None, "--disambiguation", help="Numbers of disambiguation rows of an "
                                                 "arithmetic task, e.g. 0,10,100 or 'paper' [0,100,1000]."),
    seeds: str = typer.Option("0", "--seeds", help="Seeds (initialisation, training order, controls; an arithmetic task's rows): 0-4 or 0,2."),
    preset: str = typer.Option("paper", "--preset", help="paper (100 epochs, AdamW 2e-4, batch 64) or quick (your own "
                               "small model on a CPU: 20 epochs of batches of 16 at lr 1e-3); --epochs, --lr and "
                               "--batch-size override it."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Training epochs; the model best on evaluation is kept "
                                         "[paper 100, quick 20]."),
    lr: Optional[float] = typer.Option(None, "--lr", help="AdamW learning rate [paper 2e-4, quick 1e-3]."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Rows per step [paper 64 (not stated in the "
                                             "paper), quick 16]."),
    eval_every: int = typer.Option(1, "--eval-every", help="Evaluate every N epochs."),
    freeze: bool = typer.Option(True, "--freeze/--no-freeze", help="Keep the transferred weights frozen (--no-freeze: appendix B.3)."),
    reinit: str = typer.Option("all", "--reinit", help="all: everything outside the subnetwork (the paper's text); masked: only the masked matrices (its code)."),
    loss: str = typer.Option("last-token", "--loss", help="last-token: the answer's cross-entropy; sequence: every next "
                             "token of the sequence (the released math/transfer.py)."),
    accuracy: str = typer.Option("answers", "--accuracy", help="Argmax over the answer tokens (answers) or the whole "
                                 "vocabulary (vocabulary: the released code)."),
    ties: str = typer.Option("earliest", "--ties", help="Of epochs equally good on evaluation keep the earliest or the "
                             "latest (the released code)."),
    init_std: Optional[float] = typer.Option(None, "--init-std", help="Fresh masked matrices from N(0, std^2) (0.02: "
                                             "the released code); default: the model's own initialisation."),
    stack: int = typer.Option(1, "--stack", help="Train up to K runs of one job together (torch.func); pays off on GPUs and tiny batches."),
    threads: int = typer.Option(1, "--threads", help="Torch threads per job."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    dtype: Optional[str] = dtype_option(),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable), e.g. n_eval=1000."),
    data_flags: dict = None,
    executor: ExecutorOptions = None,
) -> None:
    """Transfer SUBNETWORK from MODEL into fresh models and train them on TASK, for every condition,
    number of disambiguation rows and seed; report each run's test accuracy at its best evaluation epoch.

    An empty subnetwork is refused (only the empty-mask condition may use one); the subnetwork's other health
    problems are warning lines (subnetlab --strict transfer ... refuses them before any training)."""
    from subnetlab.cli.commands._options import parse_int_list, parse_task_options, with_data_options
    from subnetlab.experiments.subtask_induction.figures import figure3
    from subnetlab.experiments.subtask_induction.report import summarise, summary_table
    from subnetlab.io import write_json
    from subnetlab.progress import stage
    from subnetlab.runs.splits import save_splits
    from subnetlab.runs.transfer import TransferJobConfig, lm_task_options, load_lm, own_data, task_options_for
    from subnetlab.runtime import describe_runtime, dtype_name, resolve_device, resolve_dtype
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.transfer import CONDITIONS, TrainSettings, check_reinit

    conditions = parse_conditions(condition)
    if own_data(task) and disambiguation is not None:
        raise SubnetlabError(f"--disambiguation: task {task} trains on its own rows; disambiguation rows exist only "
                             "for arithmetic tasks (arith:*)")
    sizes = [0] if own_data(task) else parse_sizes(disambiguation or "0,100,1000")
    seed_list = parse_int_list(seeds)
    check_reinit(reinit)
    where = resolve_device(device)
    forward = resolve_dtype(dtype, where)  # float16 on the CPU: refused here
    stage(describe_runtime(where, forward))
    if stack < 1 or threads < 1:
        raise SubnetlabError("--stack and --threads must be at least 1")
    from subnetlab.errors import preset_values
    from subnetlab.transfer.train import TRANSFER_PRESETS

    training = preset_values(TRANSFER_PRESETS, preset, dict(epochs=epochs, lr=lr, batch_size=batch_size))
    train = TrainSettings(**training, eval_every=eval_every, loss=loss, accuracy=accuracy, ties=ties).config()
    options = with_data_options(task, parse_task_options(task_option, None, "train"), **data_flags)
    needs_sub = [c for c in conditions if CONDITIONS[c].needs_subnetwork]
    if needs_sub and subnetwork is None:
        raise SubnetlabError(f"--condition {needs_sub[0]} needs --subnetwork FILE")
    if subnetwork is not None:
        Subnetwork.load(subnetwork)  # a missing or damaged file fails before the model is loaded
    from subnetlab.run_directory import absolute_input

    model = absolute_input(model)  # stored absolute: the runs mean the same from any working directory
    subnetwork = absolute_input(subnetwork) if subnetwork is not None else None
    options = lm_task_options(model, task, options, subnetwork)  # your own data: the rows its earlier runs held out
    jobs = []
    for c in conditions:
        for size in sizes:
            runs = [{"condition": c, "size": size, "seed": s} for s in seed_list]
            packs = [runs] if stack > 1 else [[r] for r in runs]
            for pack in packs:
                config = {"model": str(model), "subnetwork": str(subnetwork) if subnetwork else None, "task": task,
                          "task_options": options, "runs": pack, "train": train, "reinit": reinit, "freeze": freeze,
                          "stack": stack, "threads": threads, "device": device}
                if init_std is not None:
                    config["init_std"] = init_std
                if dtype_name(forward) != "float32":
                    config["dtype"] = dtype_name(forward)  # part of the run: float32 runs keep their earlier configs
                TransferJobConfig.from_dict(config)  # every job's typed config, before any model is loaded
                name = f"n{size}_s{pack[0]['seed']}" if len(pack) == 1 else f"n{size}"
                jobs.append(Job("subnetlab.runs.transfer:transfer_job", config, out / c / name))
    arithmetic = {} if own_data(task) else {"ambiguous": True, "n_disambiguation": max(sizes)}
    loaded, built = load_lm(model, task, task_options_for(task, {**arithmetic, **options}, seed_list[0]), subnetwork)
    if built.kind != "lm":
        raise SubnetlabError(f"task {task}: transfer training runs on language-model tasks (e.g. arith:a^2+ab, or "
                             "your own data with --answer-column)")
    health = None
    if subnetwork is not None:
        from subnetlab.cli.commands._health import report_health
        from subnetlab.runs.transfer import check_transfer_input, subnetwork_health

        sub = Subnetwork.load(subnetwork, loaded.adapter)  # wrong file or model: fail before any job
        health = subnetwork_health(sub, subnetwork)
        check_transfer_input(health, conditions)  # an empty subnetwork: refused before any training
        report_health([(f"subnetwork {subnetwork}", health)])  # under --strict: refused here, before any training
    report = executor.run(jobs, sweep_dir=out)
    done = [j for j in report.jobs if j.metrics is not None]
    runs = [r for j in done for r in j.metrics["runs"]]
    save_splits(out, built)
    if runs:
        summary = summarise(runs)
        write_json(out / "metrics.json", {"summary": summary, "runs": [{k: v for k, v in r.items() if k != "curve"} for r in runs],
                                          **({"health": health.to_dict()} if health is not None else {})})
        figure3(runs, out / "figure3.png")
        print(summary_table(summary, sizes), end="")
        print(f"test accuracy at the best evaluation epoch, mean over seeds; {out / 'metrics.json'}, {out / 'figure3.png'}")
    failed = [j for j in report.jobs if j.status == "failed"]
    if failed:
        raise SubnetlabError(f"{len(failed)} transfer run(s) failed, first {failed[0].name}: {failed[0].error}")


def register(app: typer.Typer) -> None:
    app.command("transfer")(executor_options(data_flag_options(transfer)))
