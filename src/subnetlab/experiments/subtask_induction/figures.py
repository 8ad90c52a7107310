"""Figure 3 of Subtask Induction: test accuracy against the number of disambiguation samples.

One line per transfer condition (mean over seeds), a band for the spread over
seeds (mean +- one sample standard deviation, clipped to [0, 1]), a logarithmic x
axis (symmetric-log, so the ambiguous set alone, 0 samples, has a place).
With several model depths the left panel averages over them and the right
shows the deepest, as in the paper. Runs of one size only (your own data has
no disambiguation rows) have no curve to draw: one bar per condition instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from subnetlab.report.plots import save_figure  # noqa: E402

COLORS = {"subnetwork": "tab:red", "full": "tab:blue", "random-matched": "tab:green", "random-released": "tab:cyan",
          "complement-matched": "tab:olive", "empty-mask": "tab:brown", "scratch": "tab:gray", "embeddings": "tab:purple"}


def accuracy_grid(runs: Sequence[dict], layers: Sequence[int] | None = None) -> dict[str, dict[int, list[float]]]:
    """``{label: {size: [test accuracy per run]}}`` over runs of the given depths (all when None).

    The label is the condition, or the condition with its variant (e.g. ``subnetwork, reinit masked``).
    """
    grid: dict[str, dict[int, list[float]]] = {}
    for r in runs:
        if layers is not None and r.get("layers") not in layers:
            continue
        label = r.get("label") or r["condition"]
        grid.setdefault(label, {}).setdefault(int(r["size"]), []).append(float(r["test_accuracy"]))
    return grid


def _panel(ax, grid: dict[str, dict[int, list[float]]], title: str) -> None:
    for condition, by_size in grid.items():
        sizes = sorted(by_size)
        values = [np.asarray(by_size[s]) for s in sizes]
        mean = np.array([v.mean() for v in values])
        std = np.array([v.std(ddof=1) if len(v) > 1 else 0.0 for v in values])  # sample s.d., as the report
        color = COLORS.get(condition.split(",")[0])
        style = "--" if "," in condition else "-"  # a variant of a condition: same colour, dashed
        ax.plot(sizes, 100 * mean, marker="o", ms=3, color=color, ls=style, label=condition)
        ax.fill_between(sizes, 100 * np.clip(mean - std, 0, 1), 100 * np.clip(mean + std, 0, 1), color=color, alpha=0.15)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("disambiguation samples (symmetric log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 102)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)


def _bars(ax, grid: dict[str, dict[int, list[float]]], title: str) -> None:
    """One size: a bar per condition (mean over seeds, +-1 s.d.), not a point on an empty axis."""
    labels = list(grid)
    values = [np.asarray([a for accs in grid[c].values() for a in accs]) for c in labels]
    mean = np.array([v.mean() for v in values])
    std = np.array([v.std(ddof=1) if len(v) > 1 else 0.0 for v in values])
    ax.bar(range(len(labels)), 100 * mean, yerr=100 * std, capsize=3,
           color=[COLORS.get(c.split(",")[0], "tab:gray") for c in labels], label=None)
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    [size] = {s for c in labels for s in grid[c]}
    ax.set_xlabel("transfer condition" + (f" ({size} disambiguation samples)" if size else ""))
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 102)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(title, fontsize=9)


def figure3(runs: Sequence[dict], path: str | os.PathLike) -> Path:
    """Write the Figure 3 plot of ``runs`` (dicts with condition, size, layers, test_accuracy)."""
    return save_figure(figure3_axes(runs), path)


def figure3_axes(runs: Sequence[dict]):
    """The Figure 3 figure of ``runs``, unsaved: curves over sizes, or bars when every run has one size."""
    depths = sorted({r.get("layers") for r in runs if r.get("layers") is not None})
    panels = [(None, f"average over {len(depths)} depths ({', '.join(map(str, depths))} layers)")] if len(depths) > 1 else []
    if depths:
        panels.append(([depths[-1]], f"GPT-2, {depths[-1]} layers; band: +-1 s.d. over seeds"))
    else:
        panels.append((None, "band: +-1 s.d. over seeds"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels) + 2.2, 4.0), squeeze=False)
    one_size = len({int(r["size"]) for r in runs}) == 1
    for ax, (layers, title) in zip(axes[0], panels):
        (_bars if one_size else _panel)(ax, accuracy_grid(runs, layers), title)
    if not one_size:
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside: never over the curves
    return fig


__all__ = ["accuracy_grid", "figure3", "figure3_axes"]
