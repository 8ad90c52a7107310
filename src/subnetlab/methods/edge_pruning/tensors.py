"""Edge Pruning's parameter tensors over subnetlab's graph, for its per-tensor deterministic masks.

The authors' code (princeton-nlp/Edge-Pruning ``src/modeling/modeling_fpt2.py``) keeps the log-alphas in
one tensor per layer and kind, and turns each into test-time masks separately
(``deterministic_z_from_log_alpha``, ``src/modeling/l0.py:22-39``, called once per tensor by ``get_mask``,
modeling_fpt2.py:106-113):

* edges: per layer its query, key and value read tensors ``[writers, heads]`` and its MLP read tensor
  ``[writers]`` (modeling_fpt2.py:496-503), and the final read ``[writers]`` (:873);
* nodes: per layer its heads' write tensor ``[heads]`` and its MLP's ``[1]`` (:505-506), and the token and
  position embeddings' ``[1]`` each (:861-864).

Every read tensor is **padded to all writers**: a reader of layer ``l`` has a log-alpha for every writer of
the model, and a constant mask (``attn_read_common_mask``, ``mlp_read_common_mask``, :510-522) zeroes the
entries of writers at or after it. Padding gets no gradient (it is multiplied by 0), yet it is a parameter
of the optimiser, so AdamW's decoupled decay shrinks it towards 0 every step (with torch's default 0.01 and
the paper's learning rate 0.8 over 3,000 steps, from 10 to about 1e-4). The deterministic rule counts the
expected zeros over the whole tensor, padding included (each padded entry at log-alpha 0 adds
``P(z = 0) = 0.17``), and zeroes the smallest soft masks, so a decayed padding closes every real edge of
its tensor whose log-alpha fell below the padding's. ``get_edge_sparsity`` (:931-948) then counts only the
real entries (its ``get_edge_masks`` slices the padding off, :636-664). subnetlab keeps the padding as
masks of its own (``EdgePruner`` with ``selection="threshold"``), trained as the authors' are: zero
gradient, the optimiser's decay.

In subnetlab's edge order (reader by reader, each reader's writers in writer order) the real entries of
one authors' tensor are consecutive, so a tensor is ``(first edge, real edges, padded entries)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from subnetlab.methods.l0.distribution import deterministic_group
from subnetlab.models.graph import Graph


@dataclass(frozen=True)
class ParameterTensor:
    """One of the authors' log-alpha tensors: edges ``start:start + real`` and ``padding`` padded entries."""

    name: str
    start: int
    real: int
    padding: int


def read_tensors(graph: Graph) -> tuple[ParameterTensor, ...]:
    """Per layer its q, k, v and MLP read tensors, then the final read, in edge order."""
    writers = len(graph.writers)
    tensors = []
    for block in graph.reader_blocks:
        if block.name.startswith("attn"):
            heads, kv = graph.num_heads, graph.num_kv_heads
            start = block.start
            for kind, count in (("q", heads), ("k", kv), ("v", kv)):
                real = count * block.writers
                tensors.append(ParameterTensor(f"{block.name}.{kind}", start, real, count * (writers - block.writers)))
                start += real
        else:
            tensors.append(ParameterTensor(block.name, block.start, block.writers, writers - block.writers))
    return tuple(tensors)


def node_tensors(graph: Graph) -> tuple[int, ...]:
    """Sizes of the authors' node tensors in writer order: one per embedding node, then per layer its heads
    and its MLP (subnetlab's joined ``input`` node, which the authors do not have, is a tensor of its own)."""
    return (1,) * graph.num_embeddings + (graph.num_heads, 1) * graph.num_layers


def padding_size(graph: Graph) -> int:
    return sum(t.padding for t in read_tensors(graph))


def per_tensor_edges(graph: Graph, log_alpha: Tensor, padding: Tensor) -> Tensor:
    """``[edges]`` deterministic masks, each authors' read tensor on its own with its padding (``padding``:
    the padded entries' log-alphas, tensor after tensor); the padding's own masks are dropped."""
    log_alpha, padding = log_alpha.detach().cpu().float(), padding.detach().cpu().float()
    out, offset = torch.empty_like(log_alpha), 0
    for t in read_tensors(graph):
        whole = torch.cat([log_alpha[t.start:t.start + t.real], padding[offset:offset + t.padding]])
        out[t.start:t.start + t.real] = deterministic_group(whole, clamped=True)[: t.real]
        offset += t.padding
    return out


def per_tensor_nodes(graph: Graph, log_alpha: Tensor) -> Tensor:
    """``[writers]`` deterministic node masks, each authors' node tensor on its own."""
    parts = log_alpha.detach().cpu().float().split(list(node_tensors(graph)))
    return torch.cat([deterministic_group(p, clamped=True) for p in parts])


def tensor_sums(graph: Graph, values: Tensor) -> Tensor:
    """``sum(values)`` accumulated tensor by tensor in float32, as ``get_edge_sparsity`` adds them up."""
    total = torch.zeros((), dtype=torch.float32)
    for t in read_tensors(graph):
        total = total + values[t.start:t.start + t.real].float().sum()
    return total


__all__ = ["ParameterTensor", "node_tensors", "padding_size", "per_tensor_edges", "per_tensor_nodes",
           "read_tensors", "tensor_sums"]
