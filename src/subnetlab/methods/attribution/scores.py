"""Attribution scores on the edge graph: EAP, EAP-IG (inputs, activations), clean-corrupted, exact patching.

Edge attribution patching (EAP; Syed, Rager and Conmy, 2023) linearises the
effect of patching one edge: the score of edge ``w -> r`` is::

    (out_w(x~) - out_w(x)) . dm/d(input of r)

summed over positions and averaged over the pairs, with ``x`` the clean and
``x~`` the corrupted prompt of a pair and ``m`` the task metric (summed over the
batch, so each pair contributes its own gradient). It is the first-order change
of ``m`` when the reader ``r`` sees the corrupted output of ``w``, i.e. minus
the gradient of ``m`` with respect to the edge mask at "everything kept" of
``intervene.edges`` (with the corrupted values). A positive score: patching the
edge raises the metric. Circuits keep the largest ``|score|`` (MIB, EAP-IG).
``exact`` (``methods.attribution.exact``) is what EAP approximates:
``m(x with only r's input from w patched) - m(x)``, hannamw/EAP-IG's
``get_scores_exact``, one forward per edge.

The other methods keep the activation differences of the real clean and
corrupted runs and average the reader gradients over several passes, as
hannamw/EAP-IG's ``attribute`` does:

* ``eap-ig`` (EAP-IG on inputs, Hanna, Pezzelle and Belinkov, 2024;
  ``get_scores_eap_ig``): ``k`` passes on the clean prompt with every embedding
  writer's output set to ``x~ + alpha (x - x~)``, ``alpha = 0, 1/k, ...,
  (k-1)/k`` (a left Riemann sum: the corrupted end included, the clean end not;
  the position embeddings are equal on both prompts).
* ``eap-ig-activations`` (``get_scores_ig_activations``): one node at a time --
  the embeddings, then per layer all its heads together and its MLP, ``1 + 2L``
  nodes -- has its output set to ``alpha clean + (1 - alpha) corrupted`` at
  ``alpha = 1/k, ..., 1`` (the clean end included, the corrupted end not), the
  rest of the pass computed from the clean prompt. The replaced output is a
  constant, so in that node's passes its own readers get no gradient and
  gradients reach upstream readers only along paths that avoid it; the scores
  are the sum over all ``(1 + 2L) k`` passes divided by ``(1 + 2L) k``, as the
  reference does (so with one step, edges into the logits get EAP's score and
  edges into the last MLP ``2L / (1 + 2L)`` of it).
* ``clean-corrupted`` (``get_scores_clean_corrupted``): the mean of the
  gradients on the clean prompt and on the corrupted prompt (two passes).

Mean ablation (``means``, MIB's "EAP (mean)"; ``eap`` and ``nap``): the corrupted outputs are replaced by each
writer's mean output over the clean prompts (``intervene.edges.writer_means``: over every real token, not per
position), so ``D_w = mean_w - out_w(x)`` and no corrupted forward runs (``mean_node_outputs``).

``nap`` and ``nap-ig`` (``methods.attribution.nodes``) score the writers themselves, one backward to the node
outputs, not the readers.

Node-level attribution patching scores a head or MLP by ``(out_w(x~) -
out_w(x)) . dm/d out_w``. At "everything kept" the gradient of a writer's output
is the sum of the gradients of every reader downstream of it, so a node's score
is exactly the sum of the scores of its outgoing edges; ``node_scores`` computes
it that way and the tests check it against hooks on the head outputs.

Cost per batch: a forward on the corrupted prompts, then one forward+backward on
the clean ones (EAP: the clean outputs and logits are that pass's own), a clean
forward and ``k`` forward+backwards (EAP-IG), ``(1 + 2L) k`` (EAP-IG on
activations), two (clean-corrupted); exact patching runs one forward per edge
(batched, no backward). Every edge is kept, so each reader's input is the
model's own and ``reader_gradients`` takes every reader's gradient from the
model's own backward (a Q/K/V reader's from its head's slice of the projection's
output gradient, through the norm), scoring each reader block with one matmul
``grads @ D^T`` as the backward passes it. ``expand_readers`` instead runs
``intervene.edges`` with every edge kept (every reader its own copy of the
stream; its ``on_reader_input`` hook puts a gradient hook on each block's inputs
and ``writer_deltas()`` gives the writer outputs): the same scores, the
independent path the tests compare with, about three times slower at GPT-2
small's graph (``benchmarks/bench_attribution.py``). Scores are in the model's
precision (at least float32).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.checkpoint import checkpointed_blocks, recomputing
from subnetlab.intervene.edges import WriterValues, apply_edges, check_edge_family
from subnetlab.methods.attribution.hooks import (
    NodeHook,
    NodeKey,
    frozen_parameters,
    mean_node_outputs,
    node_hooks,
    score_dtype,
)
from subnetlab.methods.attribution.names import IG_METHODS, MEAN_METHODS, METHODS, NODE_METHODS
from subnetlab.methods.attribution.reader_gradients import ReaderGradients
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph

Method = Literal["eap", "eap-ig", "eap-ig-activations", "clean-corrupted", "exact", "nap", "nap-ig"]
# metric(logits [B, T, V], batch, full_logits [B, T, V]) -> [B]
Metric = Callable[[Tensor, dict[str, Tensor], Tensor], Tensor]


@dataclass
class AttributionScores:
    """Edge scores ``[edges]`` in ``graph`` order and node scores (heads ``[L, H]``, MLPs ``[L]``, embeddings);
    a node method (``NODE_METHODS``) has no edge scores (``edges`` None) and its ``writers`` ``[writers]`` in
    graph order."""

    graph: Graph
    edges: Tensor | None
    method: str
    steps: int
    pairs: int
    writers: Tensor | None = None
    ablation: str = "corrupted"

    @property
    def level(self) -> str:
        return "edges" if self.edges is not None else "nodes"

    def node_scores(self) -> dict[str, Tensor]:
        if self.writers is not None:
            return writer_grid(self.graph, self.writers)
        return node_scores(self.graph, self.edges)


def writer_grid(graph: Graph, per_writer: Tensor) -> dict[str, Tensor]:
    """Per-writer scores ``[writers]`` (graph order) as heads ``[L, H]``, MLPs ``[L]`` and embeddings ``[E]``."""
    L, H, E = graph.num_layers, graph.num_heads, graph.num_embeddings
    dtype = torch.promote_types(per_writer.dtype, torch.float32)
    grid = per_writer[E:].reshape(L, H + 1).to(dtype)
    return {"heads": grid[:, :H].contiguous(), "mlps": grid[:, H].contiguous(),
            "embeddings": per_writer[:E].to(dtype).contiguous()}


def node_scores(graph: Graph, edges: Tensor) -> dict[str, Tensor]:
    """Node attribution from edge attribution: each writer's score is the sum over its outgoing edges."""
    per_writer = torch.zeros(len(graph.writers), dtype=torch.float64)
    writers = torch.tensor([w for w, _ in graph.edges])
    per_writer.index_add_(0, writers, edges.double().cpu())
    return writer_grid(graph, per_writer.to(torch.promote_types(edges.dtype, torch.float32)))


