"""Executor job functions of Subtask Induction: discover a subnetwork, and run transfer runs.

Both are ``fn(config, out_dir) -> metrics`` for ``subnetlab.executor.run_jobs``
(named ``"subnetlab.runs.transfer:discover_job"`` / ``":transfer_job"``), so the
CLI commands and the reproduction share them and a rerun skips finished work.
A transfer job holds one or more runs ``{condition, size, seed}``; runs of one
job with the same size train stacked when ``stack > 1``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import mask_weights
from subnetlab.io import read_json
from subnetlab.methods.continuous_sparsification import ContinuousSparsification, kept_percentages
from subnetlab.methods.controls import apply_control, check_controls
from subnetlab.methods.model_fit import check_model_fits_task
from subnetlab.models import load_model
from subnetlab.models.loading import LoadedModel
from subnetlab.progress import stage
from subnetlab.run_directory import record_runtime
from subnetlab.runs.health import Health, judge, read_health
from subnetlab.runs.job_config import JobConfig, optional, require_positive
from subnetlab.runs.splits import check_held_out, earlier_runs, held_out_options, save_splits
from subnetlab.runtime import (
    DTYPE_NAMES,
    autocast,
    describe_runtime,
    resolve_device,
    resolve_dtype,
    runtime_record,
    torch_threads,
)
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.base import Task
from subnetlab.tasks.spec import TaskSpec
from subnetlab.transfer.build import build_transfer_model
from subnetlab.transfer.conditions import check_conditions, check_reinit, get_condition
from subnetlab.transfer.controls import complement_matched, random_matched
from subnetlab.transfer.data import LMSplit, lm_split
from subnetlab.transfer.stacked import train_stacked
from subnetlab.transfer.train import ACCURACIES, LOSSES, TrainSettings, accuracy, check_choice, task_loss, train_model

ARITH_SPECIALS = 3  # <sep>, <pad>, <unk> after the numbers (subnetlab.tasks.arithmetic)


def own_data(task_name: str) -> bool:
    """True for the user's own data (``file:PATH``, ``hub:NAME``), whose split ``tasks.splits`` fixes per data file."""
    return task_name.startswith(("file:", "hub:"))


def lm_task_options(model: str, task_name: str, options: dict[str, Any], subnetwork: str | None = None) -> dict[str, Any]:
    """``options`` with, for your own data, the split settings of the runs that made ``model`` (fine-tuning) and
    ``subnetwork`` (discovery) on the same data where not given, so discovery and transfer hold out the rows
    those runs held out (``runs.splits``)."""
    return held_out_options(model, task_name, options, subnetwork) if own_data(task_name) else dict(options)


def task_options_for(task_name: str, options: dict[str, Any], seed: int) -> dict[str, Any]:
    """A generated task draws its rows from the run's seed; your own data's split is the data file's, not the seed's."""
    return dict(options) if own_data(task_name) else {"seed": seed, **options}


def load_lm(path: str, task_name: str, task_options: dict[str, Any],
            subnetwork: str | None = None) -> tuple[LoadedModel, Task]:
    """The causal LM at ``path`` and its task; an arithmetic task's range follows the model's vocabulary.

    Your own data is checked whole here (every split tokenizes to prompts of one length, as tensor
    training needs; no evaluation or test row was a training row of the runs that made ``path`` or
    ``subnetwork``), so a job does not find out later."""
    loaded = load_model(path, head="causal-lm")
    options = dict(task_options)
    if task_name.startswith("arith:"):
        vocab = int(loaded.model.config.vocab_size)
        options.setdefault("max_number", vocab - ARITH_SPECIALS)
    task = TaskSpec(task_name, options).build()
    check_model_fits_task(loaded.model, task.tokenizer or loaded.tokenizer, task, path)
    if own_data(task_name) and task.kind == "lm":
        missing = [s for s in ("train", "eval", "test") if s not in task.split_names]
        if missing:
            raise SubnetlabError(f"task {task.name}: no {', '.join(missing)} split (discovery and transfer train on "
                                 "train, choose on eval and report test; test_fraction 0 holds out no test rows)",
                                 setting="task_options")
        _splits(task, task.tokenizer or loaded.tokenizer)
    check_held_out(task, earlier_runs(path, subnetwork))
    loaded.model.eval()
    return loaded, task


