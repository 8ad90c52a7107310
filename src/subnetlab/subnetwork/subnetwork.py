"""The ``Subnetwork`` value: what is kept, how sparse it is, and its file.

Structured subnetworks keep heads and MLPs (``heads [layers, heads]``, ``mlps
[layers]``, 1 = kept); weight-level ones keep individual weights (one mask per
masked parameter, keyed by its name); edge circuits keep edges of the model's
computation graph (``edges [num_edges]`` in ``models.graph`` order, the graph's
shape in the metadata as ``graph``, and a fingerprint over the architecture and
that shape, so a circuit of one model is refused on another). One ``.safetensors`` file holds the masks
and string metadata, including a fingerprint of the architecture and the masked
parameters' shapes, so a mask cannot silently land on the wrong model.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import torch
from safetensors import safe_open
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.io import load_tensors, save_tensors
from subnetlab.models.adapters import Adapter, head_name, mlp_name
from subnetlab.models.circuit import Circuit
from subnetlab.models.graph import Graph

FORMAT = "subnetlab.subnetwork/1"
HEAD_OF_KIND = {"decoder": "causal-lm", "encoder": "classification", "vision": "image-classification"}  # load_model's
Kind = Literal["structured", "weights", "edges"]
KINDS = ("structured", "weights", "edges")


@dataclass
class Subnetwork:
    kind: Kind
    architecture: str
    fingerprint: str
    heads: Tensor | None = None  # [layers, heads] float, 1 = kept
    mlps: Tensor | None = None  # [layers]
    weights: dict[str, Tensor] = field(default_factory=dict)  # parameter name -> 0/1 mask
    edges: Tensor | None = None  # [num_edges] float, 1 = kept (kind "edges")
    graph_shape: dict | None = None  # the graph's shape (``Graph.shape()``) for kind "edges"
    method: str = "manual"
    seed: int | None = None
    target_sparsity: float | None = None
    ablation: str = "mean"
    extra: dict[str, str] = field(default_factory=dict)

    # -- construction --------------------------------------------------------------
    @classmethod
    def structured(cls, adapter: Adapter, heads: Tensor, mlps: Tensor | None = None, **meta: object) -> "Subnetwork":
        L, H = adapter.num_layers, adapter.num_heads
        if tuple(heads.shape) != (L, H):
            raise SubnetlabError(f"head mask has shape {tuple(heads.shape)}, the model has [{L}, {H}]")
        mlps = torch.ones(L) if mlps is None else mlps
        if tuple(mlps.shape) != (L,):
            raise SubnetlabError(f"MLP mask has shape {tuple(mlps.shape)}, the model has [{L}]")
        return cls("structured", adapter.family, adapter.fingerprint(),
                   heads=(heads > 0.5).float(), mlps=(mlps > 0.5).float(), **meta)

    @classmethod
    def from_names(cls, adapter: Adapter, kept: list[str], **meta: object) -> "Subnetwork":
        """Keep exactly the named components (``L4.H0``, ``L3.MLP``); everything else is removed."""
        heads = torch.zeros(adapter.num_layers, adapter.num_heads)
        mlps = torch.zeros(adapter.num_layers)
        index = component_index(adapter.num_layers, adapter.num_heads)
        for name in kept:
            if name not in index:
                raise SubnetlabError(f"unknown component {name!r} (expected e.g. L0.H3 or L2.MLP)")
            layer, head = index[name]
            if head is None:
                mlps[layer] = 1
            else:
                heads[layer, head] = 1
        return cls.structured(adapter, heads, mlps, **meta)

    @classmethod
    def from_weight_masks(cls, adapter: Adapter, masks: dict[str, Tensor], **meta: object) -> "Subnetwork":
        for name, mask in masks.items():
            shape = tuple(adapter.parameter(name).shape)
            if tuple(mask.shape) != shape:
                raise SubnetlabError(f"mask for {name} has shape {tuple(mask.shape)}, the parameter {shape}")
        binary = {name: (m > 0.5).to(torch.uint8) for name, m in masks.items()}
        return cls("weights", adapter.family, adapter.fingerprint(sorted(masks)), weights=binary, **meta)

    @classmethod
    def from_edges(cls, adapter: Adapter, graph: Graph, edges: Tensor, **meta: object) -> "Subnetwork":
        """An edge circuit over ``graph`` (the graph of ``adapter``'s model): ``edges [num_edges]``, 1 = kept."""
        expected = Graph.from_adapter(adapter, graph.num_embeddings)
        if expected != graph:
            raise SubnetlabError(f"the graph ({graph.shape()}) is not this model's ({expected.shape()})")
        if tuple(edges.shape) != (graph.num_edges,):
            raise SubnetlabError(f"edge mask has shape {tuple(edges.shape)}, the graph has {graph.num_edges} edges")
        return cls("edges", adapter.family, edge_fingerprint(adapter, graph), edges=(edges > 0.5).float(),
                   graph_shape=graph.shape(), **meta)

    def graph(self) -> Graph:
        """The computation graph an edge circuit is over."""
        if self.kind != "edges" or self.graph_shape is None:
            raise SubnetlabError("this operation needs an edge circuit")
        g = self.graph_shape
        return Graph.from_shape(g, "subnetwork")

    def circuit(self) -> Circuit:
        """An edge circuit as a ``Circuit``: its graph with ``in_graph`` the kept edges."""
        return Circuit(self.graph(), in_graph=self.edges)

    # -- measures ----------------------------------------------------------------
    @property
    def sparsity(self) -> float:
        """Fraction removed, counting components (heads and MLPs alike), weights or edges."""
        if self.kind == "edges":
            return 1.0 - float(self.edges.sum()) / max(self.edges.numel(), 1)
        if self.kind == "structured":
            total = self.heads.numel() + self.mlps.numel()
            return 1.0 - float(self.heads.sum() + self.mlps.sum()) / total
        total = sum(m.numel() for m in self.weights.values())
        return 1.0 - sum(int(m.sum()) for m in self.weights.values()) / max(total, 1)

    def parameter_sparsity(self, adapter: Adapter) -> float:
        """Fraction of the components' parameters removed (heads and MLPs weighted by size)."""
        if self.kind in ("weights", "edges"):  # an edge's parameters are its writer's, shared by its other edges
            return self.sparsity
        self.check(adapter)
        ph, pm = adapter.params_per_head(), adapter.params_per_mlp()
        kept = float((ph * self.heads.double()).sum() + (pm * self.mlps.double()).sum())
        return 1.0 - kept / float(ph.sum() + pm.sum())

    def kept_names(self) -> list[str]:
        """Kept components as ``L4.H0`` / ``L3.MLP``, layer by layer (kept edges ``a0.h1->a1.h2<k>``, in graph order)."""
        if self.kind == "edges":
            names = self.graph().edge_names
            return [names[i] for i in torch.nonzero(self.edges > 0.5).flatten().tolist()]
        self._need_structured()
        names = []
        for layer in range(self.heads.shape[0]):
            names += [head_name(layer, h) for h in range(self.heads.shape[1]) if self.heads[layer, h] > 0.5]
            if self.mlps[layer] > 0.5:
                names.append(mlp_name(layer))
        return names

    def gates(self) -> tuple[Tensor, Tensor]:
        """``(heads, mlps)`` gate tensors for ``apply_gates``."""
        self._need_structured()
        return self.heads.float(), self.mlps.float()

    # -- set operations ------------------------------------------------------------
    def _combine(self, other: "Subnetwork", op) -> "Subnetwork":
        if self.kind != other.kind or self.fingerprint != other.fingerprint:
            raise SubnetlabError("set operations need subnetworks of the same kind on the same architecture")
        if self.kind == "structured":
            return replace(self, heads=op(self.heads, other.heads), mlps=op(self.mlps, other.mlps), method="combined")
        if self.kind == "edges":
            return replace(self, edges=op(self.edges, other.edges), method="combined")
        if set(self.weights) != set(other.weights):
            raise SubnetlabError("weight subnetworks mask different parameters")
        return replace(self, weights={k: op(v, other.weights[k]) for k, v in self.weights.items()}, method="combined")

    def __and__(self, other: "Subnetwork") -> "Subnetwork":
        return self._combine(other, torch.minimum)

    def __or__(self, other: "Subnetwork") -> "Subnetwork":
        return self._combine(other, torch.maximum)

    def count(self) -> int:
        if self.kind == "edges":
            return int(self.edges.sum())
        if self.kind == "structured":
            return int(self.heads.sum() + self.mlps.sum())
        return sum(int(m.sum()) for m in self.weights.values())

    def maskable(self) -> int:
        """Units the mask covers (components or weights): ``count()`` of them are kept."""
        if self.kind == "structured":
            return self.heads.numel() + self.mlps.numel()
        return sum(m.numel() for m in self.weights.values())

    def jaccard(self, other: "Subnetwork") -> float:
        union = (self | other).count()
        return (self & other).count() / union if union else 1.0

    # -- compatibility and files ---------------------------------------------------------
    def check(self, adapter: Adapter) -> None:
        """Refuse a model whose architecture or masked parameter shapes differ."""
        if self.architecture and self.architecture != adapter.family:  # before the names: they are another family's
            raise SubnetlabError(f"subnetwork was found on a different architecture: a {self.architecture} model, "
                                 f"and this model is a {adapter.family} model")
        names = None if self.kind in ("structured", "edges") else sorted(self.weights)
        try:
            expected = (edge_fingerprint(adapter, self.graph(), check=False) if self.kind == "edges"
                        else adapter.fingerprint(names))
        except AttributeError as e:
            self._check_head(adapter, names)
            raise SubnetlabError(f"subnetwork does not fit this {adapter.family} model: {e}") from None
        if self.fingerprint != expected:
            self._check_head(adapter, names)
        if self.architecture != adapter.family or self.fingerprint != expected:
            raise SubnetlabError(
                f"subnetwork fingerprint {self.fingerprint} ({self.architecture}) does not match the model's "
                f"{expected} ({adapter.family}): it was found on a different architecture"
            )
        # the fingerprint is metadata: the tensors themselves must have the model's shapes too
        if self.kind == "edges":
            if tuple(self.edges.shape) != (self.graph().num_edges,):
                raise SubnetlabError(f"edge mask has shape {tuple(self.edges.shape)}, the model's graph "
                                     f"{self.graph().num_edges} edges")
        elif self.kind == "structured":
            L, H = adapter.num_layers, adapter.num_heads
            if tuple(self.heads.shape) != (L, H) or tuple(self.mlps.shape) != (L,):
                raise SubnetlabError(f"subnetwork masks have shapes {tuple(self.heads.shape)} and "
                                     f"{tuple(self.mlps.shape)}, the model has [{L}, {H}] heads and [{L}] MLPs")
        else:
            for name, mask in self.weights.items():
                shape = tuple(adapter.parameter(name).shape)
                if tuple(mask.shape) != shape:
                    raise SubnetlabError(f"subnetwork mask for {name} has shape {tuple(mask.shape)}, the parameter {shape}")

    def _check_head(self, adapter: Adapter, names: list[str] | None) -> None:
        """Refuse, naming the head, a subnetwork found on this checkpoint loaded with the other head.

        ``load_model`` defaults to the bare body (``head="base"``); a subnetwork found on the causal LM or
        classifier has the same body under other parameter names. Files keep the fingerprint they were
        written with (every file stays loadable); this only names the cause when it is the head.
        """
        if not getattr(adapter.spec, "has_components", False):
            return
        try:
            other = adapter.fingerprint(names, other_head=True)
        except AttributeError:
            return
        if other != self.fingerprint:
            return
        head = HEAD_OF_KIND.get(adapter.spec.kind, "classification")
        if adapter.model.base_model is adapter.model:
            raise SubnetlabError(f"subnetwork was found on this {adapter.family} checkpoint with its task head, and "
                                 f"this model was loaded without it (head 'base'): load it with head={head!r}")
        raise SubnetlabError(f"subnetwork was found on this {adapter.family} checkpoint without a task head (head "
                             f"'base'), and this model was loaded with one: load it with head='base'", setting="head")

    def metadata(self) -> dict[str, str]:
        meta = {
            "format": FORMAT, "kind": self.kind, "architecture": self.architecture,
            "fingerprint": self.fingerprint, "method": self.method,
            "seed": "" if self.seed is None else str(self.seed),
            "target_sparsity": "" if self.target_sparsity is None else repr(float(self.target_sparsity)),
            "sparsity": repr(self.sparsity), "ablation": self.ablation,
        }
        if self.kind == "edges":
            meta["graph"] = json.dumps(self.graph_shape, sort_keys=True)
        return {**self.extra, **meta}

    def save(self, path: str | Path) -> None:
        if self.kind == "edges":
            tensors = {"edges": self.edges}
        else:
            tensors = {"heads": self.heads, "mlps": self.mlps} if self.kind == "structured" else dict(self.weights)
        save_tensors(path, tensors, self.metadata())

    @classmethod
    def load(cls, path: str | Path, adapter: Adapter | None = None) -> "Subnetwork":
        tensors = load_tensors(path)
        with safe_open(str(path), "pt") as f:
            meta = dict(f.metadata() or {})
        if meta.get("format") != FORMAT:
            raise SubnetlabError(f"{path}: not a subnetlab subnetwork file (format {meta.get('format')!r})")
        kind = meta.get("kind")
        if kind not in KINDS:
            raise SubnetlabError(f"{path}: unknown subnetwork kind {kind!r}")
        _fraction(path, "sparsity", meta.get("sparsity"))
        graph_shape = None
        if kind == "edges":
            try:
                graph_shape = json.loads(meta["graph"])
                Graph.from_shape(graph_shape, str(path))
            except (KeyError, TypeError, ValueError, json.JSONDecodeError, SubnetlabError, RecursionError):
                raise SubnetlabError(f"{path}: edge circuit without a readable graph shape; the file is damaged") from None
            if set(tensors) != {"edges"} or tensors["edges"].dim() != 1:
                raise SubnetlabError(f"{path}: an edge circuit holds one 1-D tensor 'edges'; the file is damaged")
        if kind == "structured" and not {"heads", "mlps"} <= set(tensors):
            raise SubnetlabError(f"{path}: structured subnetwork without 'heads' and 'mlps' tensors")
        for name, tensor in tensors.items():
            _check_mask(path, name, tensor)
        if kind == "structured":
            heads, mlps = tensors["heads"], tensors["mlps"]
            if heads.dim() != 2 or mlps.dim() != 1 or heads.shape[0] != mlps.shape[0]:
                raise SubnetlabError(f"{path}: head mask {tuple(heads.shape)} and MLP mask {tuple(mlps.shape)} are not "
                                     "[layers, heads] and [layers]; the file is damaged")
        known = {"format", "kind", "architecture", "fingerprint", "method", "seed", "target_sparsity", "sparsity", "ablation",
                 "graph"}
        sub = cls(
            kind=kind, architecture=meta.get("architecture", ""), fingerprint=meta.get("fingerprint", ""),
            heads=tensors.get("heads") if kind == "structured" else None,
            mlps=tensors.get("mlps") if kind == "structured" else None,
            weights=tensors if kind == "weights" else {},
            edges=tensors["edges"].float() if kind == "edges" else None, graph_shape=graph_shape,
            method=meta.get("method", ""), seed=_seed(path, meta.get("seed")),
            target_sparsity=_fraction(path, "target_sparsity", meta.get("target_sparsity")),
            ablation=meta.get("ablation", ""), extra={k: v for k, v in meta.items() if k not in known},
        )
        if adapter is not None:
            sub.check(adapter)
        return sub

    def _need_structured(self) -> None:
        if self.kind != "structured":
            raise SubnetlabError("this operation needs a structured (heads / MLPs) subnetwork")


def _seed(path: str | Path, text: str | None) -> int | None:
    """The ``seed`` metadata: empty (none) or a non-negative integer; anything else marks a damaged file."""
    if not text:
        return None
    if not re.fullmatch(r"\d+", text.strip()):
        raise SubnetlabError(f"{path}: metadata seed={text!r} is not a non-negative integer; the file is damaged")
    return int(text)


def _fraction(path: str | Path, key: str, text: str | None) -> float | None:
    """A ``target_sparsity`` or ``sparsity`` metadata value: empty (none) or a finite number in [0, 1] (NaN would
    pass every comparison). ``sparsity`` is recomputed from the masks; a damaged record still marks a damaged file."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise SubnetlabError(f"{path}: metadata {key}={text!r} is not a number in [0, 1]; the file is damaged")
    return value


def edge_fingerprint(adapter: Adapter, graph: Graph, check: bool = True) -> str:
    """The model's fingerprint joined with the graph's shape: an edge circuit fits only this graph of this model."""
    if check and Graph.from_adapter(adapter, graph.num_embeddings) != graph:
        raise SubnetlabError(f"the graph ({graph.shape()}) is not this model's")
    blob = json.dumps({"model": adapter.fingerprint(), "graph": graph.shape()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _check_mask(path: str | Path, name: str, tensor: Tensor) -> None:
    """A stored mask holds only 0 and 1 (so no NaN, no infinity, nothing in between): else the file is damaged."""
    if tensor.dtype == torch.bool:
        return
    if tensor.is_complex() or not (tensor.is_floating_point() or tensor.dtype in _INTEGER_TYPES):
        raise SubnetlabError(f"{path}: mask {name!r} has dtype {tensor.dtype}, not a 0/1 mask")
    values = tensor.double() if tensor.numel() else tensor
    bad = ~((values == 0) | (values == 1))
    if bool(bad.any()):
        first = values[bad].flatten()[0].item()
        raise SubnetlabError(f"{path}: mask {name!r} holds {int(bad.sum())} value(s) other than 0 and 1 "
                             f"(e.g. {first!r}); the file is damaged or not a subnetwork")


_INTEGER_TYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def component_index(num_layers: int, num_heads: int) -> dict[str, tuple[int, int | None]]:
    """``{"L0.H0": (0, 0), ..., "L0.MLP": (0, None)}``."""
    index: dict[str, tuple[int, int | None]] = {}
    for layer in range(num_layers):
        for head in range(num_heads):
            index[head_name(layer, head)] = (layer, head)
        index[mlp_name(layer)] = (layer, None)
    return index