def check_ablation(method: str, means: WriterValues | None) -> None:
    """Mean ablation only where the method defines it (``MEAN_METHODS``)."""
    if means is not None and method not in MEAN_METHODS:
        raise SubnetlabError(f"ablation mean: method {method} scores the change to the corrupted prompt; mean "
                             f"ablation is taken by {' and '.join(MEAN_METHODS)}", setting="ablation")


def attribute_batch(model: nn.Module, adapter: Adapter, graph: Graph, clean: dict[str, Tensor],
                    corrupted: dict[str, Tensor], metric: Callable[[Tensor, Tensor], Tensor], *,
                    method: Method = "eap", steps: int = 5, expand_readers: bool = False,
                    position_chunk: int | None = None, means: WriterValues | None = None) -> Tensor:
    """Edge scores ``[edges]`` of one batch, summed over its pairs (divide by the pairs for the mean); a node
    method's (``nap``, ``nap-ig``) writer scores ``[writers]`` in graph order instead.

    ``metric(logits, clean_logits) -> [B]`` is differentiated (its sum); ``clean``/``corrupted`` are model inputs
    of equal shapes. See the module docstring for the methods and their conventions. Scores are in
    ``score_dtype(model)``. The reader gradients come from the model's own backward (``reader_gradients``);
    ``expand_readers`` takes them from ``intervene.edges``'s readers instead (every reader its own copy of the
    stream): the same scores to rounding, several times slower, the independent path tests compare against.
    ``position_chunk``: the batch's tokens scored per chunk (``reader_gradients``' long contexts; 0 never
    chunks; None chunks ``AUTO_CHUNK`` tokens at a time when the batch holds more), on the plain path; a chunked
    batch also recomputes each block's forward in the backward (``intervene.checkpoint``; not under
    eap-ig-activations), so the backward keeps one block's activations at a time. ``means``: mean ablation
    (``writer_means`` of the clean prompts; ``eap`` and ``nap``): ``corrupted`` is not read."""
    check_method(method, steps)
    check_ablation(method, means)
    check_edge_family(adapter)
    check_position_chunk(position_chunk)
    if method in NODE_METHODS:
        from subnetlab.methods.attribution.nodes import node_batch

        return node_batch(model, adapter, graph, clean, corrupted, metric, method=method, steps=steps, means=means)
    if means is not None and expand_readers:
        raise SubnetlabError("mean ablation is scored on the plain path (the readers are not expanded)",
                             setting="ablation")
    if method == "exact":
        from subnetlab.methods.attribution.exact import exact_batch

        return exact_batch(model, adapter, graph, clean, corrupted, metric)
    if expand_readers:
        return _expanded_batch(model, adapter, graph, clean, corrupted, metric, method, steps)
    tokens = int(clean["input_ids"].numel())
    return _plain_batch(model, adapter, graph, clean, corrupted, metric, method, steps,
                        chunk_of(position_chunk, tokens), means)


