"""Edge masks on the unmodified model: each reader sees its own sum of writer outputs.

Over a computation graph (``models.graph``), reader ``r`` sees::

    embeddings + sum_w [ m_wr * out_w(x) + (1 - m_wr) * out_w(x~) ]

where ``x~`` is a corrupted input (a paired counterfactual batch: activations
captured by ``capture_writers``), a mean (``writer_means``; Heuristic Core's
ablation) or zero (``values=None``). The model stays the ``transformers`` class
the user loaded; hooks do the work, as in Edge Pruning but without its copied
modelling files. The residual stream the model computes is the sum of every
writer's output in this forward, so with ``D_w = out_w(x) - out_w(x~)`` (kept
per writer as the forward goes) a reader's input is::

    resid - sum_w (1 - m_wr) * D_w

* writers: forward hooks on the embedding modules and the MLP output modules,
  a pre-hook on the attention output projection (a head's output is its slice
  of that input times its slice of the projection; the projection's bias is
  written by no head, so it stays, as the node-level gates leave it);
* MLP readers and the logits: a pre-hook on the norm in front of the MLP and on
  the final norm replaces their input;
* Q, K, V readers of every head: a forward hook on the norm in front of
  attention applies that norm to each reader's input ``[readers, batch, pos,
  hidden]`` and forward hooks on the query / key / value projections replace
  their output with each head's slice of the projection applied to its own
  reader's input (the FLOPs of the full projection).

Two public hooks let a method read the intervention without reaching into it
(``methods.attribution`` computes EAP with them):

* ``on_reader_input(block_index, inputs)``: called with every reader block's
  inputs ``[readers, batch, pos, hidden]`` (block ``graph.reader_blocks[i]``)
  as the forward reaches it, after the masks are applied; it may register a
  gradient hook on them, and a tensor it returns replaces them;
* ``writer_deltas()``: after a forward, every writer's ``D_w`` in graph writer
  order (its output itself when ``values`` is None).

Only pre-LN families (GPT-2, Llama-style, GPT-NeoX) have a residual stream that is
a sum of writer outputs. BERT and RoBERTa normalise the stream after every
sub-layer, so a component's input is not a sum over upstream components and "the
edge from w" has no term to remove; Gemma-2 and OLMo-2 normalise each attention
block's output before adding it, so it is not a sum of its heads' outputs: edge
interventions refuse them (their graph still counts). With parallel attention and
MLP (GPT-NeoX) the MLP reads the layer's input: its reader block has no edges
from its own layer's heads, whose outputs are already recorded when it runs.
Mask arithmetic runs in the model's dtype; masks are given as float32 ``[edges]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.activations import ComponentValues, add_padded, capture_activations, collect_means
from subnetlab.models.adapters import Adapter
from subnetlab.models.device_map import refuse_offloaded
from subnetlab.models.graph import Graph

EdgeSource = Callable[[], Tensor]
# on_reader_input(block_index, inputs [readers, batch, pos, hidden]) -> a replacement, or None to keep them
ReaderInputHook = Callable[[int, Tensor], Tensor | None]


@dataclass
class WriterValues:
    """``out_w(x~)`` for every writer: embedding outputs (one per embedding module) and head/MLP values.

    ``embeddings[i]`` broadcasts against ``[batch, pos, hidden]`` (``[hidden]`` a mean, ``[P, hidden]`` a
    per-position mean, ``[B, P, hidden]`` captured); ``components`` as for the node-level gates."""

    embeddings: list[Tensor]
    components: ComponentValues


def check_edge_family(adapter: Adapter) -> None:
    """Refuse families whose residual stream is not a sum of writer outputs."""
    spec = adapter.spec
    if spec.residual == "block-norm":
        raise SubnetlabError(
            f"{spec.family} models normalise each attention block's output before adding it to the residual stream, "
            "so it is not a sum of its heads' outputs and an edge out of one head has no term to remove; edge-level "
            "circuits need a pre-LN model (GPT-2, Llama, Mistral, Qwen, GPT-NeoX); node-level pruning works here")
    if spec.residual != "pre-ln":
        raise SubnetlabError(
            f"{spec.family} models normalise the residual stream after every attention and MLP block (post-LN), so a "
            "component's input is not a sum of upstream components' outputs and single edges cannot be removed; "
            "edge-level circuits need a pre-LN model (GPT-2, Llama, Mistral, Qwen, GPT-NeoX); node-level pruning works "
            "here")
    if not (spec.embeddings and spec.attn_norm and spec.mlp_norm and spec.final_norm):
        raise SubnetlabError(f"{spec.family} models do not name their norms and embeddings for edge interventions")


def capture_writers(model: nn.Module, adapter: Adapter, inputs: dict[str, Tensor]) -> WriterValues:
    """Every writer's output on ``inputs`` (the corrupted batch of a paired counterfactual)."""
    embeds: list[Tensor | None] = [None] * len(adapter.spec.embeddings)
    handles = [m.register_forward_hook(lambda mod, a, out, i=i: embeds.__setitem__(i, out.detach().clone()))
               for i, m in enumerate(adapter.embedding_modules())]
    try:
        components = capture_activations(model, adapter, inputs)
    finally:
        for h in handles:
            h.remove()
    return WriterValues([e for e in embeds if e is not None], components)


