"""The one reader of scores and graph files: every check a file passes before a method or an evaluation uses it.

A scores file ranks a model's edges or nodes; a graph file (``graph.json``) is a ``Circuit`` written as JSON.
Whoever reads one (a warm start, a faithfulness curve, a MIB graph) goes through ``read_scores`` or
``read_graph_file``, so every reader refuses the same files the same way, before any work:

* **readable**: a safetensors file whose header, offsets and shapes hold (``io.load_tensors``), or JSON;
* **format**: the file says what it is (``format`` metadata, or a checkpoint's ``state``), one of
  ``SCORES_FORMATS``; a subnetwork file (0/1 masks: a circuit, not scores), a model's weights or a file
  without a format is refused by name;
* **kind and shape**: edge scores ``edges`` ``[edges]`` of this model's graph (the shape the file records,
  else the model's graph with as many edges), or node scores ``heads`` ``[layers, heads]`` and ``mlps``
  ``[layers]`` of this model's family;
* **values**: float32 or float64 (integers are counts or masks, float16 loses the ranking's ties), every one
  finite (a NaN ranks nowhere; an infinity swamps every warm start).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.io import load_tensor_metadata, load_tensors
from subnetlab.models.circuit import Circuit, check_model_graph

ATTRIBUTION_FORMAT = "subnetlab.attribution/1"  # eap / eap-ig scores (runs.attribution)
CHECKPOINT_FORMAT = "subnetlab.prune-checkpoint/1"  # a mask trainer's checkpoint: its log-alphas
GATES_FORMAT = "subnetlab.gates/1"  # a Heuristic Core search level's log-alphas (runs.prune_search)
SCORES_FORMATS = (ATTRIBUTION_FORMAT, CHECKPOINT_FORMAT, GATES_FORMAT)
SUBNETWORK_FORMAT = "subnetlab.subnetwork/1"
SCORE_DTYPES = (torch.float32, torch.float64)
EDGE_KEYS = ("edges", "log_alpha_edges")
NODE_KEYS = (("heads", "mlps"), ("log_alpha_heads", "log_alpha_mlps"))


@dataclass(frozen=True)
class Scores:
    """What a scores file ranks: edges (``circuit`` holds the graph and its scores) or nodes (``heads``, ``mlps``)."""

    level: str  # "edges" or "nodes"
    absolute: bool  # rank by magnitude (attribution scores) or by signed value (log-alphas)
    circuit: Circuit | None = None
    heads: Tensor | None = None  # [layers, heads]
    mlps: Tensor | None = None  # [layers]


def file_format(metadata: dict[str, str]) -> str | None:
    """The ``format`` a tensor file records: its metadata's, or the one inside a checkpoint's ``state``."""
    if "format" in metadata:
        return metadata["format"]
    try:
        state = json.loads(metadata.get("state") or "{}")
    except (json.JSONDecodeError, RecursionError):
        return None
    return state.get("format") if isinstance(state, dict) else None


def check_score_values(path: str, name: str, values: Tensor, setting: str, names: Any = None) -> Tensor:
    """``values`` as float32 when they are float32 / float64 and all finite; else one error naming the first bad one."""
    if values.dtype not in SCORE_DTYPES:
        raise SubnetlabError(f"{path}: {name} has dtype {str(values.dtype).removeprefix('torch.')}; scores are "
                             "float32 or float64 numbers", setting=setting)
    bad = ~torch.isfinite(values.reshape(-1))
    if bool(bad.any()):
        first = int(bad.nonzero()[0])
        where = f"edge {first}, {names[first]}" if names is not None else f"entry {first}"
        raise SubnetlabError(f"{path}: {name} holds {int(bad.sum())} NaN or infinite value(s) ({where}: "
                             f"{values.reshape(-1)[first].item()}); every item needs a finite score", setting=setting)
    return values.float()


def read_graph_file(path: str | Path, adapter: Any, need: str, setting: str = "scores") -> Circuit:
    """The ``Circuit`` of a graph file of ``adapter``'s model that has ``need`` (``"score"`` or ``"in_graph"``) on
    every edge; its scores finite (``Circuit.from_dict`` checks each edge's fields)."""
    circuit = Circuit.load(path, setting)
    check_model_graph(circuit.graph, adapter, str(path), setting)
    values = circuit.scores if need == "score" else circuit.in_graph
    if values is None:
        raise SubnetlabError(f"{path}: edge 0 has no {need!r} (every edge needs one)", setting=setting)
    if circuit.scores is not None:
        check_score_values(str(path), "score", circuit.scores.double(), setting, circuit.graph.edge_names)
    return circuit


def read_scores(path: str | Path, adapter: Any, setting: str = "scores") -> Scores:
    """The scores of ``path`` (a graph file or a tensor file, module doc) on ``adapter``'s model, every check passed."""
    source = str(path)
    if source.endswith(".json"):
        circuit = read_graph_file(path, adapter, "score", setting)
        return Scores("edges", circuit.absolute, circuit=circuit)
    try:
        tensors = load_tensors(path)
        metadata = load_tensor_metadata(path)
    except SubnetlabError as e:
        raise SubnetlabError(str(e), setting=setting) from None
    fmt = file_format(metadata)
    if fmt == SUBNETWORK_FORMAT:
        raise SubnetlabError(f"{source}: a subnetwork (kind {metadata.get('kind')}), not scores: its 0/1 masks are a "
                             "circuit, measured as one, and rank nothing", setting=setting)
    if fmt not in SCORES_FORMATS:
        raise SubnetlabError(f"{source}: not a scores file (format metadata {fmt!r}; scores files record one of "
                             f"{', '.join(SCORES_FORMATS)}: attribution scores, or a pruning run's checkpoint)",
                             setting=setting)
    for key in EDGE_KEYS:
        if key in tensors:
            return _edge_scores(source, adapter, tensors[key], key, metadata, setting)
    for heads, mlps in NODE_KEYS:
        if heads in tensors and mlps in tensors:
            return _node_scores(source, adapter, tensors, (heads, mlps), metadata, setting)
    raise SubnetlabError(f"{source}: no scores (expected a tensor 'edges', or 'heads' and 'mlps'; it holds "
                         f"{', '.join(sorted(tensors)) or 'nothing'})", setting=setting)


def _edge_scores(path: str, adapter: Any, values: Tensor, key: str, metadata: dict[str, str],
                 setting: str) -> Scores:
    if values.dim() != 1:
        raise SubnetlabError(f"{path}: {key} has shape {tuple(values.shape)}; edge scores are one value per edge",
                             setting=setting)
    if key == "log_alpha_edges":  # a checkpoint records its graph's shape in its state; log-alphas rank by sign
        try:
            shape = json.loads(metadata.get("state") or "{}").get("graph")
        except (json.JSONDecodeError, AttributeError, RecursionError):
            shape = None
        metadata = {} if not isinstance(shape, dict) else {"graph_shape": json.dumps(shape)}
        metadata["score_sign"] = "signed"
    circuit = Circuit.from_tensor(values, adapter, metadata, path, setting=setting)
    check_score_values(path, key, values, setting, circuit.graph.edge_names)
    return Scores("edges", circuit.absolute, circuit=circuit)


def _node_scores(path: str, adapter: Any, tensors: dict[str, Tensor], keys: tuple[str, str], metadata: dict[str, str],
                 setting: str) -> Scores:
    family = metadata.get("graph")  # attribution files name their graph's family
    if family is not None and family != adapter.family:
        raise SubnetlabError(f"{path}: node scores of a {family} model, and this model is a {adapter.family} model",
                             setting=setting)
    heads, mlps = (tensors[k] for k in keys)
    L, H = adapter.num_layers, adapter.num_heads
    if tuple(heads.shape) != (L, H) or tuple(mlps.shape) != (L,):
        raise SubnetlabError(f"{path}: node scores {tuple(heads.shape)} and {tuple(mlps.shape)}, the model has "
                             f"[{L}, {H}] heads and [{L}] MLPs", setting=setting)
    heads = check_score_values(path, keys[0], heads, setting)
    mlps = check_score_values(path, keys[1], mlps, setting)
    return Scores("nodes", not keys[0].startswith("log_alpha"), heads=heads, mlps=mlps)


__all__ = ["ATTRIBUTION_FORMAT", "CHECKPOINT_FORMAT", "GATES_FORMAT", "SCORES_FORMATS", "SCORE_DTYPES", "Scores",
           "check_score_values", "file_format", "read_graph_file", "read_scores"]
