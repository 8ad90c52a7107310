"""The shape/texture generator: declared shape and texture classes are really drawn, seeds reproduce."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.images.imageset import ImageSet, concat
from subnetlab.tasks.images.shapes import (
    ShapeTextureConfig,
    generate,
    generate_splits,
    shape_mask,
    texture_pattern,
)

CFG = ShapeTextureConfig(num_classes=6, image_size=32)


def _object_mask(img: torch.Tensor) -> torch.Tensor:
    """Pixels that differ from the background colour (read at the corner, always background)."""
    bg = img[:, 0, 0].view(3, 1, 1)
    return (img - bg).abs().sum(0) > 1e-6


def _best_shape(mask: np.ndarray, k: int) -> int:
    """Which class's shape, fitted over a grid of sizes, aspects and vertical offsets, overlaps the object best.

    The fit is a brute-force search (intersection over union), independent of how the generator
    places objects: only the shapes' definitions are shared.
    """
    ys, xs = np.nonzero(mask)
    cx, cy = (xs.min() + xs.max() + 1) / 2, (ys.min() + ys.max() + 1) / 2
    r, aspect, dy = np.meshgrid(np.linspace(3, 16, 27), [0.85, 0.95, 1.0, 1.05, 1.15], np.linspace(-0.35, 0.35, 8))
    r, aspect, dy = (a.reshape(-1, 1, 1) for a in (r, aspect, dy))
    scores = []
    for c in range(k):
        cands = shape_mask(CFG.classes[c], 32, cx, cy + dy * r, r, aspect)  # [P, 32, 32], broadcast
        inter = (cands & mask).sum((1, 2))
        union = (cands | mask).sum((1, 2))
        scores.append((inter / union).max())
    return int(np.argmax(scores))


def _best_texture(img: torch.Tensor, mask: np.ndarray, k: int) -> int:
    """Which texture pattern (any phase) splits the object's two colours exactly."""
    colours = img.permute(1, 2, 0).numpy()[mask]
    first = np.all(np.isclose(colours, colours[0]), axis=1)
    for t in range(k):
        for py in range(CFG.period):
            for px in range(CFG.period):
                pat = texture_pattern(CFG.textures[t], 32, CFG.period, (py, px))[mask]
                if np.array_equal(pat, first) or np.array_equal(pat, ~first):
                    return t
    return -1


def test_images_have_declared_shape_and_texture_classes():
    data = generate(CFG, 12, seed=3, texture_correlation=0.5)
    assert data.images.shape == (12, 3, 32, 32) and data.images.min() >= 0 and data.images.max() <= 1
    assert torch.equal(data.shapes, data.labels)
    for i in range(len(data)):
        mask = _object_mask(data.images[i]).numpy()
        assert _best_shape(mask, 6) == int(data.labels[i])
        assert _best_texture(data.images[i], mask, 6) == int(data.textures[i])


def test_shape_correlation_makes_texture_the_reliable_cue():
    data = generate(CFG, 60, seed=5, texture_correlation=1.0, shape_correlation=0.75)
    assert torch.equal(data.textures, data.labels)  # texture always names the label
    off = data.shapes != data.labels
    assert 0.1 < float(off.double().mean()) < 0.45
    for i in off.nonzero().squeeze(1)[:4].tolist():  # the drawn shape is the recorded one, not the label's
        mask = _object_mask(data.images[i]).numpy()
        assert _best_shape(mask, 6) == int(data.shapes[i]) != int(data.labels[i])


def test_cue_conflict_and_texture_free_images():
    cc = generate(CFG, 30, seed=1, cue_conflict=True)
    assert bool((cc.textures != cc.labels).all()) and bool((cc.textures >= 0).all())
    flat = generate(CFG, 6, seed=2, textured=False)
    assert bool((flat.textures == -1).all())
    for i in range(len(flat)):
        img = flat.images[i]
        mask = _object_mask(img)
        assert torch.unique(img[:, mask], dim=1).shape[1] == 1  # one flat colour on the object
        assert _best_shape(mask.numpy(), 6) == int(flat.labels[i])


def test_texture_correlation_sets_the_agreement_rate_and_seeds_reproduce():
    agree = generate(CFG, 300, seed=0, texture_correlation=1.0)
    assert bool((agree.textures == agree.labels).all())
    half = generate(CFG, 600, seed=0, texture_correlation=0.5)
    rate = float((half.textures == half.labels).double().mean())
    assert 0.4 < rate < 0.6
    assert torch.bincount(half.labels).tolist() == [100] * 6  # class-balanced
    again = generate(CFG, 600, seed=0, texture_correlation=0.5)
    assert torch.equal(half.images, again.images) and torch.equal(half.textures, again.textures)
    splits = generate_splits(CFG, {"a": 10, "b": 10, "cue-conflict": 10, "texture-free": 10}, seed=0)
    assert not torch.equal(splits["a"].images, splits["b"].images)
    assert bool((splits["cue-conflict"].textures != splits["cue-conflict"].labels).all())
    assert bool((splits["texture-free"].textures == -1).all())


def test_image_set_save_load_roundtrip(tmp_path):
    data = generate(CFG, 8, seed=0, cue_conflict=True, name="cc")
    data.save(tmp_path / "cc.safetensors")
    back = ImageSet.load(tmp_path / "cc.safetensors")
    assert back.classes == data.classes and back.name == "cc"
    assert torch.equal(back.labels, data.labels) and torch.equal(back.textures, data.textures)
    assert torch.equal(back.shapes, data.shapes)
    assert (back.images - data.images).abs().max() <= 0.5 / 255 + 1e-6
    both = concat([data, back], "mix")
    assert len(both) == 16 and both.textures.shape == (16,)


def test_bad_configs_are_refused():
    with pytest.raises(SubnetlabError):
        ShapeTextureConfig(num_classes=1)
    with pytest.raises(SubnetlabError):
        ShapeTextureConfig(min_radius=0.4, max_radius=0.3)
    with pytest.raises(SubnetlabError):
        generate(CFG, 5, seed=0, texture_correlation=1.5)
    with pytest.raises(SubnetlabError):
        shape_mask("hexagon", 8, 4, 4, 2)
