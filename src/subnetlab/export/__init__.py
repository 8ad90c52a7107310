"""Exporting a structured subnetwork as a physically smaller model that computes what the gated model computes.

    import subnetlab as sl
    from subnetlab.export import export_subnetwork

    m = sl.load_model("minilm")
    sub = sl.Subnetwork.load("subnetwork.safetensors", m.adapter)
    means = sl.ComponentValues.load("means.safetensors")      # or None: zero ablation
    export_subnetwork(m, sub, "small/", ablation=means)
    small = sl.load_model("small/")                           # same classes, smaller shapes

``slicing.py`` removes heads and MLPs (per family, from the adapter's table),
``folding.py`` folds ablation values into biases, ``save.py`` writes and reads
the directory (``subnetlab_model.safetensors``, ``config.json``, ``subnetlab_pruning.json``),
which plain transformers ``from_pretrained`` refuses (``save.py`` says why).
"""

from subnetlab.export.api import (
    ExportResult,
    ExportSettings,
    SlicedModel,
    export_files,
    export_subnetwork,
    load_ablation,
    parameter_count,
    slice_subnetwork,
)
from subnetlab.export.save import PRUNING_FILE, is_exported, load_exported, read_plan, read_record
from subnetlab.export.slicing import LayerPlan, Plan

__all__ = [
    "ExportResult", "ExportSettings", "SlicedModel", "export_files", "export_subnetwork", "load_ablation",
    "parameter_count", "slice_subnetwork", "PRUNING_FILE", "is_exported", "load_exported", "read_plan",
    "read_record", "LayerPlan", "Plan",
]
