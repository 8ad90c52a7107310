"""Image classifiers: ResNet and ViT (transformers' pure-PyTorch classes; no torchvision) and their mask targets.

Weight-level masks (continuous sparsification, subnetwork transfer) go on:

* ResNet: every convolution weight (stem, every block, every shortcut); not
  the batch norms and not the classifier, as in the paper (masks "on every
  layer except the classifier layer").
* ViT: the attention (Q, K, V, output) and MLP matrices the text adapter
  already names, plus the patch-embedding projection (a ``Conv2d`` whose
  weight is ``[hidden, 3, patch, patch]``), added here by name.

ViT models keep using the shared ``Adapter`` (family ``vit``: head gates, MLP
outputs, parameter counts). ResNets have no heads or MLPs, so ``ResNetAdapter``
is a small adapter of its own with the part of the adapter interface that
weight masks and ``Subnetwork`` need: ``family``, ``parameter``,
``fingerprint``, ``weight_matrices``, ``layers``, ``module_name``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForImageClassification,
    PretrainedConfig,
    ResNetConfig,
    ResNetForImageClassification,
    ViTConfig,
    ViTForImageClassification,
)

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import Adapter, get_adapter
from subnetlab.models.loading import LoadedModel

VISION_FAMILIES = ("resnet", "vit")
PATCH_EMBEDDING = "embeddings.patch_embeddings.projection"  # relative to the ViT base model


@dataclass
class ResNetAdapter:
    """Component map of a transformers ResNet: its residual blocks and convolution weights."""

    model: nn.Module
    _names: dict[int, str] = field(repr=False, default_factory=dict)

    family = "resnet"
    num_heads = 0

    @property
    def num_layers(self) -> int:
        return len(self.layers())

    def layers(self) -> list[nn.Module]:
        """The residual blocks, stage by stage."""
        return [block for stage in self.model.base_model.encoder.stages for block in stage.layers]

    def module_name(self, module: nn.Module) -> str:
        if not self._names:
            self._names.update({id(m): n for n, m in self.model.named_modules()})
        return self._names[id(module)]

    def weight_matrices(self) -> list[str]:
        """Every convolution weight (stem, blocks, shortcuts), in forward order: weight-mask targets."""
        return [f"{name}.weight" for name, m in self.model.named_modules() if isinstance(m, nn.Conv2d)]

    def parameter(self, name: str) -> torch.Tensor:
        return self.model.get_parameter(name)

    def fingerprint(self, parameter_names: list[str] | None = None) -> str:
        """Hash of the architecture and the named parameters' shapes (default: every convolution)."""
        names = sorted(parameter_names if parameter_names is not None else self.weight_matrices())
        shapes = {name: list(self.parameter(name).shape) for name in names}
        cfg = self.model.config
        blob = json.dumps({"family": self.family, "depths": list(cfg.depths), "hidden_sizes": list(cfg.hidden_sizes),
                           "layer_type": cfg.layer_type, "params": shapes}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


VisionAdapter = Adapter | ResNetAdapter


def _model_type(model: nn.Module) -> str:
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "model_type"):
        raise SubnetlabError(f"{type(model).__name__} has no Hugging Face config; cannot find its components")
    return config.model_type


def vision_adapter(model: nn.Module) -> VisionAdapter:
    """``ResNetAdapter`` for a ResNet, the shared ``Adapter`` for a ViT; other models are refused."""
    kind = _model_type(model)
    if kind == "resnet":
        return ResNetAdapter(model)
    if kind == "vit":
        return get_adapter(model)
    raise SubnetlabError(f"unsupported image model type {kind!r}; supported: {', '.join(VISION_FAMILIES)}")


def vision_weight_matrices(model: nn.Module) -> list[str]:
    """Names of the weights a vision weight mask covers (see module docstring); never the classifier."""
    adapter = vision_adapter(model)
    if isinstance(adapter, ResNetAdapter):
        return adapter.weight_matrices()
    patch = f"{adapter.module_name(model.base_model.get_submodule(PATCH_EMBEDDING))}.weight"
    return [patch, *adapter.weight_matrices()]


