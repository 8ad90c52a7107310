"""Reading pruning run directories: ``<dir>/**/subnetwork.safetensors`` with ``config.json`` and ``metrics.json``.

``subnetlab prune`` writes one run directory per (sparsity, seed); the core,
Table 5 and effective-size analyses read them back from anywhere below a
directory. A run is grouped by its subnetwork's ``target_sparsity`` metadata
(falling back to ``config.json``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from subnetlab.errors import SubnetlabError
from subnetlab.io import parse_json
from subnetlab.subnetwork import Subnetwork

SUBNETWORK_FILE = "subnetwork.safetensors"


@dataclass
class PrunedRun:
    path: Path  # the run directory
    subnetwork: Subnetwork
    config: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)

    @property
    def target_sparsity(self) -> float | None:
        if self.subnetwork.target_sparsity is not None:
            return round(float(self.subnetwork.target_sparsity), 4)
        value = self.config.get("sparsity", self.config.get("target_sparsity"))
        return round(float(value), 4) if isinstance(value, (int, float)) else None

    @property
    def schedule(self) -> str:
        """``linear`` (one run per sparsity, the paper's) or ``staircase`` (a level of a sweep)."""
        return self.subnetwork.extra.get("schedule", self.config.get("prune", {}).get("schedule", "linear"))

    @property
    def seed(self) -> int | None:
        return self.subnetwork.seed if self.subnetwork.seed is not None else self.config.get("seed")


def _read_optional_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = parse_json(path.read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError as e:
        raise SubnetlabError(f"{path}: not UTF-8 text (byte {e.start}), so not JSON") from None
    return data if isinstance(data, dict) else {}


def find_pruned_runs(root: str | Path) -> list[PrunedRun]:
    """Every run below ``root`` (recursively), sorted by target sparsity, seed and path."""
    root = Path(root)
    if not root.is_dir():
        raise SubnetlabError(f"{root}: no such run directory")
    runs = []
    for file in sorted(root.rglob(SUBNETWORK_FILE)):
        if any(part.startswith(".") for part in file.relative_to(root).parts):
            continue  # temporary files of an interrupted write
        sub = Subnetwork.load(file)
        runs.append(PrunedRun(file.parent, sub, _read_optional_json(file.parent / "config.json"),
                              _read_optional_json(file.parent / "metrics.json")))
    if not runs:
        raise SubnetlabError(f"{root}: no {SUBNETWORK_FILE} found below it (prune into it first, e.g. with `subnetlab prune`)")
    return sorted(runs, key=lambda r: (r.target_sparsity or 0.0, r.seed if r.seed is not None else -1, str(r.path)))


def linear_runs(runs: Sequence[PrunedRun]) -> list[PrunedRun]:
    """The independent runs (the paper's), leaving out staircase levels when there are any others."""
    linear = [r for r in runs if r.schedule != "staircase"]
    return linear or list(runs)


def group_by_sparsity(runs: Sequence[PrunedRun]) -> dict[float, list[PrunedRun]]:
    groups: dict[float, list[PrunedRun]] = {}
    for run in runs:
        if run.target_sparsity is None:
            raise SubnetlabError(f"{run.path}: the subnetwork records no target sparsity")
        groups.setdefault(run.target_sparsity, []).append(run)
    return dict(sorted(groups.items()))


def sparsity_label(sparsity: float) -> str:
    return f"{100 * sparsity:g}%"


def two_groups(dirs: Sequence[str | Path]) -> tuple[tuple[str, list[PrunedRun]], tuple[str, list[PrunedRun]]]:
    """The two groups of runs the core compares: one per directory, or the two sparsities inside one."""
    if len(dirs) == 2:
        groups = []
        for d in dirs:
            runs = linear_runs(find_pruned_runs(d))
            by = group_by_sparsity(runs) if all(r.target_sparsity is not None for r in runs) else {}
            label = sparsity_label(next(iter(by))) if len(by) == 1 else Path(d).name
            groups.append((label, runs))
        if groups[0][0] == groups[1][0]:
            groups = [(f"{label} ({Path(d).name})", runs) for (label, runs), d in zip(groups, dirs)]
        return groups[0], groups[1]
    if len(dirs) == 1:
        by = group_by_sparsity(linear_runs(find_pruned_runs(dirs[0])))
        if len(by) != 2:
            found = ", ".join(sparsity_label(s) for s in by)
            raise SubnetlabError(f"runs {dirs[0]}: expected runs at two sparsities, found {len(by)} ({found}); "
                                 "give two directories instead", setting="runs")
        (sa, ra), (sb, rb) = by.items()
        return (sparsity_label(sa), ra), (sparsity_label(sb), rb)
    raise SubnetlabError(f"runs: expected one or two directories, got {len(dirs)}", setting="runs")
