"""Interventions on components: head/MLP gates with ablation values, edge masks, and weight-level masks."""

from subnetlab.intervene.activations import ComponentValues, capture_activations, collect_means
from subnetlab.intervene.edges import (
                                      EdgeMasks,
                                      ReaderInputHook,
                                      WriterValues,
                                      apply_edges,
                                      capture_writers,
                                      writer_means,
)
from subnetlab.intervene.gates import ComponentGates, apply_gates, count_hooks
from subnetlab.intervene.weight_masks import FixedMask, MaskedWeight, WeightMasks, mask_modules, mask_weights

__all__ = [
    "ComponentValues", "capture_activations", "collect_means",
    "EdgeMasks", "ReaderInputHook", "WriterValues", "apply_edges", "capture_writers", "writer_means",
    "ComponentGates", "apply_gates", "count_hooks",
    "FixedMask", "MaskedWeight", "WeightMasks", "mask_modules", "mask_weights",
]
