"""Mean pooling: every pixel becomes the mean of its segment; scikit-image segmenters erase fine texture."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.images.meanpool import mean_pool, mean_pool_images, skimage_segmenter


def test_mean_pool_with_known_segments_matches_hand_computation():
    # 2x3 image, segments {0: left column, 7: the rest}; ids need not be contiguous
    image = torch.tensor([[[0.0, 1.0, 2.0], [4.0, 5.0, 6.0]],
                          [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]],
                          [[0.0, 0.0, 0.0], [0.0, 0.0, 9.0]]])
    segments = torch.tensor([[0, 7, 7], [0, 7, 7]])
    out = mean_pool(image, segments)
    left = torch.tensor([2.0, 1.0, 0.0])  # mean of (0,4), (1,1), (0,0)
    right = torch.tensor([3.5, 1.0, 2.25])  # mean of (1,2,5,6), ones, (0,0,0,9)
    for r in range(2):
        assert torch.allclose(out[:, r, 0], left)
        for c in (1, 2):
            assert torch.allclose(out[:, r, c], right)


def test_mean_pool_keeps_each_segment_total():
    g = torch.Generator().manual_seed(0)
    image = torch.rand(3, 8, 8, generator=g)
    segments = torch.randint(0, 5, (8, 8), generator=g)
    out = mean_pool(image, segments)
    for k in segments.unique():
        sel = segments == k
        assert torch.allclose(out[:, sel].sum(1), image[:, sel].sum(1), atol=1e-5)
        assert torch.allclose(out[:, sel], out[:, sel][:, :1].expand(-1, int(sel.sum())))


def _textured_halves() -> torch.Tensor:
    """24x24: a fine black/white checkerboard (period 2) on the left, flat red on the right."""
    img = torch.zeros(3, 24, 24)
    yy, xx = torch.meshgrid(torch.arange(24), torch.arange(24), indexing="ij")
    checker = ((xx + yy) % 2 == 0).float()
    img[:, :, :12] = checker[:, :12]
    img[0, :, 12:] = 1.0
    return img


@pytest.mark.parametrize("method", ["felzenszwalb", "slic"])
def test_skimage_segmentation_erases_texture_and_keeps_regions(method):
    img = _textured_halves()
    out = mean_pool_images(img[None], method)[0]
    # left half: the checkerboard becomes (close to) its mean grey; right half stays red
    inner_left = out[:, 2:22, 1:9]
    assert (inner_left - 0.5).abs().max() < 0.15
    assert torch.allclose(out[:, :, 15:], torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1).expand(3, 24, 9), atol=0.05)
    assert (img[:, :, :12] - 0.5).abs().min() == 0.5  # the original really was pure black/white


def test_bad_inputs_are_refused():
    with pytest.raises(SubnetlabError):
        mean_pool(torch.zeros(3, 4, 4), torch.zeros(4, 5, dtype=torch.long))
    with pytest.raises(SubnetlabError):
        skimage_segmenter("watershed")
    with pytest.raises(SubnetlabError):
        skimage_segmenter("slic", scale=3)
    with pytest.raises(SubnetlabError):
        mean_pool_images(torch.zeros(4, 4, 4))
