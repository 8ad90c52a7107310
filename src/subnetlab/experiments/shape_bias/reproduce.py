"""`subnetlab reproduce shape-bias`: instilling a shape bias by Subtask Induction (Zhang, Lepori, Pavlick 2024, section 5).

For each model family (ResNet, ViT):

1. a base model: trained here on generated images (demo) or loaded from the
   hub with a linear-fine-tuned 16-class head (paper);
2. discovery: the subnetwork that classifies *mean-pooled* images best
   (continuous sparsification over every convolution / attention, MLP and
   patch-embedding matrix);
3. transfer: that subnetwork, frozen, in a re-initialised model trained on
   original images -- compared with training from scratch, fine-tuning the
   base model on a mixture of original and mean-pooled images, linear
   fine-tuning of the base model, and (demo) a random subnetwork of the
   same size per matrix;
4. ``report.md``: Table 1 (accuracy on original and mean-pooled images,
   cue-conflict accuracy and robustness), Table 2 (subnetwork size and its
   mean-pooled accuracy against the base model's) and Figure 5 (training
   curves on original and mean-pooled images).

Every step writes its result under ``out/<family>/`` and is skipped when a
rerun finds it; a run directory refuses settings other than its own. Any setting can be overridden by name
(on the command line as ``KEY=VALUE``, the value in YAML: ``models=[resnet]``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.shape_bias.settings import ShapeBiasSettings
from subnetlab.io import read_json, write_json
from subnetlab.progress import stage

NAME = "shape-bias"

_DISCOVERY_DEMO = {"epochs": 30, "lr": 0.01, "batch_size": 64, "lambdas": [1e-5], "init": -0.1, "beta_final": 100.0,
                   "keep": "best", "mask_classifier": False}
# the released vision code's choices (vision/vision_ablate.py, vision/vision_transfer.py; see report.VISION_CODE_NOTES)
_RELEASED = {"transfer_reinit": "masked", "class_weighted_loss": True}

PRESETS: dict[str, dict[str, Any]] = {
    "demo": {
        "data": "generated",
        "threads": 1,  # tiny models: one thread is as fast, and does not collapse on a shared CPU
        "models": ["resnet", "vit"],
        "conditions": ["subtask-induction", "scratch", "data-mixture", "linear-ft", "random-matched"],
        "seed": 0,
        "num_classes": 4,
        "image_size": 32,
        "pretrain_texture_correlation": 0.5,  # how often the base model's images carry their class's texture
        "pretrain_shape_correlation": 1.0,  # < 1: some carry another class's shape (texture the reliable cue)
        "sizes": {"pretrain": 3000, "train": 600, "discovery": 480, "discovery-eval": 120, "test": 300,
                  "cue-conflict": 300, "texture-free": 300},
        "segmentation": "felzenszwalb",
        "segmentation_params": {},
        "resnet": {
            "model": {"hidden_sizes": [16, 32, 64], "depths": [1, 1, 1], "embedding_size": 16},
            "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
            "optimizer": "sgd", "base_lr": 0.05, "lr": 0.01, "weight_decay": 1e-4, "warmup": 0, "batch_size": 64,
            "base_steps": 900, "train_steps": 300, "mixture_steps": 300, "linear_steps": 150, "eval_every": 30,
            "finetune_lr_scale": 1.0, "discovery": dict(_DISCOVERY_DEMO),
            "transfer_reinit": "all", "class_weighted_loss": False,
        },
        "vit": {
            "model": {"patch_size": 8, "hidden_size": 64, "layers": 4, "heads": 4},
            "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
            "optimizer": "adamw", "base_lr": 1e-3, "lr": 1e-3, "weight_decay": 0.05, "warmup": 50, "batch_size": 64,
            "base_steps": 4000, "train_steps": 400, "mixture_steps": 300, "linear_steps": 150, "eval_every": 40,
            "finetune_lr_scale": 0.3, "discovery": {**_DISCOVERY_DEMO, "epochs": 60},
            "transfer_reinit": "all", "class_weighted_loss": False,
        },
    },
    "paper": {
        "data": "imagenet16",
        "threads": 0,  # 0: leave torch's default
        "imagenet_train": "",  # ImageNet train/ (one folder per WordNet id)
        "imagenet_val": "",  # ImageNet val/ in the same layout
        "cue_conflict": "",  # Geirhos et al.'s cue-conflict stimuli (one folder per shape class)
        "models": ["resnet", "vit"],
        "conditions": ["subtask-induction", "scratch", "data-mixture", "linear-ft"],
        "seed": 0,
        "image_size": 224,
        "sizes": {"discovery": 13900, "discovery-eval": 1540},
        "segmentation": "sam:facebook/sam-vit-huge",
        "segmentation_params": {},
        "resnet": {
            "model": "microsoft/resnet-18",
            "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
            "optimizer": "sgd", "base_lr": 1e-3, "lr": 1e-3, "weight_decay": 1e-4, "warmup": 0, "batch_size": 128,
            "base_steps": 0, "train_steps": 33160, "mixture_steps": 33160, "linear_steps": 5000, "eval_every": 1000,
            "finetune_lr_scale": 1.0,
            "discovery": {"epochs": 100, "lr": 1e-3, "batch_size": 32, "lambdas": [1e-6, 1e-7, 1e-8], "init": -0.1,
                          "beta_final": 100.0, "keep": "best-latest", "mask_classifier": False},
            **_RELEASED,
        },
        "vit": {
            "model": "google/vit-base-patch16-224",
            "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
            "optimizer": "sgd", "base_lr": 1e-3, "lr": 1e-3, "weight_decay": 1e-4, "warmup": 0, "batch_size": 512,
            "base_steps": 0, "train_steps": 33160, "mixture_steps": 33160, "linear_steps": 5000, "eval_every": 1000,
            "finetune_lr_scale": 1.0,
            "discovery": {"epochs": 100, "lr": 1e-3, "batch_size": 32, "lambdas": [1e-6, 1e-7, 1e-8], "init": -0.1,
                          "beta_final": 100.0, "keep": "best-latest", "mask_classifier": True},
            **_RELEASED,
        },
    },
}


def _check_inputs(settings: ShapeBiasSettings) -> None:
    """The paper's image directories exist (checked when the study runs; a dry run on another machine needs none)."""
    if settings.data == "imagenet16":
        for key in ("imagenet_train", "imagenet_val", "cue_conflict"):
            value = getattr(settings, key)
            if not value or not Path(str(value)).expanduser().is_dir():
                raise SubnetlabError(f"the paper preset needs ImageNet and Geirhos et al.'s cue-conflict stimuli: "
                                     f"set {key} to a directory (got {value!r})", setting=key)


