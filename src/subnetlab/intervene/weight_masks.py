"""Weight-level masks by parametrization: ``m * W``, or for transfer ``m * W_kept + (1 - m) * W_new``.

``torch.nn.utils.parametrize`` recomputes the weight from its original on every
access, so gradients reach a trainable mask (continuous sparsification) or the
new weights (transfer) and never the frozen kept weights. Removing the masks
restores each module's class and the original parameter object: no trace.
"""

from __future__ import annotations

from typing import Union

from torch import Tensor, nn
from torch.nn.utils import parametrize

from subnetlab.errors import SubnetlabError

MaskLike = Union[Tensor, nn.Module]  # a fixed mask, or a module whose forward() returns the mask


class FixedMask(nn.Module):
    """A constant mask held as a buffer (moves with the model, never trained)."""

    def __init__(self, mask: Tensor) -> None:
        super().__init__()
        self.register_buffer("mask", mask.detach().clone())

    def forward(self) -> Tensor:
        return self.mask


class MaskedWeight(nn.Module):
    """Parametrization ``W -> m * W`` or, given ``kept``, ``W_new -> m * kept + (1 - m) * W_new``."""

    def __init__(self, mask: nn.Module, kept: Tensor | None = None) -> None:
        super().__init__()
        self.mask = mask
        if kept is not None:
            self.register_buffer("kept", kept.detach().clone())
        else:
            self.kept = None

    def forward(self, weight: Tensor) -> Tensor:
        m = self.mask().to(weight.device, weight.dtype)  # the weight's layer may live on another device (device map)
        if self.kept is None:
            return m * weight
        return m * self.kept.to(weight.device) + (1 - m) * weight


class WeightMasks:
    """Context manager (or handle) that masks named weights of ``model``; ``remove()`` undoes it.

    ``masks`` maps parameter names (``bert.encoder.layer.0.attention.self.query.weight``)
    to a fixed mask tensor or a mask module. With ``kept`` (same keys) the masked
    weight is ``m * kept + (1 - m) * W``: the transfer construction, where ``W`` is
    the re-initialised trainable weight and ``kept`` the frozen trained one.
    """

    def __init__(self, model: nn.Module, masks: dict[str, MaskLike], kept: dict[str, Tensor] | None = None) -> None:
        self.model = model
        self.masks = masks
        self.kept = kept or {}
        self._applied: list[tuple[nn.Module, str]] = []

    def apply(self) -> "WeightMasks":
        try:
            for name, mask in self.masks.items():
                module_name, _, attr = name.rpartition(".")
                try:
                    module = self.model.get_submodule(module_name)
                    weight = getattr(module, attr)
                except AttributeError:
                    raise SubnetlabError(f"the model has no parameter {name!r} to mask") from None
                if weight.device.type == "meta":
                    raise SubnetlabError(f"{name} is offloaded by the model's device map (its weights are loaded only "
                                         "while its module runs), so it cannot carry a weight mask; map that module "
                                         "to a device (cpu or a GPU) instead of offloading it", setting="device_map")
                mask_module = mask if isinstance(mask, nn.Module) else FixedMask(mask)
                if isinstance(mask, Tensor) and mask.shape != weight.shape:
                    raise SubnetlabError(f"mask for {name} has shape {tuple(mask.shape)}, the weight {tuple(weight.shape)}")
                kept = self.kept.get(name)
                parametrize.register_parametrization(module, attr, MaskedWeight(mask_module, kept), unsafe=True)
                self._applied.append((module, attr))
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self, bake: bool = False) -> None:
        """Drop the masks; ``bake=True`` leaves the masked values in the weights instead of the originals."""
        for module, attr in reversed(self._applied):
            if parametrize.is_parametrized(module, attr):
                parametrize.remove_parametrizations(module, attr, leave_parametrized=bake)
        self._applied.clear()

    def __enter__(self) -> "WeightMasks":
        return self.apply()

    def __exit__(self, *exc: object) -> None:
        self.remove()


def mask_weights(model: nn.Module, masks: dict[str, MaskLike], kept: dict[str, Tensor] | None = None) -> WeightMasks:
    """``with mask_weights(model, {name: mask}):`` (see ``WeightMasks``)."""
    return WeightMasks(model, masks, kept)


def mask_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The mask modules currently applied, by parameter name (to read trained masks out)."""
    found: dict[str, nn.Module] = {}
    for module_name, module in model.named_modules():
        if parametrize.is_parametrized(module):
            for attr, plist in module.parametrizations.items():
                for p in plist:
                    if isinstance(p, MaskedWeight):
                        found[f"{module_name}.{attr}"] = p.mask
    return found


__all__ = ["FixedMask", "MaskedWeight", "WeightMasks", "mask_weights", "mask_modules", "MaskLike"]