def check_lm_task(path: str, task_name: str, task_options: dict[str, Any], what: str,
                  subnetwork: str | None = None) -> Task:
    """Before any job of a discovery or transfer sweep: the model loads (a missing one is refused), the task is a
    language-model task and fits it (``load_lm``); the built task. The command and ``sl.discover`` /
    ``sl.transfer_subnetwork`` run this one check."""
    _, task = load_lm(path, task_name, task_options, subnetwork)
    if task.kind != "lm":
        raise SubnetlabError(f"task {task_name}: {what} runs on language-model tasks (e.g. arith:ab, or your own data "
                             "with an answer column)", setting="task")
    return task


def _quiet_hub() -> None:
    """Worker processes print one line per stage, not the weight-loading bars of every job."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _splits(task: Task, tokenizer: Any = None, device: torch.device | None = None) -> dict[str, LMSplit]:
    splits = {s: lm_split(task, s, tokenizer) for s in task.split_names}
    return {k: v.to(device) for k, v in splits.items()} if device is not None else splits


def check_dtype_name(name: str | None, training: str | None = None) -> None:
    """A job's ``dtype`` names one of ``runtime.DTYPE_NAMES`` (whether the device can run it is checked there);
    a job that trains (``training`` says what) refuses float16, which would need loss scaling."""
    if name is not None and name not in DTYPE_NAMES:
        raise SubnetlabError(f"dtype {name!r}: expected {', '.join(DTYPE_NAMES)}", setting="dtype")
    if name == "float16" and training:
        raise SubnetlabError(f"dtype float16 has no loss scaling in {training} (gradients would underflow); use bfloat16 "
                             "or float32", setting="dtype")


@dataclass(frozen=True)
class DiscoverJobConfig(JobConfig):
    """``discover_job``'s config: the trained LM, the subtask, one continuous-sparsification setting."""

    what: ClassVar[str] = "discovery setting"
    model: str
    task: str
    cs: dict[str, Any]
    task_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    threads: int | None = None
    device: str | None = None
    loss: str | None = optional()  # "last-token" (none) or "sequence" (the released math/ablate.py)
    accuracy: str | None = optional()  # "answers" (none) or "vocabulary" (the released math/ablate.py)
    dtype: str | None = optional()  # forward passes: None (float32), bfloat16 or float16 autocast
    control: str | None = optional()  # a search control (methods.controls), seeded by the run's seed

    def __post_init__(self) -> None:
        if self.control is not None:
            check_controls([self.control])
        require_positive("discovery", "threads", self.threads, allow_none=True)
        check_dtype_name(self.dtype, "discovery (the mask logits are trained)")
        self.strategy  # checks the continuous-sparsification settings
        check_choice(self.loss_name, LOSSES, "loss")
        check_choice(self.accuracy_over, ACCURACIES, "accuracy")

    @property
    def loss_name(self) -> str:
        return self.loss or "last-token"

    @property
    def accuracy_over(self) -> str:
        return self.accuracy or "answers"

    @cached_property
    def strategy(self) -> ContinuousSparsification:
        fields_ = dict(self.cs)
        if "include" in fields_:
            fields_["include"] = tuple(fields_["include"])
        return ContinuousSparsification(**fields_)


@dataclass(frozen=True)
class TransferJobConfig(JobConfig):
    """``transfer_job``'s config: the trained LM, its subnetwork, the target task and the runs to train."""

    what: ClassVar[str] = "transfer setting"
    model: str
    task: str
    runs: list[dict[str, Any]]
    subnetwork: str | None = None
    task_options: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    reinit: str = "all"
    freeze: bool = True
    stack: int = 1
    threads: int | None = None
    device: str | None = None
    layers: int | None = optional()
    init_std: float | None = optional()  # fresh masked matrices from N(0, std^2) (transfer.build_transfer_model)
    dtype: str | None = optional()  # forward passes: None (float32), bfloat16 or float16 autocast

    def __post_init__(self) -> None:
        require_positive("transfer", "stack", self.stack)
        check_dtype_name(self.dtype, "transfer training")
        if self.init_std is not None and not self.init_std > 0:
            raise SubnetlabError(f"init_std {self.init_std!r}: expected a positive standard deviation",
                                 setting="init_std")
        require_positive("transfer", "threads", self.threads, allow_none=True)
        self.settings  # checks the training settings
        check_reinit(self.reinit)
        for run in self.runs:
            if not isinstance(run, dict) or not {"condition", "size", "seed"} <= set(run):
                raise SubnetlabError(f"transfer run {run!r}: expected condition, size and seed", setting="runs")
        check_conditions(list(dict.fromkeys(run["condition"] for run in self.runs)),  # a stack's runs share one
                         has_subnetwork=self.subnetwork is not None)

    @cached_property
    def settings(self) -> TrainSettings:
        return TrainSettings(**self.train)


