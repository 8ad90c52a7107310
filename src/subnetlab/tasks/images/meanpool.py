"""Mean-pooled images: segment an image, then paint every pixel with the mean colour of its segment.

This erases local, high-frequency texture while keeping the outlines of
regions, i.e. shape (Zhang, Lepori, Pavlick 2024, section 5.1). The paper
segments with Segment Anything (``tasks.images.sam.SamSegmenter``, optional: it needs
the SAM weights); the default here is scikit-image, which needs nothing:

* ``slic`` -- SLIC superpixels (k-means in colour + position). Defaults for
  small generated images: ``n_segments=24`` (about one segment per 40 px at
  32x32), ``compactness=10`` (colour and position weighted as in skimage's
  default), ``sigma=1.5`` (Gaussian smoothing *before* segmenting, so that a
  texture finer than ~3 px is blurred into its mean colour and does not split
  the object into stripes), ``start_label=0``.
* ``felzenszwalb`` -- graph-based segmentation. Defaults ``scale=60``,
  ``sigma=1.5`` (same reason), ``min_size=12`` pixels.

For ImageNet-sized images use larger values (e.g. SLIC ``n_segments=150``,
``sigma=2``; Felzenszwalb ``scale=300``, ``min_size=100`` as the paper's SAM
recipe drops segments under 100 pixels). The segmentation runs on the
smoothed image, but the means are taken over the *original* pixels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.progress import track

DEFAULTS: dict[str, dict[str, Any]] = {
    "slic": {"n_segments": 24, "compactness": 10.0, "sigma": 2.0},
    "felzenszwalb": {"scale": 60.0, "sigma": 2.0, "min_size": 12},
}

Segmenter = Callable[[np.ndarray], np.ndarray]  # [H, W, 3] float -> [H, W] int segment ids


def mean_pool(image: Tensor, segments: Tensor) -> Tensor:
    """``[3, H, W]`` image, ``[H, W]`` integer segment ids -> each pixel replaced by its segment's mean colour."""
    if image.ndim != 3 or segments.shape != image.shape[1:]:
        raise SubnetlabError(f"mean_pool: image {tuple(image.shape)} and segments {tuple(segments.shape)} do not match")
    flat_ids = torch.unique(segments.reshape(-1), return_inverse=True)[1]  # [H*W] in 0..K-1
    k = int(flat_ids.max()) + 1
    pixels = image.reshape(image.shape[0], -1)  # [3, H*W]
    sums = torch.zeros(image.shape[0], k, dtype=image.dtype).index_add_(1, flat_ids, pixels)
    counts = torch.bincount(flat_ids, minlength=k).to(image.dtype)
    return (sums / counts)[:, flat_ids].reshape(image.shape)


def skimage_segmenter(method: str = "slic", **params: Any) -> Segmenter:
    """A scikit-image segmenter with the documented defaults (see module docstring), overridable."""
    if method not in DEFAULTS:
        raise SubnetlabError(f"unknown segmentation method {method!r}; choose slic, felzenszwalb (or sam)")
    unknown = set(params) - set(DEFAULTS[method]) - {"max_num_iter", "enforce_connectivity", "min_size_factor"}
    if unknown:
        raise SubnetlabError(f"unknown {method} parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(DEFAULTS[method])}")
    settings = {**DEFAULTS[method], **params}

    def segment(image: np.ndarray) -> np.ndarray:
        from skimage.segmentation import felzenszwalb, slic

        if method == "slic":
            return slic(image, start_label=0, channel_axis=-1, **settings)
        return felzenszwalb(image, channel_axis=-1, **settings)

    return segment


def mean_pool_images(
    images: Tensor,
    method: str = "slic",
    params: dict[str, Any] | None = None,
    segmenter: Segmenter | None = None,
    description: str = "mean pooling",
) -> Tensor:
    """Mean-pool every image of ``[N, 3, H, W]`` (a scikit-image method, or any ``segmenter``, e.g. SAM's)."""
    if images.ndim != 4 or images.shape[1] != 3:
        raise SubnetlabError(f"mean_pool_images: expected [N, 3, H, W], got {tuple(images.shape)}")
    segment = segmenter or skimage_segmenter(method, **(params or {}))
    out = torch.empty_like(images)
    for i in track(range(images.shape[0]), total=images.shape[0], description=description):
        hwc = images[i].permute(1, 2, 0).double().numpy()
        segments = torch.from_numpy(np.asarray(segment(hwc), dtype=np.int64))
        out[i] = mean_pool(images[i], segments)
    return out


def segment_count(images: Tensor, method: str = "slic", params: dict[str, Any] | None = None) -> float:
    """Mean number of segments per image (to document a parameter choice)."""
    segment = skimage_segmenter(method, **(params or {}))
    counts = [len(np.unique(segment(img.permute(1, 2, 0).double().numpy()))) for img in images]
    return float(np.mean(counts)) if counts else 0.0


__all__ = ["DEFAULTS", "Segmenter", "mean_pool", "skimage_segmenter", "mean_pool_images", "segment_count"]
