"""Figures of the shape-bias report: training curves (the paper's Figure 5) and example images (Figure 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from subnetlab.io import atomic_path  # noqa: E402
from subnetlab.tasks.images.imageset import ImageSource  # noqa: E402

LABELS = {"subtask-induction": "Subtask Induction", "scratch": "from scratch", "random-matched": "random subnetwork",
          "data-mixture": "data mixture", "linear-ft": "linear FT"}
STYLES = {"subtask-induction": "C0", "scratch": "C3", "random-matched": "C7", "data-mixture": "C2", "linear-ft": "C1"}
FAMILY_NAMES = {"resnet": "ResNet", "vit": "ViT"}


def _save(fig: plt.Figure, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def training_curves(results: dict[str, Any], path: Path,
                    conditions: tuple[str, ...] = ("subtask-induction", "scratch", "random-matched")) -> bool:
    """Rows: accuracy on original / mean-pooled test images; columns: model families; x: optimisation steps."""
    families = [f for f in results if any(c in results[f]["conditions"] for c in conditions)]
    if not families:
        return False
    fig, axes = plt.subplots(2, len(families), figsize=(4.2 * len(families), 6.4), squeeze=False, sharey="row",
                             constrained_layout=True)
    for col, family in enumerate(families):
        for row, split in enumerate(("original", "mean-pooled")):
            ax = axes[row][col]
            for cond in conditions:
                res = results[family]["conditions"].get(cond)
                if res is None:
                    continue
                steps = [r["step"] for r in res["curve"]]
                ax.plot(steps, [100 * r[split] for r in res["curve"]], color=STYLES[cond], label=LABELS[cond],
                        marker="o", markersize=2.5)
            ax.set_title(f"{FAMILY_NAMES.get(family, family)}: {split} images", fontsize=10)
            ax.set_xlabel("training steps")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    _save(fig, path)
    return True


def example_images(data: dict[str, ImageSource], path: Path, per_row: int = 8) -> None:
    """Rows: original test images, their mean-pooled versions, cue-conflict images (and texture-free ones)."""
    rows = [k for k in ("original", "mean-pooled", "cue-conflict", "texture-free") if k in data]
    fig, axes = plt.subplots(len(rows), per_row, figsize=(1.3 * per_row, 1.45 * len(rows)), squeeze=False)
    for r, name in enumerate(rows):
        source = data[name]
        n = min(per_row, len(source))
        images = source.pixels(torch.arange(n))
        for c in range(per_row):
            ax = axes[r][c]
            ax.axis("off")
            if c >= n:
                continue
            ax.imshow(images[c].permute(1, 2, 0).clamp(0, 1).numpy(), interpolation="nearest")
            title = source.classes[int(source.labels[c])]
            if int(source.textures[c]) >= 0 and name == "cue-conflict":
                title += f"/{source.classes[int(source.textures[c])]}"
            ax.set_title(title, fontsize=7)
        axes[r][0].text(-0.15, 0.5, name, transform=axes[r][0].transAxes, ha="right", va="center", fontsize=8)
    _save(fig, path)


__all__ = ["training_curves", "example_images"]
