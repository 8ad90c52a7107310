"""The image training loop: what trains, what stays frozen, the schedule, the curve."""

from __future__ import annotations

import math

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.shape_bias.training import TrainConfig, freeze_all_but, lr_factor, train_classifier
from subnetlab.intervene import mask_weights
from subnetlab.models.vision import build_vision_model, classifier_parameters, resnet_config, vision_weight_matrices
from subnetlab.tasks.images.shapes import ShapeTextureConfig, generate

MEAN, STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)


def _setup():
    data = generate(ShapeTextureConfig(num_classes=2, image_size=16), 32, seed=0)
    model = build_vision_model(resnet_config(2, hidden_sizes=(8, 16), depths=(1, 1), embedding_size=8), seed=0).model
    return data, model


def test_linear_fine_tuning_changes_only_the_classifier_and_keeps_batchnorm_statistics():
    data, model = _setup()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    head = classifier_parameters(model)
    freeze_all_but(model, head)
    cfg = TrainConfig(steps=3, batch_size=8, lr=0.1, eval_every=10)
    train_classifier(model, data, cfg, MEAN, STD, seed=0, train_mode=False)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == set(head)  # running means/vars included: they did not move


def test_transfer_parametrization_trains_new_weights_only_and_curve_has_every_eval():
    data, model = _setup()
    names = vision_weight_matrices(model)
    g = torch.Generator().manual_seed(0)
    masks = {n: (torch.rand(model.get_parameter(n).shape, generator=g) > 0.5).float() for n in names}
    kept = {n: torch.randn(model.get_parameter(n).shape, generator=g) for n in names}
    with mask_weights(model, masks, kept=kept):
        cfg = TrainConfig(steps=4, batch_size=8, lr=0.1, eval_every=2)
        curve = train_classifier(model, data, cfg, MEAN, STD, seed=1, eval_sets={"original": data})
        for n in names:
            module = model.get_submodule(n.rsplit(".", 1)[0])
            w = module.weight.detach()
            assert torch.equal(w[masks[n].bool()], kept[n][masks[n].bool()])  # frozen part untouched
    assert [r["step"] for r in curve] == [0, 2, 4]
    assert all(0.0 <= r["original"] <= 1.0 for r in curve)


def test_schedule_and_bad_settings():
    cfg = TrainConfig(steps=10, warmup=2)
    assert lr_factor(0, cfg) == 0.5 and lr_factor(1, cfg) == 1.0
    assert lr_factor(2, cfg) == pytest.approx(1.0) and lr_factor(10, cfg) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(6, cfg) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    with pytest.raises(SubnetlabError):
        TrainConfig(steps=0)
    with pytest.raises(SubnetlabError):
        TrainConfig(optimizer="lion")
    _, model = _setup()
    with pytest.raises(SubnetlabError):
        freeze_all_but(model, ["classifier.nope"])
