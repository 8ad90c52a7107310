"""Image classifiers: ResNet and ViT (transformers' pure-PyTorch classes; no torchvision) and their mask targets.

Weight-level masks (continuous sparsification, subnetwork transfer) go on:

* ResNet: every convolution weight (stem, every block, every shortcut); not
  the batch norms and not the classifier, as in the paper (masks "on every
  layer except the classifier layer").
* ViT: the attention (Q, K, V, output) and MLP matrices the text adapter
  already names, plus the patch-embedding projection (a ``Conv2d`` whose
  weight is ``[hidden, 3, patch, patch]``), added here by name.

ViT models keep using the shared ``Adapter`` (family ``vit``: head gates, MLP
outputs, parameter counts). ResNets have no heads or MLPs, so their family in
``subnetlab.models.adapters.FAMILIES`` builds a ``ResNetAdapter`` (defined
there, re-exported here) with the part of the adapter interface that weight
masks and ``Subnetwork`` need: ``family``, ``parameter``, ``fingerprint``,
``weight_matrices``, ``layers``, ``module_name``.
"""

from __future__ import annotations

from pathlib import Path
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
from subnetlab.models.adapters import Adapter, ResNetAdapter, get_adapter
from subnetlab.models.loading import LoadedModel, quiet_transformers, refuse_pickled_weights

VISION_FAMILIES = ("resnet", "vit")
PATCH_EMBEDDING = "embeddings.patch_embeddings.projection"  # relative to the ViT base model


VisionAdapter = Adapter | ResNetAdapter


def _model_type(model: nn.Module) -> str:
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "model_type"):
        raise SubnetlabError(f"{type(model).__name__} has no Hugging Face config; cannot find its components")
    return config.model_type


def vision_adapter(model: nn.Module) -> VisionAdapter:
    """``ResNetAdapter`` for a ResNet, the shared ``Adapter`` for a ViT; other models are refused."""
    kind = _model_type(model)
    if kind not in VISION_FAMILIES:
        raise SubnetlabError(f"unsupported image model type {kind!r}; supported: {', '.join(VISION_FAMILIES)}")
    return get_adapter(model)


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
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        refuse_pickled_weights(local, name_or_path)
    with quiet_transformers():
        model = AutoModelForImageClassification.from_pretrained(name_or_path, config=config, use_safetensors=True,
                                                                **kwargs)
    model.eval()
    return LoadedModel(model, None, vision_adapter(model), name_or_path)  # type: ignore[arg-type]


def classifier_parameters(model: nn.Module) -> list[str]:
    """Names of the classification head's parameters (what linear fine-tuning trains)."""
    head = model.classifier
    prefix = "classifier."
    return [prefix + n for n, _ in head.named_parameters()]


__all__ = ["VISION_FAMILIES", "ResNetAdapter", "VisionAdapter", "vision_adapter", "vision_weight_matrices",
           "resnet_config", "vit_config", "build_vision_model", "load_vision_model", "classifier_parameters"]