def discover_job(config: dict, out_dir: Path) -> dict:
    """Continuous sparsification with one ``l0_lambda``; writes ``subnetwork.safetensors``.

    Config: ``model`` (directory), ``task`` (e.g. ``arith:ab``), ``task_options``,
    ``cs`` (``ContinuousSparsification`` fields, ``l0_lambda`` among them),
    ``seed``, ``threads``, and optionally ``loss`` (``"last-token"``, the default,
    or ``"sequence"``) and ``accuracy`` (``"answers"``, the default, or
    ``"vocabulary"``), as in ``subnetlab.transfer.train``. Returns evaluation and test accuracy with the hard
    mask, the full model's test accuracy on the subtask, and Table 3's kept
    percentages. A lambda sweep is one job per value, then ``select_best``.
    """
    _quiet_hub()
    job = DiscoverJobConfig.from_dict(config)
    with torch_threads(job.threads):
        return _discover(job, Path(out_dir))


def _discover(job: DiscoverJobConfig, out_dir: Path) -> dict:
    seed = int(job.seed)
    loaded, task = load_lm(job.model, job.task, task_options_for(job.task, job.task_options, seed))
    save_splits(out_dir, task)  # the real rows: a shuffled-labels control permutes their answers below
    loaded = apply_control(job.control, loaded, task, seed)  # methods.controls: the same search, nothing to find
    device = resolve_device(job.device or "cpu")
    dtype = resolve_dtype(job.dtype, device)
    stage(describe_runtime(device, dtype))
    record_runtime(out_dir, runtime_record(device, dtype))  # where it ran: not compared when the run resumes
    model, adapter = loaded.model.to(device), loaded.adapter
    splits = _splits(task, loaded.tokenizer if task.tokenizer is None else None, device)
    train, ev, test = splits["train"], splits["eval"], splits["test"]
    strategy = job.strategy
    g = torch.Generator().manual_seed(seed)
    stage(f"discovery on {task.name}: lambda={strategy.l0_lambda:g}, {strategy.epochs} epochs of {len(train)} rows")
    started, cpu_started = time.perf_counter(), time.process_time()
    over = job.accuracy_over
    with autocast(device, dtype):  # forward passes in the run's precision; the masks and weights stay float32
        full_acc = accuracy(model, test, over=over)
        found = strategy.fit(
            model, adapter,
            batches=lambda epoch: [(train.input_ids[r], train.targets[r]) for r in train.batches(strategy.batch_size, g)],
            loss_fn=lambda m, b: task_loss(m, b[0], b[1], job.loss_name),
            evaluate=lambda m: accuracy(m, ev, over=over),
            seed=seed,
            held_out_loss=lambda m: _held_out_loss(m, ev, job.loss_name),  # plateau stopping's monitor (eval rows)
        )
    sub = Subnetwork.from_weight_masks(
        adapter, found.masks, method="continuous-sparsification", seed=seed, ablation="zero",
        extra={"l0_lambda": repr(strategy.l0_lambda), "task": task.name, "epoch": str(found.epoch)})
    with mask_weights(model, {n: m.to(device, torch.float32) for n, m in sub.weights.items()}), autocast(device, dtype):
        test_acc = accuracy(model, test, over=over)
    sub.save(out_dir / "subnetwork.safetensors")
    kept = kept_percentages(sub.weights, adapter)
    metrics = {
        "subnetwork": str(out_dir / "subnetwork.safetensors"), "task": task.name, "l0_lambda": strategy.l0_lambda,
        "eval_accuracy": found.eval_accuracy, "test_accuracy": test_acc, "epoch": found.epoch,
        "full_model_test_accuracy": full_acc, "kept_percent": kept["overall"], "kept_percent_per_layer": kept["per_layer"],
        "kept": kept["kept"], "masked_total": kept["total"],
        "history": [vars(h) for h in found.history], "stopping": found.stopping, "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu_started, "seed": seed,
        **({} if job.control is None else {"control": job.control}),
    }
    return {**metrics, "health": discovery_health(metrics).to_dict()}


def _held_out_loss(model: torch.nn.Module, split: LMSplit, loss: str, batch_size: int = 1000) -> float:
    """Mean task loss ``loss`` of ``model`` over ``split`` (no gradient; the caller sets the masks' mode)."""
    total = 0.0
    for start in range(0, len(split), batch_size):
        rows = slice(start, start + batch_size)
        total += float(task_loss(model, split.input_ids[rows], split.targets[rows], loss)) * len(split.input_ids[rows])
    return total / len(split)


