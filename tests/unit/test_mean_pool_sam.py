"""The Segment Anything recipe without SAM: grid + crop queries, small-mask filter, non-overlapping cover."""

from __future__ import annotations

import numpy as np
import torch

from subnetlab.tasks.images.meanpool import mean_pool_images
from subnetlab.tasks.images.sam import SamSegmenter, combine_masks, point_grid


def test_combine_masks_paints_small_over_large_and_covers_the_rest():
    masks = torch.zeros(4, 20, 20, dtype=torch.bool)
    masks[0, :, :10] = True  # 200 px, left half
    masks[1, 5:15, 2:14] = True  # 120 px, overlaps the left half and spills right
    masks[2, 0:3, 15:18] = True  # 9 px: dropped
    masks[3, :10, :10] = True  # 100 px: kept (exactly the threshold)
    seg = combine_masks(masks, min_pixels=100)
    assert seg.shape == (20, 20) and seg.min() == 0
    # expected by hand: paint 0 (200), then 1 (120), then 3 (100); the rest is one segment
    expected = torch.full((20, 20), 3)
    expected[:, :10] = 0
    expected[5:15, 2:14] = 1
    expected[:10, :10] = 2
    same = (seg.view(-1, 1) == seg.view(1, -1)) == (expected.view(-1, 1) == expected.view(1, -1))
    assert bool(same.all())  # the same partition, whatever the ids


def test_point_grid_centres():
    pts = point_grid(32, 64, per_side=2)
    assert pts.tolist() == [[16.0, 8.0], [48.0, 8.0], [16.0, 24.0], [48.0, 24.0]]


def _scene() -> np.ndarray:
    """64x64 region ids: 0 background, 1 a large square, 2 and 3 two 11x11 squares between the coarse grid's points."""
    ids = np.zeros((64, 64), dtype=int)
    ids[34:62, 34:62] = 1
    ids[42:53, 11:22] = 2  # 121 px each, inside one crop; the coarse grid's points sit at 8, 24, 40, 56
    ids[11:22, 42:53] = 3
    return ids


def _oracle():
    """A perfect 'SAM': the region containing the queried point (within the queried image)."""

    def predict(image: np.ndarray, points: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        local = image[..., 0].astype(int)  # the scene's ids are stored in the red channel
        out = np.zeros((len(points), h, w), dtype=bool)
        for i, (x, y) in enumerate(points):
            out[i] = local == local[int(y), int(x)]
        return out

    return predict


def test_crops_catch_segments_the_coarse_grid_misses():
    ids = _scene()
    image = np.repeat(ids[..., None], 3, axis=2).astype(float)
    coarse = point_grid(64, 64, 4)
    assert not any(ids[int(y), int(x)] in (2, 3) for x, y in coarse)
    # without crops both small squares are missed and fall into one "uncovered rest" segment
    without = SamSegmenter(_oracle(), points_per_side=4, crops_per_side=0, min_pixels=100)(image)
    assert len(np.unique(without[(ids == 2) | (ids == 3)])) == 1
    # with the 2x2 crops each is found and becomes a segment of its own
    with_crops = SamSegmenter(_oracle(), points_per_side=4, crops_per_side=2, min_pixels=100)(image)
    for k in range(4):
        inside = np.unique(with_crops[ids == k])
        assert len(inside) == 1 and not np.isin(with_crops[ids != k], inside).any()
    # raising the size threshold above 121 px drops them again
    strict = SamSegmenter(_oracle(), points_per_side=4, crops_per_side=2, min_pixels=122)(image)
    assert len(np.unique(strict[(ids == 2) | (ids == 3)])) == 1


def test_sam_segmenter_drives_mean_pooling():
    ids = _scene()
    g = torch.Generator().manual_seed(0)
    noise = torch.rand(3, 64, 64, generator=g) * 0.01
    image = torch.from_numpy(ids).float().expand(3, 64, 64) + noise  # ids in every channel, plus faint texture
    seg = SamSegmenter(_oracle(), points_per_side=4, crops_per_side=2, min_pixels=100)
    pooled = mean_pool_images(image[None], segmenter=lambda hwc: seg(np.round(hwc)))[0]
    for k in (0, 1, 2, 3):
        region = torch.from_numpy(ids == k)
        expected = image[:, region].mean(1)
        assert torch.allclose(pooled[:, region], expected[:, None].expand(-1, int(region.sum())), atol=1e-5)
