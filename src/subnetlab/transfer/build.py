"""Building the model a transfer run starts from, for every condition of the paper and its controls.

Section 3.2: the weights inside the subnetwork are copied from the trained
model and frozen, every other weight is re-initialised and trained::

    W = m * W_kept + (1 - m) * W_new          (gradients reach W_new only)

This is ``subnetlab.intervene.mask_weights(model, masks, kept=...)``: the kept
values live in a buffer, so they are bit-identical after any amount of training.

Conditions (the table ``subnetlab.transfer.conditions.CONDITIONS``):

* ``subnetwork``: the discovered mask;
* ``random-matched`` / ``complement-matched``: the controls of
  ``subnetlab.transfer.controls`` (built by the caller, passed as the mask);
* ``random-released``: the released code's random control (n - k weights per
  matrix), drawn here under ``seed`` from the discovered subnetwork the caller
  passes (``subnetlab.transfer.controls.random_released``);
* ``empty-mask``: the masked conditions' starting model with nothing transferred
  from the masked matrices (the discovered subnetwork, passed by the caller,
  names them): with ``reinit="masked"`` the copied embeddings, layer norms,
  biases and head alone; with ``reinit="all"`` it equals ``scratch``;
* ``scratch``: a freshly initialised model;
* ``full``: the whole trained model, fine-tuned;
* ``embeddings``: a fresh model with only the trained token and position
  embeddings copied in (how much of the effect do they carry?).

``reinit="all"`` (the paper's text) re-initialises everything outside the
subnetwork, embeddings, biases and layer norms included; ``reinit="masked"``
(the released code) re-initialises only the masked matrices and copies every
other parameter from the trained model (trainable). ``freeze=False`` (appendix
B.3) lets the transferred weights train too: they are simply copied in.
Fresh weights come from the model class's own initialisation under ``seed``,
so ``scratch`` and ``subnetwork`` with the same seed share every weight
outside the subnetwork. ``init_std`` (the masked conditions only) redraws the
masked matrices' fresh values from ``N(0, init_std^2)`` instead: the released
code re-initialises every masked GPT-2 ``Conv1D`` weight with
``nn.init.normal_(std=0.02)`` (NeuroSurgeon's ``ContSparseGPTConv1D.
_init_subnet_transfer``, bundled in ``_NeuroSurgeon/src/Masking/contsparse_layer.py``),
where transformers' GPT-2 draws the ``c_proj`` matrices at
``0.02 / sqrt(2 * n_layer)``; ``scratch`` keeps the model's own
initialisation, as the released code's ``random`` condition
(``GPT2LMHeadModel(config)``) does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import WeightMasks, mask_weights
from subnetlab.models.adapters import Adapter, get_adapter
from subnetlab.subnetwork import Subnetwork
from subnetlab.transfer.conditions import CONDITIONS, MASKED_CONDITIONS, REINIT, check_reinit, get_condition
from subnetlab.transfer.controls import random_released


@dataclass
class TransferModel:
    """A model ready to train, with what was transferred into it and what stays frozen."""

    model: nn.Module
    condition: str
    handle: WeightMasks | None = None  # the m*W_kept + (1-m)*W_new parametrization, if any
    frozen: list[str] = field(default_factory=list)  # parameters (or masked positions' names) that never train
    transferred: int = 0  # number of trained values copied in

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def effective_weight(self, name: str) -> Tensor:
        """The weight the forward pass uses (``m*W_kept + (1-m)*W_new`` for masked ones)."""
        module_name, _, attr = name.rpartition(".")
        return getattr(self.model.get_submodule(module_name), attr).detach()


def fresh_copy(model: nn.Module, seed: int, attn_implementation: str | None = None) -> nn.Module:
    """A newly initialised model of ``model``'s class and config, from the global RNG seeded with ``seed``.

    Hugging Face initialisers draw from the global generator, so it is forked
    and seeded here: the caller's random state is untouched.
    """
    config = copy.deepcopy(model.config)
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        fresh = type(model)(config)
    device = next(model.parameters()).device
    if next(fresh.parameters()).device != device:  # a plan's fake parameters cannot be moved, even where they are
        fresh.to(device)
    fresh.train(model.training)
    return fresh


def embedding_names(model: nn.Module) -> list[str]:
    """Token and position embedding parameters (``nn.Embedding`` weights) of a model."""
    names = []
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Embedding):
            names.append(f"{module_name}.weight")
    return names


def _copy_in(target: nn.Module, source: nn.Module, names: list[str]) -> int:
    with torch.no_grad():
        for name in names:
            target.get_parameter(name).copy_(source.get_parameter(name))
    return sum(target.get_parameter(n).numel() for n in names)


def redraw_normal(model: nn.Module, names: list[str], std: float, seed: int) -> None:
    """Refill the parameters ``names`` (in the given order) from ``N(0, std^2)``, drawn from a generator
    seeded with ``seed`` (on the CPU: the same values on any device)."""
    g = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for name in names:
            p = model.get_parameter(name)
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32).mul_(std).to(p.device, p.dtype))


def build_transfer_model(
    trained: nn.Module,
    condition: str,
    *,
    seed: int,
    subnetwork: Subnetwork | None = None,
    reinit: str = "all",
    freeze: bool = True,
    adapter: Adapter | None = None,
    init_std: float | None = None,
) -> TransferModel:
    """The starting model of one transfer run (see the module docstring for the conditions and ``init_std``)."""
    get_condition(condition)
    check_reinit(reinit)
    if init_std is not None and not (isinstance(init_std, (int, float)) and init_std > 0):
        raise SubnetlabError(f"init_std {init_std!r}: expected a positive standard deviation (or none: the model's "
                             "own initialisation)", setting="init_std")
    if condition == "full":
        model = copy.deepcopy(trained)
        for p in model.parameters():
            p.requires_grad_(True)
        return TransferModel(model, condition, transferred=sum(p.numel() for p in model.parameters()))
    model = fresh_copy(trained, seed)
    if condition == "scratch":
        return TransferModel(model, condition)
    if condition == "embeddings":
        names = embedding_names(model)
        n = _copy_in(model, trained, names)
        if freeze:
            for name in names:
                model.get_parameter(name).requires_grad_(False)
        return TransferModel(model, condition, frozen=names if freeze else [], transferred=n)
    get_condition(condition, has_subnetwork=subnetwork is not None)
    if subnetwork.kind != "weights":
        raise SubnetlabError("transfer needs a weight-level subnetwork (kind 'weights'), e.g. from `subnetlab discover`")
    subnetwork.check(adapter or get_adapter(trained))
    if condition == "random-released":
        subnetwork = random_released(subnetwork, seed)
    masked = sorted(subnetwork.weights)
    if reinit == "masked":
        masked_names = set(masked)
        others = [n for n, _ in model.named_parameters() if n not in masked_names]
        _copy_in(model, trained, others)
    if init_std is not None:
        redraw_normal(model, masked, float(init_std), seed)
    if condition == "empty-mask":  # no matrix weight transferred: the fresh matrices all train
        return TransferModel(model, condition)
    masks = {n: subnetwork.weights[n].to(model.get_parameter(n).device, model.get_parameter(n).dtype) for n in masked}
    kept = {n: trained.get_parameter(n).detach() for n in masked}
    transferred = sum(int(m.sum()) for m in masks.values())
    if not freeze:
        with torch.no_grad():
            for n in masked:
                w = model.get_parameter(n)
                w.copy_(masks[n] * kept[n] + (1 - masks[n]) * w)
        return TransferModel(model, condition, transferred=transferred)
    handle = mask_weights(model, masks, kept=kept).apply()
    return TransferModel(model, condition, handle=handle, frozen=masked, transferred=transferred)


__all__ = ["CONDITIONS", "MASKED_CONDITIONS", "REINIT", "TransferModel", "build_transfer_model", "embedding_names", "fresh_copy",
           "redraw_normal"]
