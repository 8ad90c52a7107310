"""Vision models: weight masks over every ResNet convolution and every ViT matrix plus the patch embedding."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import mask_weights
from subnetlab.models.vision import (
    ResNetAdapter,
    build_vision_model,
    classifier_parameters,
    resnet_config,
    vision_adapter,
    vision_weight_matrices,
    vit_config,
)
from subnetlab.subnetwork import Subnetwork


def _tiny(family: str):
    if family == "resnet":
        cfg = resnet_config(3, hidden_sizes=(8, 16), depths=(1, 1), embedding_size=8)
    else:
        cfg = vit_config(3, image_size=16, patch_size=4, hidden_size=16, layers=2, heads=2)
        cfg.initializer_range = 0.3  # every matrix matters, so zeroing any of them shows
    return build_vision_model(cfg, seed=0)


def _pixels(seed: int = 0) -> torch.Tensor:
    return torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_resnet_masks_cover_every_convolution_and_nothing_else():
    m = _tiny("resnet").model
    names = vision_weight_matrices(m)
    convs = [n for n, mod in m.named_modules() if isinstance(mod, nn.Conv2d)]
    assert names == [f"{c}.weight" for c in convs]
    assert len(names) == 1 + 2 * 2 + 1  # stem, two convs per block, one projection shortcut
    assert not any("classifier" in n or "normalization" in n for n in names)


def test_vit_masks_add_patch_embedding_to_attention_and_mlp():
    loaded = _tiny("vit")
    names = vision_weight_matrices(loaded.model)
    assert names[0] == "vit.embeddings.patch_embeddings.projection.weight"
    assert names[1:] == loaded.adapter.weight_matrices()
    assert len(names) == 1 + 2 * 6  # patch embedding + (q, k, v, o, fc1, fc2) per layer


@pytest.mark.parametrize("family", ["resnet", "vit"])
def test_mask_one_reproduces_outputs_and_mask_zero_changes_them(family):
    m = _tiny(family).model
    x = _pixels()
    names = vision_weight_matrices(m)
    with torch.no_grad():
        plain = m(pixel_values=x).logits
        with mask_weights(m, {n: torch.ones_like(m.get_parameter(n)) for n in names}):
            ones = m(pixel_values=x).logits
        with mask_weights(m, {n: torch.zeros_like(m.get_parameter(n)) for n in names}):
            zeros = m(pixel_values=x).logits
        # zeroing a single matrix (each one in turn) changes the output too: every mask target is live
        for name in names:
            with mask_weights(m, {name: torch.zeros_like(m.get_parameter(name))}):
                assert not torch.allclose(m(pixel_values=x).logits, plain, atol=1e-6), name
        after = m(pixel_values=x).logits
    assert torch.equal(plain, ones)
    assert (plain - zeros).abs().max() > 1e-3
    assert torch.equal(plain, after)  # removing masks leaves no trace


@pytest.mark.parametrize("family", ["resnet", "vit"])
def test_partial_mask_equals_manually_zeroed_weights(family):
    loaded = _tiny(family)
    m = loaded.model
    x = _pixels(1)
    g = torch.Generator().manual_seed(2)
    masks = {n: (torch.rand(m.get_parameter(n).shape, generator=g) > 0.5).float() for n in vision_weight_matrices(m)}
    with torch.no_grad():
        with mask_weights(m, masks):
            masked = m(pixel_values=x).logits
        manual = build_vision_model(m.config, seed=0).model
        for n, mask in masks.items():
            manual.get_parameter(n).mul_(mask)
        expected = manual(pixel_values=x).logits
    assert torch.allclose(masked, expected, atol=1e-5)


def test_weight_subnetwork_file_roundtrip_and_fingerprint_on_resnet(tmp_path):
    loaded = _tiny("resnet")
    adapter = loaded.adapter
    assert isinstance(adapter, ResNetAdapter) and adapter.num_layers == 2
    names = vision_weight_matrices(loaded.model)
    masks = {n: (adapter.parameter(n) > 0).float() for n in names}
    sub = Subnetwork.from_weight_masks(adapter, masks, method="continuous-sparsification")
    sub.save(tmp_path / "s.safetensors")
    back = Subnetwork.load(tmp_path / "s.safetensors", adapter=adapter)
    assert back.architecture == "resnet" and set(back.weights) == set(names)
    wider = build_vision_model(resnet_config(3, hidden_sizes=(8, 32), depths=(1, 1), embedding_size=8)).adapter
    with pytest.raises(SubnetlabError):
        back.check(wider)


def test_classifier_parameters_and_unsupported_models():
    m = _tiny("resnet").model
    assert classifier_parameters(m) == ["classifier.1.weight", "classifier.1.bias"]
    assert classifier_parameters(_tiny("vit").model) == ["classifier.weight", "classifier.bias"]
    from tests.conftest import tiny_model

    with pytest.raises(SubnetlabError):
        vision_adapter(tiny_model("bert").model)
    with pytest.raises(SubnetlabError):
        vit_config(3, image_size=15, patch_size=4)
