"""Image folders: one folder per class (``root/<class>/<image>``), read with Pillow (no torchvision).

* ``ImageFolderSet`` -- a lazy ``ImageSource``: file names and labels in memory,
  pixels read (centre crop, resize) only when a batch asks for them, so
  16-class ImageNet (213k images) never has to fit in memory;
* ``load_image_folder`` -- the same, read eagerly into an ``ImageSet``;
* ``cue_conflict_folder`` -- Geirhos et al.'s cue-conflict stimuli, whose file
  names say both cues (``cat/cat3-elephant1.png``: shape cat, texture
  elephant); images whose two cues agree are left out, as in their analysis;
* ``save_image_folder`` -- write any source as PNG files (Mean-pooled ImageNet
  is materialised this way once, then read lazily).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.images.imageset import IMAGE_SUFFIXES, ImageSet, ImageSource, iter_batches


def read_image(path: Path, size: int) -> np.ndarray:
    """``[size, size, 3]`` uint8: the centre square of the image, resized (the usual evaluation transform)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            side = min(w, h)
            left, top = (w - side) // 2, (h - side) // 2
            im = im.crop((left, top, left + side, top + side)).resize((size, size), Image.BILINEAR)
            return np.asarray(im, dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise SubnetlabError(f"{path}: not a readable image ({e})") from None


class ImageFolderSet:
    """A lazily read image folder (see module docstring); ``pixels(index)`` loads just those files."""

    def __init__(self, files: Sequence[Path], labels: Tensor, classes: Sequence[str], size: int, name: str,
                 textures: Tensor | None = None) -> None:
        if len(files) != len(labels):
            raise SubnetlabError(f"image folder {name!r}: {len(files)} files but {len(labels)} labels")
        self.files = list(files)
        self.labels = labels.long()
        self.classes = list(classes)
        self.size = size
        self.name = name
        self.textures = textures if textures is not None else torch.full((len(files),), -1, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.files)

    def pixels(self, index: Tensor) -> Tensor:
        arrays = [read_image(self.files[int(i)], self.size) for i in index]
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255

    def subset(self, index: Tensor | Sequence[int], name: str | None = None) -> "ImageFolderSet":
        idx = torch.as_tensor(index, dtype=torch.long)
        return ImageFolderSet([self.files[int(i)] for i in idx], self.labels[idx], self.classes, self.size,
                              self.name if name is None else name, self.textures[idx])

    def load(self) -> ImageSet:
        """Everything in memory."""
        return ImageSet(self.pixels(torch.arange(len(self))), self.labels, self.classes, self.textures, self.name)


def scan_image_folder(
    root: str | Path,
    size: int = 224,
    classes: Sequence[str] | None = None,
    class_folders: dict[str, Sequence[str]] | None = None,
    limit_per_class: int | None = None,
    name: str | None = None,
) -> ImageFolderSet:
    """List ``root/<class>/*`` images; ``class_folders`` merges several folders into one class (16-class ImageNet)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise SubnetlabError(f"{root}: no such image folder")
    if class_folders is None:
        names = list(classes) if classes is not None else sorted(p.name for p in root.iterdir() if p.is_dir())
        class_folders = {c: [c] for c in names}
    if not class_folders:
        raise SubnetlabError(f"{root}: no class folders found")
    files: list[Path] = []
    labels: list[int] = []
    for label, (cls, folders) in enumerate(class_folders.items()):
        found = sorted(f for folder in folders if (root / folder).is_dir()
                       for f in (root / folder).iterdir() if f.suffix in IMAGE_SUFFIXES)
        if limit_per_class is not None:
            found = found[:limit_per_class]
        if not found:
            raise SubnetlabError(f"{root}: class {cls!r} has no images (looked in {', '.join(folders)})")
        files += found
        labels += [label] * len(found)
    return ImageFolderSet(files, torch.tensor(labels), list(class_folders), size, name or root.name)


def load_image_folder(root: str | Path, size: int = 224, **options) -> ImageSet:
    """``scan_image_folder(...)`` read into memory."""
    return scan_image_folder(root, size, **options).load()


_CUE = re.compile(r"^([a-z]+)\d+-([a-z]+)\d+$")


def cue_conflict_folder(root: str | Path, classes: Sequence[str], size: int = 224) -> ImageFolderSet:
    """Geirhos et al.'s cue-conflict stimuli: ``root/<shape>/<shape><i>-<texture><j>.png``."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise SubnetlabError(f"{root}: no such cue-conflict folder")
    index = {c: i for i, c in enumerate(classes)}
    files, shapes, textures = [], [], []
    for f in sorted(root.glob("*/*")):
        if f.suffix not in IMAGE_SUFFIXES:
            continue
        m = _CUE.match(f.stem)
        if m is None or m.group(1) not in index or m.group(2) not in index:
            raise SubnetlabError(f"{f}: expected a name like cat3-elephant1.png with both classes among {', '.join(classes)}")
        if m.group(1) != m.group(2):
            files.append(f)
            shapes.append(index[m.group(1)])
            textures.append(index[m.group(2)])
    if not files:
        raise SubnetlabError(f"{root}: no cue-conflict images with different shape and texture")
    return ImageFolderSet(files, torch.tensor(shapes), classes, size, "cue-conflict", torch.tensor(textures))


def save_image_folder(source: ImageSource, root: str | Path, batch_size: int = 64) -> ImageFolderSet:
    """Write ``source`` as ``root/<class>/<index>.png`` (atomic per file) and return it as a lazy folder set."""
    from PIL import Image

    from subnetlab.io import atomic_path

    root = Path(root)
    files: list[Path] = []
    start = 0
    for images, labels in iter_batches(source, batch_size):
        for img, label in zip(images, labels.tolist()):
            path = root / source.classes[label] / f"{start:07d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            pixels = (img.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
            with atomic_path(path) as tmp:
                Image.fromarray(pixels).save(tmp, format="PNG")
            files.append(path)
            start += 1
    size = int(source.pixels(torch.tensor([0])).shape[-1]) if len(source) else 0
    return ImageFolderSet(files, source.labels.clone(), source.classes, size, source.name, source.textures.clone())


__all__ = ["ImageFolderSet", "read_image", "scan_image_folder", "load_image_folder", "cue_conflict_folder",
           "save_image_folder"]
