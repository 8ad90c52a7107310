"""The paper preset's data step on a miniature ImageNet layout: balanced discovery splits, pooled PNG folders, reuse."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.experiments.shape_bias.data import prepare_data
from subnetlab.tasks.images.imagenet16 import CATEGORIES, imagenet16_folders


def _fake_imagenet(root, per_class: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for category, wnids in imagenet16_folders().items():
        folder = root / wnids[-1]
        folder.mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (10, 14, 3), dtype=np.uint8)).save(folder / f"{category}_{i}.png")


def test_paper_data_on_a_miniature_imagenet(tmp_path):
    _fake_imagenet(tmp_path / "train", per_class=3, seed=0)
    _fake_imagenet(tmp_path / "val", per_class=1, seed=1)
    cue = tmp_path / "cue"
    (cue / "cat").mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(cue / "cat" / "cat1-dog2.png")
    module = get_reproduction("shape-bias")
    settings = settings_for(module, "paper", {
        "imagenet_train": str(tmp_path / "train"), "imagenet_val": str(tmp_path / "val"), "cue_conflict": str(cue),
        "sizes": {"discovery": 16, "discovery-eval": 16}, "segmentation": "felzenszwalb", "image_size": 8})
    data = prepare_data(settings, tmp_path / "run")
    assert set(data) == {"train", "discovery", "discovery-eval", "original", "mean-pooled", "cue-conflict"}
    assert len(data["train"]) == 16 * 3 - 16  # the selection images are removed from training
    for split in ("discovery", "discovery-eval"):
        assert torch.bincount(data[split].labels, minlength=16).tolist() == [1] * 16
    pooled = data["mean-pooled"].pixels(torch.arange(2))
    assert pooled.shape == (2, 3, 8, 8)
    # every pooled image is piecewise constant: far fewer distinct colours than the noise it came from
    originals = data["original"].pixels(torch.arange(2))
    for p, o in zip(pooled, originals):
        assert len(torch.unique(p.reshape(3, -1), dim=1)[0]) < len(torch.unique(o.reshape(3, -1), dim=1)[0])
    assert data["cue-conflict"].labels.tolist() == [CATEGORIES.index("cat")]
    assert data["cue-conflict"].textures.tolist() == [CATEGORIES.index("dog")]
    # a second preparation reuses the pooled folders (same files, not rewritten)
    stamp = {f: f.stat().st_mtime_ns for f in data["discovery"].files}
    again = prepare_data(settings, tmp_path / "run")
    assert {f: f.stat().st_mtime_ns for f in again["discovery"].files} == stamp
