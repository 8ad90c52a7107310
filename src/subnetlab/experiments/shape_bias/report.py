"""``report.md`` of the shape-bias study: Table 1, Table 2, Figure 5 analogues, with measured numbers only."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from subnetlab.experiments.shape_bias.figures import FAMILY_NAMES, LABELS, example_images, training_curves
from subnetlab.experiments.shape_bias.settings import ShapeBiasSettings
from subnetlab.io import write_text
from subnetlab.tasks.images.imageset import ImageSource

PAPER_TABLE1 = {  # Zhang, Lepori, Pavlick 2024, Table 1 (original, pooled, cue acc, cue robustness), for reference
    "resnet": {"subtask-induction": (80.7, 55.6, 27.1, 77.4), "scratch": (68.9, 24.7, 15.9, 75.3),
               "data-mixture": (91.9, 38.3, 18.9, 55.3), "linear-ft": (95.4, 36.8, 18.9, 56.0)},
    "vit": {"subtask-induction": (83.4, 66.0, 20.0, 72.1), "scratch": (58.4, 23.4, 12.1, 70.3),
            "data-mixture": (84.3, 35.1, 15.0, 64.7), "linear-ft": (97.1, 57.3, 28.5, 73.8)},
}


# The shape-bias study against the authors' released vision code (Rock-Z/instilling-inductive-bias,
# vision/ and its bundled NeuroSurgeon). Each entry: (topic, the difference with the released file it comes from, a
# function of the settings saying what this run did). ``vision_code_notes(settings)`` writes them into the report.
def _families(settings: ShapeBiasSettings, key: str, default: Any, sub: str | None = None) -> str:
    out = []
    for family in settings.models:
        fs = settings.family(family) or {}
        value = (fs.get(sub) or {}).get(key, default) if sub else fs.get(key, default)
        out.append(f"{family} `{value}`")
    return ", ".join(out)


VISION_CODE_NOTES: list[tuple[str, str, Any]] = [
    ("Masked layers",
     "`vision/vision_ablate.py` (`load_model`) masks every `Conv2d` of a ResNet (as subnetlab) and every `Conv2d` and "
     "`Linear` of a ViT: the patch embedding, attention, MLP *and the classifier*; the paper's text masks every layer "
     "except the classifier, as subnetlab's default. Exposed: `discovery.mask_classifier` (paper preset: on for ViT).",
     lambda s: "mask_classifier " + _families(s, "mask_classifier", False, "discovery")),
    ("Discovery schedule",
     "`vision/configs/ablate_base.yaml` (ResNet-18: lambda 1e-8, 100 epochs, batch 32, AdamW lr 1e-3) and "
     "`vision/configs/ablate_base_vit.yaml` (ViT: lambda 1e-8, 200 epochs, batch 128); beta x 100^(1/epochs) after "
     "every epoch, frozen model in eval mode (NeuroSurgeon `Models/circuit_model.py`), as subnetlab. The paper preset "
     "sweeps lambda in {1e-6, 1e-7, 1e-8} for 100 epochs at batch 32 and keeps the most accurate.",
     lambda s: "; ".join(f"{f}: {s.family(f)['discovery']['epochs']} epochs, batch {s.family(f)['discovery']['batch_size']}, "
                         f"lambdas {s.family(f)['discovery']['lambdas']}" for f in s.models)),
    ("Which epoch's mask",
     "`vision/vision_ablate.py` saves `best_circuit_model.pt` whenever `eval_acc >= best_acc` (the latest of equally "
     "accurate epochs) and the transfer loads it; subnetlab's earlier choice was the earliest, sparser one. Exposed: "
     "`discovery.keep` (`best-latest` in the paper preset).",
     lambda s: "keep " + _families(s, "keep", "best", "discovery")),
    ("Mean-pooled images",
     "`vision/mean_pool_with_SAM.py` runs SAM ViT-H's `SamAutomaticMaskGenerator` (16 points per side, "
     "`crop_n_layers=1` with `crop_n_points_downscale_factor=2`, i.e. 8 x 8 points on each of 4 overlapping crops, "
     "its default IoU / stability filters and NMS, `min_mask_region_area=100`, which removes islands and holes under "
     "100 px inside masks) on the full-resolution images of `16-class-ImageNet/downsampled_1000` (1,000 per class, "
     "900 / 100 in `train` / `eval`); `vision/utils.py` `mean_pool` paints masks largest first, each with the mean "
     "colour of its *whole* mask (pixels later painted by a smaller mask included), then the uncovered pixels with "
     "their mean. subnetlab (`tasks/images/sam.py`): transformers' `SamModel`, 16 x 16 points on the image and on each "
     "of 2 x 2 non-overlapping crops, the best of SAM's three masks per point, no quality filter or NMS, masks under "
     "100 px dropped, every pixel painted with the mean of its final segment, at `image_size`. Not changed: these are "
     "the segmenter's implementation details, not a bias of the study; the demo uses its own segmenter.",
     lambda s: f"segmentation `{s.segmentation}` at {s.image_size} px"),
    ("Transfer: which weights are re-initialised",
     "`vision/vision_transfer.py` (`load_model`) transfers into ViTs only (ResNets raise \"Freezing embeds only work "
     "for ViT\"), re-initialises only the masked weights (NeuroSurgeon `Masking/contsparse_layer.py` "
     "`_init_subnet_transfer`: `kaiming_uniform_(a=sqrt(5))`; the masked layers' biases keep the base model's "
     "values), copies the position embeddings and layer norms (trainable) and freezes the copied `cls_token`. "
     "Exposed: `transfer_reinit` (`masked` in the paper preset; fresh values from the model's own initialisation, "
     "`cls_token` trainable); `all` re-initialises everything outside the subnetwork (the text).",
     lambda s: "transfer_reinit " + _families(s, "transfer_reinit", "all")),
    ("Transfer: training",
     "`vision/vision_transfer.py`: the 16-class ImageNet training images minus the evaluation list, Resize 256, "
     "RandomCrop 224, RandomHorizontalFlip, ImageNet mean/std, cross-entropy weighted by inverse class frequency "
     "(`loss_weight`, also for `random`, i.e. scratch); `vision/checkpoints/vit_1e-8_transfer/configs.yaml`: SGD "
     "momentum 0.9, weight decay 1e-4, lr 1e-3, batch 128, 40 epochs (`configs/transfer_vit_base.yaml`: Adam, batch "
     "512, linear warm-up 10k steps and decay); evaluation five times per epoch, the model best on original evaluation "
     "images kept (`>=`, at epoch ends). subnetlab trains for a number of steps with a cosine schedule, no crop "
     "augmentation, and reports the final model. Exposed: `class_weighted_loss` (on in the paper preset).",
     lambda s: "; ".join(f"{f}: {s.family(f)['optimizer']}, lr {s.family(f)['lr']}, batch {s.family(f)['batch_size']}, "
                         f"{s.family(f)['train_steps']} steps, class_weighted_loss {bool(s.family(f).get('class_weighted_loss'))}"
                         for f in s.models)),
    ("Conditions",
     "`vision/vision_transfer.py` runs `subnet` (Subtask Induction) and `random` (scratch: "
     "`AutoModelForImageClassification.from_config`); the data mixture is `vision/vit_augment.py` (original plus "
     "`MeanPooledImageNet` training images, one epoch with the Hugging Face `Trainer`), linear fine-tuning is the "
     "16-class base model of `vision/vit_16_class_adapt.py` / `vision/resnet_16_class_adapt.py`. `random-matched` "
     "(a random subnetwork of the same size per matrix) is subnetlab's control, not in the vision code.",
     lambda s: f"conditions {', '.join(s.conditions)}"),
    ("Cue-conflict metric",
     "`vision/geirhos_cue_conflict_eval.py`: stimuli resized to 224 and centre-cropped with ImageNet mean/std for both "
     "families (the ViT was trained with mean/std 0.5); every stimulus is counted, also those whose shape and texture "
     "agree, for which the texture label is left over from the previous image (a bug: subnetlab's "
     "`tasks/images/folder.py` `cue_conflict_folder` drops them); accuracy is per shape class averaged over the 16 "
     "classes and \"misled\" counts texture predictions per texture class over that class's number of shape "
     "images, averaged (robustness = 1 - misled). subnetlab (`analysis/shape_bias.py`) averages over images "
     "(accuracy: by shape; robustness: not by the texture) and adds Geirhos et al.'s shape bias; with the "
     "near-balanced stimuli the two averages differ little.",
     lambda s: f"cue-conflict images at {s.image_size} px with the family's own mean/std"),
]


def vision_code_notes(settings: ShapeBiasSettings) -> list[str]:
    """The notes section: every difference to the released vision code, its file, and what this run did."""
    return [f"- **{topic}.** {text} This run: {did(settings)}." for topic, text, did in VISION_CODE_NOTES]


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _delta(a: float, b: float) -> str:
    return f"{100 * (a - b):+.1f} points"


def table1(results: dict[str, Any], has_texture_free: bool) -> list[str]:
    extra = " Texture-free |" if has_texture_free else ""
    lines = ["| Model | Train set | Original | Mean-pooled | Cue-conflict accuracy | Cue-conflict robustness | "
             f"Shape bias |{extra}", "|---|---|---|---|---|---|---|" + ("---|" if has_texture_free else "")]
    for family, res in results.items():
        for cond, r in res["conditions"].items():
            row = r["row"]
            tf = f" {_pct(row.get('texture-free'))} |" if has_texture_free else ""
            lines.append(f"| {FAMILY_NAMES.get(family, family)} + {LABELS[cond]} | {r['train_size']} | "
                         f"{_pct(row['original'])} | {_pct(row['mean-pooled'])} | "
                         f"{_pct(row['cue-conflict/accuracy'])} | {_pct(row['cue-conflict/robustness'])} | "
                         f"{_pct(row['cue-conflict/shape_bias'])} |{tf}")
    return lines


def table2(results: dict[str, Any]) -> list[str]:
    lines = ["| Model | % masked parameters kept | % of all parameters | lambda | Mean-pooled: base | "
             "Mean-pooled: subnetwork | Original: base | Original: subnetwork |", "|---|---|---|---|---|---|---|---|"]
    for family, res in results.items():
        d = res["discovery"]
        kept = d["kept_fraction"] * d["masked_parameters"]
        lines.append(f"| {FAMILY_NAMES.get(family, family)} | {100 * d['kept_fraction']:.1f}% | "
                     f"{100 * kept / d['total_parameters']:.1f}% | {d['l0_lambda']:g} | "
                     f"{_pct(d['base']['mean-pooled'])} | {_pct(d['subnetwork']['mean-pooled'])} | "
                     f"{_pct(d['base']['original'])} | {_pct(d['subnetwork']['original'])} |")
    return lines


def findings(results: dict[str, Any]) -> list[str]:
    """The study's question, answered from the measured rows (Subtask Induction vs from scratch)."""
    lines = []
    for family, res in results.items():
        conds = res["conditions"]
        if "subtask-induction" not in conds or "scratch" not in conds:
            continue
        si, sc = conds["subtask-induction"]["row"], conds["scratch"]["row"]
        lines.append(
            f"- **{FAMILY_NAMES.get(family, family)}**: Subtask Induction vs from scratch on the same training set -- "
            f"mean-pooled {_pct(si['mean-pooled'])} vs {_pct(sc['mean-pooled'])} ({_delta(si['mean-pooled'], sc['mean-pooled'])}); "
            f"cue-conflict accuracy {_pct(si['cue-conflict/accuracy'])} vs {_pct(sc['cue-conflict/accuracy'])} "
            f"({_delta(si['cue-conflict/accuracy'], sc['cue-conflict/accuracy'])}); robustness "
            f"{_pct(si['cue-conflict/robustness'])} vs {_pct(sc['cue-conflict/robustness'])} "
            f"({_delta(si['cue-conflict/robustness'], sc['cue-conflict/robustness'])}); original images "
            f"{_pct(si['original'])} vs {_pct(sc['original'])} ({_delta(si['original'], sc['original'])}).")
        if "random-matched" in conds:
            rm = conds["random-matched"]["row"]
            lines.append(f"  Random subnetwork of the same size per matrix: mean-pooled {_pct(rm['mean-pooled'])}, "
                         f"cue-conflict accuracy {_pct(rm['cue-conflict/accuracy'])}, original {_pct(rm['original'])}.")
    return lines


