"""Fine-tuning checkpoints: Hugging Face weights plus everything needed to resume exactly.

``DIR/checkpoints/step-N/`` holds ``config.json`` + ``model.safetensors`` and
the tokenizer (loadable by any Hugging Face tool), ``trainer_state.json``
(step, running loss, optimizer hyperparameters, scheduler state) and
``optimizer.safetensors`` (Adam moments, the torch RNG state). Only the
newest checkpoint keeps its optimizer file: older ones stay as weights for
analysis over training (the effective-size curves) at a third of the disk.

A checkpoint is written into a temporary directory and renamed into place,
so a killed run never leaves a half-written ``step-N``. No pickle anywhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from subnetlab.errors import SubnetlabError
from subnetlab.io import WRITE_ERRORS, load_tensors, save_tensors, seal_directory, write_failed, write_json
from subnetlab.models.loading import quiet_transformers

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_dirs(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, path)`` of every complete checkpoint, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / STATE_FILE).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_resumable(run_dir: str | os.PathLike) -> Path | None:
    """The newest checkpoint that still has its optimizer state."""
    for _, path in reversed(checkpoint_dirs(run_dir)):
        if (path / OPTIMIZER_FILE).is_file():
            return path
    return None


def clean_temporaries(run_dir: str | os.PathLike) -> None:
    """Remove temporary checkpoint directories left by a killed run."""
    root = Path(run_dir) / "checkpoints"
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(".") and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)


def _rng_tensors() -> dict[str, torch.Tensor]:
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["rng.cuda"] = torch.cuda.get_rng_state()
    return out


def tokenizer_state(tokenizer: Any) -> tuple[Any, Any] | None:
    """A fast tokenizer's truncation and padding settings (its backend's), which every call with
    ``truncation=``/``max_length=`` changes and ``save_pretrained`` writes into ``tokenizer.json``."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    return (dict(backend.truncation) if backend.truncation else None,
            dict(backend.padding) if backend.padding else None)


def _restore_tokenizer_state(tokenizer: Any, state: tuple[Any, Any] | None) -> None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or state is None:
        return
    truncation, padding = state
    if truncation:
        backend.enable_truncation(**truncation)
    else:
        backend.no_truncation()
    if padding:
        backend.enable_padding(**padding)
    else:
        backend.no_padding()


def save_tokenizer(tokenizer: Any, directory: str | os.PathLike, state: tuple[Any, Any] | None = None) -> None:
    """``tokenizer.save_pretrained(directory)`` with its truncation and padding as ``state`` recorded them
    (``tokenizer_state`` of the tokenizer as the run loaded it): what the last batch set is not saved, so a run
    resumed from a checkpoint saves the tokenizer an uninterrupted run saves."""
    if tokenizer is None or not hasattr(tokenizer, "save_pretrained"):
        return
    now = tokenizer_state(tokenizer)
    _restore_tokenizer_state(tokenizer, state)
    try:
        tokenizer.save_pretrained(str(directory))
    finally:
        _restore_tokenizer_state(tokenizer, now)


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    model: nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    extra: dict[str, Any],
    tokenizer_as_loaded: tuple[Any, Any] | None = None,
) -> Path:
    """Write ``checkpoints/step-<step>`` atomically; drop older checkpoints' optimizer files.

    The tokenizer is saved with the truncation and padding of ``tokenizer_as_loaded`` (``save_tokenizer``)."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        with quiet_transformers():  # no "Writing model shards" bar at every checkpoint
            model.save_pretrained(str(tmp))
        save_tokenizer(tokenizer, tmp, tokenizer_as_loaded if tokenizer_as_loaded is not None
                       else tokenizer_state(tokenizer))
        opt = optimizer.state_dict()
        tensors, scalars = {}, {}
        for idx, state in opt["state"].items():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"state.{idx}.{key}"] = value
                else:
                    scalars[f"{idx}.{key}"] = value
        tensors.update(_rng_tensors())
        save_tensors(tmp / OPTIMIZER_FILE, tensors)
        write_json(tmp / STATE_FILE, {
            "step": step,
            "param_groups": [{**g, "betas": list(g["betas"])} if "betas" in g else g for g in opt["param_groups"]],
            "state_scalars": scalars,
            "scheduler": scheduler.state_dict(),
            **extra,
        })
        seal_directory(tmp)  # save_pretrained's files: readable by colleagues, on disk before the rename
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except WRITE_ERRORS as e:  # save_pretrained on a full disk: an error naming the checkpoint; older ones stay
        raise write_failed(final, e) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for _, older in checkpoint_dirs(run_dir):
        if older != final and (older / OPTIMIZER_FILE).is_file():
            (older / OPTIMIZER_FILE).unlink()
    return final


def load_training_state(
    checkpoint: Path,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> dict[str, Any]:
    """Restore optimizer, scheduler and RNG from ``checkpoint``; return its trainer state."""
    try:
        state = json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, RecursionError) as e:
        raise SubnetlabError(f"{checkpoint / STATE_FILE}: unreadable trainer state ({e})") from None
    tensors = load_tensors(checkpoint / OPTIMIZER_FILE)
    per_param: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("state."):
            _, idx, key = name.split(".", 2)
            per_param.setdefault(int(idx), {})[key] = value
    for name, value in state.get("state_scalars", {}).items():
        idx, key = name.split(".", 1)
        per_param.setdefault(int(idx), {})[key] = value
    groups = [{**g, "betas": tuple(g["betas"])} if "betas" in g else g for g in state["param_groups"]]
    try:
        optimizer.load_state_dict({"state": per_param, "param_groups": groups})
    except (ValueError, KeyError) as e:
        raise SubnetlabError(f"{checkpoint}: optimizer state does not fit this model ({e})") from None
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    return state
