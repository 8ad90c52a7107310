"""Shared matplotlib plots for reports: heatmaps, curves over steps, per-seed dot plots.

Every function takes plain numbers, writes one PNG atomically (Agg backend, no
display needed) and returns its path. Styles are deliberately plain so that the
figures read well in a Markdown report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from subnetlab.io import atomic_path  # noqa: E402


def save_figure(fig: "plt.Figure", path: str | os.PathLike, dpi: int = 120) -> Path:
    """Write ``fig`` as PNG to ``path`` atomically and close it."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def heatmap(
    matrix: Sequence[Sequence[float]] | np.ndarray,
    path: str | os.PathLike,
    *,
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
    xticks: Sequence[str] | None = None,
    yticks: Sequence[str] | None = None,
    annotate: bool = True,
    fmt: str = "{:g}",
    cmap: str = "viridis",
    origin_lower: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
) -> Path:
    """A labelled heatmap; ``annotate`` writes each cell's value (non-zero cells only)."""
    m = np.asarray(matrix, dtype=float)
    rows, cols = m.shape
    fig, ax = plt.subplots(figsize=(max(3.5, 0.45 * cols + 1.5), max(3.0, 0.4 * rows + 1.2)))
    im = ax.imshow(m, cmap=cmap, origin="lower" if origin_lower else "upper", aspect="auto", vmin=vmin, vmax=vmax)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(cols), list(xticks) if xticks is not None else [str(i) for i in range(cols)], rotation=90 if cols > 14 else 0)
    ax.set_yticks(range(rows), list(yticks) if yticks is not None else [str(i) for i in range(rows)])
    if annotate:
        hi = np.nanmax(m) if m.size else 0.0
        for i in range(rows):
            for j in range(cols):
                if m[i, j] != 0 and not np.isnan(m[i, j]):
                    color = "black" if hi and m[i, j] > 0.6 * hi else "white"
                    ax.text(j, i, fmt.format(m[i, j]), ha="center", va="center", fontsize=7, color=color)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    return save_figure(fig, path)


def curves(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    path: str | os.PathLike,
    *,
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
    right: Mapping[str, Sequence[float]] | None = None,
    right_label: str = "",
    percent: bool = False,
) -> Path:
    """Lines over a shared x axis (training step, sparsity); ``right`` series use a second y axis."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    scale = 100.0 if percent else 1.0
    for name, ys in series.items():
        ax.plot(list(x), [scale * v if v is not None else np.nan for v in ys], marker="o", ms=3, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    handles, labels = ax.get_legend_handles_labels()
    if right:
        ax2 = ax.twinx()
        for name, ys in right.items():
            ax2.plot(list(x), [v if v is not None else np.nan for v in ys], marker="s", ms=3, ls="--", label=name)
        ax2.set_ylabel(right_label)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, fontsize=7, loc="best")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def seed_dots(
    groups: Sequence[str],
    values: Mapping[str, Sequence[float]],
    path: str | os.PathLike,
    *,
    reference: Mapping[str, float] | None = None,
    ylabel: str = "accuracy (%)",
    title: str = "",
    percent: bool = True,
    labels: Sequence[str] | None = None,
) -> Path:
    """One column of dots (one per seed) for each group, with the full model as a short line (Figure 2 style).

    ``labels`` are the tick labels (default: the group names)."""
    scale = 100.0 if percent else 1.0
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(groups) + 1.5), 3.6))
    rng = np.random.default_rng(0)  # horizontal jitter only, for legibility
    for i, g in enumerate(groups):
        ys = np.asarray(values.get(g, []), dtype=float) * scale
        ax.scatter(i + rng.uniform(-0.12, 0.12, len(ys)), ys, s=14, alpha=0.8, color="tab:blue",
                   label="subnetworks" if i == 0 else None)
        if reference is not None and g in reference:
            ax.hlines(scale * reference[g], i - 0.3, i + 0.3, colors="tab:red", lw=2,
                      label="full model" if i == 0 else None)
    ax.set_xticks(range(len(groups)), list(labels if labels is not None else groups), rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    if percent:
        ax.set_ylim(-2, 102)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)


def attention_map(
    weights: np.ndarray,
    tokens: Sequence[str],
    path: str | os.PathLike,
    *,
    title: str = "",
) -> Path:
    """One head's attention matrix ``[query, key]`` with token labels on both axes (Figure 7 style)."""
    w = np.asarray(weights, dtype=float)
    n = len(tokens)
    fig, ax = plt.subplots(figsize=(max(3.5, 0.28 * n + 1.5), max(3.2, 0.28 * n + 1.2)))
    ax.imshow(w[:n, :n], cmap="Blues", vmin=0.0, vmax=max(float(w.max()), 1e-9))
    ax.set_xticks(range(n), list(tokens), rotation=90, fontsize=7)
    ax.set_yticks(range(n), list(tokens), fontsize=7)
    ax.set_xlabel("attended to (key)")
    ax.set_ylabel("attending (query)")
    if title:
        ax.set_title(title, fontsize=9)
    return save_figure(fig, path)
