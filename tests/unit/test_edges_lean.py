"""Edge masks against a straightforward reference: every reader's input summed from recorded writer outputs.

The reference keeps every reader's input and its normed copy (what ``intervene.edges`` recomputes in the
backward instead): plain torch hooks record each writer's output (embeddings, each head's slice of the attention
output projection, each MLP) in a plain corrupted run and, with autograd, in the clean run, and replace each
reader's input by ``sum_w [m_wr out_w(x) + (1 - m_wr) out_w(x~)]`` plus the attention output biases no head
writes; each head's query, key and value are its own reader's normed input times its slice of the projection.
Logits and the masks' gradients must agree within 1e-5 in float32, on the lean path (frozen weights, no reader
hook), with the lean path's reader inputs kept for the backward (``keep_reader_inputs``) and on the materialised
one (a reader hook set).
"""

from __future__ import annotations

import pytest
import torch

from subnetlab.intervene import count_hooks
from subnetlab.intervene.edges import apply_edges, capture_writers
from subnetlab.models.graph import Graph
from tests.conftest import tiny_inputs, tiny_model


class Reference:
    """Hooks computing every reader's input from recorded writer outputs (module docstring)."""

    def __init__(self, m, graph: Graph, mask: torch.Tensor | None, corrupted: list[torch.Tensor] | None) -> None:
        self.m, self.graph, self.mask, self.corrupted = m, graph, mask, corrupted
        self.outputs: list[torch.Tensor] = []
        self.normed: torch.Tensor | None = None
        self.handles: list = []

    def reader_inputs(self, block_index: int, like: torch.Tensor) -> torch.Tensor:
        block = self.graph.reader_blocks[block_index]
        out = torch.stack([o.expand_as(like) for o in self.outputs[:block.writers]])  # [writers, B, P, hidden]
        corr = torch.stack([o.expand_as(like) for o in self.corrupted[:block.writers]])
        m = self.mask[block.start:block.stop].view(len(block.readers), block.writers, 1, 1, 1)
        x = (m * out + (1 - m) * corr).sum(1)
        bias = [self.m.adapter.head_output_module(layer).bias for layer in range(self.m.adapter.num_layers)]
        seen = block.layer + (0 if block.name.startswith("attn") else 1)  # attention layers before this reader
        return x + sum((b for b in bias[:seen] if b is not None), torch.zeros(()))

    def __enter__(self) -> "Reference":
        a = self.m.adapter
        H, d = a.num_heads, a.head_dim
        hook = self.handles.append
        record = lambda mod, args, out: self.outputs.append(out)  # noqa: E731
        for module in a.embedding_modules():
            hook(module.register_forward_hook(record))
        for layer, block in enumerate(a.layers()):
            def heads(mod, args):
                z = args[0]
                w = mod.weight if a.spec.transposed else mod.weight.t()  # [H * d, hidden]
                self.outputs.extend(z[..., h * d:(h + 1) * d] @ w[h * d:(h + 1) * d] for h in range(H))

            hook(a.head_output_module(layer).register_forward_pre_hook(heads))
            hook(a.mlp_output_module(layer).register_forward_hook(record))
            if self.mask is None:
                continue
            attn_norm = block.get_submodule(a.spec.attn_norm)

            def qkv_inputs(mod, args, layer=layer):
                self.normed = torch.stack([mod.forward(x) for x in self.reader_inputs(2 * layer, args[0])])

            hook(attn_norm.register_forward_pre_hook(qkv_inputs))
            if a.family == "gpt2":  # c_attn's columns are [q heads | k heads | v heads]: reader i owns block i
                def fused(mod, args, out):
                    return torch.cat([self.normed[i] @ mod.weight[:, i * d:(i + 1) * d] + mod.bias[i * d:(i + 1) * d]
                                      for i in range(self.normed.shape[0])], -1)

                hook(block.attn.c_attn.register_forward_hook(fused))
            else:  # q_proj, k_proj, v_proj: readers 0..H-1, H..H+kv-1, H+kv..
                kv = a.num_kv_heads
                for first, count, proj in ((0, H, block.self_attn.q_proj), (H, kv, block.self_attn.k_proj),
                                           (H + kv, kv, block.self_attn.v_proj)):
                    def split(mod, args, out, first=first, count=count):
                        return torch.cat([self.normed[first + i] @ mod.weight[i * d:(i + 1) * d].t()
                                          for i in range(count)], -1)

                    hook(proj.register_forward_hook(split))
            mlp_norm = block.get_submodule(a.spec.mlp_norm)
            hook(mlp_norm.register_forward_pre_hook(
                lambda mod, args, layer=layer: (self.reader_inputs(2 * layer + 1, args[0])[0],)))
        if self.mask is not None:
            final = a.model.base_model.get_submodule(a.spec.final_norm)
            hook(final.register_forward_pre_hook(
                lambda mod, args: (self.reader_inputs(len(self.graph.reader_blocks) - 1, args[0])[0],)))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()


def _frozen(family: str, heads: int = 4):
    m = tiny_model(family, layers=2, heads=heads)
    m.model.eval()
    for p in m.model.parameters():
        p.requires_grad_(False)
    return m


@pytest.mark.parametrize("masks", ["mixed", "few-cut", "all-kept"])
@pytest.mark.parametrize("path", ["lean", "kept", "materialised"])
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_logits_and_mask_gradients_equal_the_reference_sums(family, path, masks, one_thread):
    """``mixed``: every writer cut by some reader; ``few-cut``: most writers cut by none (the products over the
    cut writers only); ``all-kept``: none cut."""
    _compare(family, path, masks)


@pytest.mark.parametrize("path", ["lean", "kept"])
def test_two_heads_equal_the_reference_sums(path, one_thread):
    """Attention blocks of 6 readers, smaller than the writer blocks they read."""
    _compare("gpt2", path, "mixed", heads=2)


