"""Exact activation patching per edge: the quantity EAP linearises, one forward per edge.

The score of edge ``w -> r`` is ``m(x with r's input from w patched) - m(x)``:
reader ``r`` sees ``out_w(x~)`` in place of ``out_w(x)`` and nothing else
changes, everything downstream of ``r`` recomputed (hannamw/EAP-IG's
``get_scores_exact``: the metric with the edge corrupted minus the clean
baseline). The sign is EAP's: its score is this difference to first order.

Every writer upstream of ``r`` computes before ``r`` reads, so patching the edge
changes ``r``'s input by ``-D_w`` with ``D_w = out_w(x) - out_w(x~)`` of the two
unmodified runs. Many edges share one forward: the clean batch is repeated once
per edge of a chunk and each copy's reader input is shifted by its edge's
``D_w`` through ``intervene.edges``'s public ``on_reader_input`` hook.

Cost: ``edges x pairs`` rows of forward passes (no backward): feasible up to a
few thousand edges on a CPU (a ground truth for small graphs), hours for GPT-2
small's 32,936. ``edges`` scores a chosen subset (the others stay 0): a ground
truth for a few edges of a large graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.edges import apply_edges, check_edge_family
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph

ROWS_PER_FORWARD = 64  # copies of the batch per forward x its pairs: larger amortises the hooks, costs memory
BYTES_PER_FORWARD = 256 * 2**20  # and at most this much of the copies' reader inputs, writer outputs and logits


def copies_per_forward(readers: int, writers: int, rows: int, length: int, hidden: int, vocab: int, itemsize: int = 4,
                       rows_per_forward: int = ROWS_PER_FORWARD, budget: int = BYTES_PER_FORWARD) -> int:
    """Copies of a batch of ``rows`` x ``length`` tokens one patched forward holds (``exact_batch``): its rows at
    most ``rows_per_forward`` and, where a row's tensors (the input of each of the widest block's ``readers``,
    twice with its norm; the ``writers``' outputs; the logits) take more, at most ``budget`` bytes of them."""
    per_row = length * itemsize * (vocab + hidden * (2 * readers + writers))
    return max(1, min(rows_per_forward, budget // per_row) // rows)


def exact_batch(model: nn.Module, adapter: Adapter, graph: Graph, clean: dict[str, Tensor],
                corrupted: dict[str, Tensor], metric: Callable[[Tensor, Tensor], Tensor], *,
                rows_per_forward: int = ROWS_PER_FORWARD, edges: Sequence[int] | None = None,
                bytes_per_forward: int = BYTES_PER_FORWARD) -> Tensor:
    """``[edges]`` exact patching scores of one batch, summed over its pairs (the metric as ``attribute_batch``'s);
    with ``edges`` (indices in graph order) only those are patched and scored, every other score 0.

    One patched forward holds ``rows_per_forward`` rows (copies of the batch x its pairs), fewer where a row's
    tensors (every reader's input of the widest block, twice with its norm; the writers' outputs; the logits)
    would pass ``bytes_per_forward``: GPT-2 small at 32 tokens holds 16 MB a row, so 64 rows took 1 GB of
    copies; Llama-3.2-1B's vocabulary and 97 readers a block took 12 GB. The scores do not depend on it."""
    check_edge_family(adapter)
    chosen = range(graph.num_edges) if edges is None else sorted({int(e) for e in edges})
    if edges is not None and (not chosen or chosen[0] < 0 or chosen[-1] >= graph.num_edges):
        raise SubnetlabError(f"edges: expected indices in 0..{graph.num_edges - 1} of the graph's edges, got "
                             f"{list(edges)[:5]}{' ...' if len(list(edges)) > 5 else ''}", setting="edges")
    device = next(model.parameters()).device
    dtype = torch.promote_types(next(model.parameters()).dtype, torch.float32)
    rows = int(clean["input_ids"].shape[0])
    blocks = graph.reader_blocks
    scores = torch.zeros(graph.num_edges, dtype=dtype, device=device)
    chunk: list[int] = []
    with torch.no_grad(), apply_edges(model, adapter, graph, torch.ones(graph.num_edges, device=device)) as masked:
        model(**corrupted)
        corrupted_out = masked.writer_deltas()  # values None: each writer's output
        clean_logits = model(**clean).logits
        deltas = masked.writer_deltas() - corrupted_out  # [writers, B, P, hidden]
        del corrupted_out
        baseline = metric(clean_logits, clean_logits).to(dtype)  # [B]
        per_forward = copies_per_forward(max(len(b.readers) for b in blocks), len(graph.writers), rows, int(clean_logits.shape[1]), int(deltas.shape[-1]),
                                         int(clean_logits.shape[-1]), clean_logits.element_size(), rows_per_forward,
                                         bytes_per_forward)

        def patch(i: int, readers: Tensor) -> Tensor | None:
            """Shift copy ``j``'s input of the edge ``chunk[j]``'s reader by ``-D`` of its writer."""
            b = blocks[i]
            local = [(j, e - b.start) for j, e in enumerate(chunk) if b.start <= e < b.stop]
            if not local:
                return None
            copies = torch.tensor([j for j, _ in local], device=readers.device)
            reader = torch.tensor([e // b.writers for _, e in local], device=readers.device)
            writer = torch.tensor([e % b.writers for _, e in local], device=readers.device)
            grid = readers.view(readers.shape[0], len(chunk), rows, *readers.shape[2:])  # [R, copies, B, P, hidden]
            grid[reader, copies] -= deltas[writer].to(readers.dtype)
            return readers

        masked.on_reader_input = patch
        for start in range(0, len(chosen), per_forward):
            chunk[:] = chosen[start:start + per_forward]
            n = len(chunk)
            inputs = {k: v if v is None else v.repeat(n, *[1] * (v.dim() - 1)) for k, v in clean.items()}
            logits = model(**inputs).logits
            for j, e in enumerate(chunk):
                scores[e] = (metric(logits[j * rows:(j + 1) * rows], clean_logits).to(dtype) - baseline).sum()
            del inputs, logits  # not alive through the next chunk's forward
        masked.on_reader_input = None
    return scores


__all__ = ["BYTES_PER_FORWARD", "ROWS_PER_FORWARD", "copies_per_forward", "exact_batch"]
