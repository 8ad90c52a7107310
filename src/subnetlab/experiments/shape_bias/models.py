"""The models of the shape-bias study: per-family settings, fresh models, and the base model.

Each family (``resnet``, ``vit``) has a settings dict in the preset::

    {"model": {...config...} or "hub-id", "mean": [...], "std": [...],
     "optimizer": "sgd", "base_lr": ..., "lr": ..., "weight_decay": ..., "warmup": ..., "batch_size": ...,
     "base_steps": ..., "train_steps": ..., "mixture_steps": ..., "linear_steps": ..., "eval_every": ...,
     "discovery": {"epochs": ..., "lr": ..., "lambdas": [...], "batch_size": ...}}

Demo: ``model`` is a small config, and the base model is trained here from
scratch on ``pretrain``. Paper: ``model`` is a hub id (``microsoft/resnet-18``,
``google/vit-base-patch16-224``); its classifier is replaced by a 16-way one
trained alone on ``train`` (linear fine-tuning, which is also the Linear FT
row of Table 1) and that model is the base the subnetwork is found in, as in
the paper (Table 2's "Original" column equals the Linear FT row's).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from torch import nn

from subnetlab.experiments.shape_bias.training import TrainConfig, freeze_all_but, train_classifier
from subnetlab.io import load_tensors, read_json, save_tensors, write_json
from subnetlab.models.vision import (
    build_vision_model,
    classifier_parameters,
    load_vision_model,
    resnet_config,
    vit_config,
)
from subnetlab.progress import stage
from subnetlab.tasks.images.imageset import ImageSource


def normalisation(fs: dict[str, Any]) -> tuple[list[float], list[float]]:
    return list(fs["mean"]), list(fs["std"])


def train_config(fs: dict[str, Any], steps_key: str, lr_scale: float = 1.0, lr_key: str = "lr") -> TrainConfig:
    """The family's optimiser settings for a run of ``fs[steps_key]`` steps at ``fs[lr_key] * lr_scale``."""
    return TrainConfig(steps=int(fs[steps_key]), batch_size=int(fs["batch_size"]), lr=float(fs[lr_key]) * lr_scale,
                       optimizer=fs["optimizer"], weight_decay=float(fs["weight_decay"]), warmup=int(fs["warmup"]),
                       eval_every=int(fs["eval_every"]))


def fresh_model(family: str, fs: dict[str, Any], num_labels: int, image_size: int, seed: int) -> nn.Module:
    """A newly initialised model of the family's small demo architecture (``fs["model"]`` a config dict)."""
    spec = fs["model"]
    if family == "resnet":
        config = resnet_config(num_labels, tuple(spec["hidden_sizes"]), tuple(spec["depths"]),
                               int(spec["embedding_size"]), spec.get("layer_type", "basic"))
    else:
        config = vit_config(num_labels, image_size, int(spec["patch_size"]), int(spec["hidden_size"]),
                            int(spec["layers"]), int(spec["heads"]), spec.get("intermediate_size"))
    return build_vision_model(config, seed).model


def _save(model: nn.Module, path: Path) -> None:
    save_tensors(path, {k: v for k, v in model.state_dict().items()})


def base_model(family: str, fs: dict[str, Any], data: dict[str, ImageSource], out: Path, image_size: int,
               seed: int) -> tuple[nn.Module, list[dict]]:
    """The trained model the subnetwork is found in (saved to ``out/base.safetensors``; reloaded on reruns)."""
    num_labels = len(data["train"].classes)
    mean, std = normalisation(fs)
    weights, curve_file = out / "base.safetensors", out / "base_curve.json"
    pretrained = isinstance(fs["model"], str)
    if pretrained:
        model = load_vision_model(fs["model"], num_labels=num_labels).model
    else:
        model = fresh_model(family, fs, num_labels, image_size, seed)
    if weights.is_file() and curve_file.is_file():
        model.load_state_dict(load_tensors(weights))
        return model.eval(), read_json(curve_file)
    evals = {k: data[k] for k in ("original", "mean-pooled")}
    if pretrained:
        stage(f"{family}: linear fine-tuning of {fs['model']} (the base model)")
        freeze_all_but(model, classifier_parameters(model))
        curve = train_classifier(model, data["train"], train_config(fs, "linear_steps"), mean, std, seed,
                                 eval_sets=evals, train_mode=False)
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        stage(f"{family}: training the base model on the pre-training split")
        curve = train_classifier(model, data["pretrain"], train_config(fs, "base_steps", lr_key="base_lr"), mean, std,
                                 seed, eval_sets=evals)
    _save(model, weights)
    write_json(curve_file, curve)
    return model.eval(), curve


def copy_model(model: nn.Module) -> nn.Module:
    clone = copy.deepcopy(model)
    for p in clone.parameters():
        p.requires_grad_(True)
    return clone


__all__ = ["normalisation", "train_config", "fresh_model", "base_model", "copy_model"]
