"""Whether a model about to be fine-tuned was never trained, and whether its learning rate is a fine-tuning one.

A new user's own small model is often built from a config and saved without
training. Fine-tuning rates (BERT's 2e-5 to 5e-5, the default 2e-5) barely move
such a model in a few thousand steps: it stays at chance and nothing says why.
``fresh_model_warning`` says so before the run spends its time.

The test of "never trained": every normalisation layer (LayerNorm, RMSNorm) still
has scale exactly 1 and shift exactly 0. That is how transformers initialises
them (``_init_weights`` of BERT, RoBERTa, GPT-2, Llama, ViT), any optimiser step
on a loss that flows through a layer moves its scale and shift off those exact
values, and pretrained checkpoints have them far from 1 and 0. So it needs no
marker file (a model a user trained and saved with ``save_pretrained`` has
none) and reads no statistics that vary with the initialiser's range. It fails
only for a model whose norms were frozen while the rest trained (no warning is
then a missed warning, never a refusal), and tells nothing for a model without
normalisation layers (no warning).
"""

from __future__ import annotations

import torch
from torch import nn

FINE_TUNING_LR = 1e-4  # at or below: a fine-tuning rate (BERT's paper: 2e-5 to 5e-5); from scratch: about 1e-3


def _norms(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules()
            if isinstance(m, nn.LayerNorm) or type(m).__name__.endswith(("LayerNorm", "RMSNorm"))]


@torch.no_grad()
def looks_untrained(model: nn.Module) -> bool:
    """Every normalisation layer has scale 1 and shift 0 exactly, as initialised (False without any)."""
    norms = [m for m in _norms(model) if isinstance(getattr(m, "weight", None), torch.Tensor)]
    if not norms:
        return False
    for m in norms:
        if not torch.all(m.weight == 1):
            return False
        bias = getattr(m, "bias", None)
        if isinstance(bias, torch.Tensor) and not torch.all(bias == 0):
            return False
    return True


def fresh_model_warning(model: nn.Module, lr: float, name: str) -> str | None:
    """The warning for fine-tuning an untrained ``model`` at a fine-tuning ``lr``; None when not both."""
    if lr > FINE_TUNING_LR or not looks_untrained(model):
        return None
    return (f"{name} looks freshly initialised (every layer norm still has scale 1 and shift 0, as built from a "
            f"config; training moves them), and lr {lr:g} is a fine-tuning rate (at most {FINE_TUNING_LR:g}): a model "
            "trained from scratch usually needs an lr near 1e-3 and may stay at chance at this one")