# -- building and loading --------------------------------------------------------------------------
def resnet_config(num_labels: int, hidden_sizes: tuple[int, ...] = (16, 32, 64), depths: tuple[int, ...] = (1, 1, 1),
                  embedding_size: int = 16, layer_type: str = "basic") -> ResNetConfig:
    """A ResNet config; ResNet-18 is ``hidden_sizes=(64, 128, 256, 512), depths=(2, 2, 2, 2), embedding_size=64``."""
    if len(hidden_sizes) != len(depths):
        raise SubnetlabError(f"resnet: {len(hidden_sizes)} hidden sizes but {len(depths)} depths")
    return ResNetConfig(num_channels=3, embedding_size=embedding_size, hidden_sizes=list(hidden_sizes),
                        depths=list(depths), layer_type=layer_type, num_labels=num_labels)


def vit_config(num_labels: int, image_size: int = 32, patch_size: int = 4, hidden_size: int = 64, layers: int = 4,
               heads: int = 4, intermediate_size: int | None = None) -> ViTConfig:
    """A ViT config; ViT-B/16 is ``image_size=224, patch_size=16, hidden_size=768, layers=12, heads=12``."""
    if image_size % patch_size:
        raise SubnetlabError(f"vit: image_size {image_size} is not a multiple of patch_size {patch_size}")
    return ViTConfig(image_size=image_size, patch_size=patch_size, num_channels=3, hidden_size=hidden_size,
                     num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=intermediate_size or 2 * hidden_size, num_labels=num_labels)


def build_vision_model(config: PretrainedConfig, seed: int = 0) -> LoadedModel:
    """A freshly initialised image classifier from a config (``seed`` fixes the initial weights)."""
    classes: dict[str, Any] = {"resnet": ResNetForImageClassification, "vit": ViTForImageClassification}
    if config.model_type not in classes:
        raise SubnetlabError(f"unsupported image model type {config.model_type!r}; supported: {', '.join(classes)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = classes[config.model_type](config)
    model.eval()
    return LoadedModel(model, None, vision_adapter(model), f"config:{config.model_type}")  # type: ignore[arg-type]


def load_vision_model(name_or_path: str, num_labels: int | None = None) -> LoadedModel:
    """A pretrained image classifier (hub id such as ``microsoft/resnet-18``, or a local directory).

    With ``num_labels`` different from the checkpoint's, the classifier is replaced by a new,
    randomly initialised one of that size (the rest of the network is loaded).
    """
    try:
        config = AutoConfig.from_pretrained(name_or_path)
    except (OSError, ValueError) as e:
        raise SubnetlabError(f"{name_or_path}: cannot load a model config ({str(e).splitlines()[0]})") from None
    if config.model_type not in VISION_FAMILIES:
        raise SubnetlabError(f"{name_or_path}: model type {config.model_type!r} is not one of {', '.join(VISION_FAMILIES)}")
    kwargs: dict[str, Any] = {}
    if num_labels is not None and num_labels != config.num_labels:
        config.num_labels = num_labels
        config.id2label = {i: str(i) for i in range(num_labels)}
        config.label2id = {str(i): i for i in range(num_labels)}
        kwargs["ignore_mismatched_sizes"] = True
    model = AutoModelForImageClassification.from_pretrained(name_or_path, config=config, **kwargs)
    model.eval()
    return LoadedModel(model, None, vision_adapter(model), name_or_path)  # type: ignore[arg-type]


def classifier_parameters(model: nn.Module) -> list[str]:
    """Names of the classification head's parameters (what linear fine-tuning trains)."""
    head = model.classifier
    prefix = "classifier."
    return [prefix + n for n, _ in head.named_parameters()]


__all__ = ["VISION_FAMILIES", "ResNetAdapter", "VisionAdapter", "vision_adapter", "vision_weight_matrices",
           "resnet_config", "vit_config", "build_vision_model", "load_vision_model", "classifier_parameters"]