@torch.no_grad()
def writer_means(model: nn.Module, adapter: Adapter, batches: Iterable[dict[str, Tensor]],
                 per_position: bool = False) -> WriterValues:
    """Mean output of every writer over the non-padding tokens of ``batches`` (mean ablation of edges)."""
    sums: list[Tensor | None] = [None] * len(adapter.spec.embeddings)
    count: list[Tensor | None] = [None]
    current: dict[str, Tensor | None] = {"mask": None}

    def record(i: int, out: Tensor) -> None:
        mask = current["mask"]
        rows = mask.shape[0] if mask is not None else out.shape[0]
        w = (torch.ones(rows, out.shape[1]) if mask is None else mask).to(out.device, torch.float64)
        x = out.double().expand(rows, *out.shape[1:]) * w[..., None]  # position embeddings come as [1, P, hidden]
        sums[i] = add_padded(sums[i], x.sum(0) if per_position else x.sum((0, 1)))
        if i == 0:
            count[0] = add_padded(count[0], w.sum(0) if per_position else w.sum())

    def tracked() -> Iterator[dict[str, Tensor]]:
        for batch in batches:
            current["mask"] = batch.get("attention_mask")
            yield batch

    handles = [m.register_forward_hook(lambda mod, a, out, i=i: record(i, out))
               for i, m in enumerate(adapter.embedding_modules())]
    try:
        components = collect_means(model, adapter, tracked(), per_position=per_position)
    finally:
        for h in handles:
            h.remove()
    c = count[0].clamp(min=1)
    return WriterValues([(s / (c[:, None] if per_position else c)).float() for s in sums], components)


