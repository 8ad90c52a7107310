"""Image classification data: the ``ImageSet`` value, normalisation, and image folders.

Vision tasks do not fit the tokenized ``Task`` API (no tokenizer, no text), so
they use one small value: a float tensor of images ``[N, 3, H, W]`` in [0, 1],
the class of each image (``labels``), and, for cue-conflict images, the class
whose *texture* the image carries (``textures``, -1 when unknown or absent).
Splits are plain dicts ``{name: ImageSet}``.

Image folders are laid out one folder per class (``root/<class>/<image>``), as
ImageNet subsets usually are; ``load_image_folder`` reads and resizes them with
Pillow (no torchvision).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.io import load_tensors, save_tensors

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".JPEG", ".JPG", ".PNG")


@dataclass
class ImageSet:
    """Images ``[N, 3, H, W]`` (float, 0..1) with class ``labels [N]`` and texture classes ``textures [N]``."""

    images: Tensor
    labels: Tensor
    classes: list[str]
    textures: Tensor | None = None  # [N] texture class per image; -1 = none / unknown
    name: str = ""
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.images.ndim != 4 or self.images.shape[1] != 3:
            raise SubnetlabError(f"image set {self.name!r}: images must be [N, 3, H, W], got {tuple(self.images.shape)}")
        n = self.images.shape[0]
        if self.labels.shape != (n,):
            raise SubnetlabError(f"image set {self.name!r}: {n} images but labels of shape {tuple(self.labels.shape)}")
        if self.textures is None:
            self.textures = torch.full((n,), -1, dtype=torch.long)
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
                       name=self.name if name is None else name, meta=dict(self.meta))

    def with_images(self, images: Tensor, name: str) -> "ImageSet":
        """The same labels with other pixels (mean-pooled, texture-free)."""
        if images.shape != self.images.shape:
            raise SubnetlabError(f"replacement images {tuple(images.shape)} do not match {tuple(self.images.shape)}")
        return replace(self, images=images, name=name, meta=dict(self.meta))

    def batches(self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None
                ) -> Iterator[tuple[Tensor, Tensor]]:
        """``(images [B, 3, H, W], labels [B])``; ``shuffle`` needs an explicit ``generator``."""
        if shuffle and generator is None:
            raise SubnetlabError("shuffled batches need an explicit torch.Generator")
        order = torch.randperm(len(self), generator=generator) if shuffle else torch.arange(len(self))
        for start in range(0, len(self), batch_size):
            idx = order[start:start + batch_size]
            yield self.images[idx], self.labels[idx]

    # -- files -------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """One safetensors file; pixels stored as uint8 (lossless for generated data at 1/255 steps)."""
        tensors = {"images": (self.images.clamp(0, 1) * 255).round().to(torch.uint8),
                   "labels": self.labels.long(), "textures": self.textures.long()}
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
        return cls(t["images"].float() / 255, t["labels"].long(), classes, t.get("textures"), name, meta)


def concat(sets: Sequence[ImageSet], name: str) -> ImageSet:
    """Stack image sets with the same classes (e.g. a data mixture of original and mean-pooled images)."""
    if not sets:
        raise SubnetlabError("concat needs at least one image set")
    for s in sets[1:]:
        if s.classes != sets[0].classes:
            raise SubnetlabError(f"cannot mix image sets with different classes: {s.name!r} vs {sets[0].name!r}")
    return ImageSet(torch.cat([s.images for s in sets]), torch.cat([s.labels for s in sets]), list(sets[0].classes),
                    torch.cat([s.textures for s in sets]), name)


def normalize(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """``pixel_values`` for a model: ``(x - mean) / std`` per channel."""
    m = torch.as_tensor(mean, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.as_tensor(std, dtype=images.dtype).view(1, -1, 1, 1)
    return (images - m) / s


def _read_image(path: Path, size: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            side = min(w, h)  # centre crop to a square, then resize: the usual evaluation transform
            left, top = (w - side) // 2, (h - side) // 2
            im = im.crop((left, top, left + side, top + side)).resize((size, size), Image.BILINEAR)
            return np.asarray(im, dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise SubnetlabError(f"{path}: not a readable image ({e})") from None


def load_image_folder(
    root: str | Path,
    size: int = 224,
    classes: Sequence[str] | None = None,
    class_folders: dict[str, Sequence[str]] | None = None,
    limit_per_class: int | None = None,
    name: str | None = None,
) -> ImageSet:
    """Read ``root/<class>/*.jpg`` (centre-cropped, resized to ``size``) into an ``ImageSet``.

    ``class_folders`` maps a class to several folder names (16-class ImageNet
    merges WordNet folders, see ``imagenet16_folders``); folders that do not
    exist are skipped, but every class must end up with at least one image.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise SubnetlabError(f"{root}: no such image folder")
    if class_folders is None:
        names = list(classes) if classes is not None else sorted(p.name for p in root.iterdir() if p.is_dir())
        class_folders = {c: [c] for c in names}
    if not class_folders:
        raise SubnetlabError(f"{root}: no class folders found")
    images, labels = [], []
    for label, (cls, folders) in enumerate(class_folders.items()):
        files = sorted(f for folder in folders if (root / folder).is_dir()
                       for f in (root / folder).iterdir() if f.suffix in IMAGE_SUFFIXES)
        if limit_per_class is not None:
            files = files[:limit_per_class]
        if not files:
            raise SubnetlabError(f"{root}: class {cls!r} has no images (looked in {', '.join(folders)})")
        images += [_read_image(f, size) for f in files]
        labels += [label] * len(files)
    pixels = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255
    return ImageSet(pixels, torch.tensor(labels), list(class_folders), name=name or root.name)


__all__ = ["ImageSet", "concat", "normalize", "load_image_folder", "IMAGE_SUFFIXES"]