def run(settings: ShapeBiasSettings | Mapping[str, Any], out: Path) -> Path:
    """Run the study into ``out`` (resuming finished steps) and return the report's path."""
    from subnetlab.runtime import torch_threads

    settings = ShapeBiasSettings.of(settings)  # checked before config.json: a refusal leaves nothing behind

    with torch_threads(max(0, int(settings.threads))):
        return _run(settings, out)


def _run(settings: ShapeBiasSettings, out: Path) -> Path:
    import resource
    import time

    import torch

    from subnetlab.experiments.shape_bias.data import prepare_data
    from subnetlab.experiments.shape_bias.models import base_model
    from subnetlab.experiments.shape_bias.report import write_report
    from subnetlab.experiments.shape_bias.steps import discover, run_condition

    _check_inputs(settings)
    start_wall = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start_cpu = usage.ru_utime + usage.ru_stime
    out = Path(out)
    config = {"reproduction": NAME, **settings.to_dict()}
    previous = out / "config.json"
    if previous.is_file() and read_json(previous) != json.loads(json.dumps(config)):
        raise SubnetlabError(f"{out} holds a run with other settings (see {previous}); "
                             "choose a new output directory, or delete it to start over", setting="out")
    out.mkdir(parents=True, exist_ok=True)
    write_json(previous, config)
    data = prepare_data(settings, out)
    seed = int(settings.seed)
    results: dict[str, Any] = {}
    for family in settings.models:
        fs = settings.family(family)
        fam_out = out / family
        fam_out.mkdir(exist_ok=True)
        base, base_curve = base_model(family, fs, data, fam_out, int(settings.image_size), seed)
        base_data = fs["model"] if isinstance(fs["model"], str) else f"{len(data['pretrain'])} pre-training"
        sub, discovery = discover(family, fs, base, data, fam_out, seed)
        conditions = {cond: run_condition(cond, family, fs, base, sub, data, fam_out, seed, base_data)
                      for cond in settings.conditions}
        results[family] = {"discovery": discovery, "conditions": conditions, "base_curve": base_curve}
    metrics = {
        family: {"table2": {k: r["discovery"][k] for k in ("kept_fraction", "l0_lambda", "selection_accuracy")}
                 | {"base": r["discovery"]["base"], "subnetwork": r["discovery"]["subnetwork"]},
                 "table1": {c: {"train_size": v["train_size"], **v["row"]} for c, v in r["conditions"].items()}}
        for family, r in results.items()
    }
    usage = resource.getrusage(resource.RUSAGE_SELF)
    timing = {"wall_s": round(time.perf_counter() - start_wall, 1),
              "cpu_s": round(usage.ru_utime + usage.ru_stime - start_cpu, 1), "threads": torch.get_num_threads()}
    write_json(out / "metrics.json", {**metrics, "timing": timing})
    stage("writing the report")
    return write_report(out, settings, data, results, timing)


Settings = ShapeBiasSettings

__all__ = ["NAME", "PRESETS", "Settings", "run"]
