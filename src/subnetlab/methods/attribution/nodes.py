"""Node attribution patching: NAP and NAP-IG, a score per writer (embedding, head, MLP), MIB's node baselines.

The score of writer ``w`` is::

    (out_w(x~) - out_w(x)) . dm/d out_w

summed over positions and averaged over the pairs (``x`` clean, ``x~`` corrupted, ``m`` the metric summed over
the batch), the first-order change of ``m`` when ``w``'s output is patched everywhere it is read. The gradient
of a writer's output is the sum of its readers' gradients, so at the clean run a node's NAP score is the sum of
its outgoing edges' EAP scores (``scores.node_scores``; the tests check it); here it is one backward to the node
outputs, without the reader blocks. A head's output is its slice of the output projection's input times its
slice of the projection, so its term is ``dz_h . dm/dz_h`` on the projection's input (the bias is no head's).

* ``nap``: the gradient at the clean run (hannamw/EAP-IG's ``attribute_node`` with ``EAP``). With mean ablation
  (``means``) ``out_w(x~)`` is the writer's mean output over the clean prompts (``scores.mean_node_outputs``).
* ``nap-ig``: the gradients averaged over ``k`` passes on the clean prompt with every embedding output set to
  ``x~ + alpha (x - x~)`` at ``alpha = 1/k, 2/k, ..., 1`` (``attribute_node`` with ``EAP-IG-inputs``: its node
  version includes the clean end and leaves the corrupted end out, the other way round from the edge version
  ``eap-ig``), times the real runs' differences. With one step it is ``nap``.

Where this differs from the reference: the reference takes an MLP node's gradient at the MLP's input hook
(``hook_mlp_in``, the gradient through the MLP alone) and multiplies it with the MLP's output difference; here
the MLP's gradient is its output's, as for every other node (the definition above, and the sum of its outgoing
edges' EAP scores). The reference's ``nap-ig`` refuses mean ablation, and so does this one.

Cost per batch: a corrupted forward (none under mean ablation), then one forward+backward (``nap``: that pass
records the clean outputs and logits itself, as EAP's does), or a clean forward and ``k`` forward+backwards
(``nap-ig``). On ``benchmarks/bench_attribution.py``'s model NAP costs EAP's floor (a corrupted forward and a
forward+backward): no reader blocks. Scores are in the model's precision (at least float32).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from subnetlab.intervene.edges import WriterValues
from subnetlab.methods.attribution.hooks import (
    NodeKey,
    frozen_parameters,
    mean_node_outputs,
    node_hooks,
    score_dtype,
)
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph


def node_batch(model: nn.Module, adapter: Adapter, graph: Graph, clean: dict[str, Tensor],
               corrupted: dict[str, Tensor], metric: Callable[[Tensor, Tensor], Tensor], *, method: str = "nap",
               steps: int = 5, means: WriterValues | None = None) -> Tensor:
    """Writer scores ``[writers]`` (graph order) of one batch, summed over its pairs (``attribute_batch``'s metric
    and conventions; ``means``: mean ablation, ``nap`` only, ``corrupted`` then not read)."""
    device = next(model.parameters()).device
    dtype = score_dtype(model)
    seen: dict[str, dict[NodeKey, Tensor]] = {"clean": {}, "corrupted": {}}

    def recorder(run: str) -> Callable[[NodeKey, Tensor], None]:
        def record(key: NodeKey, out: Tensor) -> None:
            seen[run][key] = out.detach()
        return record

    one_pass = method == "nap"  # the gradient pass is the clean run: it records the clean outputs and logits itself
    with frozen_parameters(model):
        with torch.no_grad():
            if means is None:
                with node_hooks(adapter, recorder("corrupted")):
                    model(**corrupted)
            if not one_pass:
                with node_hooks(adapter, recorder("clean")):
                    clean_logits = model(**clean).logits.detach()
        alphas = [1.0] if one_pass else [k / steps for k in range(1, steps + 1)]
        total: dict[NodeKey, Tensor] = {}
        diff: dict[NodeKey, Tensor] = {}
        for alpha in alphas:
            outputs: dict[NodeKey, Tensor] = {}

            def tap(key: NodeKey, out: Tensor, alpha: float = alpha) -> Tensor | None:
                if one_pass:
                    seen["clean"][key] = out.detach()
                elif key[0] == "embedding":
                    x, x_corr = seen["clean"][key], seen["corrupted"][key]
                    out = (x_corr + alpha * (x - x_corr)).to(out.dtype)
                if not out.requires_grad:  # the embeddings (frozen weights): the graph starts here
                    out = out.detach().requires_grad_()
                outputs[key] = out
                return out

            with node_hooks(adapter, tap):
                logits = model(**clean).logits
            if one_pass:
                clean_logits = logits.detach()
            if not diff:  # the real runs' differences, once the clean outputs are recorded
                if means is not None:
                    seen["corrupted"] = mean_node_outputs(means, seen["clean"])
                diff = {key: (seen["corrupted"][key] - x).to(dtype) for key, x in seen["clean"].items()}
            keys = list(outputs)
            grads = torch.autograd.grad(metric(logits, clean_logits).sum(), [outputs[k] for k in keys],
                                        allow_unused=True)
            for key, grad in zip(keys, grads):
                if grad is None:  # a node the metric does not depend on
                    continue
                part = _per_node(adapter, key, diff[key], grad.to(dtype))
                total[key] = part if key not in total else total[key] + part
    return _in_graph_order(adapter, graph, total, len(alphas), device, dtype)


def _per_node(adapter: Adapter, key: NodeKey, diff: Tensor, grad: Tensor) -> Tensor:
    """``diff . grad`` summed over batch and positions: ``[heads]`` for a layer's heads, a scalar otherwise.
    ``diff`` may broadcast against ``grad`` (a position embedding ``[1, P, hidden]``)."""
    product = diff * grad
    if key[0] == "heads":
        return product.reshape(-1, adapter.num_heads, adapter.head_dim).sum((0, 2))
    return product.sum()


def _in_graph_order(adapter: Adapter, graph: Graph, total: dict[NodeKey, Tensor], passes: int,
                    device: torch.device, dtype: torch.dtype) -> Tensor:
    """The writers' scores in graph order (embeddings, then per layer its heads and its MLP), over the passes."""
    zero = torch.zeros((), dtype=dtype, device=device)
    E, H = graph.num_embeddings, adapter.num_heads
    embeds = [total.get(("embedding", i), zero) for i in range(len(adapter.embedding_modules()))]
    rows: list[Tensor] = []
    if E == 1 and len(embeds) > 1:  # one writer for the token and position embeddings: the sum of the two
        rows.append(sum(embeds, zero).reshape(1))
    elif E:
        rows += [e.reshape(1) for e in embeds[:E]]
    for layer in range(adapter.num_layers):
        rows.append(total.get(("heads", layer), torch.zeros(H, dtype=dtype, device=device)).reshape(H))
        rows.append(total.get(("mlp", layer), zero).reshape(1))
    return torch.cat(rows) / passes


__all__ = ["node_batch"]