def _setup(settings: ShapeBiasSettings, data: dict[str, ImageSource]) -> list[str]:
    sizes = ", ".join(f"{k} {len(v)}" for k, v in data.items())
    lines = [f"- Preset: `{settings.preset}`, seed {settings.seed}.",
             f"- Data: {'generated shape/texture benchmark' if settings.data == 'generated' else '16-class ImageNet'}; "
             f"split sizes: {sizes}."]
    if settings.data == "generated":
        from subnetlab.tasks.images.shapes import ShapeTextureConfig, describe

        cfg = ShapeTextureConfig(num_classes=int(settings.num_classes), image_size=int(settings.image_size))
        shape_corr = float(settings.pretrain_shape_correlation)
        lines.append(f"- Benchmark: {describe(cfg)}. Texture agrees with the class in "
                     f"{100 * float(settings.pretrain_texture_correlation):.0f}% of the base model's pre-training "
                     f"images (shape: {100 * shape_corr:.0f}%) and in 100% of the training images (shape: 100%); "
                     "cue-conflict images always carry another class's texture.")
    seg = settings.segmentation
    params = settings.segmentation_params or {}
    lines.append(f"- Mean pooling: `{seg}`" + (f" with {params}" if params else " with its documented defaults") +
                 " (`subnetlab.tasks.images.meanpool`).")
    for family in settings.models:
        fs = settings.family(family)
        model = fs["model"] if isinstance(fs["model"], str) else ", ".join(f"{k}={v}" for k, v in fs["model"].items())
        d = fs["discovery"]
        lines.append(f"- {FAMILY_NAMES.get(family, family)}: {model}; {fs['optimizer']}, lr {fs['base_lr']} for the "
                     f"base model and {fs['lr']} after (x{fs.get('finetune_lr_scale', 1.0)} for data mixture and "
                     f"linear FT), batch "
                     f"{fs['batch_size']}; base {fs['base_steps']} steps, transfer / scratch {fs['train_steps']}, "
                     f"data mixture {fs['mixture_steps']}, linear FT {fs['linear_steps']}; discovery {d['epochs']} "
                     f"epochs, lr {d['lr']}, lambdas {d['lambdas']}.")
    return lines