def discovery_health(metrics: dict) -> Health:
    """The health of a discovery run from its metrics' raw numbers: the kept mask's size, the masks still
    undecided after the last epoch, the objective (task loss + L0 term) per epoch. A run written before
    health was recorded is judged from what its metrics hold (nothing: no problem found)."""
    history = metrics.get("history") or []
    last = history[-1] if history else {}
    masked = last.get("masked") or None  # absent from runs written before the count was recorded
    return judge(kept=metrics.get("kept"), maskable=metrics.get("masked_total"),
                 undecided=last.get("undecided") if masked else None, gates=masked,
                 objective=[h["loss"] + h["penalty"] for h in history if "loss" in h and "penalty" in h],
                 stopping=metrics.get("stopping") if isinstance(metrics.get("stopping"), dict) else None)


def sweep_health(metrics: list[dict]) -> list[Health]:
    """Each discovery run's health: as recorded, or judged from its raw numbers."""
    return [read_health(m) or discovery_health(m) for m in metrics]


def select_best(metrics: list[dict], selection: Any = None) -> dict:
    """The lambda sweep's winner among ``discover_job`` metrics, by ``selection``
    (a ``continuous_sparsification.LambdaChoice``; default: the sparsest subnetwork within 1 point of the
    best evaluation accuracy, the paper's principle; ``LambdaChoice("best-accuracy")``: the most accurate, the vision study's rule).

    A degenerate subnetwork (keeping no weight, or every one) is never chosen while another run's is not:
    the rules choose among the others (``degenerate_passed_over`` names the runs left out). The ``lambda``
    rule names its run and keeps it whatever its health (its problems are reported, not overruled)."""
    from subnetlab.methods.continuous_sparsification import LambdaChoice

    if not metrics:
        raise SubnetlabError("no discovery results to choose from")
    selection = selection if selection is not None else LambdaChoice()
    candidates = metrics if selection.rule == "lambda" else _not_degenerate(metrics) or metrics
    return selection.choose(candidates, lambda m: m["eval_accuracy"], lambda m: m["kept_percent"],
                            lambda m: m["l0_lambda"])


def _not_degenerate(metrics: list[dict]) -> list[dict]:
    return [m for m, h in zip(metrics, sweep_health(metrics)) if "degenerate" not in h.problems]


def degenerate_passed_over(metrics: list[dict], selection: Any = None) -> list[dict]:
    """The runs ``select_best`` left out as degenerate (none when every run is, or under the ``lambda`` rule)."""
    if selection is not None and selection.rule == "lambda":
        return []
    kept = _not_degenerate(metrics)
    return [m for m in metrics if kept and not any(m is k for k in kept)]


def subnetwork_health(sub: Subnetwork, path: str | Path | None = None) -> Health:
    """The health of a transfer's subnetwork input: as its discovery run recorded it (the ``metrics.json``
    beside ``path`` that names this file), else judged from the file alone (how many units it keeps)."""
    if path is not None:
        beside = Path(path).parent / "metrics.json"
        if beside.is_file():
            try:
                recorded = read_json(beside)
            except SubnetlabError:
                recorded = None
            same = isinstance(recorded, dict) and Path(str(recorded.get("subnetwork", ""))).resolve() == Path(path).resolve()
            health = read_health(recorded) if same else None
            if health is not None and health.kept == sub.count():  # the file as it was judged
                return health
    return judge(kept=sub.count(), maskable=sub.maskable())


def check_transfer_input(health: Health, conditions: list[str]) -> None:
    """Refuse to transfer an empty subnetwork: every masked condition would train the empty-mask control
    under another name (a "subnetwork" result equal to scratch by construction). Only ``empty-mask`` may."""
    using = [c for c in conditions if get_condition(c).needs_subnetwork and c != "empty-mask"]
    if health.empty and using:
        raise SubnetlabError(f"subnetwork keeps nothing (0 of {health.maskable} maskable units): condition "
                             f"{using[0]!r} would train the empty-mask control under its name; rediscover it (a smaller "
                             "L0 penalty, more epochs) or run only the empty-mask condition", setting="subnetwork")


def _subnetwork_for(condition: str, sub: Subnetwork | None, seed: int) -> Subnetwork | None:
    if condition == "random-matched":
        return random_matched(sub, seed)
    if condition == "complement-matched":
        return complement_matched(sub, seed)
    return sub


def transfer_job(config: dict, out_dir: Path) -> dict:
    """Train every run of ``config["runs"]`` and return each one's best-on-eval test accuracy.

    Config: ``model`` (the trained model's directory), ``subnetwork`` (file, for the
    masked conditions), ``task`` (e.g. ``arith:a^2+ab``), ``task_options``,
    ``runs`` (list of ``{condition, size, seed}``), ``train`` (``TrainSettings``
    fields), ``reinit``, ``freeze``, ``stack``, ``threads``, and optionally
    ``init_std`` (``build_transfer_model``).
    """
    _quiet_hub()
    job = TransferJobConfig.from_dict(config)
    with torch_threads(job.threads):
        return _transfer(job, Path(out_dir))