class EdgeMasks:
    """Context manager that runs the model with edge masks; removes every hook it added on exit.

    ``with EdgeMasks(model, adapter, graph, mask, values) as edges: model(**x)``. ``mask`` is ``[edges]``
    (1 = kept) in ``graph`` order; ``source()`` (a hard-concrete sampler) instead gives one per model forward.
    ``edges.enabled = False`` runs the full model. ``on_reader_input`` (settable between forwards) and
    ``writer_deltas()`` are the hooks of the module docstring.
    """

    def __init__(self, model: nn.Module, adapter: Adapter, graph: Graph, mask: Tensor | None = None,
                 values: WriterValues | None = None, source: EdgeSource | None = None,
                 on_reader_input: ReaderInputHook | None = None) -> None:
        check_edge_family(adapter)
        if (graph.family, graph.num_layers, graph.num_heads, graph.num_kv_heads) != \
                (adapter.family, adapter.num_layers, adapter.num_heads, adapter.num_kv_heads):
            raise SubnetlabError(f"the graph is of a {graph.family} model {graph.num_layers} x {graph.num_heads}, "
                                 f"the model a {adapter.family} {adapter.num_layers} x {adapter.num_heads}")
        if graph.parallel_attn_mlp != adapter.parallel_attn_mlp:
            raise SubnetlabError(f"the graph's MLPs read {'beside' if graph.parallel_attn_mlp else 'after'} their "
                                 f"layer's attention, the model's {'beside' if adapter.parallel_attn_mlp else 'after'}")
        self.model, self.adapter, self.graph, self.values, self.source = model, adapter, graph, values, source
        self.enabled = True
        self.on_reader_input = on_reader_input
        self.mask: Tensor | None = None
        self._handles: list[Any] = []
        self._state: dict[str, Any] = {}
        self.set(mask)

    def set(self, mask: Tensor | None) -> None:
        if mask is not None and tuple(mask.shape) != (self.graph.num_edges,):
            raise SubnetlabError(f"edge mask of shape {tuple(mask.shape)}, the graph has {self.graph.num_edges} edges")
        self.mask = mask

    def writer_deltas(self) -> Tensor:
        """``D_w`` of every writer in the last forward, in graph writer order: ``[writers, batch, pos, hidden]``,
        detached (a writer's output less its ablated value; its output itself when ``values`` is None)."""
        deltas = self._state.get("deltas")
        if not deltas:
            raise SubnetlabError("no forward has run with these edge masks applied, so there are no writer outputs")
        return torch.cat([d.detach() for d in deltas], 0)

    # -- per forward --------------------------------------------------------------------
    def _active(self) -> bool:
        return self.enabled and (self.mask is not None or self.source is not None)

    def _begin(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self._state = {"embeds": [], "deltas": []}
        if self.enabled and self.source is not None:
            self.set(self.source())

    def _complement(self, block_index: int, like: Tensor) -> Tensor:
        """``1 - m`` of a reader block, ``[readers, writers]``."""
        block = self.graph.reader_blocks[block_index]
        return (1.0 - self.mask[block.start:block.stop].to(like.device, like.dtype)).view(len(block.readers),
                                                                                          block.writers)

    def _read(self, block_index: int, resid: Tensor) -> Tensor:
        """``resid - sum_w (1 - m_wr) D_w`` for every reader of a block: ``[readers, batch, pos, hidden]``, as
        ``on_reader_input`` leaves it."""
        self._flush_embeddings(resid)
        neg = -self._complement(block_index, resid)  # [readers, writers], tiny
        start, flat = 0, resid.numel()
        # every reader's copy of the stream, then out -= (1 - m) @ D in place, one BLAS call per writer group: no
        # full-size temporary, subtraction or copy per group (addmm's backward needs only the two small factors).
        # Writers recorded after the block's own (a parallel MLP's layer's heads) are not in its stream.
        out = resid.reshape(1, flat).expand(neg.shape[0], flat).clone()  # [readers, batch * pos * hidden]
        for delta in self._state["deltas"]:  # [n, batch, pos, hidden] per writer group
            if start >= neg.shape[1]:
                break
            n = delta.shape[0]
            out.addmm_(neg[:, start:start + n], delta.reshape(n, flat).to(out.device))  # a device map's layers
            start += n
        if start != neg.shape[1]:
            raise SubnetlabError(f"edge intervention saw {start} writers before a block that reads {neg.shape[1]}; "
                                 "the model's forward does not run in the order its graph assumes")
        readers = out.view(neg.shape[0], *resid.shape)
        if self.on_reader_input is not None:
            replaced = self.on_reader_input(block_index, readers)
            if replaced is not None:
                readers = replaced
        return readers

    def _flush_embeddings(self, resid: Tensor) -> None:
        """Turn the embedding outputs seen so far into the first writer group (once per forward)."""
        embeds = self._state["embeds"]
        if not embeds:
            return
        if self.graph.num_embeddings == 0:  # no embedding writers: the embeddings stay in every reader's input
            self._state["embeds"] = []
            return
        ablated = self.values.embeddings if self.values is not None else [None] * len(embeds)
        deltas = [(e - (0 if a is None else _fit(a, e))).expand_as(resid) for e, a in zip(embeds, ablated)]
        if self.graph.num_embeddings == 1 and len(deltas) > 1:
            deltas = [sum(deltas)]
        self._state["deltas"].append(torch.stack(deltas))
        self._state["embeds"] = []

    # -- hooks ----------------------------------------------------------------------------
    def _on_embedding(self, output: Tensor) -> None:
        if self._active():
            self._state["embeds"].append(output)

    def _on_attn_norm(self, layer: int, module: nn.Module, args: tuple) -> None:
        if not self._active():
            return
        readers = self._read(2 * layer, args[0])
        self._state["qkv"] = module.forward(readers)  # the norm of every reader's own input (no hooks re-fired)

    def _on_projection(self, groups: list[tuple[int, int, int]], module: nn.Module, output: Tensor) -> Tensor | None:
        """Replace a Q/K/V projection's output: head ``i`` of each group projects its own reader's input."""
        if not self._active():
            return None
        normed = self._state["qkv"]  # [readers, batch, pos, hidden]
        weight = module.weight if self.adapter.spec.transposed else module.weight.t()  # [hidden, out]
        bias = getattr(module, "bias", None)
        d = self.adapter.head_dim
        parts = []
        for first, count, column in groups:
            w = weight[:, column:column + count * d].reshape(weight.shape[0], count, d)  # [hidden, n, d]
            readers = normed if count == normed.shape[0] else normed[first:first + count]  # a slice's backward zero-fills
            part = torch.einsum("nbph,hne->bpne", readers, w).flatten(-2)
            if bias is not None:
                part = part + bias[column:column + count * d]
            parts.append(part)
        return torch.cat(parts, dim=-1).to(output.dtype)

    def _on_heads(self, layer: int, module: nn.Module, args: tuple) -> None:
        if not self._active():
            return
        z = args[0]  # [batch, pos, heads * d]
        H, d = self.adapter.num_heads, self.adapter.head_dim
        zh = z.view(*z.shape[:-1], H, d)
        weight = module.weight if self.adapter.spec.transposed else module.weight.t()  # [H * d, hidden]
        w = weight.reshape(H, d, weight.shape[-1])
        if self.values is not None:
            zh = zh - _fit(self.values.components.head_value(layer, zh), zh).to(zh.dtype)
        self._state["deltas"].append(torch.einsum("bphe,heo->hbpo", zh, w))  # D per head [H, batch, pos, hidden]

    def _on_mlp_norm(self, layer: int, args: tuple) -> tuple:
        if not self._active():
            return None
        return (self._read(2 * layer + 1, args[0])[0], *args[1:])

    def _on_mlp(self, layer: int, output: Tensor) -> None:
        if not self._active():
            return
        delta = output
        if self.values is not None:
            delta = output - _fit(self.values.components.mlp_value(layer, output), output).to(output.dtype)
        self._state["deltas"].append(delta.unsqueeze(0))

    def _on_final_norm(self, args: tuple) -> tuple:
        if not self._active():
            return None
        return (self._read(len(self.graph.reader_blocks) - 1, args[0])[0], *args[1:])

    def __enter__(self) -> "EdgeMasks":
        refuse_offloaded(self.model, "edge interventions")  # their hooks read weights outside the module's forward
        a, spec = self.adapter, self.adapter.spec
        hook = self._handles.append
        try:
            hook(self.model.register_forward_pre_hook(self._begin, with_kwargs=True))
            for module in a.embedding_modules():
                hook(module.register_forward_hook(lambda m, args, out: self._on_embedding(out)))
            groups = projection_groups(a)
            for layer, block in enumerate(a.layers()):
                hook(block.get_submodule(spec.attn_norm).register_forward_pre_hook(
                    lambda m, args, layer=layer: self._on_attn_norm(layer, m, args)))
                for path, g in groups.items():
                    hook(block.get_submodule(path).register_forward_hook(lambda m, args, out, g=g: self._on_projection(g, m, out)))
                hook(a.head_output_module(layer).register_forward_pre_hook(
                    lambda m, args, layer=layer: self._on_heads(layer, m, args)))
                hook(block.get_submodule(spec.mlp_norm).register_forward_pre_hook(
                    lambda m, args, layer=layer: self._on_mlp_norm(layer, args)))
                hook(a.mlp_output_module(layer).register_forward_hook(
                    lambda m, args, out, layer=layer: self._on_mlp(layer, out)))
            final = a.model.base_model.get_submodule(spec.final_norm)
            hook(final.register_forward_pre_hook(lambda m, args: self._on_final_norm(args)))
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._state = {}


def projection_groups(adapter: Adapter) -> dict[str, list[tuple[int, int, int]]]:
    """Per Q/K/V projection module: ``(first reader of the layer's block, readers, first output column)``."""
    s, H, kv, d = adapter.spec, adapter.num_heads, adapter.num_kv_heads, adapter.head_dim
    if s.key is None and s.fused_layout == "per-head":  # [q k v] per head (GPT-NeoX): one reader per column block
        return {s.query: [(part * H + h, 1, (3 * h + part) * d) for h in range(H) for part in range(3)]}
    if s.key is None:  # fused [q | k | v] (GPT-2): its columns are in reader order, so one group of every reader
        return {s.query: [(0, H + 2 * kv, 0)]}
    return {s.query: [(0, H, 0)], s.key: [(H, kv, 0)], s.value: [(H + kv, kv, 0)]}


def _fit(value: Tensor, like: Tensor) -> Tensor:
    """A mean ``[hidden]`` / per-position ``[P, hidden]`` or captured ``[B, P, hidden]`` value against ``like``."""
    if value.dim() == like.dim() - 1 and value.dim() >= 2 and like.dim() == 3:
        value = value[: like.shape[1]]
    return value.to(like.device)


def apply_edges(model: nn.Module, adapter: Adapter, graph: Graph, mask: Tensor | None = None,
                values: WriterValues | None = None, source: EdgeSource | None = None,
                on_reader_input: ReaderInputHook | None = None) -> EdgeMasks:
    """``with apply_edges(model, adapter, graph, mask, values):`` (see ``EdgeMasks``)."""
    return EdgeMasks(model, adapter, graph, mask, values, source, on_reader_input)
