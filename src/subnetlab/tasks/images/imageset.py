"""Image classification data: the ``ImageSet`` value, normalisation, and image folders.

Vision tasks do not fit the tokenized ``Task`` API (no tokenizer, no text), so
they use one small value: a float tensor of images ``[N, 3, H, W]`` in [0, 1],
the class of each image (``labels``), and, for cue-conflict images, the class
whose *texture* the image carries (``textures``, -1 when unknown or absent).
Splits are plain dicts ``{name: ImageSet}``.

Anything with ``classes``, ``labels``, ``textures``, ``name``, ``len`` and
``pixels(index)`` is an ``ImageSource``: image folders too large for memory
(``tasks.images.folder.ImageFolderSet``) are read lazily through the same interface.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.io import load_tensors, save_tensors

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".JPEG", ".JPG", ".PNG")


@runtime_checkable
class ImageSource(Protocol):
    """Anything that yields labelled images by index: in memory (``ImageSet``) or read lazily from files."""

    classes: list[str]
    labels: Tensor  # [N]
    textures: Tensor  # [N], -1 = none
    name: str

    def __len__(self) -> int: ...

    def pixels(self, index: Tensor) -> Tensor:
        """Images ``[B, 3, H, W]`` (0..1) at ``index``."""
        ...


def iter_batches(source: ImageSource, batch_size: int, shuffle: bool = False,
                 generator: torch.Generator | None = None) -> Iterator[tuple[Tensor, Tensor]]:
    """``(images [B, 3, H, W], labels [B])`` over any source; ``shuffle`` needs an explicit ``generator``."""
    if shuffle and generator is None:
        raise SubnetlabError("shuffled batches need an explicit torch.Generator")
    order = torch.randperm(len(source), generator=generator) if shuffle else torch.arange(len(source))
    for start in range(0, len(source), batch_size):
        idx = order[start:start + batch_size]
        yield source.pixels(idx), source.labels[idx]


@dataclass
class ImageSet:
    """Images ``[N, 3, H, W]`` (float, 0..1): class ``labels [N]``, ``textures [N]`` and ``shapes [N]`` classes."""

    images: Tensor
    labels: Tensor
    classes: list[str]
    textures: Tensor | None = None  # [N] texture class per image; -1 = none / unknown
    name: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    shapes: Tensor | None = None  # [N] shape class per image (generated data); default: the labels

    def __post_init__(self) -> None:
        if self.images.ndim != 4 or self.images.shape[1] != 3:
            raise SubnetlabError(f"image set {self.name!r}: images must be [N, 3, H, W], got {tuple(self.images.shape)}")
        n = self.images.shape[0]
        if self.labels.shape != (n,):
            raise SubnetlabError(f"image set {self.name!r}: {n} images but labels of shape {tuple(self.labels.shape)}")
        if self.textures is None:
            self.textures = torch.full((n,), -1, dtype=torch.long)
        if self.shapes is None:
            self.shapes = self.labels.clone()
        if n and int(self.labels.max()) >= len(self.classes):
            raise SubnetlabError(f"image set {self.name!r}: label {int(self.labels.max())} but {len(self.classes)} classes")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[-1])

    def subset(self, index: Tensor | Sequence[int], name: str | None = None) -> "ImageSet":
        idx = torch.as_tensor(index, dtype=torch.long)
        return replace(self, images=self.images[idx], labels=self.labels[idx], textures=self.textures[idx],
                       shapes=self.shapes[idx], name=self.name if name is None else name, meta=dict(self.meta))

    def with_images(self, images: Tensor, name: str) -> "ImageSet":
        """The same labels with other pixels (mean-pooled, texture-free)."""
        if images.shape != self.images.shape:
            raise SubnetlabError(f"replacement images {tuple(images.shape)} do not match {tuple(self.images.shape)}")
        return replace(self, images=images, name=name, meta=dict(self.meta))

    def pixels(self, index: Tensor) -> Tensor:
        return self.images[index]

    def batches(self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None
                ) -> Iterator[tuple[Tensor, Tensor]]:
        """``(images [B, 3, H, W], labels [B])``; ``shuffle`` needs an explicit ``generator``."""
        return iter_batches(self, batch_size, shuffle, generator)

    # -- files -------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """One safetensors file; pixels stored as uint8 (lossless for generated data at 1/255 steps)."""
        tensors = {"images": (self.images.clamp(0, 1) * 255).round().to(torch.uint8),
                   "labels": self.labels.long(), "textures": self.textures.long(), "shapes": self.shapes.long()}
        save_tensors(path, tensors, {"classes": "\n".join(self.classes), "name": self.name, **self.meta})

    @classmethod
    def load(cls, path: str | Path) -> "ImageSet":
        from safetensors import safe_open

        t = load_tensors(path)
        if not {"images", "labels"} <= set(t):
            raise SubnetlabError(f"{path}: not an image set (needs 'images' and 'labels' tensors)")
        with safe_open(str(path), "pt") as f:
            meta = dict(f.metadata() or {})
        classes = meta.pop("classes", "").split("\n")
        name = meta.pop("name", Path(path).stem)
        return cls(t["images"].float() / 255, t["labels"].long(), classes, t.get("textures"), name, meta, t.get("shapes"))


class ConcatSource:
    """Several sources with the same classes, one after another (a data mixture), read lazily."""

    def __init__(self, sources: Sequence[ImageSource], name: str) -> None:
        if not sources:
            raise SubnetlabError("a mixture needs at least one image source")
        for s in sources[1:]:
            if list(s.classes) != list(sources[0].classes):
                raise SubnetlabError(f"cannot mix image sources with different classes: {s.name!r} vs {sources[0].name!r}")
        self.sources = list(sources)
        self.classes = list(sources[0].classes)
        self.labels = torch.cat([s.labels for s in sources])
        self.textures = torch.cat([s.textures for s in sources])
        self.name = name
        self._offsets = torch.tensor([0, *np.cumsum([len(s) for s in sources]).tolist()])

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def pixels(self, index: Tensor) -> Tensor:
        which = torch.bucketize(index, self._offsets[1:], right=True)
        parts: list[Tensor | None] = [None] * len(index)
        for k in which.unique().tolist():
            sel = (which == k).nonzero().squeeze(1)
            imgs = self.sources[k].pixels(index[sel] - self._offsets[k])
            for j, i in enumerate(sel.tolist()):
                parts[i] = imgs[j]
        return torch.stack(parts)  # type: ignore[arg-type]


def concat(sets: Sequence[ImageSource], name: str) -> ImageSource:
    """A data mixture: one in-memory ``ImageSet`` if every part is one, else a lazy ``ConcatSource``."""
    if sets and all(isinstance(s, ImageSet) for s in sets):
        mixed = ConcatSource(sets, name)  # validates the classes
        return ImageSet(torch.cat([s.images for s in sets]), mixed.labels, mixed.classes, mixed.textures, name,
                        shapes=torch.cat([s.shapes for s in sets]))
    return ConcatSource(sets, name)


def normalize(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """``pixel_values`` for a model: ``(x - mean) / std`` per channel."""
    m = torch.as_tensor(mean, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.as_tensor(std, dtype=images.dtype).view(1, -1, 1, 1)
    return (images - m) / s


__all__ = ["ImageSource", "ImageSet", "ConcatSource", "iter_batches", "concat", "normalize", "IMAGE_SUFFIXES"]
