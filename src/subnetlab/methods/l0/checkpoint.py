"""Resumable pruning state: gates, lambdas, optimizer moments, generator states and the step.

One ``checkpoint.safetensors`` holds every tensor and, in its string metadata,
the JSON part (step, config, history); it is written to a temporary name and
renamed, so it is always either the previous or the new checkpoint, never half
of one. ``checkpoint.json`` beside it repeats the JSON part for people to read.
Data order is a function of the step (``DataOrder``), so the step is all that
is needed to replay the remaining batches; on CPU a resumed run therefore ends
bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors import safe_open
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.io import load_tensors, save_tensors, write_json

CHECKPOINT = "checkpoint.safetensors"
CHECKPOINT_JSON = "checkpoint.json"
FORMAT = "subnetlab.prune-checkpoint/1"


@dataclass
class TrainingState:
    """Everything needed to continue a run at ``step`` (optimizer steps completed)."""

    step: int
    tensors: dict[str, Tensor]
    optimizer: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)


def _flatten_optimizer(state_dict: dict[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Split ``optimizer.state_dict()`` into tensors (``opt.<param>.<key>``) and JSON."""
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, entries in state_dict["state"].items():
        for key, value in entries.items():
            if isinstance(value, Tensor):
                tensors[f"opt.{pid}.{key}"] = value
            else:
                scalars.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("opt."):
            _, pid, key = name.split(".", 2)
            state.setdefault(int(pid), {})[key] = value
    for pid, entries in meta.get("scalars", {}).items():
        state.setdefault(int(pid), {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(run_dir: str | Path, state: TrainingState, optimizer_state: dict[str, Any]) -> None:
    """Write ``checkpoint.safetensors`` (authoritative) then ``checkpoint.json`` (for reading)."""
    opt_tensors, opt_meta = _flatten_optimizer(optimizer_state)
    info = {"format": FORMAT, "step": state.step, "optimizer": opt_meta, **state.info}
    text = json.dumps(info, sort_keys=True)
    save_tensors(Path(run_dir) / CHECKPOINT, {**state.tensors, **opt_tensors}, {"state": text})
    write_json(Path(run_dir) / CHECKPOINT_JSON, {k: v for k, v in info.items() if k != "optimizer"})


def load_checkpoint(run_dir: str | Path) -> TrainingState | None:
    """The last checkpoint in ``run_dir``, or None when there is none."""
    path = Path(run_dir) / CHECKPOINT
    if not path.is_file():
        return None
    tensors = load_tensors(path)
    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
    try:
        info = json.loads(meta["state"])
    except (KeyError, json.JSONDecodeError, RecursionError):
        raise SubnetlabError(f"{path}: not a subnetlab pruning checkpoint (no readable state)") from None
    if info.get("format") != FORMAT:
        raise SubnetlabError(f"{path}: unknown checkpoint format {info.get('format')!r}")
    optimizer = _unflatten_optimizer(tensors, info.pop("optimizer"))
    plain = {k: v for k, v in tensors.items() if not k.startswith("opt.")}
    return TrainingState(int(info.pop("step")), plain, optimizer, info)
