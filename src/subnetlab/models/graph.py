"""A transformer's computation graph as plain data: writers, readers and the edges between them.

The residual stream of a pre-LN transformer is a sum of what its components
write into it, so every component input can be written as a sum over the
components upstream. Edge-level circuits (Edge Pruning, ACDC, EAP) cut single
terms of these sums. The graph names them:

* **writers** (nodes): the embeddings (token and position as two nodes where the
  family has both, ``tok_embeds`` and ``pos_embeds`` as Edge Pruning counts
  them; one node ``input`` otherwise, or when asked for one; none when asked for
  none, Edge Pruning's default graph: the embeddings then feed every reader
  directly and no edge out of them can be cut), every attention head
  ``a{l}.h{h}``, every MLP ``m{l}``;
* **readers**: the query, key and value input of every head separately
  (``a{l}.h{h}<q>``, ``<k>``, ``<v>``), every MLP's input ``m{l}``, the output
  ``logits``;
* **edges** ``writer->reader`` from every writer to every reader downstream of
  it: the embeddings feed everything, a head of layer ``l`` feeds layer ``l``'s
  MLP and every reader of later layers, an MLP feeds the later layers. Where
  attention and MLP run in parallel (``parallel_attn_mlp``: GPT-NeoX / Pythia's
  parallel residual, EAP-IG's flag of that name), both read the layer's input, so
  a layer's heads feed only later layers.

Grouped-query attention (Llama, Mistral, Qwen): by default the key and value
readers are **per key/value head** (``a{l}.kv{g}<k>``, ``<v>``), as in Edge
Pruning's ``modeling_fllama.py``: one key/value projection serves a group of
query heads, and a reader is an input of a projection. ``ungrouped_kv`` gives
EAP-IG's (MIB's) graph instead: TransformerLens's
``ungroup_grouped_query_attention``, one key and one value reader **per query
head** (``a{l}.h{h}<k>``), each the input of its own copy of its key/value
head's projection, owned by that query head alone. The layout is then that of
an ungrouped model of as many heads (EAP-IG's graph names no key/value heads),
and ``intervene.edges`` runs the grouped model's attention on per-query-head
keys and values (its key/value weights are shared, not copied). Without
grouping (GPT-2) key/value head ``g`` is head ``h``, the names are
``a{l}.h{h}<k>`` and ``ungrouped_kv`` changes nothing (it is normalised to false).

Names follow TransformerLens / EAP-IG (``a3.h5<q>``, ``m2``, ``logits``). Order:
writers are the embeddings, then per layer its heads and its MLP; readers per
layer its queries, keys, values and MLP, then the logits; edges reader by
reader, each reader's upstream writers in writer order, so the edges into one
layer's attention readers form one ``[readers, writers]`` block
(``reader_blocks``), which ``intervene.edges`` reads masks from.

GPT-2 small (12 x 12): 32,936 edges with two embedding nodes, 32,491 with one, 32,046 with none.

What each writer is (``writer_nodes``), what each reader is (``reader_kinds``)
and which writers compute from it (``reader_owners``) are data here, so no code
reads them out of names. The rules over a graph with scores and kept edges
(selection, connectivity, files with scores) are ``models.circuit``'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.io import write_json

FORMAT = "subnetlab.graph/1"
EMBEDDING_NAMES = {2: ("tok_embeds", "pos_embeds"), 1: ("input",), 0: ()}


@dataclass(frozen=True)
class ReaderBlock:
    """Readers that share their upstream writers: edges ``start:stop`` are ``[len(readers), writers]``."""

    name: str  # "attn{l}", "mlp{l}" or "logits"
    layer: int  # the layer read, num_layers for the logits
    readers: tuple[int, ...]  # reader indices
    writers: int  # the first ``writers`` writers feed these readers
    start: int  # first edge index

    @property
    def stop(self) -> int:
        return self.start + len(self.readers) * self.writers


@dataclass(frozen=True)
class Node:
    """What a writer is: ``kind`` "embedding", "head" or "mlp"; its layer (-1 for embeddings); its index (the
    embedding's or the head's number, 0 for an MLP)."""

    kind: str
    layer: int
    index: int


@dataclass(frozen=True)
class Graph:
    """Writers, readers and edges of one model shape (see module docstring)."""

    family: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    num_embeddings: int = 2
    parallel_attn_mlp: bool = False
    ungrouped_kv: bool = False  # one key and value reader per query head (EAP-IG / MIB), not per key/value head

    def __post_init__(self) -> None:
        if self.ungrouped_kv and self.num_heads == self.num_kv_heads:
            object.__setattr__(self, "ungrouped_kv", False)  # nothing to ungroup: one layout, one shape record
        if self.num_layers < 1 or self.num_heads < 1 or self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise SubnetlabError(f"a graph needs layers, heads and key/value heads dividing the heads; got "
                                 f"{self.num_layers} x {self.num_heads} ({self.num_kv_heads} key/value heads)")
        if self.num_embeddings not in EMBEDDING_NAMES:
            raise SubnetlabError(f"embedding nodes: {self.num_embeddings}, expected 0, 1 or 2", setting="embedding_nodes")

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_adapter(cls, adapter: Any, embedding_nodes: int | None = None, ungrouped_kv: bool = False) -> "Graph":
        """The graph of the model behind ``adapter``; ``embedding_nodes`` 1 joins token and position embeddings,
        0 leaves them out of the graph (always present); ``ungrouped_kv`` one key/value reader per query head."""
        return cls.for_family(adapter.spec, adapter.num_layers, adapter.num_heads, adapter.num_kv_heads,
                              embedding_nodes, getattr(adapter, "parallel_attn_mlp", False), ungrouped_kv)

    @classmethod
    def for_family(cls, spec: Any, num_layers: int, num_heads: int, num_kv_heads: int | None = None,
                   embedding_nodes: int | None = None, parallel_attn_mlp: bool = False,
                   ungrouped_kv: bool = False) -> "Graph":
        """The graph of a family's model of this shape (no weights needed: counts for any size)."""
        if not spec.has_components or not spec.embeddings:
            raise SubnetlabError(f"{spec.family} models have no attention heads and MLPs to build a graph from")
        available = len(spec.embeddings)
        wanted = available if embedding_nodes is None else int(embedding_nodes)
        if wanted > available:
            raise SubnetlabError(f"{spec.family} models have {available} embedding writer(s); "
                                 f"{wanted} embedding nodes asked for", setting="embedding_nodes")
        return cls(spec.family, num_layers, num_heads, num_kv_heads or num_heads, wanted, bool(parallel_attn_mlp),
                   bool(ungrouped_kv))

    # -- nodes --------------------------------------------------------------------------
    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.num_heads // self.num_kv_heads

    @property
    def kv_readers(self) -> int:
        """Key (and value) readers per layer: one per key/value head, or per query head when ungrouped."""
        return self.num_heads if self.ungrouped_kv else self.num_kv_heads

    @property
    def embeddings(self) -> tuple[str, ...]:
        return EMBEDDING_NAMES[self.num_embeddings]

    def _kv(self, layer: int, g: int) -> str:
        return f"a{layer}.h{g}" if self.group == 1 or self.ungrouped_kv else f"a{layer}.kv{g}"

    @cached_property
    def writers(self) -> tuple[str, ...]:
        names = list(self.embeddings)
        for layer in range(self.num_layers):
            names += [f"a{layer}.h{h}" for h in range(self.num_heads)] + [f"m{layer}"]
        return tuple(names)

    @cached_property
    def readers(self) -> tuple[str, ...]:
        names: list[str] = []
        for layer in range(self.num_layers):
            names += [f"a{layer}.h{h}<q>" for h in range(self.num_heads)]
            names += [f"{self._kv(layer, g)}<k>" for g in range(self.kv_readers)]
            names += [f"{self._kv(layer, g)}<v>" for g in range(self.kv_readers)]
            names.append(f"m{layer}")
        return tuple(names + ["logits"])

    @cached_property
    def writer_nodes(self) -> tuple[Node, ...]:
        """Per writer, what it is (in writer order)."""
        nodes = [Node("embedding", -1, i) for i in range(self.num_embeddings)]
        for layer in range(self.num_layers):
            nodes += [Node("head", layer, h) for h in range(self.num_heads)] + [Node("mlp", layer, 0)]
        return tuple(nodes)

    @cached_property
    def reader_kinds(self) -> tuple[str, ...]:
        """Per reader, the input it is: "q", "k", "v" (of a head), "mlp" or "logits"."""
        per_layer = ["q"] * self.num_heads + ["k"] * self.kv_readers + ["v"] * self.kv_readers + ["mlp"]
        return tuple(per_layer * self.num_layers + ["logits"])

    @cached_property
    def reader_owners(self) -> tuple[tuple[int, ...], ...]:
        """Per reader, the writers whose output it computes: its head (query), its key/value head's group of query
        heads (key, value; its own query head when ungrouped), its MLP; none for the logits. The one map from readers
        to nodes."""
        owners: list[tuple[int, ...]] = []
        group = 1 if self.ungrouped_kv else self.group
        for layer in range(self.num_layers):
            owners += [(self.head_writer(layer, h),) for h in range(self.num_heads)]
            groups = [tuple(self.head_writer(layer, g * group + i) for i in range(group))
                      for g in range(self.kv_readers)]
            owners += groups + groups + [(self.mlp_writer(layer),)]
        return tuple(owners + [()])

    @cached_property
    def writer_inputs(self) -> tuple[tuple[int, ...], ...]:
        """Per writer, the readers whose inputs it computes from (the inverse of ``reader_owners``)."""
        inputs: list[list[int]] = [[] for _ in self.writers]
        for r, owners in enumerate(self.reader_owners):
            for w in owners:
                inputs[w].append(r)
        return tuple(tuple(r) for r in inputs)

    def writer_index(self, name: str) -> int:
        return self._writer_index[name]

    def reader_index(self, name: str) -> int:
        return self._reader_index[name]

    @cached_property
    def _writer_index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.writers)}

    @cached_property
    def _reader_index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.readers)}

    def head_writer(self, layer: int, head: int) -> int:
        return self.num_embeddings + layer * (self.num_heads + 1) + head

    def mlp_writer(self, layer: int) -> int:
        return self.num_embeddings + layer * (self.num_heads + 1) + self.num_heads

    # -- edges ----------------------------------------------------------------------------
    @cached_property
    def reader_blocks(self) -> tuple[ReaderBlock, ...]:
        """Per layer its attention readers and its MLP reader, then the logits, with their edge ranges."""
        blocks, start, reader = [], 0, 0
        per_attn = self.num_heads + 2 * self.kv_readers
        for layer in range(self.num_layers):
            before = self.num_embeddings + layer * (self.num_heads + 1)
            mlp_writers = before if self.parallel_attn_mlp else before + self.num_heads
            for name, count, writers in ((f"attn{layer}", per_attn, before), (f"mlp{layer}", 1, mlp_writers)):
                block = ReaderBlock(name, layer, tuple(range(reader, reader + count)), writers, start)
                blocks.append(block)
                start, reader = block.stop, reader + count
        blocks.append(ReaderBlock("logits", self.num_layers, (reader,), len(self.writers), start))
        return tuple(blocks)

    @property
    def num_edges(self) -> int:
        return self.reader_blocks[-1].stop

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """``(writer, reader)`` index pairs, in edge order."""
        return tuple((w, r) for b in self.reader_blocks for r in b.readers for w in range(b.writers))

    @cached_property
    def edge_names(self) -> tuple[str, ...]:
        return tuple(f"{self.writers[w]}->{self.readers[r]}" for w, r in self.edges)

    def edge_index(self, name: str) -> int:
        try:
            return self._edge_index[name]
        except KeyError:
            raise SubnetlabError(f"no edge {name!r} in this {self.family} graph (edges look like "
                                 f"{self.edge_names[0]!r})") from None

    @cached_property
    def _edge_index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.edge_names)}

    def edges_from(self, writer: str) -> list[int]:
        """Indices of every edge leaving ``writer``."""
        w = self.writer_index(writer)
        return [i for i, (src, _) in enumerate(self.edges) if src == w]

    def edges_into(self, reader: str) -> list[int]:
        r = self.reader_index(reader)
        return [i for i, (_, dst) in enumerate(self.edges) if dst == r]

    # -- plain data -------------------------------------------------------------------------
    def shape(self) -> dict[str, Any]:
        """The fields that rebuild this graph (``parallel_attn_mlp`` and ``ungrouped_kv`` only where set, so other
        graphs' files stay as they were)."""
        shape: dict[str, Any] = {"family": self.family, "layers": self.num_layers, "heads": self.num_heads,
                                 "kv_heads": self.num_kv_heads, "embedding_nodes": self.num_embeddings}
        if self.parallel_attn_mlp:
            shape["parallel_attn_mlp"] = True
        if self.ungrouped_kv:
            shape["ungrouped_kv"] = True
        return shape

    def to_dict(self, scores: list[float] | None = None, in_graph: list[bool] | None = None) -> dict[str, Any]:
        """JSON-ready: the shape, nodes, readers and edges, with per-edge ``score`` / ``in_graph`` when given."""
        for name, values in (("scores", scores), ("in_graph", in_graph)):
            if values is not None and len(values) != self.num_edges:
                raise SubnetlabError(f"{name}: {len(values)} values for {self.num_edges} edges")
        edges = []
        for i, (w, r) in enumerate(self.edges):
            edge: dict[str, Any] = {"name": self.edge_names[i], "writer": self.writers[w], "reader": self.readers[r]}
            if scores is not None:
                edge["score"] = float(scores[i])
            if in_graph is not None:
                edge["in_graph"] = bool(in_graph[i])
            edges.append(edge)
        return {"format": FORMAT, **self.shape(), "writers": list(self.writers), "readers": list(self.readers),
                "num_edges": self.num_edges, "edges": edges}

    @classmethod
    def from_shape(cls, shape: dict[str, Any], source: str = "graph") -> "Graph":
        """The graph of a ``shape()`` record."""
        try:
            flags = [shape.get(key, False) for key in ("parallel_attn_mlp", "ungrouped_kv")]
            for key, flag in zip(("parallel_attn_mlp", "ungrouped_kv"), flags):
                if not isinstance(flag, bool):
                    raise TypeError(f"{key} is {flag!r}, not true or false")
            return cls(str(shape["family"]), int(shape["layers"]), int(shape["heads"]), int(shape["kv_heads"]),
                       int(shape["embedding_nodes"]), *flags)
        except (KeyError, TypeError, ValueError) as e:
            raise SubnetlabError(f"{source}: graph shape unreadable ({e})") from None

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "graph") -> "Graph":
        if not isinstance(data, dict):
            raise SubnetlabError(f"{source}: a JSON {type(data).__name__}, not a subnetlab graph")
        if data.get("format") != FORMAT:
            raise SubnetlabError(f"{source}: not a subnetlab graph (format {data.get('format')!r})")
        graph = cls.from_shape(data, source)
        edges = data.get("edges")
        if edges is not None and (not isinstance(edges, list) or not all(isinstance(e, dict) for e in edges)):
            raise SubnetlabError(f"{source}: 'edges' must be a list of objects, one per edge")
        if edges is not None and [e.get("name") for e in edges] != list(graph.edge_names):
            raise SubnetlabError(f"{source}: its edges are not those of a {graph.family} graph of its shape")
        for i, edge in enumerate(edges or []):  # a writer or reader field, where given, must be the name's
            w, r = graph.edges[i]
            for key, node in (("writer", graph.writers[w]), ("reader", graph.readers[r])):
                if key in edge and edge[key] != node:
                    raise SubnetlabError(f"{source}: edge {i} names {key} {edge[key]!r}, and its name "
                                         f"{graph.edge_names[i]!r} says {node!r}")
        return graph

    def save(self, path: str | Path, scores: list[float] | None = None, in_graph: list[bool] | None = None) -> None:
        write_json(path, self.to_dict(scores, in_graph))

    @classmethod
    def load(cls, path: str | Path) -> "Graph":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SubnetlabError(f"{path}: cannot read the graph ({e})") from None
        except RecursionError:
            raise SubnetlabError(f"{path}: cannot read the graph (JSON nested too deep)") from None
        return cls.from_dict(data, str(path))
