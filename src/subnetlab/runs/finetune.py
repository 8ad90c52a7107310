"""Fine-tuning with checkpoints and evaluation over training, resumable bit for bit.

``finetune(config, out_dir)`` trains ``config.model`` on ``config.task`` with
AdamW, evaluates the in-domain split and every out-of-domain subcase every
``eval_every`` steps into ``metrics.jsonl`` (the training curves of the
Heuristic Core paper's Figures 6 and 10), and saves a Hugging Face checkpoint
every ``save_every`` steps. The run directory follows the project contract:
``config.json`` first, ``metrics.json`` last (its presence marks a finished
run), ``model/`` the final weights.

Resuming: run the same configuration into the same directory. It restarts
from the newest checkpoint: weights, Adam moments, scheduler, the torch RNG
(dropout), the running loss, and the data order, which is a function of
``(seed, epoch)`` only. On CPU the result is bit-identical to an uninterrupted
run; ``metrics.jsonl`` lines past the checkpoint are dropped and rewritten.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.io import append_jsonl, atomic_directory, read_json, write_json, write_text
from subnetlab.methods.evaluate import evaluate
from subnetlab.methods.finetune.config import FinetuneConfig, check_warmup, total_steps
from subnetlab.methods.finetune.fresh import fresh_model_warning
from subnetlab.methods.finetune.model import model_for_task
from subnetlab.methods.finetune.state import (
    checkpoint_dirs,
    clean_temporaries,
    latest_resumable,
    load_training_state,
    save_checkpoint,
    tokenizer_state,
)
from subnetlab.methods.finetune.step import BatchOrder, train_step, training_optimizer
from subnetlab.methods.model_fit import check_lengths_fit
from subnetlab.optim import lr_scheduler
from subnetlab.progress import duration, stage, track, warning
from subnetlab.run_directory import absolute_inputs, differing_keys, run_entries, same_config
from subnetlab.runs.splits import save_splits
from subnetlab.runtime import autocast, describe_runtime, resolve_device, resolve_dtype, runtime_record
from subnetlab.tasks.base import Task
from subnetlab.tasks.spec import TaskSpec


def finetune_task(cfg: FinetuneConfig) -> Task:
    """The configured task with its extra evaluation splits attached; it must have training data."""
    task = TaskSpec(cfg.task, cfg.task_options, tuple(cfg.eval_data)).build()
    if not task.train:
        raise SubnetlabError(f"task {cfg.task} has no training examples (give it a training file)", setting="data")
    return task


def _absolute_inputs(cfg: FinetuneConfig) -> FinetuneConfig:
    """``cfg`` with its local input files (model directory, ``file:`` task, ``eval_data`` files) absolute."""
    paths = absolute_inputs({"model": cfg.model, "task": cfg.task, "eval_data": list(cfg.eval_data)})
    return replace(cfg, model=paths["model"], task=paths["task"], eval_data=paths["eval_data"])


def _check_run_dir(out: Path, cfg: FinetuneConfig) -> bool:
    """True when ``out`` already holds this finished run; error if it holds another run."""
    cfg_path = out / "config.json"
    if cfg_path.is_file():
        previous = {k: v for k, v in (read_json(cfg_path).get("finetune") or {}).items() if k != "device"}
        wanted = {k: v for k, v in cfg.to_json().items() if k != "device"}  # where it ran is not what it computes
        if not same_config(previous, wanted, out):  # by meaning: a model path in any spelling is the same model
            diff = differing_keys(previous, wanted, out)
            raise SubnetlabError(
                f"{out} holds a fine-tuning run with a different configuration ({', '.join(diff) or 'format'}); "
                "run it again with the same configuration to resume it, or choose another output directory",
                setting="out",
            )
        return (out / "metrics.json").is_file()
    if out.exists() and run_entries(out):
        raise SubnetlabError(f"{out} is not empty and holds no fine-tuning run; choose another output directory",
                             setting="out")
    return False


def _trim_log(path: Path, step: int) -> None:
    """Keep the metrics lines up to ``step`` (a resumed run rewrites the rest)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and json.loads(line)["step"] <= step]
    write_text(path, "".join(line + "\n" for line in kept))


def _final_model(out: Path, checkpoint: Path) -> None:
    """``out/model``: the last checkpoint without its trainer files (weights hard-linked)."""
    with atomic_directory(out / "model") as tmp:  # a full disk: an error, and no half-copied model
        for f in checkpoint.iterdir():
            if f.name in ("trainer_state.json", "optimizer.safetensors"):
                continue
            try:
                os.link(f, tmp / f.name)
            except OSError:
                shutil.copy2(f, tmp / f.name)


def _eval_line(record: dict[str, Any], total: int, seconds: float, steps_run: int) -> str:
    """``step 500/2000: train loss 0.6931, eval accuracy 0.5100 (n=50); about 7 min left``."""
    at = record["step"]
    loss = "" if record["train_loss"] is None else f"train loss {record['train_loss']:.4f}, "
    scores = ", ".join(f"{split} accuracy {score['accuracy']:.4f} (n={score['n']})"
                       for split, score in record["splits"].items() if "accuracy" in score)
    left = seconds / steps_run * (total - at) if steps_run > 0 else None
    return f"step {at}/{total}: {loss}{scores}" + ("" if at >= total or left is None else f"; {duration(left)}")


