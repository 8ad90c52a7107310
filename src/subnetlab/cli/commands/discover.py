"""`subnetlab discover`: find the weight-level subnetwork that computes a subtask (continuous sparsification)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.cli.commands._controls import CONTROL_HELP
from subnetlab.cli.commands._executor_options import executor_options
from subnetlab.cli.commands._options import DEVICE_HELP, data_flag_options, dtype_option
from subnetlab.errors import SubnetlabError
from subnetlab.executor import ExecutorOptions, Job

DISCOVER_PRESET_HELP = ("paper (Zhang et al. 2024: 50 epochs, batch 500, 50,000 arithmetic rows, lambdas 1e-7, 5e-7, "
                        "1e-8) or quick (your own small model on a CPU: 50 epochs of batches of 16 at lr 1e-2, 2,000 "
                        "arithmetic rows, lambda 1e-7; seconds to minutes). --epochs, --lr, --batch-size, --samples and --lambdas "
                        "override it.")

DISCOVER_JOB = "subnetlab.runs.transfer:discover_job"


def parse_floats(text: str, name: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SubnetlabError(f"{name}: malformed value {text!r} (expected e.g. 1e-7,5e-7)") from None
    if not values or any(v < 0 for v in values):
        raise SubnetlabError(f"{name}: expected non-negative numbers, got {text!r}")
    return values


def discover(
    model: str = typer.Option(..., "--model", help="The trained model's directory (a Hugging Face causal LM)."),
    task: str = typer.Option(..., "--task", help="The subtask, e.g. arith:ab, or your own data with "
                             "--answer-column: file:PATH or hub:NAME[:CONFIG] (held-out eval and test rows: the same as every "
                             "command's on that file, never rows the model was fine-tuned on)."),
    out: Path = typer.Option(..., "--out", help="Run directory: subnetwork.safetensors, metrics.json; a rerun resumes."),
    preset: str = typer.Option("paper", "--preset", help=DISCOVER_PRESET_HELP),
    lambdas: Optional[str] = typer.Option(None, "--lambdas", help="L0 penalties to sweep, e.g. 1e-7,5e-7 [the preset's]; "
                                          "--select picks the subnetwork."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Epochs of mask training (beta reaches beta_final at the "
                                         "end) [50]."),
    lr: Optional[float] = typer.Option(None, "--lr", help="AdamW learning rate of the mask logits [paper 1e-3, quick 1e-2]."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Examples per step [paper 500, quick 16]."),
    samples: Optional[int] = typer.Option(None, "--samples", help="Training rows of an arithmetic subtask (n_train) "
                                          "[paper 50,000, quick 2,000]."),
    include: str = typer.Option("attention,mlp", "--include", help="Masked weight matrices: attention, mlp or both."),
    keep: str = typer.Option("best", "--keep", help="Mask of the best epoch on evaluation (best: ties to the sparser; "
                             "best-latest: ties to the later, as the released code), or of the last (Algorithm 1)."),
    selection: str = typer.Option("sparsest", "--select", help="Which lambda's subnetwork: sparsest (the sparsest within "
                                  "--select-tolerance of the best evaluation accuracy), best-accuracy, or lambda "
                                  "(the one of --select-lambda)."),
    selection_tolerance: float = typer.Option(0.01, "--select-tolerance", help="Accuracy a sparser subnetwork may lose "
                                              "and still count as keeping the subtask (sparsest rule)."),
    selection_lambda: Optional[float] = typer.Option(None, "--select-lambda", help="The lambda whose subnetwork is kept "
                                                     "(lambda rule; the released code uses 1e-7)."),
    beta_final: float = typer.Option(100.0, "--beta-final", help="Final sigmoid scale (beta starts at 1)."),
    init: float = typer.Option(-0.1, "--init", help="Initial mask logit s."),
    loss: str = typer.Option("last-token", "--loss", help="last-token: the answer's cross-entropy; sequence: every "
                             "next token of the sequence (the released math/ablate.py)."),
    accuracy: str = typer.Option("answers", "--accuracy", help="Argmax over the answer tokens (answers) or the whole "
                                 "vocabulary (vocabulary: the released code)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data order (and of an arithmetic subtask's rows); your own "
                             "data's held-out rows are the data file's, whatever the seed."),
    threads: int = typer.Option(1, "--threads", help="Torch threads per job."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    dtype: Optional[str] = dtype_option(),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable), e.g. max_number=100."),
    control: list[str] = typer.Option([], "--control", help=CONTROL_HELP.replace(
        "DIR/metrics.json", "DIR/controls/metrics.json (each control's lambda chosen by --select, as the real one)")),
    data_flags: dict = None,
    executor: ExecutorOptions = None,
) -> None:
    """Train a continuous-sparsification mask over MODEL's frozen attention and MLP weights on TASK.

    Defaults are the paper's (Zhang et al. 2024, appendix A and B.1): s = -0.1, beta 1 -> 100,
    lambda in {1e-7, 5e-7, 1e-8}, AdamW lr 1e-3, 50 epochs, batch 500, 50,000 samples; --preset quick
    trains 50 epochs of batches of 16 at lr 1e-2 with lambda 1e-7 (a small model on a CPU).

    A degenerate lambda (its mask keeps no weight, or every one) is never selected while another is not;
    health problems are warning lines (subnetlab --strict discover ... exits 2 instead)."""
    from subnetlab.cli.commands._controls import parse_controls
    from subnetlab.cli.commands._options import parse_task_options, with_data_options
    from subnetlab.errors import preset_values
    from subnetlab.io import write_json
    from subnetlab.methods.continuous_sparsification import DISCOVERY_PRESETS, ContinuousSparsification, LambdaChoice
    from subnetlab.progress import stage
    from subnetlab.run_directory import claim, record_runtime
    from subnetlab.runs.splits import save_splits
    from subnetlab.runs.transfer import lm_task_options, load_lm, select_best, task_options_for
    from subnetlab.runtime import describe_runtime, dtype_name, resolve_device, resolve_dtype, runtime_record

    controls = parse_controls(control)
    settings = preset_values(DISCOVERY_PRESETS, preset, dict(epochs=epochs, lr=lr, batch_size=batch_size,
                                                             samples=samples, lambdas=lambdas))
    epochs, lr, batch_size, samples = (settings[k] for k in ("epochs", "lr", "batch_size", "samples"))
    options = with_data_options(task, parse_task_options(task_option, None, "train"), **data_flags)
    if samples is not None and task.startswith("arith:"):
        options.setdefault("n_train", samples)
    given = settings["lambdas"]
    values = parse_floats(given, "--lambdas") if isinstance(given, str) else [float(v) for v in given]
    where = resolve_device(device)
    forward = resolve_dtype(dtype, where)  # float16 on the CPU: refused here
    precision = dtype_name(forward)
    stage(describe_runtime(where, forward))
    parts = tuple(p.strip() for p in include.split(",") if p.strip())
    cs = dict(epochs=epochs, lr=lr, batch_size=batch_size, include=list(parts), keep=keep, beta_final=beta_final, init=init,
              **{k: settings[k] for k in ("patience", "min_delta") if settings.get(k) is not None})  # the preset's stopping
    ContinuousSparsification(**{**cs, "include": parts})  # validate before any job starts
    chooser = LambdaChoice(selection, selection_tolerance, selection_lambda)
    if chooser.rule == "lambda" and not any(abs(v - selection_lambda) <= 1e-9 * abs(v) for v in values):
        raise SubnetlabError(f"selection_lambda {selection_lambda:g} is not among the lambdas to run", setting="selection_lambda")
    from subnetlab.run_directory import absolute_input
    from subnetlab.runs.transfer import DiscoverJobConfig

    model = absolute_input(model)  # stored absolute: the run means the same from any working directory
    options = lm_task_options(model, task, options)  # your own data: the rows its fine-tuning run held out

    scoring = {k: v for k, v in (("loss", loss), ("accuracy", accuracy)) if v != {"loss": "last-token", "accuracy": "answers"}[k]}
    if precision != "float32":
        scoring["dtype"] = precision  # part of the run: float32 runs keep their earlier configs
    for lam in values:  # every job's typed config, checked before any model is loaded or job started
        DiscoverJobConfig.from_dict({"model": str(model), "task": task, "task_options": options, "seed": seed,
                                     "threads": threads, "device": device, "cs": {**cs, "l0_lambda": lam}, **scoring})
    loaded, built = load_lm(model, task, task_options_for(task, options, seed))  # a wrong model or task fails here
    if built.kind != "lm":
        raise SubnetlabError(f"task {task}: discovery runs on language-model tasks (e.g. arith:ab, or your own data "
                             "with --answer-column)")
    from subnetlab.methods.controls import SHUFFLED_LABELS, check_shufflable

    if SHUFFLED_LABELS in controls:
        check_shufflable(built)
    config = {"command": "discover", "model": str(model), "task": task, "task_options": options, "cs": cs,
              "lambdas": values, "seed": seed, **scoring}  # the selection is not part of it: a rerun may choose differently
    claim(out, config, what="discovery run")
    record_runtime(out, runtime_record(where, forward))  # not compared when the run resumes
    save_splits(out, built)
    jobs = [Job(DISCOVER_JOB,
                {"model": str(model), "task": task, "task_options": options, "seed": seed, "threads": threads, "device": device,
                 "cs": {**cs, "l0_lambda": lam}, **scoring}, out / f"lambda_{lam:g}") for lam in values]
    from subnetlab.runs.controls import control_jobs

    report = executor.run(jobs + control_jobs(jobs, out, controls, DISCOVER_JOB), sweep_dir=out)
    failed = [j for j in report.jobs if j.status == "failed"]
    if failed:
        raise SubnetlabError(f"discovery failed for {failed[0].name}: {failed[0].error}")
    from subnetlab.runs.transfer import degenerate_passed_over, sweep_health

    runs = [j.metrics for j in report.jobs if not j.metrics.get("control")]  # the controls: compared below
    healths = sweep_health(runs)
    best = select_best(runs, chooser)
    passed_over = degenerate_passed_over(runs, chooser)
    from subnetlab.subnetwork import Subnetwork

    Subnetwork.load(best["subnetwork"], loaded.adapter).save(out / "subnetwork.safetensors")
    chosen = healths[next(i for i, m in enumerate(runs) if m is best)]
    summary = {**{k: v for k, v in best.items() if k not in ("history", "health")},
               "subnetwork": str(out / "subnetwork.safetensors"), "selection": chooser.describe(),
               "health": chosen.to_dict(), "passed_over_degenerate": [m["l0_lambda"] for m in passed_over],
               "sweep": [{**{k: m[k] for k in ("l0_lambda", "eval_accuracy", "test_accuracy", "kept_percent")},
                          "health": h.to_dict()} for m, h in zip(runs, healths)]}
    write_json(out / "metrics.json", summary)
    for row, h in zip(summary["sweep"], healths):
        print(f"lambda {row['l0_lambda']:g}: eval {row['eval_accuracy']:.4f}  test {row['test_accuracy']:.4f}  "
              f"kept {row['kept_percent']:.2f}%  health: {', '.join(h.problems) or 'ok'}")
    for m in passed_over:
        print(f"lambda {m['l0_lambda']:g} not selected: its subnetwork is degenerate "
              f"({'keeps nothing' if m['kept'] == 0 else 'keeps everything'})")
    print(f"selected lambda {best['l0_lambda']:g} ({chooser.describe()}): subtask test accuracy {best['test_accuracy']:.4f} "
          f"(full model {best['full_model_test_accuracy']:.4f}); parameters kept {best['kept_percent']:.2f}% "
          f"(per layer: {', '.join(f'L{k} {v:.2f}%' for k, v in best['kept_percent_per_layer'].items())})")
    print(f"subnetwork: {out / 'subnetwork.safetensors'}")
    if controls:
        from subnetlab.cli.commands._controls import show_comparison
        from subnetlab.methods.controls import CONTROLS_DIR
        from subnetlab.runs.controls import discovery_measure, selected_comparison

        compared = selected_comparison(out / CONTROLS_DIR, report.jobs, "discover", controls=controls,
                                       select=lambda metrics: select_best(metrics, chooser), measure=discovery_measure,
                                       score_name="test_accuracy")
        show_comparison(compared, lambda key: f"the {key} lambda", out / CONTROLS_DIR / "metrics.json")
    from subnetlab.cli.commands._health import refuse_if_strict, report_health

    if len(runs) > 1 and not any(h.ok for h in healths):
        tried = ", ".join(f"{m['l0_lambda']:g}" for m in runs)
        refuse_if_strict(f"no lambda of the sweep ({tried}) gave a healthy subnetwork; lambda {best['l0_lambda']:g} "
                         "is selected anyway")
    report_health([(f"selected subnetwork (lambda {best['l0_lambda']:g})", chosen)])


def register(app: typer.Typer) -> None:
    app.command("discover")(executor_options(data_flag_options(discover)))
