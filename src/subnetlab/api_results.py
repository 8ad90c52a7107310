"""What the Python API's functions return: one dataclass per function, its fields documented, so a notebook
user reads attributes (``result.summary``, ``result.circuits()``) instead of dictionary keys from the source.

Each result is also a read-only mapping (``result["summary"]``, ``dict(result)``) with the keys the functions
returned as plain dictionaries before, and ``to_dict()`` gives that dictionary."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


class Result(Mapping[str, Any]):
    """A mapping view of a result's fields (``to_dict``)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


@dataclass(eq=False)
class PruneResult(Result):
    """``sl.prune``: heads and MLPs pruned at each sparsity and seed."""

    out: Path  #: the sweep's folder
    summary: dict[str, Any]  #: per sparsity, the mean over seeds the command prints (with its health counts)
    health: dict[str, dict[str, Any]]  #: each run's health entry (``runs.health.Health.to_dict``)
    warnings: list[str]  #: the health problems as the command's warning lines
    runs: dict[str, dict[str, Any]]  #: each run's metrics.json, by run name
    subnetworks: list[Path]  #: each run's chosen subnetwork file
    controls: dict[str, Any] = field(default_factory=dict)  #: the comparison with the controls (empty without)

    def load_subnetworks(self) -> list[Any]:
        """The runs' subnetworks as ``subnetwork.Subnetwork`` values."""
        from subnetlab.subnetwork import Subnetwork

        return [Subnetwork.load(path) for path in self.subnetworks]


@dataclass(eq=False)
class DiscoverResult(Result):
    """``sl.discover``: continuous-sparsification weight masks over a lambda sweep, one chosen."""

    out: Path  #: the sweep's folder
    chosen: dict[str, Any]  #: the chosen run's metrics (``l0_lambda``, ``kept_percent``, accuracies, ``subnetwork``)
    sweep: list[dict[str, Any]]  #: every lambda's metrics
    controls: dict[str, Any] = field(default_factory=dict)  #: the chosen masks against the controls' (empty without)

    @property
    def subnetwork(self) -> Path:
        """The chosen run's subnetwork file."""
        return Path(self.chosen["subnetwork"])

    @property
    def l0_lambda(self) -> float:
        return float(self.chosen["l0_lambda"])

    def to_dict(self) -> dict[str, Any]:
        """The chosen run's metrics with ``out``, ``sweep`` and ``controls`` beside them."""
        return {**self.chosen, "out": self.out, "sweep": self.sweep, "controls": self.controls}


@dataclass(eq=False)
class TransferResult(Result):
    """``sl.transfer_subnetwork``: fresh models trained around a frozen subnetwork, per condition, size and seed."""

    out: Path  #: the sweep's folder
    summary: dict[str, Any]  #: per condition and size, the mean test accuracy over seeds
    runs: list[dict[str, Any]]  #: every run's record


@dataclass(eq=False)
class CircuitResult(Result):
    """``sl.circuit``: an edge circuit found by edge pruning, or edge scores by an attribution method."""

    out: Path  #: the run's (or sweep's) folder
    summary: dict[str, Any]  #: per run, kept edges, sparsity, faithfulness (edge pruning); the metrics (attribution)
    health: dict[str, dict[str, Any]]  #: each run's health entry
    warnings: list[str]  #: the health problems as the command's warning lines
    runs: dict[str, dict[str, Any]]  #: each run's metrics, by run folder
    paths: dict[str, Any]  #: the files written: ``graph``, ``circuits`` / ``scores``, ``figures``, ``metrics``
    controls: dict[str, Any] = field(default_factory=dict)  #: the comparison with the controls (edge pruning)
    stability: dict[str, Any] | None = None  #: per target, the stability over step counts and seeds (a sweep)

    def circuits(self) -> dict[str, Any]:
        """Each run's circuit as a ``models.circuit.Circuit`` (its graph, scores and kept edges), by run folder:
        an edge-pruning run's kept edges, or an attribution run's scores."""
        from subnetlab.models.circuit import Circuit

        if "circuits" in self.paths:  # edge pruning: each run folder holds its circuit's graph.json
            files = [Path(p).parent / "graph.json" for p in self.paths["circuits"]]
        else:
            files = [Path(self.out) / "graph.json"] if (Path(self.out) / "graph.json").is_file() else []
        return {str(path.parent): Circuit.load(path) for path in files if path.is_file()}


@dataclass(eq=False)
class CircuitEvalResult(Result):
    """``sl.circuit_eval``: the faithfulness curve of scores or circuits, with CPR and CMD."""

    out: Path  #: the run's folder
    summary: dict[str, Any]  #: metrics.json's content
    areas: str | None  #: CPR and CMD as the command prints them (with their span), None without a curve
    health: dict[str, dict[str, Any]]  #: the run's health entry
    warnings: list[str]  #: the health problems as warning lines
    result: dict[str, Any]  #: the whole curve (faithfulness.json)
    paths: dict[str, Path]  #: the files written

    @property
    def cpr(self) -> float | None:
        return self.result.get("cpr")

    @property
    def cmd(self) -> float | None:
        return self.result.get("cmd")