def finetune(cfg: FinetuneConfig, out_dir: str | os.PathLike, *, _stop_after: int | None = None) -> dict[str, Any]:
    """Run (or resume, or skip when finished) the fine-tuning ``cfg`` into ``out_dir``.

    ``_stop_after`` (tests only) raises KeyboardInterrupt after that many steps,
    as if the process had been killed there.
    """
    out = Path(out_dir)
    cfg = _absolute_inputs(cfg)  # stored absolute: the run directory means the same from any working directory
    if _check_run_dir(out, cfg):
        stage(f"{out}: already finished")
        return read_json(out / "metrics.json")
    task = finetune_task(cfg)
    warmup = check_warmup(cfg, len(task.train))
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    stage(describe_runtime(device, dtype))
    resume = latest_resumable(out)
    loaded = model_for_task(str(resume) if resume else cfg.model, task, seed=cfg.seed,
                            new_weights=() if resume else cfg.new_weights)
    check_lengths_fit(loaded.model, loaded.tokenizer, task, cfg.max_length, cfg.model)
    fresh = None if resume else fresh_model_warning(loaded.model, cfg.lr, cfg.model)
    if fresh is not None:  # after every check of the input: bad input stays one error line
        warning(fresh)
    new_weights = list(loaded.new_weights)  # a fresh task head; a resumed run's was created by its first start
    if resume is not None and (out / "config.json").is_file():
        new_weights = list(read_json(out / "config.json").get("new_weights") or [])
    out.mkdir(parents=True, exist_ok=True)  # only now: bad input above leaves no run directory behind
    write_json(out / "config.json", {"command": "finetune", "finetune": cfg.to_json(), "task": task.options,
                                     **runtime_record(device, dtype),
                                     **({"new_weights": new_weights} if new_weights else {})})
    save_splits(out, task)  # your own data: the rows it trains on, which later commands never evaluate on
    clean_temporaries(out)

    n = len(task.train)
    per_epoch = math.ceil(n / cfg.batch_size)
    total = total_steps(cfg, n)
    if resume is None:
        torch.manual_seed(cfg.seed)  # dropout stream of a fresh run
    model, tokenizer = loaded.model.to(device), loaded.tokenizer
    as_loaded = tokenizer_state(tokenizer)  # saved with every checkpoint, not the last batch's truncation
    optimizer = training_optimizer(model, cfg)
    scheduler = lr_scheduler(optimizer, total=total, warmup=warmup, decay=cfg.scheduler)
    state: dict[str, Any] = {"loss_sum": 0.0, "loss_count": 0, "elapsed": 0.0}
    step = 0
    if resume is not None:
        state = load_training_state(resume, optimizer, scheduler)
        step = int(state["step"])
        stage(f"resuming from {resume.name} of {total} steps")
    _trim_log(out / "metrics.jsonl", step)

    def log_eval(at: int) -> dict[str, Any]:
        with autocast(device, dtype):
            scores = evaluate(model, tokenizer, task, batch_size=cfg.eval_batch_size, max_length=cfg.max_length,
                              limit=cfg.eval_limit, show_progress=False)
        record = {"step": at, "epoch": at / per_epoch, "lr": scheduler.get_last_lr()[0],
                  "train_loss": state["loss_sum"] / state["loss_count"] if state["loss_count"] else None, "splits": scores}
        append_jsonl(out / "metrics.jsonl", record)
        state["loss_sum"], state["loss_count"] = 0.0, 0
        stage(_eval_line(record, total, time.time() - started, at - first))
        return record

    started = time.time() - float(state.get("elapsed", 0.0))
    first = step  # steps this process has run, for the time left: at - first
    stage(f"fine-tuning {cfg.model} on {task.name}: {n} examples, {total} steps ({per_epoch} per epoch)")
    if step == 0 and cfg.eval_at_start:
        log_eval(0)
    model.train()
    batches = BatchOrder(n, cfg.batch_size, cfg.seed)
    last = None
    for step in track(range(step, total), total=total - step, description="fine-tuning"):
        batch = task.batch_at(tokenizer, "train", batches.indices(step), max_length=cfg.max_length)
        with autocast(device, dtype):
            loss = train_step(model, task, {k: v.to(device) for k, v in batch.items()}, optimizer, scheduler,
                              cfg.grad_clip, step)
        state["loss_sum"] += float(loss.item())
        state["loss_count"] += 1
        done = step + 1
        if done % cfg.eval_every == 0 or done == total:
            last = log_eval(done)
        if done % cfg.save_every == 0 or done == total:
            state["elapsed"] = time.time() - started
            extra = {k: state[k] for k in ("loss_sum", "loss_count", "elapsed")}
            save_checkpoint(out, done, model, tokenizer, optimizer, scheduler, {**extra, "total_steps": total},
                            tokenizer_as_loaded=as_loaded)
        if _stop_after is not None and done >= _stop_after:
            raise KeyboardInterrupt(f"stopped after step {done}")
    final_ckpt = checkpoint_dirs(out)[-1][1]
    _final_model(out, final_ckpt)
    if last is None:  # resumed at the very end: the last evaluation is in the log
        last = json.loads((out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    metrics = {"steps": total, "epochs": total / per_epoch, "train_examples": n, "final_checkpoint": f"checkpoints/{final_ckpt.name}",
               "wall_seconds": time.time() - started, "final": last["splits"], "train_loss": last["train_loss"]}
    write_json(out / "metrics.json", metrics)
    stage(f"done: {out / 'metrics.json'}")
    return metrics
