"""Issue 16 item 7: the released vision code's choices as shape-bias settings, each against an independent computation."""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F

from subnetlab.errors import SubnetlabError
from subnetlab.experiments import settings_for
from subnetlab.experiments.shape_bias import reproduce
from subnetlab.experiments.shape_bias.report import VISION_CODE_NOTES, vision_code_notes
from subnetlab.experiments.shape_bias.steps import discovery_targets, transfer_start
from subnetlab.experiments.shape_bias.training import TrainConfig, class_weights, train_classifier
from subnetlab.models.vision import build_vision_model, resnet_config, vision_weight_matrices, vit_config
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.images.shapes import ShapeTextureConfig, generate

pytestmark = pytest.mark.usefixtures("one_thread")
MEAN, STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)


def _vit(seed: int = 0):
    return build_vision_model(vit_config(3, image_size=16, patch_size=8, hidden_size=16, layers=2, heads=2), seed).model


def _resnet(seed: int = 0):
    return build_vision_model(resnet_config(3, hidden_sizes=(8, 16), depths=(1, 1), embedding_size=8), seed).model


def test_class_weights_are_inverse_frequencies_at_unit_norm():
    labels = torch.tensor([0, 0, 0, 1, 2, 2])
    w = class_weights(labels, 4)
    raw = torch.tensor([6 / 3, 6 / 1, 6 / 2, 0.0])  # N / n_c; class 3 never appears
    assert torch.allclose(w, raw / raw.norm())
    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    per_row = -logits.log_softmax(-1)[torch.arange(6), labels]
    by_hand = (w[labels] * per_row).sum() / w[labels].sum()  # the weighted mean torch's CrossEntropyLoss takes
    assert float(F.cross_entropy(logits, labels, weight=w)) == pytest.approx(float(by_hand), rel=1e-6)


def test_class_weighted_training_step_follows_the_weighted_loss():
    data = generate(ShapeTextureConfig(num_classes=2, image_size=16), 12, seed=0)
    data.labels[:9] = 0  # unbalanced: 9 of class 0, 3 of class 1
    data.labels[9:] = 1
    model = build_vision_model(resnet_config(2, hidden_sizes=(8, 16), depths=(1, 1), embedding_size=8), 0).model
    reference = copy.deepcopy(model)
    cfg = TrainConfig(steps=1, batch_size=12, lr=0.1, momentum=0.0, weight_decay=0.0, eval_every=10,
                      class_weights=True)
    # the one batch holds every image, in the order the training stream draws it: the weighted mean is order-free
    images = data.pixels(torch.arange(12))
    reference.train()
    logits = reference(pixel_values=(images - 0.5) / 0.5).logits
    w = torch.tensor([12 / 9, 12 / 3])
    per_row = -logits.log_softmax(-1)[torch.arange(12), data.labels]
    loss = (w[data.labels] * per_row).sum() / w[data.labels].sum()
    grads = torch.autograd.grad(loss, list(reference.parameters()))
    before = [p.detach().clone() for p in model.parameters()]
    train_classifier(model, data, cfg, MEAN, STD, seed=0)
    for p0, g, p1 in zip(before, grads, model.parameters()):
        assert torch.allclose(p1.detach(), p0 - 0.1 * g, atol=1e-5)


def test_discovery_masks_the_vit_classifier_only_when_asked():
    vit, resnet = _vit(), _resnet()
    assert discovery_targets(vit) == vision_weight_matrices(vit)
    assert discovery_targets(vit, mask_classifier=True) == [*vision_weight_matrices(vit), "classifier.weight"]
    assert "classifier.1.weight" in discovery_targets(resnet, mask_classifier=True)
    assert not any(n.startswith("classifier") for n in discovery_targets(resnet))


@pytest.mark.parametrize("reinit", ["all", "masked"])
def test_transfer_reinit_masked_copies_everything_outside_the_masked_matrices(reinit):
    base = _vit(seed=5)  # another seed than the fresh model's (seed + 1)
    names = discovery_targets(base, mask_classifier=True)
    g = torch.Generator().manual_seed(0)
    masks = {n: torch.rand(base.get_parameter(n).shape, generator=g) < 0.2 for n in names}
    sub = Subnetwork.from_weight_masks(reproduce_adapter(base), masks, method="continuous-sparsification")
    tm = transfer_start("subtask-induction", base, sub, seed=0, reinit=reinit)
    for name, mask in masks.items():
        assert torch.equal(tm.effective_weight(name)[mask], base.get_parameter(name).detach()[mask])
    outside = [n for n, _ in base.named_parameters() if n not in masks]
    assert any("layernorm" in n for n in outside) and any("position_embeddings" in n for n in outside)
    copied = [torch.equal(tm.model.get_parameter(n).detach(), base.get_parameter(n).detach()) for n in outside]
    # masked: every parameter outside the masks is the base model's (biases of masked layers included, as
    # NeuroSurgeon's _init_subnet_transfer leaves them); all: a fresh draw (layer-norm ones may coincide)
    if reinit == "masked":
        assert all(copied)
    else:
        assert not all(copied)
        assert not torch.equal(tm.model.get_parameter("vit.embeddings.position_embeddings").detach(),
                               base.get_parameter("vit.embeddings.position_embeddings").detach())
    scratch = transfer_start("scratch", base, sub, seed=0, reinit=reinit)
    assert scratch.handle is None and not scratch.frozen


def reproduce_adapter(model):
    from subnetlab.models.vision import vision_adapter

    return vision_adapter(model)


def test_paper_preset_carries_the_released_choices_and_bad_values_are_refused():
    paper, demo = reproduce.PRESETS["paper"], reproduce.PRESETS["demo"]
    assert paper["vit"]["discovery"]["mask_classifier"] and not paper["resnet"]["discovery"]["mask_classifier"]
    for family in ("resnet", "vit"):
        assert paper[family]["transfer_reinit"] == "masked" and paper[family]["class_weighted_loss"]
        assert paper[family]["discovery"]["keep"] == "best-latest"
        assert demo[family]["transfer_reinit"] == "all" and not demo[family]["class_weighted_loss"]
        assert demo[family]["discovery"]["keep"] == "best" and not demo[family]["discovery"]["mask_classifier"]
    with pytest.raises(SubnetlabError, match="transfer_reinit"):
        settings_for(reproduce, "demo", {"vit": {**demo["vit"], "transfer_reinit": "some"}})
    with pytest.raises(SubnetlabError, match="keep"):
        settings_for(reproduce, "demo", {"resnet": {**demo["resnet"], "discovery": {**demo["resnet"]["discovery"],
                                                                                  "keep": "first"}}})


@pytest.mark.parametrize("preset", ["demo", "paper"])
def test_report_notes_list_every_difference_with_its_released_file(preset):
    settings = settings_for(reproduce, preset)
    notes = vision_code_notes(settings)
    assert len(notes) == len(VISION_CODE_NOTES) >= 8
    topics = " ".join(t for t, _, _ in VISION_CODE_NOTES).lower()
    for topic in ("masked layers", "mean-pooled", "transfer", "conditions", "cue-conflict"):
        assert topic in topics
    for note in notes:
        assert re.search(r"`vision/[\w/.-]+\.(py|yaml)`", note), note
        assert "This run: " in note
    text = "\n".join(notes)
    reinit = settings.vit["transfer_reinit"]
    assert f"vit `{reinit}`" in text
