"""A model's weights as a short hash: the cache key of what depends only on the frozen weights (means, teacher)."""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from subnetlab.models.device_map import stored_value


def weights_digest(model: nn.Module) -> str:
    """A short hash of every parameter and buffer (names, shapes, bytes), offloaded ones too (``models.device_map``)."""
    h = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        t = stored_value(model, name, tensor).detach().cpu().contiguous()  # offloaded weights read one at a time
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
