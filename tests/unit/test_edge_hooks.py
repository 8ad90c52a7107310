"""The public hooks of edge masks (``on_reader_input``, ``writer_deltas``) against a tiny GPT-2 read by hand.

Independent computation: plain torch hooks record every writer's output (token and position embeddings, each
head's slice of the attention output projection, each MLP) in the clean run under the masks and in a plain
corrupted run; a reader's input is then the module docstring's sum written out,
``sum_w [m_wr out_w(x) + (1 - m_wr) out_w(x~)]`` plus the projection biases no head writes.
"""

from __future__ import annotations

import torch

from subnetlab.intervene import count_hooks
from subnetlab.intervene.edges import apply_edges, capture_writers
from subnetlab.models.graph import Graph
from tests.conftest import tiny_inputs, tiny_model


def _recorded_writers(m):
    """Plain hooks appending every writer's output ``[B, P, hidden]`` in graph writer order to a list."""
    model, a = m.model, m.adapter
    H, d = a.num_heads, a.head_dim
    seen: list[torch.Tensor] = []
    handles = [module.register_forward_hook(lambda mod, args, out: seen.append(out.detach()))
               for module in (model.transformer.wte, model.transformer.wpe)]
    for layer, block in enumerate(model.transformer.h):
        def heads(mod, args):
            z = args[0].detach()  # [B, P, H * d]; Conv1D weight is [in, out]
            seen.extend(z[..., h * d:(h + 1) * d] @ mod.weight[h * d:(h + 1) * d] for h in range(H))

        handles.append(block.attn.c_proj.register_forward_pre_hook(heads))
        handles.append(block.mlp.register_forward_hook(lambda mod, args, out: seen.append(out.detach())))
    return seen, handles


def _remove(handles):
    for h in handles:
        h.remove()


def _setup():
    m = tiny_model("gpt2", layers=2)
    m.model.double().eval()
    clean, corrupted = tiny_inputs("gpt2", batch=2, length=5, seed=0), tiny_inputs("gpt2", batch=2, length=5, seed=1)
    return m, Graph.from_adapter(m.adapter), clean, corrupted


def test_reader_inputs_and_writer_deltas_are_the_sums_written_out(one_thread):
    m, graph, clean, corrupted = _setup()
    B, P = clean["input_ids"].shape
    with torch.no_grad():
        values = capture_writers(m.model, m.adapter, corrupted)
        ablated, handles = _recorded_writers(m)
        try:
            m.model(**corrupted)
        finally:
            _remove(handles)
    mask = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    inputs: dict[int, torch.Tensor] = {}
    with torch.no_grad(), apply_edges(m.model, m.adapter, graph, mask, values,
                                      on_reader_input=lambda i, x: inputs.__setitem__(i, x.clone())) as edges:
        outputs, handles = _recorded_writers(m)
        try:
            m.model(**clean)
        finally:
            _remove(handles)
        deltas = edges.writer_deltas()
    assert count_hooks(m.model) == 0
    assert sorted(inputs) == list(range(len(graph.reader_blocks)))
    out = torch.stack([o.expand(B, P, -1) for o in outputs])  # [writers, B, P, hidden]
    corr = torch.stack([o.expand(B, P, -1) for o in ablated])
    assert (deltas - (out - corr)).abs().max() < 1e-10
    biases = [block.attn.c_proj.bias for block in m.model.transformer.h]
    for i, block in enumerate(graph.reader_blocks):
        m_block = mask[block.start:block.stop].view(len(block.readers), block.writers, 1, 1, 1)
        by_hand = (m_block * out[:block.writers] + (1 - m_block) * corr[:block.writers]).sum(1)
        attention_layers = block.layer + (0 if block.name.startswith("attn") else 1)  # whose projection bias it sees
        by_hand = by_hand + sum(biases[:attention_layers], torch.zeros(()))
        assert inputs[i].shape == by_hand.shape, block.name
        assert (inputs[i] - by_hand).abs().max() < 1e-10, block.name


def test_a_returned_tensor_replaces_the_readers_input(one_thread):
    """Zeros as the logits' input: the logits are the final norm and unembedding of zeros."""
    m, graph, clean, _ = _setup()
    last = len(graph.reader_blocks) - 1
    with torch.no_grad():
        with apply_edges(m.model, m.adapter, graph, torch.ones(graph.num_edges),
                         on_reader_input=lambda i, x: torch.zeros_like(x) if i == last else None):
            logits = m.model(**clean).logits
        zeros = torch.zeros(*clean["input_ids"].shape, m.adapter.hidden_size, dtype=torch.float64)
        by_hand = m.model.lm_head(m.model.transformer.ln_f(zeros))
        assert (logits - by_hand).abs().max() < 1e-10
        assert (logits - m.model(**clean).logits).abs().max() > 1e-3


def test_a_gradient_hook_on_the_readers_input_sees_the_models_gradient(one_thread):
    """Every edge kept: the gradient at the logits' input is the plain model's gradient at the final norm's input."""
    m, graph, clean, _ = _setup()
    last = len(graph.reader_blocks) - 1
    grads: dict[int, torch.Tensor] = {}

    def on_input(i, x):
        x.register_hook(lambda g: grads.__setitem__(i, g.clone()))

    mask = torch.ones(graph.num_edges, dtype=torch.float64, requires_grad=True)  # reader inputs need a gradient
    with apply_edges(m.model, m.adapter, graph, mask, on_reader_input=on_input):
        m.model(**clean).logits[:, -1].sum().backward()
    seen = {}

    def keep(mod, args):
        args[0].retain_grad()
        seen["x"] = args[0]

    handle = m.model.transformer.ln_f.register_forward_pre_hook(keep)
    try:
        m.model(**clean).logits[:, -1].sum().backward()
    finally:
        handle.remove()
    assert sorted(grads) == list(range(len(graph.reader_blocks)))
    assert grads[last].shape == (1, *seen["x"].shape)
    assert (grads[last][0] - seen["x"].grad).abs().max() < 1e-10
