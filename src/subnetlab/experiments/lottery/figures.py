"""Figures of the lottery-ticket report: tickets vs controls, pruning curves, head survival, pattern types.

Plain numbers in, one PNG out (Agg backend), like ``subnetlab.report.plots``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from subnetlab.report.plots import heatmap, save_figure, seed_dots  # noqa: E402


def tickets_plot(values: Mapping[str, Sequence[float]], full: float, path: str | os.PathLike, *, split: str,
                 metric: str = "accuracy") -> Path:
    """Figure 2 style: re-fine-tuned metric of each subnetwork group, the full model as a line."""
    groups = list(values)
    return seed_dots(groups, values, path, reference={g: full for g in groups},
                     ylabel=f"{split} {metric} (%)", title="re-fine-tuned from the pre-trained weights")


def pruning_curves_plot(histories: Mapping[str, Sequence[Mapping]], full: float, threshold: float,
                        path: str | os.PathLike, metric: str = "accuracy") -> Path:
    """Development metric along the accepted pruning steps; rejected candidate steps as hollow circles."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, steps in histories.items():
        kept = [s for s in steps if s["accepted"]]
        xs = [0.0] + [100 * s["sparsity"] for s in kept]
        ys = [100 * full] + [100 * s["metric"] for s in kept]
        line, = ax.plot(xs, ys, marker="o", ms=3, label=name)
        rejected = [s for s in steps if not s["accepted"]]
        ax.plot([100 * s["sparsity"] for s in rejected], [100 * s["metric"] for s in rejected], ls="none",
                marker="o", ms=7, mfc="none", color=line.get_color())
    ax.axhline(100 * threshold * full, color="tab:red", ls="--", lw=1, label=f"{threshold:.0%} of full")
    ax.set_xlabel("removed (%: weights for magnitude, heads + MLPs for importance)")
    ax.set_ylabel(f"dev {metric} (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def survival_plot(frequency: Sequence[Sequence[float]], path: str | os.PathLike, seeds: int) -> Path:
    """Layers x heads: share of fine-tuning seeds in which s-pruning kept each head (1 = super-survivor)."""
    m = np.asarray(frequency, dtype=float)
    return heatmap(m, path, xlabel="head", ylabel="layer", title=f"head survival over {seeds} seeds",
                   fmt="{:.2f}", vmin=0.0, vmax=1.0, cmap="magma")


def pattern_types_plot(shares: Mapping[str, Mapping[str, float]], path: str | os.PathLike,
                       ylabel: str = "share of heads (%)") -> Path:
    """Figure 4 style: share of each attention pattern type per head group (grouped bars)."""
    groups = list(shares)
    types = list(next(iter(shares.values())))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(types) + 1), 3.6))
    width = 0.8 / max(1, len(groups))
    x = np.arange(len(types))
    for i, g in enumerate(groups):
        ys = [100 * (shares[g].get(t) or 0.0) for t in types]
        ax.bar(x + (i - (len(groups) - 1) / 2) * width, ys, width, label=g)
    ax.set_xticks(x, types, rotation=15)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)
