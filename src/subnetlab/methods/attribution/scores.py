"""Attribution scores on the edge graph: EAP, EAP-IG and node-level attribution patching.

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

EAP-IG (Hanna, Pezzelle and Belinkov, 2024) replaces the gradient at the clean
input by its average along the straight path from the corrupted to the clean
input embeddings (integrated gradients), with the activation differences still
those of the real clean and corrupted runs. Conventions of hannamw/EAP-IG's
``get_scores_eap_ig``: ``k`` steps at ``alpha = 0, 1/k, ..., (k-1)/k`` (a left
Riemann sum: the corrupted end included, the clean end not); the interpolated
input is every embedding writer's output (token and position embeddings; the
position embeddings are equal on both prompts). ``ig="activations"`` is not
provided (see the report).

Node-level attribution patching scores a head or MLP by ``(out_w(x~) -
out_w(x)) . dm/d out_w``. At "everything kept" the gradient of a writer's output
is the sum of the gradients of every reader downstream of it, so a node's score
is exactly the sum of the scores of its outgoing edges; ``node_scores`` computes
it that way and the tests check it against hooks on the head outputs.

Cost per batch: a forward on the corrupted prompts, one forward+backward on the
clean ones (EAP); a clean forward and ``k`` forward+backwards (EAP-IG). The
reader inputs come from ``intervene.edges`` with every edge kept (its Q/K/V
readers are the per-head inputs of the projections), so reader gradients are
the graph's own: its ``on_reader_input`` hook puts a gradient hook on each
block's inputs and ``writer_deltas()`` gives the writer outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.edges import apply_edges, check_edge_family
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph

Method = Literal["eap", "eap-ig"]
METHODS = ("eap", "eap-ig")
# metric(logits [B, T, V], batch, full_logits [B, T, V]) -> [B]
Metric = Callable[[Tensor, dict[str, Tensor], Tensor], Tensor]


@dataclass
class AttributionScores:
    """Edge scores ``[edges]`` in ``graph`` order and node scores (heads ``[L, H]``, MLPs ``[L]``, embeddings)."""

    graph: Graph
    edges: Tensor
    method: str
    steps: int
    pairs: int

    def node_scores(self) -> dict[str, Tensor]:
        return node_scores(self.graph, self.edges)


def node_scores(graph: Graph, edges: Tensor) -> dict[str, Tensor]:
    """Node attribution from edge attribution: each writer's score is the sum over its outgoing edges."""
    per_writer = torch.zeros(len(graph.writers), dtype=torch.float64)
    writers = torch.tensor([w for w, _ in graph.edges])
    per_writer.index_add_(0, writers, edges.double().cpu())
    L, H, E = graph.num_layers, graph.num_heads, graph.num_embeddings
    grid = per_writer[E:].view(L, H + 1).float()
    return {"heads": grid[:, :H].contiguous(), "mlps": grid[:, H].contiguous(), "embeddings": per_writer[:E].float()}


