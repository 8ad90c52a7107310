"""A generated shape/texture benchmark: objects whose shape is the class, drawn with class-correlated textures.

Each image is one object (a filled shape: circle, square, triangle, ...) on a
flat background. The object is painted with a two-colour, high-frequency
texture (stripes, checkerboard, dots, ...). The *label* is the shape's class.
``texture_correlation`` sets how often the texture is the one that belongs to
the label's class (1.0: texture predicts the class perfectly, the shortcut a
texture-biased model takes); otherwise it is another class's texture. Colours
are drawn at random per image and independently of the class, so that neither
the object's colour nor its mean colour says anything about the class: only
shape and texture do.

``shape_correlation`` < 1 does the mirror image: some images carry another
class's shape, so that texture becomes the more reliable cue. ``shapes`` and
``textures`` record, per image, which class's shape and texture it carries.

Three kinds of image, all seeded:

* ``textured`` (default): shape + texture (correlated with the shape's class);
* ``cue_conflict=True``: the texture of a *different* class, always
  (Geirhos et al., 2019): ``textures`` records which, so a prediction can be
  scored as following the shape (accuracy) or the texture (lost robustness);
* ``textured=False``: the object filled with the mean of its two texture
  colours -- what a perfect mean-pooling would produce (shape only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.images.imageset import ImageSet

SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond", "bar", "semicircle")
TEXTURES = ("stripes-h", "stripes-v", "checker", "dots", "stripes-diag", "stripes-anti", "grid", "zigzag")


def shape_mask(shape: str, size: int, cx: float, cy: float, r: float, aspect: float = 1.0) -> np.ndarray:
    """Boolean ``[size, size]`` mask of one shape centred at ``(cx, cy)`` with half-size ``r`` (pixels)."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    dx, dy = (xx - cx) / (r * aspect), (yy - cy) / r
    if shape == "circle":
        return dx ** 2 + dy ** 2 <= 1.0
    if shape == "square":
        return (np.abs(dx) <= 0.85) & (np.abs(dy) <= 0.85)
    if shape == "triangle":  # apex up
        return (dy <= 0.85) & (dy >= -0.95) & (np.abs(dx) <= (dy + 0.95) / 1.8 * 0.95)
    if shape == "cross":
        return ((np.abs(dx) <= 0.33) & (np.abs(dy) <= 1.0)) | ((np.abs(dy) <= 0.33) & (np.abs(dx) <= 1.0))
    if shape == "ring":
        d = dx ** 2 + dy ** 2
        return (d <= 1.0) & (d >= 0.4)
    if shape == "diamond":
        return np.abs(dx) + np.abs(dy) <= 1.05
    if shape == "bar":  # a wide horizontal bar
        return (np.abs(dx) <= 1.0) & (np.abs(dy) <= 0.4)
    if shape == "semicircle":  # flat side down
        return (dx ** 2 + dy ** 2 <= 1.0) & (dy <= 0.35)
    raise SubnetlabError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")


