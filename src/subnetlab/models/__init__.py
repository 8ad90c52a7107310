"""Loading models and naming their components (heads, MLPs, their weights).

The names below are imported on first use (module ``__getattr__``): ``loading`` brings in torch and
transformers, which a command's help or the model table does not need.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "subnetlab.models.adapters": ("FAMILIES", "Adapter", "ParamSlice", "get_adapter", "head_name", "mlp_name"),
    "subnetlab.models.aliases": ("BUILTIN_ALIASES", "resolve"),
    "subnetlab.models.loading": ("LoadedModel", "build_model", "load_model"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [name for names in _HOMES.values() for name in names]


def __getattr__(name: str):
    if name in _HOME_OF:
        value = getattr(importlib.import_module(_HOME_OF[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'subnetlab.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