def body(model: nn.Module) -> nn.Module:
    """The model without its LM head (``base_model``: GPT-2's ``transformer``, Llama's ``model``), for a forward
    whose node outputs are read and whose logits are not: the head is a vocabulary-wide matmul per token."""
    base = getattr(model, "base_model", None)
    return base if isinstance(base, nn.Module) else model


AUTO_CHUNK = 512  # tokens per chunk when a batch holds more (GPT-2 small: D of a chunk is 243 MB, not 474 KB a token)


def chunk_of(position_chunk: int | None, tokens: int) -> int | None:
    """The chunk a batch of ``tokens`` is scored in (None: whole) under the setting ``position_chunk``."""
    size = AUTO_CHUNK if position_chunk is None else position_chunk
    return size if 0 < size < tokens else None


def check_position_chunk(position_chunk: int | None) -> None:
    if position_chunk is not None and (not isinstance(position_chunk, int) or position_chunk < 0):
        raise SubnetlabError(f"position_chunk {position_chunk!r}: the tokens scored per chunk, a whole number (0: "
                             f"never chunk; unset: {AUTO_CHUNK} at a time above {AUTO_CHUNK} tokens)",
                             setting="position_chunk")


def _plain_batch(model: nn.Module, adapter: Adapter, graph: Graph, clean: dict[str, Tensor],
                 corrupted: dict[str, Tensor], metric: Callable[[Tensor, Tensor], Tensor], method: str,
                 steps: int, chunk: int | None = None, means: WriterValues | None = None) -> Tensor:
    """``attribute_batch`` by ``reader_gradients``: EAP is a corrupted forward and one clean forward+backward
    (the clean pass records the clean outputs and logits itself); the other methods add a clean forward. With
    ``means`` (EAP only) there is no corrupted forward: the corrupted outputs are the means."""
    device = next(model.parameters()).device
    scores = torch.zeros(graph.num_edges, dtype=score_dtype(model), device=device)
    dtype = next(model.parameters()).dtype
    seen: dict[str, dict[NodeKey, Tensor]] = {"clean": {}, "corrupted": {}}

    def recorder(run: str) -> NodeHook:
        def record(key: NodeKey, out: Tensor) -> None:
            if not recomputing():  # a checkpointed block again in the backward: the same values, kept already
                seen[run][key] = out.detach()
        return record

    one_pass = method == "eap"
    # eap-ig-activations replaces a node's output inside a block, and the recomputation saved other tensors than
    # the forward (torch.utils.checkpoint's metadata check): its blocks are not recomputed
    recompute = chunk is not None and method != "eap-ig-activations"
    blocks = checkpointed_blocks(adapter) if recompute else nullcontext()
    with frozen_parameters(model), ReaderGradients(adapter, graph, scores, chunk) as readers, blocks:
        with torch.no_grad():
            if means is None:
                with node_hooks(adapter, recorder("corrupted")):
                    body(model)(**corrupted)  # its nodes' outputs only: the LM head's logits go unread
            if not one_pass:
                with node_hooks(adapter, recorder("clean")):
                    clean_logits = model(**clean).logits.detach()
                readers.set_differences(seen["corrupted"], seen["clean"], dtype)
        passes = _gradient_passes(method, steps, adapter.num_layers, clean, corrupted, seen)
        for inputs, replace in passes:
            with node_hooks(adapter, recorder("clean") if one_pass else replace):
                logits = model(**inputs).logits
            if one_pass:
                clean_logits = logits.detach()
                if means is not None:
                    seen["corrupted"] = mean_node_outputs(means, seen["clean"])
                readers.set_differences(seen["corrupted"], seen["clean"], dtype)
            metric(logits, clean_logits).sum().backward()
            readers.flush()
    return scores / len(passes)


