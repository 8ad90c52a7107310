"""Image folders: lazy reading, 16-class ImageNet folder merging, cue-conflict file names, PNG round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.images.folder import cue_conflict_folder, save_image_folder, scan_image_folder
from subnetlab.tasks.images.imagenet16 import CATEGORIES, INDICES, imagenet16_folders, imagenet_to_16
from subnetlab.tasks.images.imageset import ImageSet, iter_batches


def _png(path, colour, size=(12, 8)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), colour, dtype=np.uint8)).save(path)


def test_scan_reads_lazily_with_centre_crop_and_labels(tmp_path):
    _png(tmp_path / "b" / "1.png", (255, 0, 0))
    _png(tmp_path / "a" / "1.png", (0, 255, 0))
    _png(tmp_path / "a" / "2.jpg", (0, 0, 255))
    (tmp_path / "a" / "notes.txt").write_text("not an image")
    data = scan_image_folder(tmp_path, size=4)
    assert data.classes == ["a", "b"] and data.labels.tolist() == [0, 0, 1]
    pixels = data.pixels(torch.tensor([2, 0]))
    assert pixels.shape == (2, 3, 4, 4)
    assert torch.allclose(pixels[0], torch.tensor([1.0, 0, 0]).view(3, 1, 1).expand(3, 4, 4))
    batches = list(iter_batches(data, 2))
    assert [b[0].shape[0] for b in batches] == [2, 1]
    with pytest.raises(SubnetlabError):
        scan_image_folder(tmp_path / "missing")
    with pytest.raises(SubnetlabError):
        scan_image_folder(tmp_path, classes=["a", "c"])


def test_imagenet16_merges_wordnet_folders_and_maps_logits(tmp_path):
    for category in CATEGORIES:
        _png(tmp_path / imagenet16_folders()[category][0] / "x.png", (10, 10, 10))
    folders = imagenet16_folders(tmp_path)
    assert list(folders) == CATEGORIES and all(len(v) == 1 for v in folders.values())
    data = scan_image_folder(tmp_path, size=4, class_folders=folders)
    assert data.labels.tolist() == list(range(16))
    assert sum(len(v) for v in INDICES.values()) == len({i for v in INDICES.values() for i in v})  # disjoint
    logits = torch.full((1, 1000), -30.0)
    logits[0, INDICES["knife"][0]] = 10.0
    scores = imagenet_to_16(logits)
    assert scores.shape == (1, 16) and int(scores.argmax()) == CATEGORIES.index("knife")
    (tmp_path / folders["knife"][0] / "x.png").unlink()
    (tmp_path / folders["knife"][0]).rmdir()
    with pytest.raises(SubnetlabError, match="knife"):
        imagenet16_folders(tmp_path)


def test_cue_conflict_names_give_shape_and_texture(tmp_path):
    _png(tmp_path / "cat" / "cat3-elephant1.png", (1, 2, 3))
    _png(tmp_path / "knife" / "knife1-cat2.png", (1, 2, 3))
    _png(tmp_path / "cat" / "cat1-cat2.png", (1, 2, 3))  # cues agree: left out
    data = cue_conflict_folder(tmp_path, CATEGORIES, size=4)
    assert len(data) == 2
    pairs = {(CATEGORIES[s], CATEGORIES[t]) for s, t in zip(data.labels.tolist(), data.textures.tolist())}
    assert pairs == {("cat", "elephant"), ("knife", "cat")}
    _png(tmp_path / "cat" / "cat9-zebra1.png", (1, 2, 3))
    with pytest.raises(SubnetlabError, match="zebra"):
        cue_conflict_folder(tmp_path, CATEGORIES, size=4)


def test_save_image_folder_round_trip(tmp_path):
    g = torch.Generator().manual_seed(0)
    images = (torch.randint(0, 256, (5, 3, 6, 6), generator=g).float() / 255)
    data = ImageSet(images, torch.tensor([0, 1, 1, 0, 1]), ["x", "y"], textures=torch.tensor([1, 0, 0, 1, 0]))
    folder = save_image_folder(data, tmp_path / "out", batch_size=2)
    assert len(folder) == 5 and torch.equal(folder.labels, data.labels) and torch.equal(folder.textures, data.textures)
    assert torch.allclose(folder.pixels(torch.arange(5)), images, atol=1e-6)
    assert sorted(p.parent.name for p in folder.files) == ["x", "x", "y", "y", "y"]
