"""Gates against independent computations, on tiny models of every family."""

from __future__ import annotations

import copy

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import ComponentValues, apply_gates, capture_activations, collect_means, count_hooks
from tests.conftest import output_of, tiny_inputs, tiny_model


def _ones(adapter):
    return torch.ones(adapter.num_layers, adapter.num_heads), torch.ones(adapter.num_layers)


def _head_columns(module, head: int, d: int):
    """The out-projection weight entries that read head ``head`` (Linear [out, in]; GPT-2 Conv1D [in, out])."""
    sl = slice(head * d, (head + 1) * d)
    return (module.weight[sl, :]) if type(module).__name__ == "Conv1D" else module.weight[:, sl]


def test_all_gates_open_reproduce_model(family):
    m = tiny_model(family)
    x = tiny_inputs(family)
    with torch.no_grad():
        plain = output_of(m.model, x)
        with apply_gates(m.model, m.adapter, *_ones(m.adapter)):
            gated = output_of(m.model, x)
    assert (plain - gated).abs().max() <= 1e-6


def test_closed_head_equals_removing_its_slice_by_hand(family):
    m = tiny_model(family)
    x = tiny_inputs(family)
    layer, head = 1, 2
    heads, mlps = _ones(m.adapter)
    heads[layer, head] = 0
    surgery = copy.deepcopy(m.model)
    with torch.no_grad():
        from subnetlab.models import get_adapter

        out_proj = get_adapter(surgery).head_output_module(layer)
        _head_columns(out_proj, head, m.adapter.head_dim).zero_()
        expected = output_of(surgery, x)
        with apply_gates(m.model, m.adapter, heads, mlps):
            gated = output_of(m.model, x)
        plain = output_of(m.model, x)
    assert (gated - expected).abs().max() <= 1e-5
    assert (gated - plain).abs().max() > 1e-4  # closing a gate really changes the output


def test_closed_head_mean_ablation_equals_hand_replacement(family):
    m = tiny_model(family)
    x = tiny_inputs(family)
    means = collect_means(m.model, m.adapter, [x])
    layer, head, d = 0, 1, m.adapter.head_dim
    heads, mlps = _ones(m.adapter)
    heads[layer, head] = 0

    def replace_slice(module, args):
        y = args[0].clone()
        y[..., head * d:(head + 1) * d] = means.heads[layer][head]
        return (y, *args[1:])

    with torch.no_grad():
        handle = m.adapter.head_output_module(layer).register_forward_pre_hook(replace_slice)
        try:
            expected = output_of(m.model, x)
        finally:
            handle.remove()
        with apply_gates(m.model, m.adapter, heads, mlps, ablation=means):
            gated = output_of(m.model, x)
    assert (gated - expected).abs().max() <= 1e-5


def test_closed_mlp_equals_zeroing_its_output_matrix(family):
    m = tiny_model(family)
    x = tiny_inputs(family)
    heads, mlps = _ones(m.adapter)
    mlps[1] = 0
    surgery = copy.deepcopy(m.model)
    with torch.no_grad():
        from subnetlab.models import get_adapter

        output_matrix = get_adapter(surgery).layers()[1].get_submodule(m.adapter.spec.mlp_matrices[-1])
        output_matrix.weight.zero_()
        if output_matrix.bias is not None:
            output_matrix.bias.zero_()
        expected = output_of(surgery, x)
        with apply_gates(m.model, m.adapter, heads, mlps):
            gated = output_of(m.model, x)
    assert (gated - expected).abs().max() <= 1e-5
    assert (gated - output_of(m.model, x)).abs().max() > 1e-4


def test_batched_gates_match_per_example_gates(family):
    m = tiny_model(family)
    x = tiny_inputs(family, batch=2)
    g = torch.Generator().manual_seed(0)
    heads = torch.rand(2, m.adapter.num_layers, m.adapter.num_heads, generator=g)
    mlps = torch.rand(2, m.adapter.num_layers, generator=g)
    with torch.no_grad(), apply_gates(m.model, m.adapter) as gates:
        gates.set(heads, mlps)
        both = output_of(m.model, x)
        for i in range(2):
            gates.set(heads[i], mlps[i])
            one = output_of(m.model, {k: v[i:i + 1] for k, v in x.items()})
            assert (both[i] - one[0]).abs().max() <= 1e-5