def _compare(family: str, path: str, masks: str, heads: int = 4) -> None:
    m = _frozen(family, heads)
    graph = Graph.from_adapter(m.adapter)
    clean, corrupted = tiny_inputs(family, seed=0), tiny_inputs(family, seed=1)
    with torch.no_grad(), Reference(m, graph, None, None) as plain:
        m.model(**corrupted)
    ablated = [o.detach() for o in plain.outputs]
    assert len(ablated) == len(graph.writers)
    values = capture_writers(m.model, m.adapter, corrupted)
    start = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(5))
    start[::3] = 1.0  # exact ones and zeros, as hard-concrete samples have
    start[1::7] = 0.0
    if masks != "mixed":
        kept = torch.ones(graph.num_edges)
        if masks == "few-cut":
            some = torch.randperm(graph.num_edges, generator=torch.Generator().manual_seed(7))[:5]
            kept[some] = start[some].clamp(max=0.5)
        start = kept
    weights = torch.randn(*clean["input_ids"].shape, m.model.config.vocab_size,
                          generator=torch.Generator().manual_seed(6))

    mask_ref = start.clone().requires_grad_()
    with Reference(m, graph, mask_ref, ablated):
        logits_ref = m.model(**clean).logits
    (logits_ref * weights).sum().backward()

    mask = start.clone().requires_grad_()
    hook = (lambda i, x: None) if path == "materialised" else None
    with apply_edges(m.model, m.adapter, graph, mask, values, on_reader_input=hook,
                     keep_reader_inputs=path == "kept"):
        logits = m.model(**clean).logits
    (logits * weights).sum().backward()
    assert count_hooks(m.model) == 0 and "forward" not in vars(m.adapter.layers()[0].get_submodule(
        "attn.c_attn" if family == "gpt2" else "self_attn.q_proj"))

    assert (logits - logits_ref).abs().max() <= 1e-5
    scale = mask_ref.grad.abs().max()
    assert scale > 0
    assert (mask.grad - mask_ref.grad).abs().max() <= 1e-5 * max(1.0, float(scale))


def test_writer_gradients_reach_the_token_embeddings(one_thread):
    """The writers' taps: the gradient of the input embeddings (a writer) equals the reference's."""
    m = _frozen("gpt2")
    graph = Graph.from_adapter(m.adapter)
    clean, corrupted = tiny_inputs("gpt2", seed=0), tiny_inputs("gpt2", seed=1)
    values = capture_writers(m.model, m.adapter, corrupted)
    with torch.no_grad(), Reference(m, graph, None, None) as plain:
        m.model(**corrupted)
    ablated = [o.detach() for o in plain.outputs]
    mask = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(2))
    grads = []
    for make in (lambda: Reference(m, graph, mask, ablated),
                 lambda: apply_edges(m.model, m.adapter, graph, mask, values)):
        leaf: list[torch.Tensor] = []
        # registered first, so the intervention's own embedding hooks see this leaf as the token embeddings' output
        handle = m.model.transformer.wte.register_forward_hook(
            lambda mod, args, out: leaf.append(out.detach().requires_grad_()) or leaf[-1])
        try:
            with make():
                m.model(**clean).logits.square().sum().backward()
        finally:
            handle.remove()
        grads.append(leaf[0].grad)
    assert grads[0].abs().max() > 0
    assert (grads[0] - grads[1]).abs().max() <= 1e-5 * max(1.0, float(grads[0].abs().max()))


def test_bfloat16_weights_train_float32_masks(one_thread):
    """Frozen weights in bfloat16: the edge buffers follow them, the masks, multipliers and loss stay float32, and
    one step's KL is the float32 model's within bfloat16 rounding."""
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.data import paired_data
    from subnetlab.methods.edge_pruning.train import EdgePruner

    g = torch.Generator().manual_seed(0)
    ids, corrupted = torch.randint(3, 50, (8, 6), generator=g), torch.randint(3, 50, (8, 6), generator=g)
    data = paired_data(ids, corrupted, torch.randint(3, 50, (8,), generator=g), torch.randint(3, 50, (8,), generator=g))
    kls, grads = [], []
    for dtype in ("float32", "bfloat16"):
        m = tiny_model("gpt2", layers=2)
        m.model.to(getattr(torch, dtype))
        cfg = preset_config("quick", 0.5, batch_size=4, eval_batch_size=8, init_log_alpha=0.0, dtype=dtype)
        with EdgePruner(m.model, m.adapter, data, cfg) as pruner:
            assert pruner.edges.log_alpha.dtype == torch.float32
            kls.append(pruner.step(0)[0])
            grads.append(pruner.edges.log_alpha.grad.clone())
            assert pruner.ctl.writer_deltas().dtype == getattr(torch, dtype)
    assert all(torch.isfinite(torch.tensor(kls)))
    assert abs(kls[0] - kls[1]) <= 0.05 * max(abs(kls[0]), 1e-3)
    cosine = torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0)
    assert cosine > 0.95


def test_bfloat16_settings_refuse_a_float32_model():
    from subnetlab.errors import SubnetlabError
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.data import paired_data
    from subnetlab.methods.edge_pruning.train import EdgePruner

    ids = torch.randint(3, 50, (4, 6), generator=torch.Generator().manual_seed(0))
    data = paired_data(ids, ids.flip(0), ids[:, 0], ids[:, 1])
    m = tiny_model("gpt2", layers=1)
    with pytest.raises(SubnetlabError, match="load the model in bfloat16"):
        EdgePruner(m.model, m.adapter, data, preset_config("quick", 0.5, batch_size=4, dtype="bfloat16"))
