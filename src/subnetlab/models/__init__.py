"""Loading models and naming their components (heads, MLPs, their weights)."""

from subnetlab.models.adapters import FAMILIES, Adapter, ParamSlice, get_adapter, head_name, mlp_name
from subnetlab.models.loading import BUILTIN_ALIASES, LoadedModel, build_model, load_model, resolve

__all__ = [
    "FAMILIES", "Adapter", "ParamSlice", "get_adapter", "head_name", "mlp_name",
    "BUILTIN_ALIASES", "LoadedModel", "build_model", "load_model", "resolve",
]