def _transfer(job: TransferJobConfig, out_dir: Path) -> dict:
    settings = job.settings
    device = resolve_device(job.device or "cpu")
    dtype = resolve_dtype(job.dtype, device)
    stage(describe_runtime(device, dtype))
    record_runtime(out_dir, runtime_record(device, dtype))  # where it ran: not compared when the run resumes
    trained = load_model(job.model, head="causal-lm")
    trained.model.to(device)
    sub = Subnetwork.load(job.subnetwork, trained.adapter) if job.subnetwork else None
    health = subnetwork_health(sub, job.subnetwork) if sub is not None else None
    if health is not None:
        check_transfer_input(health, [run["condition"] for run in job.runs])
    task_options = dict(job.task_options)
    arithmetic = job.task.startswith("arith:")
    if arithmetic:
        task_options.setdefault("max_number", int(trained.model.config.vocab_size) - ARITH_SPECIALS)
    prepared = []
    own = None
    if own_data(job.task):  # one split for every run: the data file's, checked against the runs that made the inputs
        own = TaskSpec(job.task, task_options).build()
        check_held_out(own, earlier_runs(job.model, job.subnetwork))
        save_splits(out_dir, own)
    for run in job.runs:
        condition, size, seed = run["condition"], int(run["size"]), int(run["seed"])
        get_condition(condition, has_subnetwork=sub is not None)
        ambiguity = {"ambiguous": True, "n_disambiguation": size} if arithmetic else {}  # other tasks: their own rows
        task = own if own is not None else TaskSpec(job.task, {**ambiguity, "seed": seed, **task_options}).build()
        tm = build_transfer_model(trained.model, condition, seed=seed, subnetwork=_subnetwork_for(condition, sub, seed),
                                  reinit=job.reinit, freeze=bool(job.freeze),
                                  adapter=trained.adapter, init_std=job.init_std)
        tokenizer = trained.tokenizer if task.tokenizer is None else None  # your own data: the model's tokenizer
        prepared.append({"run": run, "tm": tm, "splits": _splits(task, tokenizer, device), "seed": seed})
    with autocast(device, dtype):
        results = _train_all(prepared, settings, int(job.stack))
    runs = []
    for item, res in zip(prepared, results):
        runs.append({**item["run"], "test_accuracy": res.test_accuracy, "eval_accuracy": res.eval_accuracy,
                     "best_epoch": res.best_epoch, "final_eval_accuracy": res.final_eval_accuracy,
                     "transferred": item["tm"].transferred, "train_rows": len(item["splits"]["train"]),
                     "seconds": res.seconds, "cpu_seconds": res.cpu_seconds, "sequences": res.sequences,
                     "stopping": res.stopping,
                     "curve": [[c["epoch"], round(c["loss"], 5), c["eval_accuracy"]] for c in res.curve]})
    return {"runs": runs, **({"health": health.to_dict()} if health is not None else {})}


def _train_all(prepared: list[dict], settings: TrainSettings, stack: int) -> list:
    """Single runs one by one; with ``stack > 1``, runs of equal size and parameter roles together."""
    results: list = [None] * len(prepared)
    if stack <= 1:
        for i, item in enumerate(prepared):
            s = item["splits"]
            results[i] = train_model(item["tm"].model, s["train"], s["eval"], s["test"], settings, item["seed"])
        return results
    groups: dict[tuple, list[int]] = {}
    for i, item in enumerate(prepared):
        tm = item["tm"]
        key = (len(item["splits"]["train"]), tm.handle is not None, tuple(sorted(tm.frozen)), tm.condition == "full")
        groups.setdefault(key, []).append(i)
    for members in groups.values():
        for start in range(0, len(members), stack):
            chunk = members[start : start + stack]
            items = [prepared[i] for i in chunk]
            out = train_stacked([it["tm"] for it in items], [it["splits"]["train"] for it in items],
                                [it["splits"]["eval"] for it in items], [it["splits"]["test"] for it in items],
                                settings, [it["seed"] for it in items])
            for i, r in zip(chunk, out):
                results[i] = r
    return results


__all__ = ["check_lm_task", "check_transfer_input", "degenerate_passed_over", "discover_job", "discovery_health", "lm_task_options",
           "load_lm", "own_data", "select_best", "subnetwork_health", "sweep_health", "task_options_for", "transfer_job"]
