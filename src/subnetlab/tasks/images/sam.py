"""Segment Anything backend for mean pooling: the paper's recipe (section 5.1), for users who have SAM's weights.

Recipe (Zhang, Lepori, Pavlick 2024):

1. query the image with a ``16 x 16`` grid of single-point prompts;
2. to catch small segments the grid misses, query each cell of a ``2 x 2``
   crop of the image the same way, and map those masks back (dropping, as
   SAM's own automatic mask generator does, crop masks that reach a crop edge
   inside the image: they are cut-off pieces of larger regions);
3. drop masks under ``100`` pixels;
4. combine the rest into one non-overlapping cover of the image.

Step 4 is ``combine_masks``: masks are painted from largest to smallest, so a
small mask inside a large one keeps its own segment; pixels no mask covers
form one more segment. The model call is a replaceable function
``predict(image [H, W, 3] float, points [P, 2] (x, y) pixels) -> masks [P, H, W] bool``:
``SamSegmenter.from_pretrained("facebook/sam-vit-base")`` builds it from
transformers' ``SamModel`` (keeping, for each point, the best of SAM's three
masks by predicted IoU); tests plug in a stand-in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError

Predictor = Callable[[np.ndarray, np.ndarray], np.ndarray]


def point_grid(height: int, width: int, per_side: int = 16) -> np.ndarray:
    """``[per_side**2, 2]`` (x, y) prompts at the centres of a ``per_side x per_side`` grid of cells."""
    xs = (np.arange(per_side) + 0.5) * width / per_side
    ys = (np.arange(per_side) + 0.5) * height / per_side
    gx, gy = np.meshgrid(xs, ys)
    return np.stack([gx.ravel(), gy.ravel()], axis=1)


def combine_masks(masks: Tensor, min_pixels: int = 100) -> Tensor:
    """``[M, H, W]`` bool masks -> ``[H, W]`` segment ids: a non-overlapping cover of the whole image.

    Masks under ``min_pixels`` are dropped; the rest are painted largest first,
    so smaller (more specific) masks win where they overlap; uncovered pixels
    become one last segment. Ids are renumbered 0..K-1 in order of first use.
    """
    if masks.ndim != 3:
        raise SubnetlabError(f"combine_masks: expected [M, H, W] masks, got {tuple(masks.shape)}")
    h, w = masks.shape[1:]
    segments = torch.full((h, w), -1, dtype=torch.long)
    areas = masks.flatten(1).sum(1)
    keep = [int(i) for i in torch.argsort(areas, descending=True, stable=True) if int(areas[i]) >= min_pixels]
    for k, i in enumerate(keep):
        segments[masks[i].bool()] = k
    segments[segments < 0] = len(keep)  # the uncovered rest
    return torch.unique(segments, return_inverse=True)[1].reshape(h, w)


def _touches_inner_edge(masks: Tensor, top: bool, bottom: bool, left: bool, right: bool) -> Tensor:
    """``[M]``: which crop masks reach a crop edge that lies inside the image (cut-off pieces of larger regions)."""
    hit = torch.zeros(masks.shape[0], dtype=torch.bool)
    if top:
        hit |= masks[:, 0, :].any(1)
    if bottom:
        hit |= masks[:, -1, :].any(1)
    if left:
        hit |= masks[:, :, 0].any(1)
    if right:
        hit |= masks[:, :, -1].any(1)
    return hit


@dataclass
class SamSegmenter:
    """A ``Segmenter`` (image ``[H, W, 3]`` -> segment ids ``[H, W]``) following the paper's SAM recipe."""

    predict: Predictor
    points_per_side: int = 16
    crops_per_side: int = 2
    min_pixels: int = 100

    def masks(self, image: np.ndarray) -> Tensor:
        """Every mask from the full-image grid and from each crop's grid, in full-image coordinates."""
        h, w = image.shape[:2]
        found = [torch.as_tensor(self.predict(image, point_grid(h, w, self.points_per_side))).bool()]
        n = self.crops_per_side
        for row in range(n):
            for col in range(n):
                top, bottom = row * h // n, (row + 1) * h // n
                left, right = col * w // n, (col + 1) * w // n
                crop = image[top:bottom, left:right]
                local = torch.as_tensor(self.predict(crop, point_grid(bottom - top, right - left, self.points_per_side)))
                local = local.bool()[~_touches_inner_edge(local.bool(), top > 0, bottom < h, left > 0, right < w)]
                full = torch.zeros(local.shape[0], h, w, dtype=torch.bool)
                full[:, top:bottom, left:right] = local
                found.append(full)
        return torch.cat(found)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return combine_masks(self.masks(image), self.min_pixels).numpy()

    @classmethod
    def from_pretrained(cls, name_or_path: str = "facebook/sam-vit-base", batch_points: int = 64,
                        **options: int) -> "SamSegmenter":
        """Load SAM with transformers (hub id or local directory); needs its weights."""
        try:
            from transformers import SamModel, SamProcessor

            model = SamModel.from_pretrained(name_or_path, use_safetensors=True).eval()  # never unpickle
            processor = SamProcessor.from_pretrained(name_or_path)
        except (OSError, ValueError) as e:
            raise SubnetlabError(f"{name_or_path}: cannot load Segment Anything ({str(e).splitlines()[0]})") from None
        return cls(_transformers_predictor(model, processor, batch_points), **options)


def _transformers_predictor(model, processor, batch_points: int) -> Predictor:
    """``predict(image, points)`` with a transformers ``SamModel``: one image embedding, points in batches."""

    @torch.no_grad()
    def predict(image: np.ndarray, points: np.ndarray) -> np.ndarray:
        pixels = (np.clip(image, 0, 1) * 255).astype(np.uint8)
        inputs = processor(images=pixels, return_tensors="pt")
        embeddings = model.get_image_embeddings(inputs["pixel_values"])
        out = []
        for start in range(0, len(points), batch_points):
            chunk = points[start:start + batch_points]
            prompts = processor(images=pixels, input_points=[[[list(map(float, p))] for p in chunk]], return_tensors="pt")
            result = model(image_embeddings=embeddings, input_points=prompts["input_points"], multimask_output=True)
            masks = processor.image_processor.post_process_masks(
                result.pred_masks, prompts["original_sizes"], prompts["reshaped_input_sizes"])[0]  # [P, 3, H, W]
            best = result.iou_scores[0].argmax(-1)  # [P]
            out.append(masks[torch.arange(masks.shape[0]), best].numpy())
        return np.concatenate(out).astype(bool)

    return predict


__all__ = ["SamSegmenter", "combine_masks", "point_grid", "Predictor"]