def _expanded_batch(model: nn.Module, adapter: Adapter, graph: Graph, clean: dict[str, Tensor],
                    corrupted: dict[str, Tensor], metric: Callable[[Tensor, Tensor], Tensor], method: str,
                    steps: int) -> Tensor:
    """``attribute_batch`` through ``intervene.edges`` at every edge kept: its ``on_reader_input`` hook puts a
    gradient hook on each reader block's inputs and ``writer_deltas()`` gives the writer outputs."""
    device = next(model.parameters()).device
    scores = torch.zeros(graph.num_edges, dtype=score_dtype(model), device=device)
    leaf = torch.ones(graph.num_edges, device=device, requires_grad=True)  # makes every reader input need a grad
    blocks = graph.reader_blocks
    # node outputs of the two real runs: the embeddings (eap-ig), every node (eap-ig-activations)
    every_node = method == "eap-ig-activations"
    seen: dict[str, dict[NodeKey, Tensor]] = {"clean": {}, "corrupted": {}}

    def recorder(run: str) -> NodeHook:
        def record(key: NodeKey, out: Tensor) -> None:
            if every_node or key[0] == "embedding":
                seen[run][key] = out.detach()
        return record

    # every edge kept and no ablation values: each writer's delta is its output, each reader's input the model's own
    with frozen_parameters(model), apply_edges(model, adapter, graph, leaf) as edges:
        with torch.no_grad():
            with node_hooks(adapter, recorder("corrupted")):
                model(**corrupted)
            corrupted_out = edges.writer_deltas()
            with node_hooks(adapter, recorder("clean")):
                clean_logits = model(**clean).logits.detach()
            diff = (corrupted_out - edges.writer_deltas()).flatten(1)  # [writers, B * P * hidden]
        del corrupted_out

        def accumulate(i: int, grad: Tensor) -> None:
            b = blocks[i]
            part = grad.reshape(grad.shape[0], -1).to(diff.dtype) @ diff[:b.writers].t()  # [readers, writers]
            scores[b.start:b.stop] += part.reshape(-1).to(scores.dtype)

        def on_reader_input(i: int, readers: Tensor) -> None:
            if readers.requires_grad:
                readers.register_hook(lambda g, i=i: accumulate(i, g))

        edges.on_reader_input = on_reader_input
        passes = _gradient_passes(method, steps, adapter.num_layers, clean, corrupted, seen)
        for inputs, replace in passes:
            with node_hooks(adapter, replace):
                logits = model(**inputs).logits
            metric(logits, clean_logits).sum().backward()
        edges.on_reader_input = None
    return scores / len(passes)


def _gradient_passes(method: str, steps: int, layers: int, clean: dict[str, Tensor], corrupted: dict[str, Tensor],
                     seen: dict[str, dict[NodeKey, Tensor]]) -> list[tuple[dict[str, Tensor], NodeHook | None]]:
    """The forward+backward passes whose reader gradients are averaged: (inputs, node replacement) per pass."""
    if method == "eap":
        return [(clean, None)]
    if method == "clean-corrupted":
        return [(clean, None), (corrupted, None)]
    if method == "eap-ig":  # k steps from the corrupted end, the clean end left out
        def embeddings_at(alpha: float) -> NodeHook:
            def interpolate(key: NodeKey, out: Tensor) -> Tensor | None:
                if key[0] != "embedding":
                    return None
                x, x_corr = seen["clean"][key], seen["corrupted"][key]
                return (x_corr + alpha * (x - x_corr)).to(out.dtype).expand_as(out)
            return interpolate

        return [(clean, embeddings_at(k / steps)) for k in range(steps)]

    # eap-ig-activations: one node at a time (the embeddings, each layer's heads, each MLP), its output set to
    # alpha * clean + (1 - alpha) * corrupted at alpha = 1/k, ..., 1 (the clean end included)
    def node_at(kind: str, layer: int, alpha: float) -> NodeHook:
        def interpolate(key: NodeKey, out: Tensor) -> Tensor | None:
            if key[0] != kind or (kind != "embedding" and key[1] != layer):
                return None
            return (alpha * seen["clean"][key] + (1 - alpha) * seen["corrupted"][key]).to(out.dtype)
        return interpolate

    groups = [("embedding", -1)] + [(kind, l) for l in range(layers) for kind in ("heads", "mlp")]
    return [(clean, node_at(kind, layer, k / steps)) for kind, layer in groups for k in range(1, steps + 1)]


