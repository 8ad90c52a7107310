"""What ``subnetlab view`` reads: edge circuits, scores files and head/MLP subnetworks, as plain ``ViewRun`` values.

A path is one of:

* a scores or circuit file: a ``graph.json`` (``models.circuit``) with a score and/or ``in_graph`` per edge;
* a circuit run (``subnetlab circuit``'s ``sparsity-*/seed-*``): its ``graph.json``, ``metrics.json`` (health,
  faithfulness at its size);
* a circuit-eval run (``faithfulness.json`` + ``config.json``): the curve, and the scores file it measured;
* a sweep (the output directory of ``subnetlab circuit`` or ``prune``, or a folder of runs): every finished
  run in ``*/`` or ``*/seed-*/``;
* a pruning run (``subnetwork.safetensors`` of kind ``structured``): its heads and MLPs kept.

Each becomes a ``ViewRun`` (edges or nodes); ``page_data`` turns them into the page's JSON. Nothing here
evaluates a model: faithfulness is read off what the runs measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.io import check_input_file, load_tensor_metadata, load_tensors, read_json
from subnetlab.models.circuit import Circuit, top_k_mask
from subnetlab.run_directory import natural_order

GRAPH_FILE = "graph.json"
SUBNETWORK_FILE = "subnetwork.safetensors"


@dataclass
class Curve:
    """Faithfulness measured at some sizes: ``points`` are ``(items kept, f)``; CPR / CMD where a curve gave them."""

    metric: str
    points: list[tuple[int, float]]
    cpr: float | None = None
    cmd: float | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "points": [list(p) for p in sorted(self.points)], "cpr": self.cpr, "cmd": self.cmd,
                "source": self.source}


@dataclass
class ViewRun:
    """One run as the page shows it: an edge ``circuit`` or node ``heads`` ``[L, H]`` / ``mlps`` ``[L]`` kept."""

    label: str
    path: str
    circuit: Circuit | None = None
    heads: torch.Tensor | None = None
    mlps: torch.Tensor | None = None
    health: list[str] = field(default_factory=list)
    curve: Curve | None = None
    seed: int | None = None
    target: float | None = None

    @property
    def level(self) -> str:
        return "edges" if self.circuit is not None else "nodes"


# ------------------------------------------------------------------------------------------ reading
def read_runs(path: Path) -> list[ViewRun]:
    """The runs ``path`` holds (module doc); refused when it holds none."""
    path = Path(path)
    if not path.exists():
        raise SubnetlabError(f"{path}: no such file or directory", setting="runs")
    if not path.is_dir():
        check_input_file(path, setting="runs")  # a named pipe would block the reader
    if path.is_file():
        if path.suffix == ".json":
            return [_graph_run(path, path.name)]
        if path.suffix == ".safetensors":
            return [_subnetwork_run(path, path.name)]
        raise SubnetlabError(f"{path}: not a graph.json or a .safetensors file", setting="runs")
    if (path / "faithfulness.json").is_file():
        return [_circuit_eval_run(path)]
    if (path / GRAPH_FILE).is_file() and (path / "metrics.json").is_file():
        return [_graph_run(path / GRAPH_FILE, path.name, path)]
    if (path / SUBNETWORK_FILE).is_file() and (path / "metrics.json").is_file():
        return [_subnetwork_run(path / SUBNETWORK_FILE, path.name, path)]
    found = sorted({p.parent for pattern in ("*/seed-*/metrics.json", "*/metrics.json") for p in path.glob(pattern)},
                   key=natural_order)
    runs = [r for run_dir in found if _is_run(run_dir) for r in read_runs(run_dir)]
    if not runs:
        raise SubnetlabError(f"{path}: holds no run (no graph.json, faithfulness.json or subnetwork.safetensors with "
                             "a metrics.json, here, in */ or in */seed-*/)", setting="runs")
    for run in runs:
        run.label = str(Path(run.path).relative_to(path))
    return _select_as_recorded(runs, path)


def _stability_record(path: Path) -> dict[str, Any] | None:
    """A sweep's ``metrics.json`` comparing its circuits (``runs.controls`` / ``runs.attribution_sweep``), or None."""
    file = Path(path) / "metrics.json"
    data = read_json(file) if Path(path).is_dir() and file.is_file() else None
    return data if isinstance(data, dict) and isinstance(data.get("targets"), dict) else None


