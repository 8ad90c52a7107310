"""A model's weights as a short hash: the cache key of what depends only on the frozen weights (means, teacher)."""

from __future__ import annotations

import hashlib

import torch
from torch import nn


def weights_digest(model: nn.Module) -> str:
    """A short hash of every parameter and buffer (names, shapes, bytes)."""
    h = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
