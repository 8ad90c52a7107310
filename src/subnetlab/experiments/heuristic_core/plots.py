"""Figures of the Heuristic Core study: frequency heatmap (Fig. 5), head frequency maps
(Figs. 13/14), effective size over training (Fig. 6), per-seed accuracies (Fig. 2)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from subnetlab.analysis.core import CoreAnalysis
from subnetlab.report import plots
from subnetlab.report.plots import plt, save_figure


def frequency_heatmap_plot(analysis: CoreAnalysis, path: str | os.PathLike) -> Path:
    """Figure 5: cell (i, j) = heads kept by i subnetworks at A and j at B; rows from the top = i descending."""
    grid = analysis.heatmap.numpy()[::-1]  # most frequent at A on top, as in the paper
    la, lb = analysis.labels
    return plots.heatmap(
        grid, path,
        xlabel=f"kept in j of {analysis.n_b} subnetworks at {lb}",
        ylabel=f"kept in i of {analysis.n_a} subnetworks at {la}",
        xticks=[str(j) for j in range(analysis.n_b + 1)],
        yticks=[str(i) for i in range(analysis.n_a, -1, -1)],
        title=f"heads by frequency ({la} vs {lb}); top-right = core ({len(analysis.core)})",
        cmap="magma",
    )


def frequency_maps_plot(analysis: CoreAnalysis, path: str | os.PathLike) -> Path:
    """Two layer x head maps of how often each head is kept at A and at B (Figures 13 and 14)."""
    fa, fb = analysis.freq_a.numpy(), analysis.freq_b.numpy()
    L, H = fa.shape
    fig, axes = plt.subplots(1, 2, figsize=(2 * max(3.2, 0.35 * H + 1.4), max(2.8, 0.35 * L + 1.4)), layout="constrained")
    for ax, freq, n, label in ((axes[0], fa, analysis.n_a, analysis.labels[0]), (axes[1], fb, analysis.n_b, analysis.labels[1])):
        im = ax.imshow(freq, cmap="viridis", vmin=0, vmax=n, aspect="auto")
        ax.set_xticks(range(H), [str(h) for h in range(H)], fontsize=7)
        ax.set_yticks(range(L), [str(l) for l in range(L)], fontsize=7)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"{label}: kept in x of {n}", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(f"Spearman's rho = {analysis.rho:.2f} (p = {analysis.p_value:.1e})", fontsize=9)
    return save_figure(fig, path)


def effective_size_plot(
    steps: Sequence[int],
    sizes: Mapping[str, Sequence[float | None]],
    accuracy: Mapping[str, Sequence[float | None]],
    path: str | os.PathLike,
    onset_step: int | None = None,
) -> Path:
    """Figure 6: accuracy (left axis, %) and effective size (right axis, % of components) against training step."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for name, ys in accuracy.items():
        ax.plot(steps, [100 * y if y is not None else np.nan for y in ys], marker="o", ms=3, label=f"{name} accuracy")
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy (%)")
    ax2 = ax.twinx()
    for name, ys in sizes.items():
        ax2.plot(steps, [100 * y if y is not None else np.nan for y in ys], marker="s", ms=3, ls="--",
                 label=f"effective size ({name})")
    ax2.set_ylabel("effective size (% of components kept)")
    ax2.set_ylim(0, 105)
    if onset_step is not None:
        ax.axvline(onset_step, color="grey", ls=":", lw=1)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def seed_accuracy_plot(groups: Sequence[str], values: Mapping[str, Sequence[float]], reference: Mapping[str, float],
                       path: str | os.PathLike, title: str) -> Path:
    """Figure 2: one dot per pruned subnetwork for each evaluation set, the full model as a red bar."""
    from subnetlab.analysis.scores import short_name

    return plots.seed_dots(groups, values, path, reference=reference, title=title, labels=[short_name(g) for g in groups])
