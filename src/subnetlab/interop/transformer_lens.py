"""A subnetlab node or edge circuit on a TransformerLens 4 ``TransformerBridge``, through its hook points.

Removed components / edges deliver ``values`` (the writer outputs of a reference forward on the bridge,
``bridge_values(bridge, tokens)``, e.g. the corrupted prompt: patching) or zero (``values=None``), as
subnetlab's ``intervene.gates`` and ``intervene.edges`` do on the Hugging Face model:

* nodes: ``blocks.{l}.attn.hook_z`` (each head's output before the output projection, which is what
  subnetlab's head gates scale) becomes ``g z + (1 - g) v``; ``blocks.{l}.hook_mlp_out`` likewise;
* edges: every reader's input is rebuilt as ``input - sum_w (1 - m_wr) (out_w - v_w)``, with the writers'
  live outputs read at ``hook_embed`` (and ``hook_pos_embed``), ``blocks.{l}.attn.hook_result`` and
  ``blocks.{l}.hook_mlp_out`` and the readers at ``blocks.{l}.attn.hook_q_input`` / ``k`` / ``v``,
  ``blocks.{l}.hook_mlp_in`` and the last block's ``hook_resid_post`` (the logits). Needs the bridge's
  per-head hook points (``set_use_attn_result``, ``set_use_split_qkv_input``, ``set_use_hook_mlp_in``), which
  ``bridge_hooks`` turns on and off around its use. Key/value heads must equal query heads (the bridge's
  split K/V inputs are per query head).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.models.graph import Graph

Values = dict[str, Tensor]


def writer_hook_names(n_layers: int, embeddings: int) -> list[str]:
    names = ["hook_embed"] + (["hook_pos_embed"] if embeddings == 2 else [])
    for layer in range(n_layers):
        names += [f"blocks.{layer}.attn.hook_result", f"blocks.{layer}.hook_mlp_out"]
    return names


@contextmanager
def _edge_flags(bridge: Any) -> Iterator[None]:
    cfg = bridge.cfg
    saved = (cfg.use_attn_result, cfg.use_split_qkv_input, cfg.use_hook_mlp_in)
    try:
        bridge.set_use_attn_result(True)
        bridge.set_use_split_qkv_input(True)
        bridge.set_use_hook_mlp_in(True)
        yield
    finally:
        bridge.set_use_attn_result(saved[0])
        bridge.set_use_split_qkv_input(saved[1])
        bridge.set_use_hook_mlp_in(saved[2])


def bridge_values(bridge: Any, tokens: Tensor, level: str = "edges", embeddings: int = 1) -> Values:
    """The writer outputs (edges) or head ``z`` and MLP outputs (nodes) of one forward of ``bridge`` on ``tokens``."""
    L = int(bridge.cfg.n_layers)
    names = (writer_hook_names(L, 2) if level == "edges" else
             [n for layer in range(L) for n in (f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.hook_mlp_out")])
    captured: Values = {}

    def keep(name: str):  # keyed by the alias asked for (the hook's own name is its canonical one)
        def hook(t: Tensor, *, hook: Any) -> None:
            captured[name] = t.detach().clone()
        return hook

    if not _has_pos_embed(bridge):
        names = [n for n in names if n != "hook_pos_embed"]
    with (_edge_flags(bridge) if level == "edges" else _nothing()), torch.no_grad(), \
            bridge.hooks(fwd_hooks=[(n, keep(n)) for n in names]):
        bridge(tokens)
    return captured


def _has_pos_embed(bridge: Any) -> bool:
    """Learned position embeddings (GPT-2) write into the residual stream; rotary ones (Llama) do not."""
    return "pos_embed.hook_out" in bridge.hook_dict


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def apply_nodes(bridge: Any, heads: Tensor, mlps: Tensor, values: Values | None = None) -> Iterator[None]:
    """Run ``bridge`` with head gates ``[L, H]`` and MLP gates ``[L]`` (1 = kept) inside the ``with``."""
    L, H = int(bridge.cfg.n_layers), int(bridge.cfg.n_heads)
    if tuple(heads.shape) != (L, H) or tuple(mlps.shape) != (L,):
        raise SubnetlabError(f"node gates {tuple(heads.shape)} and {tuple(mlps.shape)} for a bridge of {L} layers x "
                             f"{H} heads")

    def gate(g: Tensor, name: str, per_head: bool):
        def hook(t: Tensor, *, hook: Any) -> Tensor:
            g_ = g.to(t.device, t.dtype)
            g_ = g_.view(1, 1, -1, 1) if per_head else g_
            v = 0 if values is None else values[name].to(t.device, t.dtype)
            return g_ * t + (1 - g_) * v
        return hook

    hooks = []
    for layer in range(L):
        hooks.append((f"blocks.{layer}.attn.hook_z", gate(heads[layer], f"blocks.{layer}.attn.hook_z", True)))
        hooks.append((f"blocks.{layer}.hook_mlp_out", gate(mlps[layer], f"blocks.{layer}.hook_mlp_out", False)))
    with bridge.hooks(fwd_hooks=hooks):
        yield


@contextmanager
def apply_edges(bridge: Any, graph: Graph, mask: Tensor, values: Values | None = None) -> Iterator[None]:
    """Run ``bridge`` with edge mask ``[edges]`` (1 = kept, in ``graph``'s order) inside the ``with``."""
    L, H = int(bridge.cfg.n_layers), int(bridge.cfg.n_heads)
    if (graph.num_layers, graph.num_heads) != (L, H) or graph.num_kv_heads != H:
        raise SubnetlabError(f"a graph of {graph.num_layers} layers x {graph.num_heads} heads "
                             f"({graph.num_kv_heads} key/value heads) on a bridge of {L} x {H}; the bridge's split "
                             "K/V inputs need as many key/value heads as query heads")
    if tuple(mask.shape) != (graph.num_edges,):
        raise SubnetlabError(f"edge mask of shape {tuple(mask.shape)}, the graph has {graph.num_edges} edges")
    live: Values = {}

    def deltas(like: Tensor) -> Tensor:
        """``out_w - v_w`` of every writer so far, ``[writers, B, P, hidden]`` in graph writer order."""
        parts = []
        embeds = ["hook_embed", "hook_pos_embed"] if "hook_pos_embed" in live else ["hook_embed"]
        emb = [live[n] - (0 if values is None else values[n].to(like.device, like.dtype)) for n in embeds]
        emb = [e.expand_as(like) for e in emb]
        parts += [sum(emb)[None]] if graph.num_embeddings == 1 else [torch.stack(emb)]
        for layer in range(L):
            name = f"blocks.{layer}.attn.hook_result"
            if name not in live:
                break
            v = 0 if values is None else values[name].to(like.device, like.dtype)
            parts.append((live[name] - v).permute(2, 0, 1, 3))  # [H, B, P, hidden]
            name = f"blocks.{layer}.hook_mlp_out"
            if name not in live:
                break
            v = 0 if values is None else values[name].to(like.device, like.dtype)
            parts.append((live[name] - v)[None])
        return torch.cat(parts, 0)

    def capture(name: str):
        def hook(t: Tensor, *, hook: Any) -> None:
            live[name] = t
        return hook

    def comp(block_index: int, like: Tensor) -> Tensor:
        b = graph.reader_blocks[block_index]
        return (1.0 - mask[b.start:b.stop].to(like.device, like.dtype)).view(len(b.readers), b.writers)

    def qkv(layer: int, which: int):
        def hook(t: Tensor, *, hook: Any) -> Tensor:  # [B, P, H, hidden]
            c = comp(2 * layer, t)[which * H:(which + 1) * H]
            d = deltas(t[:, :, 0])[: c.shape[1]]
            return t - torch.einsum("rw,wbpd->bprd", c, d)
        return hook

    def single(block_index: int):
        def hook(t: Tensor, *, hook: Any) -> Tensor:  # [B, P, hidden]
            c = comp(block_index, t)[0]
            d = deltas(t)[: c.shape[0]]
            return t - torch.einsum("w,wbpd->bpd", c, d)
        return hook

    hooks = [(n, capture(n)) for n in writer_hook_names(L, 2 if _has_pos_embed(bridge) else 1)]
    for layer in range(L):
        for which, kind in enumerate("qkv"):
            hooks.append((f"blocks.{layer}.attn.hook_{kind}_input", qkv(layer, which)))
        hooks.append((f"blocks.{layer}.hook_mlp_in", single(2 * layer + 1)))
    hooks.append((f"blocks.{L - 1}.hook_resid_post", single(len(graph.reader_blocks) - 1)))
    with _edge_flags(bridge), bridge.hooks(fwd_hooks=hooks):
        yield


@contextmanager
def apply_subnetwork(bridge: Any, subnetwork: Any, corrupted_tokens: Tensor | None = None) -> Iterator[None]:
    """A ``Subnetwork`` (kind ``structured`` or ``edges``) on ``bridge``; removed parts deliver their output on
    ``corrupted_tokens`` (patching) or zero (None)."""
    if subnetwork.kind == "edges":
        circuit = subnetwork.circuit()
        values = None if corrupted_tokens is None else bridge_values(bridge, corrupted_tokens, "edges")
        with apply_edges(bridge, circuit.graph, circuit.kept().float(), values):
            yield
    elif subnetwork.kind == "structured":
        values = None if corrupted_tokens is None else bridge_values(bridge, corrupted_tokens, "nodes")
        with apply_nodes(bridge, subnetwork.heads.float(), subnetwork.mlps.float(), values):
            yield
    else:
        raise SubnetlabError(f"a {subnetwork.kind} subnetwork has no heads, MLPs or edges to apply")