def _timing(timing: dict[str, float] | None) -> list[str]:
    if not timing:
        return []
    return [f"- This invocation: {timing['wall_s']:.0f} s wall clock, {timing['cpu_s']:.0f} s CPU time, "
            f"{timing['threads']} thread(s) (steps found finished by an earlier run are not counted)."]


def write_report(out: Path, settings: ShapeBiasSettings, data: dict[str, ImageSource], results: dict[str, Any],
                 timing: dict[str, float] | None = None) -> Path:
    """Write ``out/report.md`` (and its figures) from the measured results."""
    out = Path(out)
    example_images(data, out / "examples.png")
    has_curves = training_curves(results, out / "training_curves.png")
    has_tf = "texture-free" in data
    lines = ["# Shape bias by Subtask Induction (Zhang, Lepori & Pavlick 2024, section 5)", "",
             "Question: does transferring a subnetwork that classifies mean-pooled (texture-free) images into a "
             "re-initialised model, then training on original images, raise accuracy on mean-pooled and cue-conflict "
             "images over training from scratch on the same data -- and at what cost on original images?", "",
             "## Setup", "", *_setup(settings, data), *_timing(timing), "",
             "![examples](examples.png)", "",
             "*Examples.* Rows: original test images; the same images mean-pooled; cue-conflict images "
             "(title: shape/texture class)" + ("; texture-free renderings" if has_tf else "") +
             ". Look for: mean pooling should erase the texture inside each object while keeping its outline.", "",
             "## Findings (measured)", "", *findings(results), "",
             "## Table 2 analogue: the subnetwork found on mean-pooled images", "", *table2(results), "",
             "*Table 2.* Size of the discovered subnetwork (share of the masked weights, and of all parameters) and its "
             "accuracy on held-out mean-pooled and original test images, against the full base model. Look for: a "
             "small subnetwork that is *more* accurate on mean-pooled images than the whole model (paper: ResNet-18 "
             "36.8% -> 73.8% with 14.9% of parameters; ViT-B 57.3% -> 76.1% with 14.6%).", "",
             "## Table 1 analogue: training strategies", "", *table1(results, has_tf), "",
             "*Table 1.* Test accuracy of every training strategy. Cue-conflict accuracy: classified by shape; "
             "robustness: not classified by the conflicting texture; shape bias: shape decisions among shape-or-texture "
             "decisions (Geirhos et al.). Look for: Subtask Induction above from-scratch on mean-pooled and "
             "cue-conflict images although neither ever trained on mean-pooled images; the data mixture not "
             "generalising to held-out mean-pooled images as well.", ""]
    if has_curves:
        lines += ["## Figure 5 analogue: training dynamics", "", "![training curves](training_curves.png)", "",
                  "*Figure 5.* Test accuracy during training on original images: upper row original images, lower "
                  "row mean-pooled images. Look for: the Subtask Induction model reaching its accuracy in fewer "
                  "steps and keeping a high mean-pooled accuracy throughout, while from-scratch models stay low on "
                  "mean-pooled images.", ""]
    lines += ["## For reference: the paper's Table 1 (ImageNet scale, not reproduced here)", "",
              "| Model | Original | Mean-pooled | Cue acc. | Cue rob. |", "|---|---|---|---|---|"]
    for family, rows in PAPER_TABLE1.items():
        for cond, vals in rows.items():
            lines.append(f"| {FAMILY_NAMES[family]} + {LABELS[cond]} | " + " | ".join(f"{v}%" for v in vals) + " |")
    lines += ["", "## Notes: the paper's text, the authors' released vision code, and this study", "",
              "Compared line by line with Rock-Z/instilling-inductive-bias (`vision/`, bundled NeuroSurgeon); "
              "choices are settings, with the released code's in the paper preset.", "",
              *vision_code_notes(settings)]
    lines += ["", "Files: `config.json` (settings), `metrics.json` (the tables), `<family>/subnetwork.safetensors`, "
              "`<family>/discovery.json` (per-epoch discovery history), `<family>/<condition>.json` (curves and rows)."]
    path = out / "report.md"
    write_text(path, "\n".join(lines) + "\n")
    return path


__all__ = ["VISION_CODE_NOTES", "findings", "table1", "table2", "vision_code_notes", "write_report"]
