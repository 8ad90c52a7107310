"""The data of the shape-bias study, prepared once per run directory and reused on reruns.

Splits (``ImageSource`` each):

=================  ==========================================================
``pretrain``       demo only: what the base model is trained on (generated,
                   texture agreeing with the class only part of the time, so
                   that the base model also learns shape -- the stand-in for
                   ImageNet pre-training)
``train``          original images the new models train on (texture always
                   agrees with the class: the shortcut is there to take)
``discovery``      mean-pooled images: subnetwork discovery trains masks here
``discovery-eval`` mean-pooled images: selects the discovery epoch / lambda
``original``       test images
``mean-pooled``    the same test images, mean-pooled
``cue-conflict``   shape of one class, texture of another
``texture-free``   demo only: the generator's own flat-filled objects
=================  ==========================================================

Demo: everything generated (``subnetlab.tasks.images.shapes``), stored as
safetensors under ``out/data``. Paper: 16-class ImageNet from the user's
ImageNet folders, Geirhos et al.'s cue-conflict stimuli, and Mean-pooled
ImageNet materialised once as PNG folders under ``out/data``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.shape_bias.settings import GENERATED, ShapeBiasSettings
from subnetlab.io import write_text
from subnetlab.progress import stage
from subnetlab.tasks.images.folder import ImageFolderSet, cue_conflict_folder, save_image_folder, scan_image_folder
from subnetlab.tasks.images.imagenet16 import CATEGORIES, imagenet16_folders
from subnetlab.tasks.images.imageset import ImageSet, ImageSource
from subnetlab.tasks.images.meanpool import Segmenter, mean_pool_images, skimage_segmenter
from subnetlab.tasks.images.shapes import ShapeTextureConfig, generate_splits


def segmenter_for(settings: ShapeBiasSettings) -> Segmenter:
    """``segmentation``: ``felzenszwalb`` / ``slic`` (scikit-image) or ``sam:<hub id or directory>``."""
    method = str(settings.segmentation)
    params = dict(settings.segmentation_params or {})
    if method.startswith("sam:"):
        from subnetlab.tasks.images.sam import SamSegmenter

        return SamSegmenter.from_pretrained(method[4:], **params)
    return skimage_segmenter(method, **params)


def _pool(data: ImageSet, segment: Segmenter, name: str) -> ImageSet:
    return data.with_images(mean_pool_images(data.images, segmenter=segment, description=f"mean pooling {name}"), name)


def demo_data(settings: ShapeBiasSettings, root: Path) -> dict[str, ImageSource]:
    """Generate (or reload) the benchmark's splits and their mean-pooled versions."""
    names = ["pretrain", "train", "discovery", "discovery-eval", "original", "mean-pooled", "cue-conflict", "texture-free"]
    files = {n: root / f"{n}.safetensors" for n in names}
    if all(f.is_file() for f in files.values()):
        return {n: ImageSet.load(f) for n, f in files.items()}
    stage("generating the shape/texture benchmark")
    config = ShapeTextureConfig(num_classes=int(settings.num_classes), image_size=int(settings.image_size))
    sizes = {n: int(settings.sizes[n]) for n in GENERATED}
    corr = {"pretrain": float(settings.pretrain_texture_correlation)}
    shape_corr = {"pretrain": float(settings.pretrain_shape_correlation)}
    raw = generate_splits(config, sizes, int(settings.seed), corr, shape_corr)
    segment = segmenter_for(settings)
    splits: dict[str, ImageSet] = {
        "pretrain": raw["pretrain"], "train": raw["train"],
        "discovery": _pool(raw["discovery"], segment, "discovery"),
        "discovery-eval": _pool(raw["discovery-eval"], segment, "discovery-eval"),
        "original": raw["test"].with_images(raw["test"].images, "original"),
        "mean-pooled": _pool(raw["test"], segment, "mean-pooled"),
        "cue-conflict": raw["cue-conflict"], "texture-free": raw["texture-free"],
    }
    for name, data in splits.items():
        data.name = name
        data.save(files[name])
    # what a rerun reads back (pixels stored as uint8: mean-pooled pixels are rounded to 1/255), so that a run and a
    # run resumed after a kill train on the same pixels
    return {n: ImageSet.load(f) for n, f in files.items()}