def test_resample_from_same_input_is_identity(family):
    m = tiny_model(family)
    x = tiny_inputs(family)
    values = capture_activations(m.model, m.adapter, x)
    heads = torch.zeros(m.adapter.num_layers, m.adapter.num_heads)
    mlps = torch.zeros(m.adapter.num_layers)
    with torch.no_grad():
        plain = output_of(m.model, x)
        with apply_gates(m.model, m.adapter, heads, mlps, ablation=values):
            gated = output_of(m.model, x)
        other = capture_activations(m.model, m.adapter, tiny_inputs(family, seed=5))
        with apply_gates(m.model, m.adapter, heads, mlps, ablation=other):
            resampled = output_of(m.model, x)
    assert (plain - gated).abs().max() <= 1e-5
    assert (plain - resampled).abs().max() > 1e-4


def test_means_ignore_padding_and_match_hand_average(family):
    if family == "vit":
        pytest.skip("images have no padding")
    m = tiny_model(family)
    x = tiny_inputs(family)
    padded = tiny_inputs(family, pad=4)
    plain = collect_means(m.model, m.adapter, [x])
    with_pad = collect_means(m.model, m.adapter, [padded])
    acts = capture_activations(m.model, m.adapter, x)
    for layer in range(m.adapter.num_layers):
        assert torch.allclose(plain.heads[layer], with_pad.heads[layer], atol=1e-5)
        assert torch.allclose(plain.mlps[layer], with_pad.mlps[layer], atol=1e-5)
        assert torch.allclose(plain.heads[layer], acts.heads[layer].mean((0, 1)), atol=1e-5)


def test_per_position_means_and_streaming(family):
    m = tiny_model(family)
    a, b = tiny_inputs(family, seed=1), tiny_inputs(family, seed=2)
    joined = {k: torch.cat([a[k], b[k]]) for k in a}
    streamed = collect_means(m.model, m.adapter, [a, b], per_position=True)
    acts = capture_activations(m.model, m.adapter, joined)
    assert torch.allclose(streamed.mlps[0], acts.mlps[0].mean(0), atol=1e-5)


def test_no_hook_left_after_exception(family):
    m = tiny_model(family)
    before = count_hooks(m.model)
    with pytest.raises(RuntimeError, match="boom"):
        with apply_gates(m.model, m.adapter, *_ones(m.adapter)):
            assert count_hooks(m.model) > before
            raise RuntimeError("boom")
    assert count_hooks(m.model) == before


def test_trainable_source_gets_gradients():
    m = tiny_model("bert")
    x = tiny_inputs("bert")
    logits = torch.zeros(m.adapter.num_layers, m.adapter.num_heads, requires_grad=True)
    mlp_logits = torch.zeros(m.adapter.num_layers, requires_grad=True)
    source = lambda: (torch.sigmoid(logits), torch.sigmoid(mlp_logits))  # noqa: E731
    for p in m.model.parameters():
        p.requires_grad_(False)
    with apply_gates(m.model, m.adapter, source=source) as gates:
        output_of(m.model, x).sum().backward()
        assert gates.heads is not None
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    assert mlp_logits.grad.abs().sum() > 0


def test_wrong_gate_shape_is_refused():
    m = tiny_model("bert")
    with pytest.raises(SubnetlabError, match="head gates have shape"):
        apply_gates(m.model, m.adapter, torch.ones(3, 3))


def test_values_round_trip(tmp_path, family):
    m = tiny_model(family)
    means = collect_means(m.model, m.adapter, [tiny_inputs(family)])
    means.save(tmp_path / "means.safetensors")
    back = ComponentValues.load(tmp_path / "means.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(means.heads + means.mlps, back.heads + back.mlps))
