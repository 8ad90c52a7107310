"""Reader gradients at "every edge kept" without expanding the readers: EAP's scores from one plain backward.

With every edge kept each reader's input is the model's own (``intervene.edges``), so the plain forward already
holds them: the MLPs and the logits read the stream at their norm's input, the Q/K/V readers of a layer all read
its attention norm's input ``x``. What differs per reader is only which branch its gradient comes through:

* an MLP reader / the logits: the gradient of the norm's input through the norm alone (not the residual skip
  around it), taken on a view of that input that only the norm reads;
* a Q/K/V reader of head ``h``: the vector-Jacobian product of "norm, then head ``h``'s slice of the projection"
  with the gradient ``g_h`` of that slice's output: ``u_h = g_h W_h^T`` per head, then the norm's vjp at ``x``
  applied to every ``u_h`` at once (batched gradients), computed in backward, one layer at a time. The sum of
  a projection's readers' gradients is the gradient of ``x`` through that projection, so it is returned as the
  projection's backward (``_ProjectionBackward``) and the model's own backward through the projection and the
  norm is not run as well.

Each attention block's scores are then ``grads [readers, B*P*hidden] @ D[:writers]^T`` (``D`` the writers' output
differences), one matmul per block as the backward passes it; the one-reader blocks (MLPs, logits) of a pass
share one matmul after it (``flush``). Nothing of size readers x batch x pos x hidden is
kept past its layer's backward; the forward is the model's own (``intervene.edges`` copies the stream once per
reader, subtracts every writer group with a matmul and differentiates those back, which dominated EAP's cost).
The projection layouts are ``intervene.edges.projection_groups``'s, so a reader here is the reader there.

Long contexts (``chunk``, tokens of the batch per chunk): ``D`` is ``writers x batch x pos x hidden``, the largest
tensor of an attribution on a deep model (GPT-2 small: 158 writers, 474 KB a token in float32; Llama-3.2-1B: 529
writers, 4.3 MB a token). An edge's score is a sum over tokens, and the norm acts on each token alone, so with a
chunk every block's scores are summed chunk by chunk: the readers' gradients of a chunk of tokens (the norm's vjp
on those tokens only) times ``D`` of the same tokens, recomputed from the node outputs the passes recorded
(``WriterDifferenceChunks``: a chunk of each layer's head outputs through the output projection). No
``[writers, tokens, hidden]`` or ``[readers, tokens, hidden]`` tensor is made; what it costs is one output
projection per layer of writers per block and pass (about 0.4 of a forward on GPT-2 small). The scores equal the
unchunked ones to rounding (the sums are taken in another order).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.intervene.edges import (
    EdgeMasks,
    UngroupedAttention,
    embedding_scale,
    kv_repeats,
    projection_groups,
    repeat_heads,
)
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph

NodeKey = tuple[str, int]


def writer_differences(adapter: Adapter, graph: Graph, corrupted: dict[NodeKey, Tensor],
                       clean: dict[NodeKey, Tensor], dtype: torch.dtype) -> Tensor:
    """``out_w(x~) - out_w(x)`` of every writer in graph order, ``[writers, B * P * hidden]`` in ``dtype``.

    ``corrupted`` / ``clean`` hold the node outputs of ``scores``'s node hooks (embedding outputs, each layer's
    attention output projection input, MLP outputs). A head's output is its slice of that input times its slice
    of the projection (the bias is no head's), as ``intervene.edges`` writes it. Written in place, row by row."""
    H, d = adapter.num_heads, adapter.head_dim
    z = clean[("heads", 0)]
    B, P = z.shape[:2]
    out = torch.empty(len(graph.writers), B, P, adapter.hidden_size, dtype=dtype, device=z.device)
    embeds = [corrupted[("embedding", i)] - clean[("embedding", i)] for i in range(len(adapter.embedding_modules()))]
    scale = embedding_scale(adapter, dtype)  # Gemma: the stream holds the embedding times sqrt(hidden)
    if scale is not None:
        embeds = [e.to(dtype) * scale.to(e.device) for e in embeds]
    row = graph.num_embeddings
    if row == 1 and len(embeds) > 1:
        out[0] = sum(embeds)
    elif row:
        for i, e in enumerate(embeds):
            out[i] = e
    for layer in range(adapter.num_layers):
        module = adapter.head_output_module(layer)
        weight = module.weight if adapter.spec.transposed else module.weight.t()  # [H * d, hidden]
        dz = (corrupted[("heads", layer)] - clean[("heads", layer)]).to(dtype).view(B * P, H, d).transpose(0, 1)
        torch.bmm(dz, weight.to(dtype).reshape(H, d, -1), out=out[row:row + H].view(H, B * P, -1))
        torch.sub(corrupted[("mlp", layer)], clean[("mlp", layer)], out=out[row + H])
        row += H + 1
    return out.view(out.shape[0], -1)


class WriterDifferenceChunks:
    """``writer_differences``'s rows for a range of the batch's tokens (``B * P`` flattened), computed when asked
    from the node outputs ``corrupted`` / ``clean`` (which it reads, not copies); the embedding rows are kept whole
    (one or two rows)."""

    def __init__(self, adapter: Adapter, graph: Graph, corrupted: dict[NodeKey, Tensor],
                 clean: dict[NodeKey, Tensor], dtype: torch.dtype) -> None:
        self.adapter, self.graph, self.corrupted, self.clean, self.dtype = adapter, graph, corrupted, clean, dtype
        z = clean[("heads", 0)]
        B, P = z.shape[:2]
        self.tokens, self.hidden = B * P, adapter.hidden_size
        E = graph.num_embeddings
        embeds = [corrupted[("embedding", i)] - clean[("embedding", i)] for i in range(len(adapter.embedding_modules()))]
        self.embeddings = torch.zeros(E, B, P, self.hidden, dtype=dtype, device=z.device)
        if E == 1 and len(embeds) > 1:
            self.embeddings[0] = sum(embeds)
        else:
            for i in range(E):
                self.embeddings[i] = embeds[i]
        self.embeddings = self.embeddings.view(E, self.tokens, self.hidden)
        H, d = adapter.num_heads, adapter.head_dim
        self.weights = []  # per layer [H, d, hidden]
        for layer in range(adapter.num_layers):
            module = adapter.head_output_module(layer)
            weight = module.weight if adapter.spec.transposed else module.weight.t()
            self.weights.append(weight.detach().to(dtype).reshape(H, d, -1))

    def rows(self, writers: int, start: int, stop: int) -> Tensor:
        """``[writers, (stop - start) * hidden]``: the first ``writers`` rows of ``D`` at tokens ``start:stop``."""
        H, d = self.adapter.num_heads, self.adapter.head_dim
        n, E = stop - start, self.graph.num_embeddings
        out = torch.empty(writers, n, self.hidden, dtype=self.dtype, device=self.embeddings.device)
        out[:min(E, writers)] = self.embeddings[:min(E, writers), start:stop]
        row, layer = E, 0
        while row < writers:
            # a block's writers end at a layer's end, or after its heads (an MLP reading its own layer's heads)
            dz = (self.corrupted[("heads", layer)] - self.clean[("heads", layer)]).reshape(self.tokens, H, d)
            dz = dz[start:stop].to(self.dtype).transpose(0, 1)  # [H, n, d]
            torch.bmm(dz, self.weights[layer], out=out[row:row + H])
            if row + H < writers:
                mlp = (self.corrupted[("mlp", layer)] - self.clean[("mlp", layer)]).reshape(self.tokens, -1)
                out[row + H] = mlp[start:stop]
            row += H + 1
            layer += 1
        return out.view(writers, -1)


def chunks(tokens: int, chunk: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each chunk of ``chunk`` tokens over ``tokens``."""
    return [(start, min(start + chunk, tokens)) for start in range(0, tokens, chunk)]


class _Projection:
    """One Q/K/V projection module of a layer: its readers (rows of the block) and their weight columns.

    ``repeat`` > 1 (a key/value projection of an ungrouped graph): the output the attention reads is each
    key/value head's output repeated once per query head of its group (``intervene.edges.repeat_heads``), so its
    gradient is per query head; reader ``h``'s cotangent is that gradient's slice times its key/value head's
    weights, taken from the grouped weight as it is (no per-query-head copy of the weights)."""

    def __init__(self, adapter: Adapter, module: nn.Module, groups: list[tuple[int, int, int]],
                 repeat: int = 1) -> None:
        d = adapter.head_dim
        self.repeat = repeat
        if repeat > 1:
            weight = module.weight if adapter.spec.transposed else module.weight.t()  # [hidden, kv * d]
            self.first, self.count, self.contiguous = groups[0][0], len(groups), True
            self.readers = torch.arange(self.first, self.first + self.count, device=weight.device)
            self.columns = slice(0, self.count * d)  # of the repeated output
            self.weight = weight.detach().reshape(weight.shape[0], -1, d)  # [hidden, kv, d]
            return
        readers = [first + i for first, count, _ in groups for i in range(count)]
        columns = [column + i * d + j for _, count, column in groups for i in range(count) for j in range(d)]
        weight = module.weight if adapter.spec.transposed else module.weight.t()  # [hidden, out]
        index = torch.tensor(columns, device=weight.device)
        self.contiguous = readers == list(range(readers[0], readers[0] + len(readers))) and \
            columns == list(range(columns[0], columns[0] + len(columns)))
        self.first, self.count = readers[0], len(readers)
        self.readers = torch.tensor(readers, device=weight.device)
        self.columns = slice(columns[0], columns[-1] + 1) if self.contiguous else index
        picked = weight.detach()[:, self.columns] if self.contiguous else \
            weight.detach().index_select(1, index)  # not w[:, index]: advanced indexing is 15 ms a call here
        self.weight = picked.reshape(weight.shape[0], len(readers), d)  # [hidden, R, d]

    def reader_cotangents(self, grad: Tensor) -> Tensor:
        """``u_h = g_h W_h^T`` per reader: ``[R, B, P, hidden]`` from the output's gradient ``[B, P, out]``."""
        if self.repeat > 1:  # [B, P, kv, repeat, d] against [hidden, kv, d]: [kv, repeat, B, P, hidden]
            g = grad.reshape(*grad.shape[:-1], self.weight.shape[1], self.repeat, -1)
            u = torch.einsum("bpkie,hke->kibph", g.to(self.weight.dtype), self.weight)
            return u.reshape(self.count, *u.shape[2:])
        g = grad[..., self.columns].reshape(*grad.shape[:-1], self.count, -1)  # [B, P, R, d]
        return torch.einsum("bpre,hre->rbph", g.to(self.weight.dtype), self.weight)


class ReaderGradients:
    """Hooks that add every reader block's ``grads @ D^T`` into ``scores`` during backward (module docstring).

    ``with ReaderGradients(adapter, graph, scores, chunk) as rg:`` then, per pass, call ``rg.set_differences``
    (the node outputs of the corrupted and clean runs) before the backward of a forward run inside the context,
    and ``rg.flush()`` after it. ``chunk``: tokens per chunk (module docstring); None: the whole batch at once."""

    def __init__(self, adapter: Adapter, graph: Graph, scores: Tensor, chunk: int | None = None) -> None:
        EdgeMasks(adapter.model, adapter, graph)  # refuses a graph that is not this model's (installs nothing)
        self.adapter, self.graph, self.scores, self.chunk = adapter, graph, scores, chunk
        self.diff: Tensor | None = None  # [writers, B * P * hidden] (unchunked)
        self.pieces: WriterDifferenceChunks | None = None  # its rows per chunk (chunked)
        self._single: dict[int, Tensor] = {}  # block -> the gradient of its one reader (MLPs, logits), this pass
        self._handles: list[Any] = []
        self._inputs: dict[int, tuple[nn.Module, Tensor]] = {}  # layer -> (attention norm, its input)
        self._ungrouped: UngroupedAttention | None = None

    def set_differences(self, corrupted: dict[NodeKey, Tensor], clean: dict[NodeKey, Tensor],
                        dtype: torch.dtype) -> None:
        """The writers' ``D`` of this pass from the two runs' node outputs: whole, or per chunk when asked."""
        if self.chunk is None:
            self.diff = writer_differences(self.adapter, self.graph, corrupted, clean, dtype)
        else:
            self.pieces = WriterDifferenceChunks(self.adapter, self.graph, corrupted, clean, dtype)

    # -- scoring --------------------------------------------------------------------------
    def _add(self, block_index: int, rows: Tensor | slice, grads: Tensor) -> None:
        """``grads [R, B, P, hidden]`` of the readers ``rows`` of a block times ``D^T``, added to the scores."""
        b = self.graph.reader_blocks[block_index]
        diff = self.diff
        part = grads.reshape(grads.shape[0], -1).to(diff.dtype) @ diff[:b.writers].t()  # [R, writers]
        view = self.scores[b.start:b.stop].view(len(b.readers), b.writers)
        if isinstance(rows, slice):
            view[rows] += part.to(view.dtype)
        else:
            view.index_add_(0, rows, part.to(view.dtype))

    def flush(self) -> None:
        """Score the one-reader blocks (MLPs, logits) of the last backward together: one matmul, not a
        matrix-vector product per block (each of which reads ``D`` again). Call after every backward."""
        if not self._single:
            return
        blocks = sorted(self._single)
        writers = max(self.graph.reader_blocks[i].writers for i in blocks)
        if self.chunk is None:
            grads = torch.stack([self._single.pop(i).reshape(-1) for i in blocks]).to(self.diff.dtype)
            part = grads @ self.diff[:writers].t()
        else:
            pieces = self.pieces
            grads = torch.stack([self._single.pop(i).reshape(pieces.tokens, -1) for i in blocks])  # [K, N, hidden]
            part = None
            for start, stop in chunks(pieces.tokens, self.chunk):
                step = grads[:, start:stop].reshape(len(blocks), -1).to(pieces.dtype) @ \
                    pieces.rows(writers, start, stop).t()
                part = step if part is None else part + step
        for row, i in enumerate(blocks):
            b = self.graph.reader_blocks[i]
            self.scores[b.start:b.stop] += part[row, :b.writers].to(self.scores.dtype)

    def _on_projection(self, layer: int, projection: _Projection, grad: Tensor) -> Tensor:
        """Score the projection's readers from its output's gradient; return their summed gradient, the
        gradient of the attention norm's input through this projection."""
        norm, x = self._inputs[layer]
        rows = slice(projection.first, projection.first + projection.count) if projection.contiguous \
            else projection.readers
        if self.chunk is not None:
            return self._on_projection_chunks(layer, projection, rows, norm, x, grad)
        u = projection.reader_cotangents(grad)  # [R, B, P, hidden]
        with torch.enable_grad():
            xr = x.detach().requires_grad_()
            (grads,) = torch.autograd.grad(norm.forward(xr), xr, u.to(xr.dtype), is_grads_batched=True)
        self._add(2 * layer, rows, grads)
        return grads.sum(0).to(x.dtype)

    def _on_projection_chunks(self, layer: int, projection: _Projection, rows: Tensor | slice, norm: nn.Module,
                              x: Tensor, grad: Tensor) -> Tensor:
        """``_on_projection`` a chunk of tokens at a time: the norm's vjp on the chunk's tokens, scored against
        the chunk's ``D`` (the norm acts on each token alone, so the chunks' gradients are the whole one's)."""
        pieces = self.pieces
        b = self.graph.reader_blocks[2 * layer]
        flat_x = x.detach().reshape(pieces.tokens, -1)
        flat_grad = grad.reshape(1, pieces.tokens, -1)
        out = torch.empty(flat_x.shape, dtype=x.dtype, device=x.device)
        view = self.scores[b.start:b.stop].view(len(b.readers), b.writers)
        for start, stop in chunks(pieces.tokens, self.chunk):
            u = projection.reader_cotangents(flat_grad[:, start:stop])  # [R, 1, n, hidden]
            with torch.enable_grad():
                xr = flat_x[start:stop].detach().requires_grad_()
                (grads,) = torch.autograd.grad(norm.forward(xr), xr, u[:, 0].to(xr.dtype), is_grads_batched=True)
            part = grads.reshape(grads.shape[0], -1).to(pieces.dtype) @ pieces.rows(b.writers, start, stop).t()
            if isinstance(rows, slice):
                view[rows] += part.to(view.dtype)
            else:
                view.index_add_(0, rows, part.to(view.dtype))
            out[start:stop] = grads.sum(0)
            del u, grads, part
        return out.view(x.shape)

    # -- hooks ----------------------------------------------------------------------------
    @staticmethod
    def _tracked(x: Tensor) -> Tensor:
        """``x`` as a tensor that needs a gradient (the parameters are frozen; the stream may be a constant)."""
        return x if x.requires_grad else x.detach().requires_grad_()

    def _on_attn_norm(self, layer: int, module: nn.Module, args: tuple) -> tuple | None:
        if not torch.is_grad_enabled():
            return None
        x = self._tracked(args[0])
        self._inputs[layer] = (module, x)
        return None if x is args[0] else (x, *args[1:])

    def _on_projection_output(self, layer: int, projection: _Projection, output: Tensor) -> Tensor | None:
        """The projection's output, its backward ours: the readers' gradients come from ``g_h`` and their sum
        goes to the norm's input, so the model's own backward through the projection and the norm is not run.
        On an ungrouped graph a key/value projection's output is repeated per query head in every forward (the
        attention then reads it ungrouped, ``UngroupedAttention``)."""
        if not torch.is_grad_enabled() or layer not in self._inputs:
            return None if projection.repeat == 1 else repeat_heads(output, projection.repeat, self.adapter.head_dim)
        output = repeat_heads(output.detach(), projection.repeat, self.adapter.head_dim)
        return _ProjectionBackward.apply(self._inputs[layer][1], output,
                                         lambda g: self._on_projection(layer, projection, g))

    def _on_reader_norm(self, block_index: int, args: tuple) -> tuple | None:
        """A view of the norm's input that only the norm reads: its gradient is this reader's alone."""
        if not torch.is_grad_enabled():
            return None
        x = args[0]
        alias = x.view_as(x) if x.requires_grad else x.detach().requires_grad_()
        alias.register_hook(lambda g: self._single.__setitem__(block_index, g))
        return (alias, *args[1:])

    def __enter__(self) -> "ReaderGradients":
        a, spec = self.adapter, self.adapter.spec
        hook = self._handles.append
        try:
            groups = projection_groups(a, self.graph)
            repeats = kv_repeats(a, self.graph)
            if self.graph.ungrouped_kv:
                self._ungrouped = UngroupedAttention(a)
            for layer, block in enumerate(a.layers()):
                hook(block.get_submodule(spec.attn_norm).register_forward_pre_hook(
                    lambda m, args, layer=layer: self._on_attn_norm(layer, m, args)))
                for path, g in groups.items():
                    module = block.get_submodule(path)
                    p = _Projection(a, module, g, repeats.get(path, 1))
                    hook(module.register_forward_hook(
                        lambda m, args, out, layer=layer, p=p: self._on_projection_output(layer, p, out)))
                hook(block.get_submodule(spec.mlp_norm).register_forward_pre_hook(
                    lambda m, args, i=2 * layer + 1: self._on_reader_norm(i, args)))
            final = a.model.base_model.get_submodule(spec.final_norm)
            last = len(self.graph.reader_blocks) - 1
            hook(final.register_forward_pre_hook(lambda m, args: self._on_reader_norm(last, args)))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._ungrouped is not None:
            self._ungrouped.remove()
            self._ungrouped = None
        self._inputs.clear()
        self._single.clear()


class _ProjectionBackward(torch.autograd.Function):
    """``output`` (a projection's, detached) as a function of the norm's input ``x`` whose backward is
    ``backward(grad of output) -> grad of x``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, output: Tensor, backward: Any) -> Tensor:
        ctx.backward_fn = backward
        return output.view_as(output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return ctx.backward_fn(grad), None, None


__all__ = ["ReaderGradients", "WriterDifferenceChunks", "chunks", "writer_differences"]
