"""Shape-bias metrics on hand-built predictions, and evaluation of a model on named splits."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from subnetlab.analysis.shape_bias import accuracy, cue_conflict_metrics, evaluate_shape_bias, predict
from subnetlab.errors import SubnetlabError
from subnetlab.tasks.images.imageset import ConcatSource, ImageSet, concat


def test_cue_conflict_metrics_by_hand():
    shape = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    texture = torch.tensor([1, 2, 3, 0, 2, 3, 0, 1])
    # by shape: 0, 1, 2 (3 of 8); by texture: 3, 4 (2 of 8); neither: 5, 6, 7
    preds = torch.tensor([0, 1, 2, 0, 2, 0, 1, 2])
    m = cue_conflict_metrics(preds, shape, texture)
    assert m["accuracy"] == 3 / 8
    assert m["texture_rate"] == 2 / 8
    assert m["robustness"] == 6 / 8
    assert m["shape_bias"] == 3 / 5


def test_cue_conflict_extremes_and_undefined_shape_bias():
    shape, texture = torch.tensor([0, 1]), torch.tensor([1, 0])
    assert cue_conflict_metrics(shape, shape, texture) == {"accuracy": 1.0, "robustness": 1.0, "texture_rate": 0.0,
                                                           "shape_bias": 1.0}
    by_texture = cue_conflict_metrics(texture, shape, texture)
    assert by_texture["accuracy"] == 0.0 and by_texture["robustness"] == 0.0 and by_texture["shape_bias"] == 0.0
    neither = cue_conflict_metrics(torch.tensor([2, 2]), shape, texture)
    assert neither["robustness"] == 1.0 and neither["accuracy"] == 0.0 and math.isnan(neither["shape_bias"])


def test_metrics_refuse_bad_inputs():
    with pytest.raises(SubnetlabError):
        cue_conflict_metrics(torch.tensor([0]), torch.tensor([1]), torch.tensor([1]))  # cues agree
    with pytest.raises(SubnetlabError):
        cue_conflict_metrics(torch.tensor([0]), torch.tensor([1]), torch.tensor([-1]))  # no texture
    with pytest.raises(SubnetlabError):
        accuracy(torch.tensor([0, 1]), torch.tensor([0]))


class _MeanColourClassifier(nn.Module):
    """Predicts class 1 when the red channel's mean exceeds green's, else 0 (a transparent stand-in model)."""

    def forward(self, pixel_values: torch.Tensor):
        means = pixel_values.mean((2, 3))
        logits = torch.stack([means[:, 1], means[:, 0]], 1)
        return type("Out", (), {"logits": logits})()


def _images(colours: list[int]) -> torch.Tensor:
    imgs = torch.zeros(len(colours), 3, 4, 4)
    for i, c in enumerate(colours):
        imgs[i, c] = 1.0  # red (0) or green (1)
    return imgs


def test_evaluate_shape_bias_rows_match_hand_counts():
    model = _MeanColourClassifier()
    classes = ["green", "red"]
    # predictions: red image -> 1, green image -> 0
    original = ImageSet(_images([0, 1, 0, 1]), torch.tensor([1, 0, 0, 1]), classes)  # 2 of 4 right
    cue = ImageSet(_images([0, 0, 1]), torch.tensor([1, 0, 0]), classes, textures=torch.tensor([0, 1, 1]))
    row = evaluate_shape_bias(model, {"original": original, "cue-conflict": cue}, (0, 0, 0), (1, 1, 1), batch_size=3)
    # cue preds [1, 1, 0]: by shape [1, 0, 1] -> 2/3; by texture [0, 1, 0] -> 1/3
    assert row["original"] == 0.5
    assert row["cue-conflict/accuracy"] == pytest.approx(2 / 3)
    assert row["cue-conflict/robustness"] == pytest.approx(2 / 3)
    assert row["cue-conflict/shape_bias"] == pytest.approx(2 / 3)


def test_mixture_source_reads_from_each_part_in_order():
    classes = ["green", "red"]
    a = ImageSet(_images([0, 1]), torch.tensor([1, 0]), classes, name="a")
    b = ImageSet(_images([1, 1, 0]), torch.tensor([0, 0, 1]), classes, name="b")
    lazy = ConcatSource([a, b], "mix")
    eager = concat([a, b], "mix")
    idx = torch.tensor([4, 0, 2, 1, 3])
    assert torch.equal(lazy.pixels(idx), eager.pixels(idx))
    assert torch.equal(lazy.labels, torch.tensor([1, 0, 0, 0, 1]))
    model = _MeanColourClassifier()
    assert torch.equal(predict(model, lazy, (0, 0, 0), (1, 1, 1), batch_size=2), torch.tensor([1, 0, 0, 0, 1]))
    with pytest.raises(SubnetlabError):
        ConcatSource([a, ImageSet(_images([0]), torch.tensor([0]), ["x", "y"])], "bad")
