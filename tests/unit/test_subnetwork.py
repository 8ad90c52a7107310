"""The Subnetwork value and its file."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from subnetlab.errors import SubnetlabError
from subnetlab.subnetwork import Subnetwork
from tests.conftest import tiny_model


def _random(adapter, seed: int) -> Subnetwork:
    g = torch.Generator().manual_seed(seed)
    heads = (torch.rand(adapter.num_layers, adapter.num_heads, generator=g) > 0.5).float()
    return Subnetwork.structured(adapter, heads, torch.tensor([1.0, 0.0]), method="test", seed=seed,
                                 target_sparsity=0.5)


def test_save_load_round_trip_is_bit_exact(tmp_path, family):
    m = tiny_model(family)
    sub = _random(m.adapter, 0)
    sub.save(tmp_path / "s.safetensors")
    back = Subnetwork.load(tmp_path / "s.safetensors", adapter=m.adapter)
    assert torch.equal(back.heads, sub.heads) and torch.equal(back.mlps, sub.mlps)
    assert (back.method, back.seed, back.target_sparsity, back.sparsity) == ("test", 0, 0.5, sub.sparsity)
    with safe_open(str(tmp_path / "s.safetensors"), "pt") as f:
        meta = f.metadata()
    for key in ("format", "kind", "architecture", "fingerprint", "method", "seed", "target_sparsity", "sparsity", "ablation"):
        assert key in meta


def test_weight_subnetwork_round_trip(tmp_path):
    m = tiny_model("gpt2")
    names = m.adapter.weight_matrices()
    g = torch.Generator().manual_seed(1)
    masks = {n: (torch.rand(m.adapter.parameter(n).shape, generator=g) > 0.7) for n in names}
    sub = Subnetwork.from_weight_masks(m.adapter, masks, method="cs")
    sub.save(tmp_path / "w.safetensors")
    back = Subnetwork.load(tmp_path / "w.safetensors", adapter=m.adapter)
    assert all(torch.equal(back.weights[n], sub.weights[n]) for n in names)
    kept = sum(int(v.sum()) for v in masks.values())
    total = sum(v.numel() for v in masks.values())
    assert back.sparsity == pytest.approx(1 - kept / total)


def test_fingerprint_refuses_other_architecture(tmp_path):
    small = tiny_model("bert")
    sub = _random(small.adapter, 0)
    sub.save(tmp_path / "s.safetensors")
    wider = tiny_model("bert", hidden=48)
    with pytest.raises(SubnetlabError, match="fingerprint"):
        Subnetwork.load(tmp_path / "s.safetensors", adapter=wider.adapter)
    other = tiny_model("roberta")
    with pytest.raises(SubnetlabError, match="different architecture: a bert model, and this model is a roberta"):
        sub.check(other.adapter)


def test_sparsity_by_count_and_by_parameters():
    m = tiny_model("bert")  # 2 layers x 4 heads, hidden 32, MLP 64
    sub = Subnetwork.from_names(m.adapter, ["L0.H0", "L1.H3", "L1.MLP"])
    assert sub.sparsity == pytest.approx(1 - 3 / 10)
    per_head = 3 * (8 * 32 + 8) + 32 * 8  # q, k, v rows with biases + out-projection columns
    per_mlp = (64 * 32 + 64) + (32 * 64 + 32)
    assert m.adapter.params_per_head()[0, 0] == per_head
    assert m.adapter.params_per_mlp()[0] == per_mlp
    kept = 2 * per_head + per_mlp
    assert sub.parameter_sparsity(m.adapter) == pytest.approx(1 - kept / (8 * per_head + 2 * per_mlp))
    assert sub.kept_names() == ["L0.H0", "L1.H3", "L1.MLP"]


def test_gqa_heads_share_key_value_parameters():
    m = tiny_model("llama")  # 4 heads, 2 key/value heads, head dim 8, hidden 32, no biases
    per_head = 32 * 8 + 2 * (8 * 32) / 2 + 32 * 8
    assert m.adapter.params_per_head()[0, 0] == pytest.approx(per_head)


def test_set_operations():
    m = tiny_model("bert")
    a = Subnetwork.from_names(m.adapter, ["L0.H0", "L0.H1", "L1.MLP"])
    b = Subnetwork.from_names(m.adapter, ["L0.H1", "L1.H2", "L1.MLP"])
    assert (a & b).kept_names() == ["L0.H1", "L1.MLP"]
    assert (a | b).kept_names() == ["L0.H0", "L0.H1", "L1.H2", "L1.MLP"]
    assert a.jaccard(b) == pytest.approx(2 / 4)


def test_bad_inputs(tmp_path):
    m = tiny_model("bert")
    with pytest.raises(SubnetlabError, match="unknown component"):
        Subnetwork.from_names(m.adapter, ["L9.H0"])
    with pytest.raises(SubnetlabError, match="no such file"):
        Subnetwork.load(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a file")
    with pytest.raises(SubnetlabError, match="not a readable safetensors"):
        Subnetwork.load(tmp_path / "junk.safetensors")


def test_unsupported_model_lists_families():
    from transformers import T5Config, T5Model

    from subnetlab.models import get_adapter

    model = T5Model(T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=50))
    with pytest.raises(SubnetlabError, match="supported families: bert"):
        get_adapter(model)