MAX_IG_STEPS = 1000  # each step is a forward and backward per batch; EAP-IG and MIB use 5 to 100


def check_method(method: str, steps: int) -> None:
    if method not in METHODS:
        raise SubnetlabError(f"attribution method {method!r}: choose one of {', '.join(METHODS)}", setting="method")
    if not 1 <= steps <= MAX_IG_STEPS:
        raise SubnetlabError(f"integrated-gradient steps {steps} must be between 1 and {MAX_IG_STEPS} (each is a "
                             "forward and backward pass per batch; EAP-IG uses 5 to 100)", setting="ig_steps")


def attribute(model: nn.Module, adapter: Adapter, graph: Graph, batches: Iterable[dict[str, Tensor]],
              metric: Metric, *, method: Method = "eap", steps: int = 5,
              position_chunk: int | None = None, means: WriterValues | None = None) -> AttributionScores:
    """Mean edge scores over the pairs of ``batches`` (circuit-task pair batches: ``input_ids``,
    ``corrupted_input_ids``, ``attention_mask`` and what ``metric(logits, batch, clean_logits)`` reads); the
    mean writer scores of a node method. ``position_chunk`` and ``means`` (mean ablation, ``clean_means``):
    ``attribute_batch``'s.

    Across processes (``subnetlab.distributed``: every rank calls this with the same ``batches``), rank ``r`` of
    ``n`` scores batches ``r, r + n, ...``; the float64 sums and the pair counts are summed over the ranks before
    the one division, so every rank returns the single process's mean (to float64 rounding of the sum)."""
    from subnetlab.distributed import world
    from subnetlab.tasks.circuits.pairs import clean_inputs, corrupted_inputs

    check_method(method, steps)
    check_ablation(method, means)
    check_position_chunk(position_chunk)
    device = next(model.parameters()).device
    here = world()
    nodes = method in NODE_METHODS
    total, pairs = torch.zeros(len(graph.writers) if nodes else graph.num_edges, dtype=torch.float64), 0
    for index, batch in enumerate(batches):
        if index % here.size != here.rank:  # another rank's batch
            continue
        batch = {k: v.to(device) for k, v in batch.items()}
        part = attribute_batch(model, adapter, graph, clean_inputs(batch), corrupted_inputs(batch),
                               lambda logits, full, b=batch: metric(logits, b, full), method=method, steps=steps,
                               position_chunk=None if nodes else position_chunk, means=means)
        total += part.double().cpu()
        pairs += int(batch["input_ids"].shape[0])
    if here.size > 1:  # one collective: the sums and, last, the pair count
        summed = here.all_reduce_sum(torch.cat([total, torch.tensor([float(pairs)], dtype=torch.float64)]))
        total, pairs = summed[:-1], int(round(float(summed[-1])))
    if pairs == 0:
        raise SubnetlabError("attribution needs at least one prompt pair")
    mean = (total / pairs).to(score_dtype(model))
    return AttributionScores(graph, None if nodes else mean, method, steps if method in IG_METHODS else 1, pairs,
                             writers=mean if nodes else None, ablation="corrupted" if means is None else "mean")


def clean_means(model: nn.Module, adapter: Adapter, batches: Iterable[dict[str, Tensor]]) -> WriterValues:
    """Each writer's mean output over the real tokens of the clean prompts of pair ``batches`` (mean ablation)."""
    from subnetlab.intervene.edges import writer_means
    from subnetlab.tasks.circuits.pairs import clean_inputs

    device = next(model.parameters()).device
    return writer_means(model, adapter, ({k: v.to(device) for k, v in clean_inputs(b).items()} for b in batches))
