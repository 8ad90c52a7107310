"""Exporting a structured subnetwork (or an edge circuit that is one, ``edges.py``) as a physically smaller model.

``slice_subnetwork`` returns the small model in memory; ``export_subnetwork``
also writes its directory (``save.py``); ``export_files`` is the command's
entry: it reads the model, the subnetwork and the ablation values by name and
checks all of them before anything is written.

The small model computes what the gated model computes (``apply_gates`` with
the subnetwork's masks and the same ablation values): closed heads and MLPs are
removed (``slicing.py``) and their ablation values folded into biases
(``folding.py``). Only 0/1 masks export: a gate half open is not a smaller model.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.export.edges import check_edge_ablation, node_circuit, structured_of
from subnetlab.export.folding import check_values, head_biases, mlp_constants
from subnetlab.export.save import FORMAT, PRUNING_FILE, head_for, write_directory
from subnetlab.export.slicing import LayerPlan, Plan, apply_plan
from subnetlab.intervene.activations import ComponentValues
from subnetlab.models.adapters import Adapter, head_name, mlp_name
from subnetlab.models.loading import LoadedModel
from subnetlab.progress import stage
from subnetlab.subnetwork.subnetwork import Subnetwork

ZERO = "zero"



@dataclass(frozen=True)
class ExportSettings:
    """What ``subnetlab export`` does: which model, which subnetwork, which ablation values, where to.

    ``ablation`` is a file of mean activations (``ComponentValues``), ``"zero"``,
    or None: the subnetwork's own ablation when that needs no file (zero).
    """

    model: str
    subnetwork: str
    out: str
    ablation: str | None = None
    onnx: bool = False
    edges_as_nodes: bool = False  # an edge circuit that is no node circuit: export its node-level closure

    def __post_init__(self) -> None:
        for name in ("model", "subnetwork", "out"):
            if not str(getattr(self, name)).strip():
                raise SubnetlabError(f"{name}: empty", setting=name)


@dataclass
class SlicedModel:
    """The small model, its plan, its parameter accounting and what the user should know about it."""

    model: nn.Module
    plan: Plan
    parameters: dict[str, int]
    notes: list[str] = field(default_factory=list)


@dataclass
class ExportResult:
    directory: Path
    plan: Plan
    parameters: dict[str, int]
    notes: list[str]
    onnx: Path | None = None


def check_out(out: str | Path) -> Path:
    """``out`` must not exist yet, or be an empty directory: an export never overwrites."""
    path = Path(out).expanduser()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise SubnetlabError(f"out: {path} exists and is not an empty directory; choose a new one", setting="out")
    return path


def _check_subnetwork(adapter: Adapter, subnetwork: Subnetwork) -> tuple[Tensor, Tensor]:
    if not adapter.spec.has_components:
        raise SubnetlabError(f"model: a {adapter.family} model has no heads or MLPs to remove; export works on "
                             "transformer families", setting="model")
    if subnetwork.kind != "structured":
        raise SubnetlabError("subnetwork: a weight-level subnetwork keeps scattered weights, which do not make a "
                             "smaller dense model; export needs a structured (heads / MLPs) one", setting="subnetwork")
    try:
        subnetwork.check(adapter)
    except SubnetlabError as e:
        raise SubnetlabError(f"subnetwork: {e}", setting="subnetwork") from None
    heads, mlps = subnetwork.gates()
    for name, mask in (("head", heads), ("MLP", mlps)):
        if not torch.all((mask == 0) | (mask == 1)):
            raise SubnetlabError(f"subnetwork: its {name} mask holds values other than 0 and 1; only closed or open "
                                 "gates make a smaller model", setting="subnetwork")
    return heads, mlps


def build_plan(adapter: Adapter, heads: Tensor, mlps: Tensor, values: ComponentValues | None) -> Plan:
    """The plan of what stays, and which biases the small model ends with."""
    H = adapter.num_heads
    group = H // adapter.num_kv_heads
    layers = []
    for layer in range(adapter.num_layers):
        kept = tuple(h for h in range(H) if heads[layer, h] > 0.5)
        out_has_bias = getattr(adapter.head_output_module(layer), "bias", None) is not None
        folds = values is not None and len(kept) < H
        layers.append(LayerPlan(kept, tuple(sorted({h // group for h in kept})), bool(mlps[layer] > 0.5),
                                out_bias=out_has_bias or folds,
                                mlp_constant=values is not None and not mlps[layer] > 0.5))
    return Plan(adapter.family, H, adapter.num_kv_heads, adapter.head_dim, adapter.hidden_size, tuple(layers))


def parameter_count(model: nn.Module) -> int:
    """Parameters, each tied tensor once."""
    return sum(p.numel() for p in model.parameters())


def _accounting(adapter: Adapter, plan: Plan, before: int, after: int) -> tuple[dict[str, int], list[str]]:
    """Parameters removed (the adapter's per-head and per-MLP counts), kept shared, and added; and notes."""
    per_head, per_mlp = adapter.params_per_head(), adapter.params_per_mlp()
    removed_heads = removed_mlps = kept_shared = added = 0.0
    notes: list[str] = []
    for l, layer in enumerate(plan.layers):
        closed = [h for h in range(plan.num_heads) if h not in layer.heads]
        removed_heads += float(sum(per_head[l, h] for h in closed))
        if not layer.mlp:
            removed_mlps += float(per_mlp[l])
            added += plan.hidden_size if layer.mlp_constant else 0
        if layer.out_bias and getattr(adapter.head_output_module(l), "bias", None) is None:
            added += plan.hidden_size
            notes.append(f"L{l}: the attention output projection had no bias; one was added to hold the folded "
                         "means of its removed heads")
        for kv in layer.kv_heads:
            group = range(kv * plan.group, (kv + 1) * plan.group)
            gone = [h for h in group if h in closed]
            if gone:
                kept_shared += sum(sl.numel(adapter.parameter(sl.name).shape)
                                   for h in gone for sl in adapter.head_params(l, h) if sl.share < 1)
                notes.append(f"L{l}: key/value head {kv} kept for query heads "
                             f"{', '.join(head_name(l, h) for h in group if h in layer.heads)}; removed "
                             f"{', '.join(head_name(l, h) for h in gone)} shared it")
        if not layer.heads:
            notes.append(f"L{l}: every head removed; the attention block is a constant")
    counts = {"before": before, "after": after, "removed_heads": round(removed_heads),
              "removed_mlps": round(removed_mlps), "kept_shared_kv": round(kept_shared), "added_biases": round(added)}
    unaccounted = after - (before - counts["removed_heads"] - counts["removed_mlps"] + counts["kept_shared_kv"]
                           + counts["added_biases"])
    if unaccounted:
        counts["unaccounted"] = unaccounted
        notes.append(f"{unaccounted:+,} parameters changed beyond the removed components (family-specific modules)")
    removed = [mlp_name(l) for l, layer in enumerate(plan.layers) if not layer.mlp]
    if removed:
        kind = "their means are constants" if any(layer.mlp_constant for layer in plan.layers) else "zero ablation"
        notes.append(f"MLPs removed: {', '.join(removed)} ({kind})")
    return counts, notes


@torch.no_grad()
def slice_subnetwork(model: nn.Module, adapter: Adapter, subnetwork: Subnetwork,
                     ablation: ComponentValues | None = None) -> SlicedModel:
    """A copy of ``model`` without the subnetwork's closed heads and MLPs, ablation values folded in.

    ``ablation`` None is zero ablation. The source model is left as it was.
    """
    heads, mlps = _check_subnetwork(adapter, subnetwork)
    check_values(ablation, adapter)
    plan = build_plan(adapter, heads, mlps, ablation)
    stage(f"removing {int((heads == 0).sum())} heads and {int((mlps == 0).sum())} MLPs "
          f"({'mean' if ablation is not None else 'zero'} ablation folded)")
    out_biases = head_biases(adapter, heads, ablation)
    constants = mlp_constants(adapter, mlps, ablation)
    small = copy.deepcopy(model)
    _drop_subnetlab_hooks(small)
    apply_plan(small, adapter.spec, plan, out_biases, constants)
    small.eval()
    counts, notes = _accounting(adapter, plan, parameter_count(model), parameter_count(small))
    return SlicedModel(small, plan, counts, notes)


def _drop_subnetlab_hooks(model: nn.Module) -> None:
    """Remove the copied hooks of an active ``apply_gates`` (or activation recording) from ``model``.

    They would gate the small model a second time, with the old shapes. Only
    subnetlab's own hooks go: transformers installs hooks of its own (to record
    hidden states), which the copy needs.
    """
    for module in model.modules():
        for hooks in (module._forward_hooks, module._forward_pre_hooks):
            for key in [k for k, hook in hooks.items() if getattr(hook, "__module__", "").startswith("subnetlab.")]:
                del hooks[key]


def _digest(tensors: list[Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def export_subnetwork(loaded: LoadedModel, subnetwork: Subnetwork, out: str | Path,
                      ablation: ComponentValues | None = None, source: str | None = None,
                      onnx: bool = False, edges_as_nodes: bool = False) -> ExportResult:
    """Write the small model of ``subnetwork`` to the directory ``out``; ``subnetlab.load_model(out)`` reads it.

    ``ablation`` None is zero ablation; mean activations are folded into biases.
    ``out`` must not exist or be empty. ``onnx`` also writes ``model.onnx``
    (needs ``onnx`` and ``onnxscript``; checked with onnxruntime when installed).
    An edge circuit exports as its node circuit (``export/edges.py``); ``edges_as_nodes`` accepts one that is
    none, exporting its node-level closure.
    """
    path = check_out(out)
    notes: list[str] = []
    if subnetwork.kind == "edges":
        subnetwork, notes = as_node_circuit(loaded.adapter, subnetwork, ablation, edges_as_nodes)
    if onnx:
        from subnetlab.export.onnx import require_onnx

        require_onnx()
    sliced = slice_subnetwork(loaded.model, loaded.adapter, subnetwork, ablation)
    heads, mlps = subnetwork.gates()
    record = {
        "format": FORMAT,
        "architecture": type(loaded.model).__name__,
        "heads_kept": [len(layer.heads) for layer in sliced.plan.layers],
        "mlps_kept": [layer.mlp for layer in sliced.plan.layers],
        "source": {"model": source or loaded.source, "fingerprint": loaded.adapter.fingerprint()},
        "subnetwork": {"fingerprint": subnetwork.fingerprint, "masks": _digest([heads, mlps]),
                       "method": subnetwork.method, "seed": subnetwork.seed, "sparsity": subnetwork.sparsity,
                       "found_with": subnetwork.ablation},
        "ablation": {"kind": ZERO if ablation is None else "mean",
                     "values": None if ablation is None else _digest([*ablation.heads, *ablation.mlps])},
        "parameters": sliced.parameters,
        "notes": notes + sliced.notes,
        "plan": sliced.plan.to_json(),
        "onnx": "model.onnx" if onnx else None,
    }
    extra = None
    if onnx:
        from subnetlab.export.onnx import onnx_writer

        extra = onnx_writer(sliced.model, sliced.plan)
    write_directory(path, sliced.model, record, loaded.tokenizer, extra)
    return ExportResult(path, sliced.plan, sliced.parameters, notes + sliced.notes,
                        path / "model.onnx" if onnx else None)


def as_node_circuit(adapter: Adapter, subnetwork: Subnetwork, ablation: ComponentValues | None,
                    closure: bool) -> tuple[Subnetwork, list[str]]:
    """The structured subnetwork an edge circuit exports as, with the notes its record carries."""
    circuit = node_circuit(subnetwork, closure)
    differs = check_edge_ablation(subnetwork, "zero" if ablation is None else "mean")
    return structured_of(adapter, subnetwork, circuit), [*circuit.notes, *([differs] if differs else [])]


def load_ablation(path: str | Path) -> ComponentValues:
    """Read a mean-activations file, naming the setting at fault when it is missing or unreadable."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise SubnetlabError(f"ablation: {p}: no such file (a file of mean activations, or {ZERO})", setting="ablation")
    try:
        return ComponentValues.load(p)
    except SubnetlabError as e:
        raise SubnetlabError(f"ablation: {e}", setting="ablation") from None
    except KeyError as e:
        raise SubnetlabError(f"ablation: {p}: not a file of component values (no tensor {e})", setting="ablation") from None


def _ablation_for(settings: ExportSettings, subnetwork: Subnetwork) -> ComponentValues | None:
    if settings.ablation == ZERO:
        return None
    if settings.ablation is not None:
        return load_ablation(settings.ablation)
    if subnetwork.ablation == ZERO:
        return None
    how = ("resample ablation, whose values change with every input and cannot be folded into a bias"
           if subnetwork.ablation == "resample" else f"{subnetwork.ablation or 'mean'} ablation")
    raise SubnetlabError(f"ablation: the subnetwork was found with {how}; name a file of mean activations to fold "
                         f"into the biases, or {ZERO}", setting="ablation")


def export_files(settings: ExportSettings) -> ExportResult:
    """Export by names: check the output directory, the subnetwork and the ablation values, then the model."""
    from subnetlab.models.loading import load_model, read_config, refuse_exported, resolve

    out = check_out(settings.out)
    refuse_exported(settings.model, "export")
    try:
        subnetwork = Subnetwork.load(settings.subnetwork)
    except SubnetlabError as e:
        raise SubnetlabError(f"subnetwork: {e}", setting="subnetwork") from None
    if subnetwork.kind == "edges":  # refused before the model loads: a partial circuit, corrupted-prompt ablation
        node_circuit(subnetwork, settings.edges_as_nodes)
        check_edge_ablation(subnetwork, settings.ablation)
    values = _ablation_for(settings, subnetwork)
    head = "base"
    source = Path(resolve(settings.model)).expanduser()
    if (source / "config.json").is_file():
        try:
            head = head_for(read_config(str(source)).architectures)
        except (OSError, ValueError):
            pass  # load_model names the fault
    loaded = load_model(settings.model, head=head)
    if head == "base" and getattr(loaded.model.config, "architectures", None):
        archs = loaded.model.config.architectures
        if not any(a == type(loaded.model).__name__ for a in archs):
            raise SubnetlabError(f"model: {settings.model} is a {', '.join(archs)}; export keeps text "
                                 "classifiers, causal language models, image classifiers and base models",
                                 setting="model")
    return export_subnetwork(loaded, subnetwork, out, values, source=settings.model, onnx=settings.onnx,
                             edges_as_nodes=settings.edges_as_nodes)


__all__ = ["ExportSettings", "ExportResult", "SlicedModel", "build_plan", "check_out", "export_files",
           "export_subnetwork", "head_for", "load_ablation", "parameter_count", "slice_subnetwork", "PRUNING_FILE"]