@contextmanager
def _frozen_parameters(model: nn.Module) -> Iterator[None]:
    """No parameter gradients during attribution (only activations' gradients are needed)."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


@contextmanager
def _embedding_hook(adapter: Adapter, hook: Callable[[int, Tensor], Tensor | None]) -> Iterator[None]:
    """``hook(i, output)`` on every embedding module, ahead of any other hook; a returned tensor replaces it."""
    handles = [m.register_forward_hook(lambda mod, a, out, i=i: hook(i, out), prepend=True)
               for i, m in enumerate(adapter.embedding_modules())]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def attribute_batch(model: nn.Module, adapter: Adapter, graph: Graph, clean: dict[str, Tensor],
                    corrupted: dict[str, Tensor], metric: Callable[[Tensor, Tensor], Tensor], *,
                    method: Method = "eap", steps: int = 5) -> Tensor:
    """Edge scores ``[edges]`` of one batch, summed over its pairs (divide by the pairs for the mean).

    ``metric(logits, clean_logits) -> [B]`` is differentiated (its sum); ``clean``/``corrupted`` are model inputs
    of equal shapes. See the module docstring for the method and the conventions."""
    check_method(method, steps)
    check_edge_family(adapter)
    device = next(model.parameters()).device
    scores = torch.zeros(graph.num_edges, dtype=torch.float32, device=device)
    leaf = torch.ones(graph.num_edges, device=device, requires_grad=True)  # makes every reader input need a grad
    blocks = graph.reader_blocks
    embeds: dict[str, list[Tensor]] = {"clean": [], "corrupted": []}
    # every edge kept and no ablation values: each writer's delta is its output, each reader's input the model's own
    with _frozen_parameters(model), apply_edges(model, adapter, graph, leaf) as edges:
        with torch.no_grad():
            with _embedding_hook(adapter, lambda i, out: embeds["corrupted"].append(out.detach())):
                model(**corrupted)
            corrupted_out = edges.writer_deltas()
            with _embedding_hook(adapter, lambda i, out: embeds["clean"].append(out.detach())):
                clean_logits = model(**clean).logits.detach()
            diff = (corrupted_out - edges.writer_deltas()).flatten(1)  # [writers, B * P * hidden]
        del corrupted_out

        def accumulate(i: int, grad: Tensor) -> None:
            b = blocks[i]
            part = grad.reshape(grad.shape[0], -1).to(diff.dtype) @ diff[:b.writers].t()  # [readers, writers]
            scores[b.start:b.stop] += part.reshape(-1).float()

        def on_reader_input(i: int, readers: Tensor) -> None:
            if readers.requires_grad:
                readers.register_hook(lambda g, i=i: accumulate(i, g))

        edges.on_reader_input = on_reader_input
        alphas = [1.0] if method == "eap" else [k / steps for k in range(steps)]
        for alpha in alphas:
            def interpolate(i: int, out: Tensor, alpha: float = alpha) -> Tensor | None:
                if method == "eap":
                    return None
                x, x_corr = embeds["clean"][i], embeds["corrupted"][i]
                return (x_corr + alpha * (x - x_corr)).to(out.dtype).expand_as(out)

            with _embedding_hook(adapter, interpolate):
                logits = model(**clean).logits
            metric(logits, clean_logits).sum().backward()
        edges.on_reader_input = None
    return scores / len(alphas)


MAX_IG_STEPS = 1000  # each step is a forward and backward per batch; EAP-IG and MIB use 5 to 100


def check_method(method: str, steps: int) -> None:
    if method not in METHODS:
        raise SubnetlabError(f"attribution method {method!r}: choose one of {', '.join(METHODS)}", setting="method")
    if not 1 <= steps <= MAX_IG_STEPS:
        raise SubnetlabError(f"integrated-gradient steps {steps} must be between 1 and {MAX_IG_STEPS} (each is a "
                             "forward and backward pass per batch; EAP-IG uses 5 to 100)", setting="ig_steps")


def attribute(model: nn.Module, adapter: Adapter, graph: Graph, batches: Iterable[dict[str, Tensor]],
              metric: Metric, *, method: Method = "eap", steps: int = 5) -> AttributionScores:
    """Mean edge scores over the pairs of ``batches`` (circuit-task pair batches: ``input_ids``,
    ``corrupted_input_ids``, ``attention_mask`` and what ``metric(logits, batch, clean_logits)`` reads)."""
    from subnetlab.tasks.circuits.pairs import clean_inputs, corrupted_inputs

    check_method(method, steps)
    device = next(model.parameters()).device
    total, pairs = torch.zeros(graph.num_edges, dtype=torch.float64), 0
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        part = attribute_batch(model, adapter, graph, clean_inputs(batch), corrupted_inputs(batch),
                               lambda logits, full, b=batch: metric(logits, b, full), method=method, steps=steps)
        total += part.double().cpu()
        pairs += int(batch["input_ids"].shape[0])
    if pairs == 0:
        raise SubnetlabError("attribution needs at least one prompt pair")
    return AttributionScores(graph, (total / pairs).float(), method, 1 if method == "eap" else steps, pairs)