def _balanced(labels: torch.Tensor, per_class: int, generator: torch.Generator, exclude: torch.Tensor | None = None
              ) -> torch.Tensor:
    """Indices of ``per_class`` random images of every class (not in ``exclude``)."""
    chosen = []
    banned = set(exclude.tolist()) if exclude is not None else set()
    for c in labels.unique().tolist():
        pool = [i for i in (labels == c).nonzero().squeeze(1).tolist() if i not in banned]
        if len(pool) < per_class:
            raise SubnetlabError(f"class {c} has only {len(pool)} images; {per_class} needed per class")
        perm = torch.randperm(len(pool), generator=generator)[:per_class]
        chosen += [pool[int(i)] for i in perm]
    return torch.tensor(sorted(chosen))


def _pooled_folder(source: ImageFolderSet, segment: Segmenter, root: Path, name: str, chunk: int = 256
                   ) -> ImageFolderSet:
    """Mean-pool a folder set once into ``root/name`` (PNG, ``chunk`` images at a time); later runs read it back."""
    done = root / f"{name}.done"
    if not done.is_file():
        files: list[Path] = []
        for start in range(0, len(source), chunk):
            part = source.subset(range(start, min(start + chunk, len(source))))
            pooled = ImageSet(mean_pool_images(part.pixels(torch.arange(len(part))), segmenter=segment,
                                               description=f"mean pooling {name}"), part.labels, part.classes,
                              part.textures, name)
            written = save_image_folder(pooled, root / name / f"{start // chunk:05d}")
            files += written.files
        write_text(done, "\n".join(str(f.relative_to(root)) for f in files))
    files = [root / line for line in done.read_text().splitlines()]
    if len(files) != len(source):
        raise SubnetlabError(f"{done}: lists {len(files)} images, expected {len(source)}; delete it to redo")
    return ImageFolderSet(files, source.labels, source.classes, source.size, name, source.textures)


def paper_data(settings: ShapeBiasSettings, root: Path) -> dict[str, ImageSource]:
    """16-class ImageNet (train / val folders by WordNet id), cue-conflict stimuli, Mean-pooled ImageNet."""
    missing = [k for k in ("imagenet_train", "imagenet_val", "cue_conflict") if not getattr(settings, k)]
    if missing:
        raise SubnetlabError(f"the paper preset needs ImageNet and the cue-conflict stimuli: "
                             f"set {', '.join(missing)} to their directories", setting=missing[0])
    size = int(settings.image_size)
    g = torch.Generator().manual_seed(int(settings.seed))
    train_all = scan_image_folder(settings.imagenet_train, size, class_folders=imagenet16_folders(settings.imagenet_train),
                                  name="train")
    per_class = int(settings.sizes["discovery"]) // len(CATEGORIES)
    per_class_eval = int(settings.sizes["discovery-eval"]) // len(CATEGORIES)
    eval_idx = _balanced(train_all.labels, per_class_eval, g)
    disc_idx = _balanced(train_all.labels, per_class, g, exclude=eval_idx)
    keep = torch.ones(len(train_all), dtype=torch.bool)
    keep[eval_idx] = False  # the evaluation images are de-duplicated from the training data
    val = scan_image_folder(settings.imagenet_val, size, class_folders=imagenet16_folders(settings.imagenet_val),
                            name="original")
    segment = segmenter_for(settings)
    root.mkdir(parents=True, exist_ok=True)
    stage("mean-pooling the discovery, selection and test images (once)")
    return {
        "train": train_all.subset(keep.nonzero().squeeze(1), "train"),
        "discovery": _pooled_folder(train_all.subset(disc_idx), segment, root, "discovery"),
        "discovery-eval": _pooled_folder(train_all.subset(eval_idx), segment, root, "discovery-eval"),
        "original": val,
        "mean-pooled": _pooled_folder(val, segment, root, "mean-pooled"),
        "cue-conflict": cue_conflict_folder(settings.cue_conflict, CATEGORIES, size),
    }


def prepare_data(settings: ShapeBiasSettings, out: Path) -> dict[str, ImageSource]:
    """The study's splits for its preset (see module docstring)."""
    root = Path(out) / "data"
    return paper_data(settings, root) if settings.data == "imagenet16" else demo_data(settings, root)


__all__ = ["prepare_data", "demo_data", "paper_data", "segmenter_for"]
