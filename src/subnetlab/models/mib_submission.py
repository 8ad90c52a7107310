"""The MIB circuit track's submission folder, written and checked.

As the track's README (hannamw/MIB-circuit-track, "Submitting to the MIB Leaderboard") lays it out: one
folder per task and model, named ``<task>_<model>`` (``ioi_gpt2``, ``arc-easy_llama3``), holding either

* one ``.json`` or ``.pt`` graph file with a floating-point score on every edge (importances), or
* nine graph files of binary circuits (``in_graph``; scores may be left out), one with at most each of
  0.1, 0.2, 0.5, 1, 2, 5, 10, 20 and 50 % of the edges.

MIB's leaderboard also asks for at least two tasks and two models, and reads only its own task and model
names; ``check(root, mib_names=False)`` relaxes both for folders of other models. Every file is read
with ``models.mib_graph`` (each field checked), so a malformed one is refused naming the file and field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.models import mib_graph
from subnetlab.models.circuit import Circuit

MIB_TASKS = ("ioi", "mcqa", "arithmetic-addition", "arithmetic-subtraction", "arc-easy", "arc-challenge")
MIB_MODELS = ("gpt2", "qwen2.5", "gemma2", "llama3", "interpbench")
CAPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # nine circuits: one at or under each
IMPORTANCES = "importances"
SUFFIXES = (".json", ".pt")


def folder_name(task: str, model: str) -> str:
    """``<task>_<model>`` from any task and model names (MIB's own pass unchanged; others made safe)."""
    def part(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9.\-]+", "-", text).strip("-") or "x"

    return f"{part(task)}_{part(model)}"


def write(root: str | Path, task: str, model: str, circuit: Circuit, d_model: int, suffix: str = ".json") -> Path:
    """Write ``circuit``'s scores as ``root/<task>_<model>/importances<suffix>``; returns the file."""
    if suffix not in SUFFIXES:
        raise SubnetlabError(f"MIB files are .json or .pt, not {suffix!r}", setting="mib_submission")
    if circuit.scores is None:
        raise SubnetlabError("a MIB importance file needs a score on every edge", setting="mib_submission")
    path = Path(root) / folder_name(task, model) / f"{IMPORTANCES}{suffix}"
    mib_graph.save(circuit, path, d_model)
    return path


def _folder(folder: Path, mib_names: bool) -> dict[str, Any]:
    parts = folder.name.split("_")
    if len(parts) != 2 or not all(parts):
        raise SubnetlabError(f"{folder}: a folder name is <task>_<model> (one underscore), e.g. ioi_gpt2",
                             setting="mib_submission")
    task, model = parts
    if mib_names and task not in MIB_TASKS:
        raise SubnetlabError(f"{folder}: task {task!r} is not one of MIB's ({', '.join(MIB_TASKS)})",
                             setting="mib_submission")
    if mib_names and model not in MIB_MODELS:
        raise SubnetlabError(f"{folder}: model {model!r} is not one of MIB's ({', '.join(MIB_MODELS)})",
                             setting="mib_submission")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    if len(files) not in (1, len(CAPS)):
        raise SubnetlabError(f"{folder}: {len(files)} .json/.pt files; MIB takes one importance file or "
                             f"{len(CAPS)} binary circuits", setting="mib_submission")
    circuits = [mib_graph.load(p, setting="mib_submission") for p in files]
    shapes = {(c.graph.num_layers, c.graph.num_heads, c.graph.parallel_attn_mlp) for c in circuits}
    if len(shapes) > 1:
        raise SubnetlabError(f"{folder}: cfg: its files describe graphs of different models", setting="mib_submission")
    if len(files) == 1:
        if circuits[0].scores is None:
            edge = circuits[0].graph.edge_names[0]
            raise SubnetlabError(f"{files[0]}: edges[{edge!r}].score: missing (an importance file scores every edge)",
                                 setting="mib_submission")
        return {"folder": folder.name, "task": task, "model": model, "kind": "importances", "files": [files[0].name],
                "edges": circuits[0].graph.num_edges}
    edges = circuits[0].graph.num_edges
    sized = sorted(zip((int(c.kept().sum()) for c in circuits), files))
    for cap, (count, path) in zip(CAPS, sized):
        if count > cap * edges:
            raise SubnetlabError(f"{path}: in_graph: {count} of {edges} edges kept ({100 * count / edges:.3g} %); "
                                 f"the nine circuits must fit under {', '.join(f'{100 * c:g}' for c in CAPS)} % of "
                                 f"the edges, one each (this one is matched to {100 * cap:g} %)",
                                 setting="mib_submission")
    return {"folder": folder.name, "task": task, "model": model, "kind": "circuits",
            "files": [p.name for _, p in sized], "kept": [c for c, _ in sized], "edges": edges}


def check_target(root: str | Path, task: str, model: str, suffix: str = ".json") -> Path:
    """Before any work: ``write(root, task, model, ...)`` could write its file and ``check(root, mib_names=False)``
    would then pass (``root`` creatable, its other folders well formed, nothing else in the one to be written);
    returns the file ``write`` would write."""
    from subnetlab.run_directory import check_output_file, check_writable

    base = check_writable(root, setting="mib_submission")
    target = base / folder_name(task, model)
    path = check_output_file(target / f"{IMPORTANCES}{suffix}", setting="mib_submission")
    if base.is_dir():
        for folder in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if folder != target:
                _folder(folder, mib_names=False)
    if target.is_dir():
        others = sorted(p.name for p in target.iterdir() if p.is_file() and p.suffix in SUFFIXES and p != path)
        if others:
            raise SubnetlabError(f"{target}: already holds {', '.join(others)}; MIB takes one importance file per "
                                 "folder (move them, or choose another submission folder)", setting="mib_submission")
    return path


def check(root: str | Path, mib_names: bool = True) -> list[dict[str, Any]]:
    """Check a submission folder; one summary per ``<task>_<model>`` folder, or a ``SubnetlabError`` naming the
    folder, file and field at fault."""
    base = Path(root)
    if not base.is_dir():
        raise SubnetlabError(f"{base}: no such directory", setting="mib_submission")
    folders = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise SubnetlabError(f"{base}: no <task>_<model> folder in it", setting="mib_submission")
    rows = [_folder(folder, mib_names) for folder in folders]
    if mib_names:
        for what in ("task", "model"):
            found = sorted({row[what] for row in rows})
            if len(found) < 2:
                raise SubnetlabError(f"{base}: MIB's leaderboard takes at least two {what}s; found "
                                     f"{', '.join(found)}", setting="mib_submission")
    return rows


__all__ = ["CAPS", "IMPORTANCES", "MIB_MODELS", "MIB_TASKS", "check", "check_target", "folder_name", "write"]
