"""Shape-bias metrics (Zhang, Lepori, Pavlick 2024, Table 1; Geirhos et al. 2019).

* accuracy on original images and on mean-pooled (texture-free) images;
* on cue-conflict images (the shape of one class, the texture of another):
  **accuracy** -- the fraction classified by *shape* (prediction = shape class);
  **robustness** -- the fraction *not* classified by the misleading texture
  (prediction != texture class);
* Geirhos et al.'s **shape bias** -- among cue-conflict decisions that follow
  either cue, the fraction that follow shape: ``shape / (shape + texture)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.images.imageset import ImageSource, iter_batches, normalize


def accuracy(predictions: Tensor, labels: Tensor) -> float:
    """Fraction of ``predictions [N]`` equal to ``labels [N]``."""
    if predictions.shape != labels.shape or predictions.numel() == 0:
        raise SubnetlabError(f"accuracy: predictions {tuple(predictions.shape)} vs labels {tuple(labels.shape)}")
    return float((predictions == labels).double().mean())


def cue_conflict_metrics(predictions: Tensor, shape_labels: Tensor, texture_labels: Tensor) -> dict[str, float]:
    """``accuracy`` (by shape), ``robustness`` (not by texture), ``texture_rate``, ``shape_bias`` on cue-conflict images.

    Every image must have a texture class different from its shape class: an
    image whose cues agree cannot tell shape from texture.
    """
    if not predictions.shape == shape_labels.shape == texture_labels.shape or predictions.numel() == 0:
        raise SubnetlabError(f"cue-conflict metrics: shapes {tuple(predictions.shape)}, {tuple(shape_labels.shape)}, "
                             f"{tuple(texture_labels.shape)} must be equal and non-empty")
    if bool((shape_labels == texture_labels).any()) or bool((texture_labels < 0).any()):
        raise SubnetlabError("cue-conflict metrics need every texture class set and different from the shape class")
    by_shape = (predictions == shape_labels).double()
    by_texture = (predictions == texture_labels).double()
    either = float((by_shape + by_texture).sum())
    return {
        "accuracy": float(by_shape.mean()),
        "robustness": float((predictions != texture_labels).double().mean()),
        "texture_rate": float(by_texture.mean()),
        "shape_bias": float(by_shape.sum()) / either if either else float("nan"),
    }


@torch.no_grad()
def predict(model: nn.Module, data: ImageSource | Tensor, mean: Sequence[float], std: Sequence[float],
            batch_size: int = 256) -> Tensor:
    """Argmax class of every image (a source, or pixels ``[N, 3, H, W]`` in 0..1), in eval mode, restored after."""
    was_training = model.training
    model.eval()
    try:
        if isinstance(data, Tensor):
            chunks = (data[i:i + batch_size] for i in range(0, data.shape[0], batch_size))
        else:
            chunks = (images for images, _ in iter_batches(data, batch_size))
        preds = [model(pixel_values=normalize(images, mean, std)).logits.argmax(-1) for images in chunks]
    finally:
        model.train(was_training)
    return torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)


def evaluate_shape_bias(model: nn.Module, splits: dict[str, ImageSource], mean: Sequence[float],
                        std: Sequence[float], batch_size: int = 256) -> dict[str, float]:
    """Table 1's columns for one model: ``{split: accuracy}``, plus ``cue-conflict/accuracy`` etc.

    A split named ``cue-conflict`` is scored with ``cue_conflict_metrics``; every
    other split (``original``, ``mean-pooled``, ``texture-free`` ...) by accuracy.
    """
    row: dict[str, float] = {}
    for name, data in splits.items():
        preds = predict(model, data, mean, std, batch_size)
        if name == "cue-conflict":
            for key, value in cue_conflict_metrics(preds, data.labels, data.textures).items():
                row[f"cue-conflict/{key}"] = value
        else:
            row[name] = accuracy(preds, data.labels)
    return row


__all__ = ["accuracy", "cue_conflict_metrics", "predict", "evaluate_shape_bias"]