def texture_pattern(texture: str, size: int, period: int, phase: tuple[int, int]) -> np.ndarray:
    """Boolean ``[size, size]`` two-colour pattern (True = first colour), ``period`` pixels, shifted by ``phase``."""
    yy, xx = np.mgrid[0:size, 0:size]
    yy, xx = yy + phase[0], xx + phase[1]
    half = max(period // 2, 1)
    if texture == "stripes-h":
        return (yy // half) % 2 == 0
    if texture == "stripes-v":
        return (xx // half) % 2 == 0
    if texture == "checker":
        return ((xx // half) + (yy // half)) % 2 == 0
    if texture == "dots":
        return ((xx % period) < half) & ((yy % period) < half)
    if texture == "stripes-diag":
        return ((xx + yy) // half) % 2 == 0
    if texture == "stripes-anti":
        return ((xx - yy) // half) % 2 == 0
    if texture == "grid":
        return ((xx % period) == 0) | ((yy % period) == 0)
    if texture == "zigzag":
        return ((yy + np.abs((xx % period) - half)) // half) % 2 == 0
    raise SubnetlabError(f"unknown texture {texture!r}; choose from {', '.join(TEXTURES)}")


@dataclass(frozen=True)
class ShapeTextureConfig:
    """The benchmark's fixed design: which shapes and textures, image size, object scale, texture period."""

    num_classes: int = 4
    image_size: int = 32
    min_radius: float = 0.26  # object half-size as a fraction of the image
    max_radius: float = 0.40
    period: int = 4  # texture period in pixels (high frequency: finer than any object)
    min_contrast: float = 0.35  # min. distance between the object's mean colour and the background

    def __post_init__(self) -> None:
        if not 2 <= self.num_classes <= min(len(SHAPES), len(TEXTURES)):
            raise SubnetlabError(f"num_classes={self.num_classes}: must be between 2 and {len(SHAPES)}")
        if self.image_size < 12:
            raise SubnetlabError(f"image_size={self.image_size}: must be at least 12 pixels")
        if not 0 < self.min_radius <= self.max_radius < 0.5:
            raise SubnetlabError(f"radius range ({self.min_radius}, {self.max_radius}) must satisfy 0 < min <= max < 0.5")

    @property
    def classes(self) -> list[str]:
        return list(SHAPES[: self.num_classes])

    @property
    def textures(self) -> list[str]:
        return list(TEXTURES[: self.num_classes])


def _colours(rng: np.random.Generator, min_contrast: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two contrasting texture colours and a background far enough from their mean."""
    while True:
        c1, c2, bg = rng.uniform(0, 1, (3, 3))
        if np.linalg.norm(c1 - c2) > 0.6 and np.linalg.norm((c1 + c2) / 2 - bg) > min_contrast:
            return c1, c2, bg


def render(config: ShapeTextureConfig, shape: int, texture: int | None, rng: np.random.Generator) -> np.ndarray:
    """One ``[3, H, W]`` float image: shape class ``shape`` painted with texture class ``texture`` (None: flat)."""
    s = config.image_size
    r = rng.uniform(config.min_radius, config.max_radius) * s
    aspect = rng.uniform(0.85, 1.15)
    margin = r * max(aspect, 1.0)
    cx, cy = rng.uniform(margin, s - margin), rng.uniform(r, s - r)
    mask = shape_mask(SHAPES[shape], s, cx, cy, r, aspect)
    c1, c2, bg = _colours(rng, config.min_contrast)
    phase = (int(rng.integers(config.period)), int(rng.integers(config.period)))
    image = np.empty((s, s, 3))
    image[:] = bg
    if texture is None:
        image[mask] = (c1 + c2) / 2
    else:
        pattern = texture_pattern(TEXTURES[texture], s, config.period, phase)
        image[mask & pattern] = c1
        image[mask & ~pattern] = c2
    return image.transpose(2, 0, 1)


def generate(
    config: ShapeTextureConfig,
    n: int,
    seed: int,
    texture_correlation: float = 1.0,
    cue_conflict: bool = False,
    textured: bool = True,
    name: str = "shapes",
    shape_correlation: float = 1.0,
) -> ImageSet:
    """``n`` class-balanced images with their texture classes (-1 if flat) and shape classes.

    The label is the shape's class, except that with ``shape_correlation`` < 1
    a share of images carry another class's shape (the label then agrees with
    the texture only, if ``texture_correlation`` is 1): a pre-training set in
    which texture is the more reliable cue, as for ImageNet-trained CNNs.
    """
    if n < 1:
        raise SubnetlabError(f"n={n}: need at least one image")
    for label, value in (("texture_correlation", texture_correlation), ("shape_correlation", shape_correlation)):
        if not 0.0 <= value <= 1.0:
            raise SubnetlabError(f"{label}={value}: must be in [0, 1]")
    rng = np.random.default_rng(seed)
    k = config.num_classes
    labels = rng.permutation(np.arange(n) % k)
    images, textures, shapes = [], [], []
    for label in labels:
        shape = int(label) if shape_correlation >= 1.0 or rng.uniform() < shape_correlation else \
            int((label + rng.integers(1, k)) % k)
        if not textured:
            texture = None
        elif cue_conflict or rng.uniform() >= texture_correlation:
            texture = int((shape + rng.integers(1, k)) % k)  # another class's texture than the shape's
        else:
            texture = int(label)
        images.append(render(config, shape, texture, rng))
        textures.append(-1 if texture is None else texture)
        shapes.append(shape)
    kind = "cue-conflict" if cue_conflict else ("textured" if textured else "texture-free")
    meta = {"generator": "subnetlab.shapes/1", "kind": kind, "seed": str(seed),
            "texture_correlation": repr(texture_correlation), "shape_correlation": repr(shape_correlation),
            "textures": "\n".join(config.textures)}
    return ImageSet(torch.tensor(np.stack(images), dtype=torch.float32), torch.tensor(labels, dtype=torch.long),
                    config.classes, torch.tensor(textures, dtype=torch.long), name, meta,
                    torch.tensor(shapes, dtype=torch.long))


def generate_splits(config: ShapeTextureConfig, sizes: dict[str, int], seed: int,
                    correlations: dict[str, float] | None = None,
                    shape_correlations: dict[str, float] | None = None) -> dict[str, ImageSet]:
    """Named splits with independent seeds: ``cue-conflict`` and ``texture-free`` by name, others textured."""
    splits = {}
    correlations, shape_correlations = correlations or {}, shape_correlations or {}
    for i, (name, n) in enumerate(sizes.items()):
        sub_seed = int(np.random.default_rng([seed, i]).integers(2 ** 31))
        splits[name] = generate(config, n, sub_seed, correlations.get(name, 1.0),
                                cue_conflict=name == "cue-conflict", textured=name != "texture-free", name=name,
                                shape_correlation=shape_correlations.get(name, 1.0))
    return splits


def describe(config: ShapeTextureConfig) -> str:
    """One line for a report: classes, textures, scale."""
    pairs = ", ".join(f"{s}/{t}" for s, t in zip(config.classes, config.textures))
    return (f"{config.num_classes} shape classes with their textures ({pairs}); {config.image_size}x{config.image_size} "
            f"px, object half-size {config.min_radius:.2f}-{config.max_radius:.2f} of the image, texture period "
            f"{config.period} px")


__all__ = ["SHAPES", "TEXTURES", "ShapeTextureConfig", "shape_mask", "texture_pattern", "render", "generate",
           "generate_splits", "describe"]
