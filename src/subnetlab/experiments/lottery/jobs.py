"""Analysis steps of the lottery-ticket reproduction (see ``experiments.lottery``); its jobs are in ``runs.lottery``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json
from subnetlab.tasks.base import Task


def model_dir(finetune_dir: Path) -> Path:
    return finetune_dir / "run" / "model"


def sentence_pairs(task: Task, split: str, n: int, source: str,
                   shared_data: Path | None) -> tuple[list[tuple[str, str | None]], str]:
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
    examples = task.examples(split)
    rows = [ex for ex in examples if ex.text_b is not None][:n]
    if rows:
        return [(ex.text_a, ex.text_b) for ex in rows], f"the first {len(rows)} pairs of the {split!r} split of {task.name}"
    # single-sentence tasks (CoLA, SST-2): one sentence per map, as the paper's maps of those tasks
    rows = [ex for ex in examples if ex.text_a][:n]
    if not rows:
        raise SubnetlabError(f"split {split!r} of task {task.name} has no sentences for attention maps")
    return [(ex.text_a, None) for ex in rows], f"the first {len(rows)} sentences of the {split!r} split of {task.name}"


def pattern_types(model_path: str, pairs: list[tuple[str, str | None]], max_length: int, device: str = "cpu",
                  gates: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """Raw and normed pattern types of every head of the model at ``model_path`` (loaded with eager attention).

    ``gates = (heads [L, H], mlps [L])``: read the maps in the model pruned to those components.
    """
    import torch

    from subnetlab.analysis.attention_types import check_types_defined, head_types
    from subnetlab.models import load_model
    from subnetlab.runtime import resolve_device

    loaded = load_model(model_path, head="base", attn_implementation="eager")
    check_types_defined(loaded.model)
    if loaded.tokenizer is None:
        raise SubnetlabError(f"{model_path}: no tokenizer to build attention maps with")
    loaded.model.to(resolve_device(device))
    with torch.no_grad():
        types = head_types(loaded.model, loaded.tokenizer, pairs, max_length=max_length, gates=gates)
    return types.to_dict()


def read_metrics(run_dir: Path) -> dict[str, Any]:
    return read_json(run_dir / "metrics.json")
