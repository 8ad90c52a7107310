"""The steps of the shape-bias study for one model family: discovery, then every training condition.

Discovery (section 5.2): continuous sparsification
(``subnetlab.methods.continuous_sparsification``) trains a mask over every
weight the vision adapter names (``vision_weight_matrices``: every ResNet
convolution; ViT attention, MLP and patch embedding), never the classifier,
to classify *mean-pooled* images; one run per lambda, the best on the
mean-pooled selection split wins. Batch-norm statistics stay the base
model's while masks train, so the subnetwork is exactly ``base * mask``.

Conditions (Table 1; the table ``subnetlab.transfer.conditions.SHAPE_BIAS_CONDITIONS``),
each trained on the ``train`` split of original images unless stated:

* ``subtask-induction``: the subnetwork's weights copied, frozen, into a
  re-initialised model (``subnetlab.transfer.build_transfer_model``);
* ``random-matched``: the same number of weights per matrix, at random
  positions (the control of the paper's section 4; not in its Table 1);
* ``scratch``: a fresh model;
* ``data-mixture``: the base model fine-tuned on ``train`` + the discovery
  split's mean-pooled images;
* ``linear-ft``: the base model with only its classifier trained.

Choices where the paper's text and the authors' released vision code differ
are family settings (``VISION_CODE_NOTES`` in ``report.py`` lists every
difference with its released file): ``discovery.mask_classifier`` (the
released ``vision_ablate.py`` masks every ``Linear`` of a ViT, the classifier
included), ``discovery.keep`` (its ``eval_acc >= best_acc``: ``"best-latest"``),
``transfer_reinit`` (``"masked"``: only the masked matrices re-initialised, the
rest copied, as ``vision_transfer.py`` through ``init_subnet_transfer``; ``"all"``:
the text) and ``class_weighted_loss`` (``vision_transfer.py`` weights the
cross-entropy by inverse class frequency, for its transfer and scratch runs).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from subnetlab.analysis.shape_bias import evaluate_shape_bias, predict
from subnetlab.experiments.shape_bias.models import copy_model, normalisation, train_config
from subnetlab.experiments.shape_bias.training import freeze_all_but, train_classifier
from subnetlab.intervene import mask_weights
from subnetlab.io import read_json, write_json
from subnetlab.methods.continuous_sparsification import ContinuousSparsification, DiscoveryResult, sweep
from subnetlab.models.vision import classifier_parameters, vision_adapter, vision_weight_matrices
from subnetlab.progress import stage
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.images.imageset import ImageSource, concat, iter_batches, normalize
from subnetlab.transfer import build_transfer_model, random_matched
from subnetlab.transfer.conditions import SHAPE_BIAS_CONDITIONS

CONDITIONS = tuple(SHAPE_BIAS_CONDITIONS)  # subtask-induction, random-matched, scratch, data-mixture, linear-ft
CURVE_SPLITS = ("original", "mean-pooled")
EVAL_SPLITS = ("original", "mean-pooled", "cue-conflict", "texture-free")


def _freeze_batchnorm(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()


def discover(family: str, fs: dict[str, Any], base: nn.Module, data: dict[str, ImageSource], out: Path,
             seed: int) -> tuple[Subnetwork, dict[str, Any]]:
    """Find the subnetwork best on mean-pooled images; ``out/subnetwork.safetensors`` + ``discovery.json``."""
    adapter = vision_adapter(base)
    sub_file, summary_file = out / "subnetwork.safetensors", out / "discovery.json"
    if sub_file.is_file() and summary_file.is_file():
        return Subnetwork.load(sub_file, adapter=adapter), read_json(summary_file)
    mean, std = normalisation(fs)
    d = fs["discovery"]
    names = discovery_targets(base, bool(d.get("mask_classifier", False)))
    strategy = ContinuousSparsification(epochs=int(d["epochs"]), lr=float(d["lr"]), batch_size=int(d["batch_size"]),
                                        init=float(d.get("init", -0.1)), beta_final=float(d.get("beta_final", 100.0)),
                                        keep=str(d.get("keep", "best")))
    generator = torch.Generator().manual_seed(seed)

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        _freeze_batchnorm(model)
        images, labels = batch
        return F.cross_entropy(model(pixel_values=normalize(images, mean, std)).logits, labels)

    def evaluate(model: nn.Module) -> float:
        held_out = data["discovery-eval"]
        return float((predict(model, held_out, mean, std) == held_out.labels).double().mean())

    def run(s: ContinuousSparsification) -> DiscoveryResult:
        work = copy.deepcopy(base)
        return s.fit(work, vision_adapter(work), lambda epoch: iter_batches(data["discovery"], s.batch_size, True, generator),
                     loss_fn, evaluate, names=names,
                     log=lambda r: stage(f"{family} discovery lambda={s.l0_lambda:g} epoch {r.epoch}: "
                                         f"eval {r.eval_accuracy:.3f}, kept {r.kept_fraction:.3f}"))

    best, results = sweep(strategy, [float(x) for x in d["lambdas"]], run)
    sub = Subnetwork.from_weight_masks(adapter, best.masks, method="continuous-sparsification", seed=seed,
                                       extra={"l0_lambda": repr(best.l0_lambda), "objective": "mean-pooled accuracy"})
    with mask_weights(base, {n: m.float() for n, m in sub.weights.items()}):
        subnet_row = evaluate_shape_bias(base, _eval_sets(data), mean, std)
    summary = {
        "kept_fraction": best.kept_fraction, "l0_lambda": best.l0_lambda, "epoch": best.epoch,
        "selection_accuracy": best.eval_accuracy, "masked_parameters": sum(m.numel() for m in best.masks.values()),
        "total_parameters": sum(p.numel() for p in base.parameters()),
        "subnetwork": subnet_row, "base": evaluate_shape_bias(base, _eval_sets(data), mean, std),
        "runs": [{"l0_lambda": r.l0_lambda, "selection_accuracy": r.eval_accuracy, "kept_fraction": r.kept_fraction,
                  "epoch": r.epoch, "history": [vars(h) for h in r.history]} for r in results],
        "strategy": strategy.config(), "targets": names,
    }
    sub.save(sub_file)
    write_json(summary_file, summary)
    return sub, summary


def discovery_targets(model: nn.Module, mask_classifier: bool = False) -> list[str]:
    """The weights discovery masks: ``vision_weight_matrices`` (never the classifier), plus, with
    ``mask_classifier``, the classifier's weight matrices (the released ``vision_ablate.py`` masks every ViT
    ``Linear``, the classifier included; its ResNet masks only convolutions)."""
    names = vision_weight_matrices(model)
    if mask_classifier:
        names += [n for n in classifier_parameters(model) if model.get_parameter(n).dim() == 2]
    return names


def transfer_start(cond: str, base: nn.Module, sub: Subnetwork, seed: int, reinit: str = "all"):
    """The starting ``TransferModel`` of ``subtask-induction`` / ``random-matched`` / ``scratch`` (``reinit``:
    ``"all"``, the text, or ``"masked"``, the released ``vision_transfer.py``)."""
    adapter = vision_adapter(base)
    if cond == "scratch":
        return build_transfer_model(base, "scratch", seed=seed + 1, adapter=adapter)
    mask = sub if cond == "subtask-induction" else random_matched(sub, seed)
    return build_transfer_model(base, "subnetwork", seed=seed + 1, subnetwork=mask, adapter=adapter, reinit=reinit)


def _eval_sets(data: dict[str, ImageSource]) -> dict[str, ImageSource]:
    return {k: data[k] for k in EVAL_SPLITS if k in data}


def _train_size(data: dict[str, ImageSource], cond: str, base_data: str) -> str:
    n_train, n_disc = len(data["train"]), len(data["discovery"])
    if cond in ("scratch",):
        return f"{n_train}"
    if cond in ("subtask-induction", "random-matched"):
        return f"{n_train} (+ base: {base_data})"
    if cond == "data-mixture":
        return f"{base_data} + {n_train} + {n_disc} mean-pooled"
    return f"{base_data} + {n_train}"


def run_condition(cond: str, family: str, fs: dict[str, Any], base: nn.Module, sub: Subnetwork,
                  data: dict[str, ImageSource], out: Path, seed: int, base_data: str) -> dict[str, Any]:
    """Train one condition; ``out/<cond>.json`` holds its final row and its curve (reused on reruns)."""
    path = out / f"{cond}.json"
    if path.is_file():
        return read_json(path)
    stage(f"{family}: {cond}")
    mean, std = normalisation(fs)
    curves = {k: data[k] for k in CURVE_SPLITS}
    handle = None
    train_mode, train_data, steps = True, data["train"], "train_steps"
    if cond in ("subtask-induction", "random-matched", "scratch"):
        tm = transfer_start(cond, base, sub, seed, str(fs.get("transfer_reinit", "all")))
        model, handle = tm.model, tm.handle
    elif cond == "data-mixture":
        model, steps = copy_model(base), "mixture_steps"
        train_data = concat([data["train"], data["discovery"]], "train + mean-pooled")
    elif cond == "linear-ft":
        if isinstance(fs["model"], str):  # the paper's base model already is the linear fine-tuned one
            result = {"row": evaluate_shape_bias(base, _eval_sets(data), mean, std), "curve": read_json(out / "base_curve.json")}
            result["train_size"] = _train_size(data, cond, base_data)
            write_json(path, result)
            return result
        model, steps, train_mode = copy_model(base), "linear_steps", False
        freeze_all_but(model, classifier_parameters(model))
    else:
        raise ValueError(cond)
    lr_scale = float(fs.get("finetune_lr_scale", 1.0)) if cond in ("data-mixture", "linear-ft") else 1.0
    model.train()
    cfg = train_config(fs, steps, lr_scale)
    if cond in ("subtask-induction", "random-matched", "scratch") and fs.get("class_weighted_loss"):
        cfg = replace(cfg, class_weights=True)
    curve = train_classifier(model, train_data, cfg, mean, std, seed + 2, eval_sets=curves, train_mode=train_mode)
    row = evaluate_shape_bias(model, _eval_sets(data), mean, std)
    if handle is not None:
        handle.remove()
    result = {"row": row, "curve": curve, "train_size": _train_size(data, cond, base_data), "steps": int(fs[steps])}
    write_json(path, result)
    return result


__all__ = ["CONDITIONS", "EVAL_SPLITS", "discover", "discovery_targets", "run_condition", "transfer_start"]
