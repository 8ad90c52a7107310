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
  written by no head, so it stays, as the node-level gates leave it). Each
  writes its ``D_w`` into one buffer ``[writers, batch, pos, hidden]`` in the
  model's dtype, outside autograd: the only per-writer tensor kept for the
  backward. An identity autograd node on the writer's output (``_WriterTap``)
  hands it the gradient the readers sent to ``D_w``;
* reader inputs: one GEMM per reader block, ``resid + (m - 1) @ D`` over the
  block's writers; its backward gives the stream ``sum_r G_r``, the masks
  ``G @ D^T`` and the writers ``(m - 1)^T @ G`` (``_Stream``);
* MLP readers and the logits: a pre-hook on the norm in front of the MLP and on
  the final norm replaces their input;
* Q, K, V readers of every head: the query / key / value projections' forward
  is replaced on the instance (the class untouched, restored on exit) by each
  head's slice of the projection applied to the norm of its own reader's input
  (the FLOPs of the full projection; the projection of the block's own stream
  is not computed). The readers' inputs ``[readers, batch, pos, hidden]`` and
  their normed copies are not kept: the backward recomputes them from ``D``
  (activation checkpointing of one reader block, ``_ProjectedReaders``), so
  the intervention keeps writers x batch x pos x hidden, not readers x it.
  With ``on_reader_input`` set, or a norm / projection weight that trains, the
  inputs are materialised and kept as autograd sees them. ``keep_reader_inputs``
  keeps them (and the norm's graph) for the backward instead of recomputing:
  a GEMM over the block's cut writers and a norm less per block, for
  2 x readers x batch x pos x hidden more memory.

Two public hooks let a method read the intervention without reaching into it
(``methods.attribution`` computes EAP with them):

* ``on_reader_input(block_index, inputs)``: called with every reader block's
  inputs ``[readers, batch, pos, hidden]`` (block ``graph.reader_blocks[i]``)
  as the forward reaches it, after the masks are applied; it may register a
  gradient hook on them, and a tensor it returns replaces them;
* ``writer_deltas()``: after a forward, every writer's ``D_w`` in graph writer
  order (its output itself when ``values`` is None).

Pre-LN families (GPT-2, Llama-style, GPT-NeoX) have a residual stream that is
a sum of writer outputs. BERT and RoBERTa normalise the stream after every
sub-layer, so a component's input is not a sum over upstream components and "the
edge from w" has no term to remove: edge interventions refuse them (their graph
still counts). Gemma-2 normalises each attention block's and MLP's output before
adding it (``post_attention_layernorm``, ``post_feedforward_layernorm``), so the
stream holds the norm of the heads' sum, not the sum: its edges are EAP-IG's
(TransformerLens's hooks on Gemma-2): a head writes its own output before the norm
(``attn.hook_result``), an MLP its output after its norm (``hook_mlp_out``), the
input the embedding times sqrt(hidden) (``hook_embed``, the scale folded into
W_E). EAP's scores are EAP-IG's ``get_scores_eap`` there: ``D_w . g_r`` with a
head's ``D`` before the norm. A cut edge is EAP-IG's ``evaluate_graph``: a reader
sees the embeddings' and MLPs' cut differences added to its input, and each earlier
layer's attention output as ``post_norm(A_l - sum_h (1 - m_hr) D_h) -
post_norm(A_l)`` added (``A_l`` the layer's ``o_proj`` output in this forward: its
heads' sum with the cut ones corrupted, through the norm), so with every edge cut
a reader sees the corrupted run. That is not linear in the masks: on Gemma-2 edge
masks are evaluated (no gradient through them: Edge Pruning's training is refused
there). OLMo-2, with norms after each block and none before, names no reader
inputs and is refused. With parallel attention and
MLP (GPT-NeoX) the MLP reads the layer's input: its reader block has no edges
from its own layer's heads, whose outputs are already recorded when it runs.
Mask arithmetic runs in the model's dtype; masks are given as float32 ``[edges]``.
Under ``intervene.checkpoint.checkpointed_blocks`` a block's hooks run again in the backward; the writers' hooks
then only tap (their rows of ``D`` are already written).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.activations import ComponentValues, add_padded, collect_means
from subnetlab.intervene.checkpoint import recomputing
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
    if spec.residual == "block-norm" and not (spec.attn_norm and spec.mlp_norm):
        raise SubnetlabError(
            f"{spec.family} models normalise each attention block's output before adding it to the residual stream, "
            "so it is not a sum of its heads' outputs and an edge out of one head has no term to remove; edge-level "
            "circuits need a pre-LN model (GPT-2, Llama, Mistral, Qwen, GPT-NeoX) or Gemma-2's norms before and after "
            "each block; node-level pruning works here")
    if spec.residual not in ("pre-ln", "block-norm"):
        raise SubnetlabError(
            f"{spec.family} models normalise the residual stream after every attention and MLP block (post-LN), so a "
            "component's input is not a sum of upstream components' outputs and single edges cannot be removed; "
            "edge-level circuits need a pre-LN model (GPT-2, Llama, Mistral, Qwen, GPT-NeoX); node-level pruning works "
            "here")
    if not (spec.embeddings and spec.attn_norm and spec.mlp_norm and spec.final_norm):
        raise SubnetlabError(f"{spec.family} models do not name their norms and embeddings for edge interventions")


def check_trainable_edges(adapter: Adapter) -> None:
    """Refuse training edge masks where a cut head edge passes a norm after attention (Gemma-2): its masks are
    evaluated and scored, not trained (module doc)."""
    if adapter.spec.attn_post_norm:
        raise SubnetlabError(f"{adapter.family} models normalise each attention block's output, and a cut head edge is "
                             "seen through that norm (EAP-IG's definition), which the masks' gradient does not follow: "
                             "their edge masks are evaluated (circuit-eval) and scored by attribution (eap, eap-ig), "
                             "not trained by Edge Pruning", setting="method")


class _WritersCaptured(Exception):
    """Raised at the final norm: every writer has run, so the corrupted forward stops before the logits."""


@torch.no_grad()
def capture_writers(model: nn.Module, adapter: Adapter, inputs: dict[str, Tensor]) -> WriterValues:
    """Every writer's output on ``inputs`` (the corrupted batch of a paired counterfactual). The forward stops at
    the final norm: no writer comes after it, and the unembedding is a third of GPT-2 small's forward."""
    embeds: list[Tensor | None] = [None] * len(adapter.spec.embeddings)
    heads: list[Tensor | None] = [None] * adapter.num_layers
    mlps: list[Tensor | None] = [None] * adapter.num_layers
    H, d = adapter.num_heads, adapter.head_dim

    def stop(module: nn.Module, args: tuple) -> None:
        raise _WritersCaptured

    handles = [m.register_forward_hook(lambda mod, a, out, i=i: embeds.__setitem__(i, out.detach().clone()))
               for i, m in enumerate(adapter.embedding_modules())]
    for layer in range(adapter.num_layers):
        handles.append(adapter.head_output_module(layer).register_forward_pre_hook(
            lambda mod, a, layer=layer: heads.__setitem__(layer, a[0].detach().view(*a[0].shape[:-1], H, d).clone())))
        handles.append(adapter.mlp_output_module(layer).register_forward_hook(
            lambda mod, a, out, layer=layer: mlps.__setitem__(layer, out.detach().clone())))
    if adapter.spec.final_norm:
        handles.append(adapter.model.base_model.get_submodule(adapter.spec.final_norm).register_forward_pre_hook(stop))
    try:
        model(**inputs)
    except _WritersCaptured:
        pass
    finally:
        for h in handles:
            h.remove()
    return WriterValues([e for e in embeds if e is not None], ComponentValues(heads, mlps, per_position=True))


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
    ``writer_deltas()`` are the hooks of the module docstring. ``keep_reader_inputs`` (settable between
    forwards) keeps each attention block's reader inputs and their normed copies for the backward instead of
    recomputing them (module docstring).
    """

    def __init__(self, model: nn.Module, adapter: Adapter, graph: Graph, mask: Tensor | None = None,
                 values: WriterValues | None = None, source: EdgeSource | None = None,
                 on_reader_input: ReaderInputHook | None = None, keep_reader_inputs: bool = False) -> None:
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
        self.keep_reader_inputs = keep_reader_inputs
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
        detached (a writer's output less its ablated value; its output itself when ``values`` is None). It is the
        buffer the backward reads: read it, do not write it."""
        stream = self._state.get("stream")
        if stream is None or not stream.count:
            raise SubnetlabError("no forward has run with these edge masks applied, so there are no writer outputs")
        return stream.deltas[:stream.count]

    # -- per forward --------------------------------------------------------------------
    def _active(self) -> bool:
        return self.enabled and (self.mask is not None or self.source is not None)

    def _begin(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self._state = {"embeds": [], "stream": _Stream()}
        if self.enabled and self.source is not None:
            self.set(self.source())

    def _negated_complement(self, block_index: int, like: Tensor) -> Tensor:
        """``-(1 - m)`` of a reader block, ``[readers, writers]``, in the model's dtype."""
        block = self.graph.reader_blocks[block_index]
        mask = self.mask[block.start:block.stop].to(like.device, like.dtype)
        return (mask - 1.0).view(len(block.readers), block.writers)

    def _read(self, block_index: int, resid: Tensor) -> Tensor:
        """``resid - sum_w (1 - m_wr) D_w`` for every reader of a block: ``[readers, batch, pos, hidden]``, as
        ``on_reader_input`` leaves it."""
        self._flush_embeddings(resid)
        readers = _ReaderInputs.apply(resid, self._negated_complement(block_index, resid), self._state["stream"])
        if self.on_reader_input is not None:
            replaced = self.on_reader_input(block_index, readers)
            if replaced is not None:
                readers = replaced
        return readers

    def _flush_embeddings(self, resid: Tensor) -> None:
        """Write the embedding outputs seen so far as the first writers (once per forward, at the first reader)."""
        stream = self._state["stream"]
        stream.allocate(len(self.graph.writers), resid)
        embeds = self._state["embeds"]
        self._state["embeds"] = []
        if not embeds or self.graph.num_embeddings == 0:  # no embedding writers: they stay in every reader's input
            return
        ablated = self.values.embeddings if self.values is not None else [None] * len(embeds)
        with torch.no_grad():
            rows = stream.take(self.graph.num_embeddings)
            if self.graph.num_embeddings == 1 and len(embeds) > 1:
                rows[0].zero_()
            scale = embedding_scale(self.adapter, resid.dtype)
            for i, (e, a) in enumerate(zip(embeds, ablated)):
                row = rows[0 if self.graph.num_embeddings == 1 else i]
                delta = e if a is None else e - _fit(a, e).to(e.dtype)
                delta = delta if scale is None else delta * scale.to(delta.device)
                if self.graph.num_embeddings == 1 and len(embeds) > 1:
                    row += delta
                else:
                    row.copy_(delta.expand_as(row))

    def _tap(self, out: Tensor, start: int, count: int, heads: Tensor | None = None,
             scale: Tensor | None = None) -> Tensor | None:
        """``out`` through a ``_WriterTap`` when a gradient can reach it; None (unchanged) otherwise."""
        if not (out.requires_grad and torch.is_grad_enabled()):
            return None
        return _WriterTap.apply(out, self._state["stream"], start, count, heads, scale)

    def _lean(self, modules: Iterable[nn.Module]) -> bool:
        """Q/K/V readers' inputs recomputed in the backward rather than kept: unless a method reads them
        (``on_reader_input``) or the norm or projections train."""
        return self.on_reader_input is None and not any(p.requires_grad for m in modules for p in m.parameters())

    # -- hooks ----------------------------------------------------------------------------
    def _on_embedding(self, index: int, output: Tensor) -> Tensor | None:
        if not self._active():
            return None
        self._state["embeds"].append(output.detach())
        if self.graph.num_embeddings == 0:
            return None
        return self._tap(output, 0 if self.graph.num_embeddings == 1 else index, 1,
                         scale=embedding_scale(self.adapter, output.dtype))

    def _on_attn_norm(self, layer: int, module: nn.Module, args: tuple) -> None:
        if not self._active():
            return
        if self._lean([module, *self._projections[layer]]):
            self._flush_embeddings(args[0])
            self._state["attn"] = (2 * layer, args[0], module)
            self._state.pop("qkv", None)
        else:
            readers = self._read(2 * layer, args[0])
            self._state["qkv"] = module.forward(readers)  # the norm of every reader's own input (no hooks re-fired)

    def _on_projection(self, groups: list[tuple[int, int, int]], module: nn.Module, forward: Callable,
                       x: Tensor, *args: Any, repeat: int = 1, **kwargs: Any) -> Tensor:
        """A Q/K/V projection's forward: head ``i`` of each group projects its own reader's normed input (the
        projection of the block's own stream is not computed). ``repeat`` > 1: a key/value projection of an
        ungrouped graph, which gives every query head its own copy of its key/value head's output."""
        if not self._active():
            return repeat_heads(forward(x, *args, **kwargs), repeat, self.adapter.head_dim)
        weight = module.weight if self.adapter.spec.transposed else module.weight.t()  # [hidden, out]
        bias = getattr(module, "bias", None)
        first = min(g[0] for g in groups)
        last = max(g[0] + g[1] for g in groups)
        d = self.adapter.head_dim
        if "qkv" in self._state:
            out = _project(self._state["qkv"][first:last], weight, bias, groups, first, d)
        else:
            block, resid, norm = self._state["attn"]
            neg = self._negated_complement(block, resid)[first:last]
            out = _ProjectedReaders.apply(resid, neg, self._state["stream"], norm, weight, bias, groups, first, d,
                                          self.keep_reader_inputs)
        return out.to(x.dtype)

    def _on_heads(self, layer: int, module: nn.Module, args: tuple) -> tuple | None:
        if not self._active():
            return None
        z = args[0]  # [batch, pos, heads * d]
        H, d = self.adapter.num_heads, self.adapter.head_dim
        weight = module.weight if self.adapter.spec.transposed else module.weight.t()  # [H * d, hidden]
        w = weight.reshape(H, d, weight.shape[-1])
        stream = self._state["stream"]
        if recomputing():  # a checkpointed block's forward again in the backward: its rows are written
            tapped = self._tap(z, self._state["starts"][("heads", layer)], H, w)
            return None if tapped is None else (tapped, *args[1:])
        start = stream.count
        self._state.setdefault("starts", {})[("heads", layer)] = start
        with torch.no_grad():
            zh = z.detach().view(*z.shape[:-1], H, d)
            if self.values is not None:
                zh = zh - _fit(self.values.components.head_value(layer, zh), zh).to(zh.dtype)
            rows = stream.take(H)  # D per head [H, batch, pos, hidden]
            torch.bmm(zh.movedim(-2, 0).reshape(H, -1, d), w.to(zh.dtype), out=rows.view(H, -1, w.shape[-1]))
        tapped = self._tap(z, start, H, w)
        return None if tapped is None else (tapped, *args[1:])

    def _on_attention_output(self, norm: nn.Module, output: Tensor) -> None:
        """Gemma-2: the layer's heads (the rows just written) and its attention output ``A_l`` before its norm."""
        if not self._active():
            return
        stream = self._state["stream"]
        H = self.adapter.num_heads
        stream.post_norms.append((stream.count - H, stream.count, output.detach(), norm))

    def _on_mlp_norm(self, layer: int, args: tuple) -> tuple:
        if not self._active():
            return None
        return (self._read(2 * layer + 1, args[0])[0], *args[1:])

    def _on_mlp(self, layer: int, output: Tensor) -> Tensor | None:
        if not self._active():
            return None
        stream = self._state["stream"]
        if recomputing():
            return self._tap(output, self._state["starts"][("mlp", layer)], 1)
        start = stream.count
        self._state.setdefault("starts", {})[("mlp", layer)] = start
        with torch.no_grad():
            row = stream.take(1)[0]
            if self.values is None:
                row.copy_(output)
            else:
                torch.sub(output, _fit(self.values.components.mlp_value(layer, output), output).to(output.dtype),
                          out=row)
        return self._tap(output, start, 1)

    def _on_final_norm(self, args: tuple) -> tuple:
        if not self._active():
            return None
        return (self._read(len(self.graph.reader_blocks) - 1, args[0])[0], *args[1:])

    def __enter__(self) -> "EdgeMasks":
        refuse_offloaded(self.model, "edge interventions")  # their hooks read weights outside the module's forward
        a, spec = self.adapter, self.adapter.spec
        hook = self._handles.append
        self._projections: list[list[nn.Module]] = []
        try:
            hook(self.model.register_forward_pre_hook(self._begin, with_kwargs=True))
            for i, module in enumerate(a.embedding_modules()):
                hook(module.register_forward_hook(lambda m, args, out, i=i: self._on_embedding(i, out)))
            groups = projection_groups(a, self.graph)
            repeats = kv_repeats(a, self.graph)
            if self.graph.ungrouped_kv:
                hook(UngroupedAttention(a))
            for layer, block in enumerate(a.layers()):
                hook(block.get_submodule(spec.attn_norm).register_forward_pre_hook(
                    lambda m, args, layer=layer: self._on_attn_norm(layer, m, args)))
                projections = []
                for path, g in groups.items():
                    module = block.get_submodule(path)
                    hook(_ReplacedForward(module, lambda forward, m=module, g=g, r=repeats.get(path, 1): (
                        lambda x, *args, **kwargs: self._on_projection(g, m, forward, x, *args, repeat=r,
                                                                       **kwargs))))
                    projections.append(module)
                self._projections.append(projections)
                hook(a.head_output_module(layer).register_forward_pre_hook(
                    lambda m, args, layer=layer: self._on_heads(layer, m, args)))
                if spec.attn_post_norm:  # Gemma-2: cut head edges are seen through the norm after attention
                    post = block.get_submodule(spec.attn_post_norm)
                    hook(a.head_output_module(layer).register_forward_hook(
                        lambda m, args, out, post=post: self._on_attention_output(post, out)))
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
        for handle in reversed(self._handles):
            handle.remove()
        self._handles.clear()
        self._state = {}


class _ReplacedForward:
    """A module's ``forward`` replaced on the instance (the class untouched) until ``remove()``."""

    def __init__(self, module: nn.Module, make: Callable[[Callable], Callable]) -> None:
        if "forward" in module.__dict__:
            raise SubnetlabError(f"{type(module).__name__}'s forward is already replaced on this instance (edge masks "
                                 "applied twice to one model?)")
        self.module = module
        module.forward = make(module.forward)

    def remove(self) -> None:
        self.module.__dict__.pop("forward", None)


class _Stream:
    """One forward's writer deltas ``[writers, batch, pos, hidden]`` (the model's dtype, outside autograd) and, in
    the backward, the gradient the readers send them, ``[writers, batch * pos * hidden]``.

    The deltas are the only per-writer tensors kept for the backward; reader inputs are recomputed from them.
    Readers' backward steps add into ``grad`` before any earlier writer's backward runs (every reader reads the
    residual stream downstream of the writers it reads), where the writer's tap (``_WriterTap``) picks it up."""

    def __init__(self) -> None:
        self.deltas: Tensor | None = None
        self.count = 0
        self.grad: Tensor | None = None
        # Gemma-2: per layer so far (first head row, end, A_l, the norm after attention); see the module doc
        self.post_norms: list[tuple[int, int, Tensor, nn.Module]] = []

    def allocate(self, writers: int, resid: Tensor) -> None:
        if self.deltas is None:
            self.deltas = resid.new_empty(writers, *resid.shape)

    def take(self, n: int) -> Tensor:
        """The next ``n`` writers' rows ``[n, batch, pos, hidden]``, to be written in place."""
        if self.deltas is None:
            raise SubnetlabError("edge intervention saw a writer before the first reader; the model's forward does "
                                 "not run in the order its graph assumes")
        rows = self.deltas[self.count:self.count + n]
        self.count += n
        return rows

    def flat(self, writers: int) -> Tensor:
        return self.deltas[:writers].reshape(writers, self.deltas[0].numel())

    @staticmethod
    def cut(neg: Tensor) -> Tensor | None:
        """The writers some reader of a block cuts (its column of ``m - 1`` not all zero) when they are at most an
        eighth of its writers, else None (all of them): a writer no reader cuts adds exactly nothing to the
        readers' inputs or to its own gradient, so it is left out of those products (every edge kept costs no
        product at all). The bound keeps the gathered rows of ``D`` small beside the buffer."""
        cut = (neg != 0).any(0)
        if bool(cut.sum() * 8 > cut.numel()):  # asked this way, a fake tensor's planning answer (True) is "all"
            return None
        return cut.nonzero().squeeze(1)

    def read(self, resid: Tensor, neg: Tensor, cut: Tensor | None) -> Tensor:
        """``resid - (1 - m) @ D``: ``[readers, batch, pos, hidden]``; one GEMM over the block's cut writers."""
        readers, writers = neg.shape
        if self.count < writers:
            raise SubnetlabError(f"edge intervention saw {self.count} writers before a block that reads {writers}; "
                                 "the model's forward does not run in the order its graph assumes")
        if self.post_norms:
            return self._read_through_norms(resid, neg)
        row = resid.reshape(1, -1)
        out = resid.new_empty(readers, row.shape[1])
        # the stream broadcast as addmm's bias: no separate copy per reader (into ``out``: a fresh addmm with a
        # broadcast bias costs a few ms more per call, most of a small block's GEMM)
        if cut is None and writers:
            torch.addmm(row, neg, self.flat(writers), out=out)
        elif cut is not None and cut.numel():
            torch.addmm(row, neg[:, cut], self.flat(writers)[cut], out=out)
        else:
            out.copy_(row.expand(readers, -1))
        return out.view(readers, *resid.shape)

    def _read_through_norms(self, resid: Tensor, neg: Tensor) -> Tensor:
        """Gemma-2's reader inputs (EAP-IG's ``evaluate_graph``): ``resid + (m - 1) @ D`` over the embeddings and
        MLPs, plus per earlier layer ``norm(A_l + (m - 1)[:, heads] @ D[heads]) - norm(A_l)``."""
        readers, writers = neg.shape
        linear = neg.clone()
        out = resid.reshape(1, -1).expand(readers, -1).clone()
        for start, stop, attention, norm in self.post_norms:
            if stop > writers:
                continue
            linear[:, start:stop] = 0
            part = neg[:, start:stop]
            if bool((part != 0).any()):
                heads = (part @ self.flat(writers)[start:stop]).view(readers, *resid.shape)
                out += (norm(attention + heads) - norm(attention)).reshape(readers, -1)
        if writers:
            out += linear @ self.flat(writers)
        return out.view(readers, *resid.shape)

    def backward(self, resid_shape: torch.Size, neg: Tensor, cut: Tensor | None, grad: Tensor,
                 needs: tuple[bool, ...]) -> tuple[Tensor | None, Tensor | None]:
        """Gradients of ``read`` from the readers' ``grad`` ``[readers, batch * pos * hidden]``: the stream's,
        the block's ``-(1 - m)``'s (every writer's, cut or not), and the writers' (added to ``self.grad``)."""
        writers = neg.shape[1]
        grad_resid = grad.sum(0).view(resid_shape) if needs[0] else None
        grad_neg = None
        if needs[1]:
            grad_neg = grad @ self.flat(writers).t() if writers else torch.zeros_like(neg)
        if cut is None and writers:
            if self.grad is None and writers == self.deltas.shape[0]:  # the logits' block, first in the backward
                self.grad = torch.mm(neg.t(), grad)
            else:
                self._grad()[:writers].addmm_(neg.t(), grad)
        elif cut is not None and cut.numel():
            self._grad().index_add_(0, cut, neg[:, cut].t() @ grad)
        return grad_resid, grad_neg

    def _grad(self) -> Tensor:
        if self.grad is None:
            self.grad = self.deltas.new_zeros(self.deltas.shape[0], self.deltas[0].numel())
        return self.grad


def refuse_gradient_through_norms(stream: _Stream, needs: tuple[bool, ...]) -> None:
    """Gemma-2's cut head edges pass a norm (``_Stream._read_through_norms``), which the hand-written backward
    does not follow: masks there are evaluated only."""
    if stream.post_norms and any(needs):
        raise SubnetlabError("edge masks on a model with a norm after each attention block (Gemma-2) are evaluated, "
                             "not trained: a cut head edge is seen through that norm (EAP-IG's definition), which "
                             "the masks' gradient does not follow; score its edges by attribution (eap, eap-ig)")


class _ReaderInputs(torch.autograd.Function):
    """Every reader's input of a block, materialised (MLP and logit readers, and Q/K/V readers under
    ``on_reader_input`` or trainable norm / projection weights)."""

    @staticmethod
    def forward(ctx: Any, resid: Tensor, neg: Tensor, stream: _Stream) -> Tensor:
        refuse_gradient_through_norms(stream, ctx.needs_input_grad[:2])
        ctx.stream, ctx.shape, ctx.cut = stream, resid.shape, stream.cut(neg)
        ctx.save_for_backward(neg)
        return stream.read(resid, neg, ctx.cut)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        (neg,) = ctx.saved_tensors
        grads = ctx.stream.backward(ctx.shape, neg, ctx.cut, grad.reshape(neg.shape[0], -1), ctx.needs_input_grad)
        return (*grads, None)


class _ProjectedReaders(torch.autograd.Function):
    """A Q/K/V projection's output when each head projects its own reader's normed input, without keeping the
    readers' inputs: the forward computes them, the norm and the per-head products and keeps only ``resid`` and
    the masks; the backward recomputes the inputs and the norm (activation checkpointing of one reader block)."""

    @staticmethod
    def forward(ctx: Any, resid: Tensor, neg: Tensor, stream: _Stream, norm: nn.Module, weight: Tensor,
                bias: Tensor | None, groups: list[tuple[int, int, int]], first: int, head_dim: int,
                keep: bool) -> Tensor:
        refuse_gradient_through_norms(stream, ctx.needs_input_grad[:2])
        ctx.stream, ctx.norm, ctx.weight = stream, norm, weight
        ctx.groups, ctx.first, ctx.head_dim = groups, first, head_dim
        ctx.cut = stream.cut(neg)
        ctx.save_for_backward(resid, neg)
        readers = stream.read(resid, neg, ctx.cut)
        ctx.kept = None
        if keep:  # the inputs and the norm's own graph on them, as autograd keeps them for the backward
            readers.requires_grad_()
            with torch.enable_grad():
                normed = norm.forward(readers)
            ctx.kept = (readers, normed)
            normed = normed.detach()
        else:
            normed = norm.forward(readers)
        return _project(normed, weight, bias, groups, first, head_dim)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        resid, neg = ctx.saved_tensors
        stream = ctx.stream
        if ctx.kept is not None:
            readers, normed = ctx.kept
            ctx.kept = None
        else:
            readers = stream.read(resid.detach(), neg.detach(), ctx.cut).requires_grad_()
            with torch.enable_grad():
                normed = ctx.norm.forward(readers)
        grad_normed = _project_backward(grad, ctx.weight, ctx.groups, ctx.first, ctx.head_dim, readers.shape)
        (grad_readers,) = torch.autograd.grad(normed, readers, grad_normed.to(normed.dtype))
        del normed, readers
        grads = stream.backward(resid.shape, neg, ctx.cut, grad_readers.reshape(neg.shape[0], -1),
                                ctx.needs_input_grad)
        return (*grads, None, None, None, None, None, None, None, None)


class _WriterTap(torch.autograd.Function):
    """Identity on a writer's output (or, for heads, the output projection's input); its backward adds the
    gradient the readers sent to the writer's delta (``_Stream.grad``), through the head's slice of the
    projection for heads."""

    @staticmethod
    def forward(ctx: Any, out: Tensor, stream: _Stream, start: int, count: int, heads: Tensor | None,
                scale: Tensor | None = None) -> Tensor:
        ctx.stream, ctx.start, ctx.count, ctx.heads, ctx.shape = stream, start, count, heads, out.shape
        ctx.scale = scale  # the embeddings' scale into the stream (Gemma): the delta is ``scale * out``
        return out.view_as(out)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        stream = ctx.stream
        if stream.grad is None:
            return grad, None, None, None, None, None
        sent = stream.grad[ctx.start:ctx.start + ctx.count]  # [count, batch * pos * hidden]
        resid_shape = stream.deltas.shape[1:]
        if ctx.heads is not None:  # [H, d, hidden]: the heads' inputs [batch, pos, H * d]
            H, d, hidden = ctx.heads.shape
            per_head = torch.bmm(sent.view(H, -1, hidden), ctx.heads.transpose(1, 2))  # [H, batch * pos, d]
            extra = per_head.view(H, *resid_shape[:-1], d).movedim(0, -2).reshape(ctx.shape)
        else:
            extra = sent.view(ctx.count, *resid_shape).sum(0).sum_to_size(ctx.shape)
            if ctx.scale is not None:
                extra = extra * ctx.scale.to(extra.device)
        return grad + extra.to(grad.dtype), None, None, None, None, None


def _project(normed: Tensor, weight: Tensor, bias: Tensor | None, groups: list[tuple[int, int, int]], first: int,
             head_dim: int) -> Tensor:
    """Each group's heads project their own readers' normed inputs (rows from ``first`` on) through their columns
    of ``weight`` ``[hidden, out]``: ``[batch, pos, out]`` in the groups' column order."""
    parts = []
    for start, count, column in groups:
        w = weight[:, column:column + count * head_dim].reshape(weight.shape[0], count, head_dim)
        part = torch.einsum("nbph,hne->bpne", normed[start - first:start - first + count], w).flatten(-2)
        parts.append(part if bias is None else part + bias[column:column + count * head_dim])
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _project_backward(grad: Tensor, weight: Tensor, groups: list[tuple[int, int, int]], first: int,
                      head_dim: int, shape: torch.Size) -> Tensor:
    """The gradient of ``_project``'s normed readers ``[readers, batch, pos, hidden]`` from its output's."""
    if len(groups) == 1 and groups[0][1] == shape[0]:  # one group of every reader: no zero-filled buffer
        start, count, column = groups[0]
        w = weight[:, column:column + count * head_dim].reshape(weight.shape[0], count, head_dim)
        return torch.einsum("bpne,hne->nbph", grad.reshape(*grad.shape[:-1], count, head_dim), w.to(grad.dtype))
    out = grad.new_zeros(shape)
    offset = 0
    for start, count, column in groups:
        w = weight[:, column:column + count * head_dim].reshape(weight.shape[0], count, head_dim)
        g = grad[..., offset:offset + count * head_dim].reshape(*grad.shape[:-1], count, head_dim)
        out[start - first:start - first + count] += torch.einsum("bpne,hne->nbph", g, w.to(grad.dtype))
        offset += count * head_dim
    return out


def projection_groups(adapter: Adapter, graph: Graph | None = None) -> dict[str, list[tuple[int, int, int]]]:
    """Per Q/K/V projection module: ``(first reader of the layer's block, readers, first weight column)``. On an
    ungrouped graph (``Graph.ungrouped_kv``) every query head's key and value reader is a group of its own on its
    key/value head's columns."""
    s, H, kv, d = adapter.spec, adapter.num_heads, adapter.num_kv_heads, adapter.head_dim
    if graph is not None and graph.ungrouped_kv and s.key is not None:
        group = H // kv
        return {s.query: [(0, H, 0)], s.key: [(H + h, 1, (h // group) * d) for h in range(H)],
                s.value: [(2 * H + h, 1, (h // group) * d) for h in range(H)]}
    if s.key is None and s.fused_layout == "per-head":  # [q k v] per head (GPT-NeoX): one reader per column block
        return {s.query: [(part * H + h, 1, (3 * h + part) * d) for h in range(H) for part in range(3)]}
    if s.key is None:  # fused [q | k | v] (GPT-2): its columns are in reader order, so one group of every reader
        return {s.query: [(0, H + 2 * kv, 0)]}
    return {s.query: [(0, H, 0)], s.key: [(H, kv, 0)], s.value: [(H + kv, kv, 0)]}


def embedding_scale(adapter: Adapter, dtype: torch.dtype) -> Tensor | None:
    """What the embeddings' outputs are multiplied by on their way into the stream: Gemma's ``normalizer``
    (sqrt(hidden size) in the stream's dtype, as the model computes it) where the model scales them after the
    embedding module; None where they enter as they are, or the module scales them itself (``transformers``
    5's ``Gemma2TextScaledWordEmbedding``, its ``embed_scale``)."""
    if not adapter.spec.scaled_embeddings or any(hasattr(m, "embed_scale") for m in adapter.embedding_modules()):
        return None
    return torch.tensor(adapter.hidden_size ** 0.5, dtype=dtype)


def kv_repeats(adapter: Adapter, graph: Graph) -> dict[str, int]:
    """Per key/value projection path, the copies of each key/value head's output the attention reads: the group
    size on an ungrouped graph (one per query head), else nothing (1)."""
    s = adapter.spec
    if not graph.ungrouped_kv:
        return {}
    if s.key is None:
        raise SubnetlabError(f"{s.family} models fuse their key and value projections; an ungrouped graph needs "
                             "separate ones")
    return {s.key: graph.group, s.value: graph.group}


def repeat_heads(out: Tensor, repeat: int, head_dim: int) -> Tensor:
    """A key/value projection's output ``[..., kv * d]`` with each head repeated ``repeat`` times in place,
    ``[..., kv * repeat * d]`` (query head ``h`` reads copy ``h`` of key/value head ``h // repeat``, as
    ``transformers``' ``repeat_kv`` and TransformerLens's ungrouping do)."""
    if repeat == 1:
        return out
    heads = out.view(*out.shape[:-1], -1, head_dim)
    return heads.repeat_interleave(repeat, dim=-2).flatten(-2)


class UngroupedAttention:
    """Every layer's attention told it has one query head per key/value head (``num_key_value_groups = 1``), so
    it reads the per-query-head keys and values the projections then give (``repeat_heads``) instead of
    repeating a key/value head for its group itself; ``remove()`` restores it. The weights stay as they are."""

    def __init__(self, adapter: Adapter) -> None:
        parent = adapter.spec.out_proj.rpartition(".")[0]
        self.saved: list[tuple[nn.Module, int]] = []
        for layer in adapter.layers():
            module = layer.get_submodule(parent) if parent else layer
            if not isinstance(getattr(module, "num_key_value_groups", None), int):
                self.remove()
                raise SubnetlabError(f"{adapter.family}'s attention ({type(module).__name__}) names no "
                                     "num_key_value_groups; its grouped keys and values cannot be given per query head")
            self.saved.append((module, module.num_key_value_groups))
            module.num_key_value_groups = 1

    def remove(self) -> None:
        for module, groups in self.saved:
            module.num_key_value_groups = groups
        self.saved.clear()


def _fit(value: Tensor, like: Tensor) -> Tensor:
    """A mean ``[hidden]`` / per-position ``[P, hidden]`` or captured ``[B, P, hidden]`` value against ``like``."""
    if value.dim() == like.dim() - 1 and value.dim() >= 2 and like.dim() == 3:
        value = value[: like.shape[1]]
    return value.to(like.device)


def apply_edges(model: nn.Module, adapter: Adapter, graph: Graph, mask: Tensor | None = None,
                values: WriterValues | None = None, source: EdgeSource | None = None,
                on_reader_input: ReaderInputHook | None = None, keep_reader_inputs: bool = False) -> EdgeMasks:
    """``with apply_edges(model, adapter, graph, mask, values):`` (see ``EdgeMasks``)."""
    return EdgeMasks(model, adapter, graph, mask, values, source, on_reader_input, keep_reader_inputs)
