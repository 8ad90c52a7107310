"""Job functions and analysis steps of the lottery-ticket reproduction (see ``experiments.lottery``).

Job functions follow the executor contract ``fn(config, out_dir) -> metrics``;
the executor writes ``config.json`` / ``metrics.json`` in ``out_dir``, so the
fine-tuning run (which keeps its own ``config.json``) lives in ``out_dir/run``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json
from subnetlab.methods.finetune.train import finetune
from subnetlab.methods.finetune.config import FinetuneConfig
from subnetlab.methods.finetune.state import OPTIMIZER_FILE, checkpoint_dirs
from subnetlab.tasks.base import Task


def finetune_job(config: dict[str, Any], out_dir: str | os.PathLike) -> dict[str, Any]:
    """Fine-tune ``config['finetune']`` into ``out_dir/run``; the model ends up in ``out_dir/run/model``."""
    run = Path(out_dir) / "run"
    metrics = finetune(FinetuneConfig.from_json(config["finetune"]), run)
    for _, checkpoint in checkpoint_dirs(run):  # finished: resuming needs no optimizer state (2/3 of the disk)
        (checkpoint / OPTIMIZER_FILE).unlink(missing_ok=True)
    return {"final": metrics["final"], "train_loss": metrics["train_loss"], "steps": metrics["steps"],
            "train_examples": metrics["train_examples"], "wall_seconds": metrics["wall_seconds"],
            "model": str(run / "model")}


def model_dir(finetune_dir: Path) -> Path:
    return finetune_dir / "run" / "model"


def sentence_pairs(task: Task, split: str, n: int, source: str, shared_data: Path | None) -> tuple[list[tuple[str, str]], str]:
    """Pairs whose attention maps are classified, and a description of where they come from.

    ``source="mnli-shared"`` takes the first ``n`` rows of the real MNLI
    development sample in ``../shared/data/mnli`` when it is there (natural
    sentences, unlike the synthetic corpus), else falls back to ``task``.
    """
    if n < 1:
        raise SubnetlabError(f"pattern_pairs {n} must be at least 1")
    if source == "mnli-shared" and shared_data is not None:
        path = shared_data / "mnli" / "dev_matched_1k.tsv"
        if path.is_file():
            from subnetlab.tasks.nli.files import load_mnli

            rows = load_mnli(path)[:n]
            return [(ex.text_a, ex.text_b or "") for ex in rows], f"the first {len(rows)} real MNLI dev-matched pairs ({path.name})"
    elif source not in ("task", "mnli-shared"):
        raise SubnetlabError(f"pattern_source {source!r}: expected task or mnli-shared")
    rows = [ex for ex in task.examples(split) if ex.text_b is not None][:n]
    if not rows:
        raise SubnetlabError(f"split {split!r} of task {task.name} has no sentence pairs for attention maps")
    return [(ex.text_a, ex.text_b) for ex in rows], f"the first {len(rows)} pairs of the {split!r} split of {task.name}"


def pattern_types(model_path: str, pairs: list[tuple[str, str]], max_length: int, device: str = "cpu") -> dict[str, Any]:
    """Raw and normed pattern types of every head of the model at ``model_path`` (loaded with eager attention)."""
    import torch

    from subnetlab.analysis.attention_types import head_types
    from subnetlab.methods.lottery.retrain import resolve_device
    from subnetlab.models import load_model

    loaded = load_model(model_path, head="base", attn_implementation="eager")
    if loaded.tokenizer is None:
        raise SubnetlabError(f"{model_path}: no tokenizer to build attention maps with")
    loaded.model.to(resolve_device(device))
    with torch.no_grad():
        types = head_types(loaded.model, loaded.tokenizer, pairs, max_length=max_length)
    return types.to_dict()


def read_metrics(run_dir: Path) -> dict[str, Any]:
    return read_json(run_dir / "metrics.json")