def _select_as_recorded(runs: list[ViewRun], path: Path) -> list[ViewRun]:
    """Scores-only runs of a sweep (attribution over step counts or seeds) kept as the sweep compared them: each
    run's top ``kept`` edges by ``|score|`` at the record's sparsest target."""
    record = _stability_record(path)
    if record is None or not any(r.circuit is not None and r.circuit.in_graph is None for r in runs):
        return runs
    entries = [(key, e["stability"]) for key, e in sorted(record["targets"].items()) if isinstance(e, dict)
               and isinstance(e.get("stability"), dict) and e["stability"].get("kept")]
    if not entries:
        return runs
    key, stab = entries[-1]
    for run in runs:
        if run.circuit is not None and run.circuit.in_graph is None and run.circuit.scores is not None:
            run.circuit = replace(run.circuit, in_graph=top_k_mask(run.circuit.scores, int(stab["kept"][0]),
                                                                   absolute=True))
            run.target = float(key)
    return runs


def read_stability(path: Path) -> list[dict[str, Any]]:
    """What ``path`` recorded about its stability, for the page's panel: per target of a sweep, the circuits'
    agreement over seeds / step counts (and the bootstrap over seeds of their faithfulness); for a circuit-eval
    run, the bootstrap interval of CPR and CMD over the pairs."""
    path = Path(path)
    out: list[dict[str, Any]] = []
    record = _stability_record(path)
    for key, entry in sorted((record or {}).get("targets", {}).items()):
        stab = entry.get("stability") if isinstance(entry, dict) else None
        if not isinstance(stab, dict):
            continue
        labels = stab.get("runs") or [f"seed {s}" for s in stab.get("seeds", [])]
        top = sorted(stab.get("frequency", {}).items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        row = {"source": str(path), "kind": "circuits", "target": key, "runs": labels, "kept": stab.get("kept"),
               "pairwise_jaccard": stab.get("pairwise_jaccard"), "top_frequency": [list(t) for t in top]}
        for name in ("mean_jaccard", "min_jaccard", "mean_jaccard_across_steps", "mean_jaccard_across_seeds",
                     "kept_in_every", "kept_in_any"):
            row[name] = _number(stab.get(name))
        if isinstance(stab.get("score"), dict):
            row["faithfulness_over_seeds"] = {"mean": _number(stab["score"].get("mean")),
                                              "n": _number(stab["score"].get("n")),
                                              "range": [_number(v) for v in stab["score"].get("range", [])],
                                              "interval": [_number(v) for v in stab["score"].get("bootstrap_95", [])]}
        out.append(row)
    faithfulness = path / "faithfulness.json"
    if path.is_dir() and faithfulness.is_file():
        boot = read_json(faithfulness).get("bootstrap")
        if isinstance(boot, dict):
            out.append({"source": str(path), "kind": "pairs", "pairs": boot.get("pairs"),
                        "resamples": boot.get("resamples"), "seed": boot.get("seed"), "level": boot.get("level"),
                        **{name: {"estimate": _number(boot["estimate"].get(name)),
                                  "interval": [_number(v) for v in boot["interval"].get(name, [])]}
                           for name in ("cpr", "cmd")}})
    return out


def _is_run(run_dir: Path) -> bool:
    return any((run_dir / name).is_file() for name in (GRAPH_FILE, SUBNETWORK_FILE, "faithfulness.json"))


def _metrics(run_dir: Path | None) -> dict[str, Any]:
    if run_dir is None or not (run_dir / "metrics.json").is_file():
        return {}
    data = read_json(run_dir / "metrics.json")
    if not isinstance(data, dict):
        raise SubnetlabError(f"{run_dir / 'metrics.json'}: a JSON {type(data).__name__}, not a run's metrics",
                             setting="runs")
    return data


def _health(metrics: dict[str, Any]) -> list[str]:
    health = metrics.get("health")
    return [str(m) for m in (health.get("messages") or [])] if isinstance(health, dict) else []


def _graph_run(graph_file: Path, label: str, run_dir: Path | None = None) -> ViewRun:
    circuit = Circuit.load(graph_file, setting="runs")
    if circuit.scores is None and circuit.in_graph is None:
        raise SubnetlabError(f"{graph_file}: a graph with neither scores nor in_graph on its edges: nothing to show",
                             setting="runs")
    metrics = _metrics(run_dir)
    curve = None
    faithful = metrics.get("faithfulness")
    if isinstance(faithful, dict) and circuit.in_graph is not None:
        metric = "logit_diff" if "logit_diff" in faithful else next(iter(faithful), None)
        if metric is not None and isinstance(faithful[metric], (int, float)):
            curve = Curve(metric, [(int(circuit.in_graph.sum()), float(faithful[metric]))], source="metrics.json")
    return ViewRun(label, str(run_dir or graph_file), circuit=circuit, health=_health(metrics), curve=curve,
                   seed=metrics.get("seed"), target=metrics.get("target_sparsity"))


def _circuit_eval_run(run_dir: Path) -> ViewRun:
    """A circuit-eval run: its curve, on the scores (or the one circuit) it measured."""
    result, config = read_json(run_dir / "faithfulness.json"), read_json(run_dir / "config.json")
    if not isinstance(result, dict) or not isinstance(config, dict):
        raise SubnetlabError(f"{run_dir}: faithfulness.json or config.json is not a JSON object", setting="runs")
    measured = config.get("scores") or next(iter(config.get("circuits") or []), None)
    if not measured or not Path(measured).is_file():
        raise SubnetlabError(f"{run_dir}: the scores file it measured ({measured}) is gone; view that file's run "
                             "instead", setting="runs")
    run = read_runs(Path(measured))[0]
    run.label, run.path = run_dir.name, str(run_dir)
    run.health = _health(_metrics(run_dir))
    if "fractions" in result:  # a curve of the top k by score alone: the page ranks as the curve did
        if run.circuit is not None:
            run.circuit = replace(run.circuit, in_graph=None)
        metric = result["metric"]
        counts, fs, source = result.get("counts"), result.get("faithfulness", {}).get(metric), "faithfulness.json"
        if result.get("definition") == "mib":  # MIB's two rankings: the absolute one (CMD's), at its pruned sizes
            counts, fs = result["absolute"]["edge_counts"], result["absolute"]["faithfulness"][metric]
            source = "faithfulness.json (MIB: the absolute ranking, pruned as EAP-IG prunes)"
        points = [(int(c), float(f)) for c, f in zip(counts, fs) if f is not None]
        run.curve = Curve(metric, points, result.get("cpr"), result.get("cmd"), source=source)
    return run


def _subnetwork_run(file: Path, label: str, run_dir: Path | None = None) -> ViewRun:
    """Heads and MLPs kept (structured), or an edge subnetwork read through its recorded graph."""
    tensors, metadata = load_tensors(file), load_tensor_metadata(file)
    metrics = _metrics(run_dir)
    kind = metadata.get("kind")
    if kind == "edges" and "edges" in tensors:
        from subnetlab.models.graph import Graph

        try:
            shape = json.loads(metadata.get("graph_shape") or "null")
        except (ValueError, RecursionError):
            shape = None
        if not isinstance(shape, dict):
            raise SubnetlabError(f"{file}: an edge subnetwork without its graph's shape", setting="runs")
        circuit = Circuit(Graph.from_shape(shape, str(file)), in_graph=tensors["edges"])
        return ViewRun(label, str(run_dir or file), circuit=circuit, health=_health(metrics))
    if "heads" not in tensors or "mlps" not in tensors:
        raise SubnetlabError(f"{file}: neither an edge circuit nor heads and MLPs (it holds "
                             f"{', '.join(sorted(tensors)) or 'nothing'})", setting="runs")
    heads, mlps = tensors["heads"].float(), tensors["mlps"].float()
    if heads.dim() != 2 or mlps.shape != (heads.shape[0],) or bool(torch.isnan(heads).any() | torch.isnan(mlps).any()):
        raise SubnetlabError(f"{file}: heads {tuple(heads.shape)} and mlps {tuple(mlps.shape)} are not [layers, heads] "
                             "and [layers] masks", setting="runs")
    seed = metrics.get("seed", metadata.get("seed"))
    target = metrics.get("target_sparsity", metadata.get("target_sparsity"))
    seed, target = _number(seed), _number(target)
    return ViewRun(label, str(run_dir or file), heads=heads, mlps=mlps, health=_health(metrics),
                   seed=None if seed is None else int(seed), target=target)


def _number(value: Any) -> float | None:
    """A label's number (a seed, a target) or None where the file records none (or not a number)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None


def read_all(paths: list[Path]) -> list[list[ViewRun]]:
    """Per path its runs, checked to be of one level and one graph (or one head/MLP shape)."""
    groups = [read_runs(Path(p)) for p in paths]
    runs = [r for g in groups for r in g]
    levels = {r.level for r in runs}
    if len(levels) > 1:
        raise SubnetlabError("the runs mix edge circuits and head/MLP subnetworks; view one kind at a time",
                             setting="runs")
    shapes = {json.dumps(r.circuit.graph.shape(), sort_keys=True) if r.circuit is not None
              else json.dumps(list(r.heads.shape)) for r in runs}
    if len(shapes) > 1:
        raise SubnetlabError(f"the runs are of different graphs ({'; '.join(sorted(shapes))}); side by side needs "
                             "runs of one model", setting="runs")
    return groups


__all__ = ["Curve", "ViewRun", "read_all", "read_runs", "read_stability"]
