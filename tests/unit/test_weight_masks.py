"""Weight-level masks by parametrization."""

from __future__ import annotations

import torch

from subnetlab.intervene import mask_weights
from tests.conftest import output_of, tiny_inputs, tiny_model


def test_ones_mask_is_identity_and_removal_leaves_no_trace(family):
    m = tiny_model(family)
    x = tiny_inputs(family)
    names = m.adapter.weight_matrices()
    before = {k: v.clone() for k, v in m.model.state_dict().items()}
    classes = {n: type(mod) for n, mod in m.model.named_modules()}
    with torch.no_grad():
        plain = output_of(m.model, x)
        with mask_weights(m.model, {n: torch.ones_like(m.adapter.parameter(n)) for n in names}):
            masked = output_of(m.model, x)
    assert torch.equal(plain, masked)
    after = m.model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert {n: type(mod) for n, mod in m.model.named_modules()} == classes


def test_mask_multiplies_weight():
    m = tiny_model("bert")
    name = m.adapter.weight_matrices()[0]
    w = m.adapter.parameter(name).detach().clone()
    mask = (torch.arange(w.numel()).reshape(w.shape) % 3 == 0).float()
    with mask_weights(m.model, {name: mask}):
        module = m.model.get_submodule(name.rsplit(".", 1)[0])
        assert torch.equal(module.weight, mask * w)


def test_transfer_mix_trains_only_new_weights():
    m = tiny_model("gpt2")
    x = tiny_inputs("gpt2")
    name = m.adapter.weight_matrices()[0]
    kept = m.adapter.parameter(name).detach().clone()
    mask = (torch.rand(kept.shape, generator=torch.Generator().manual_seed(0)) > 0.5).float()
    with mask_weights(m.model, {name: mask}, kept={name: kept}) as masks:
        module = m.model.get_submodule(name.rsplit(".", 1)[0])
        new = module.parametrizations.weight.original
        with torch.no_grad():
            new.normal_(generator=torch.Generator().manual_seed(1))
        expected = mask * kept + (1 - mask) * new.detach()
        assert torch.equal(module.weight, expected)
        output_of(m.model, x).sum().backward()
        assert torch.all(new.grad[mask.bool()] == 0) and new.grad[~mask.bool()].abs().sum() > 0
        masks.remove(bake=True)
    assert torch.equal(m.adapter.parameter(name).detach(), expected)
