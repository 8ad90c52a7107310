"""subnetlab: find, analyse and transfer the subnetworks inside trained neural networks.

    import subnetlab as sl
    m = sl.load_model("minilm", head="classification", num_labels=3)
    sub = sl.Subnetwork.from_names(m.adapter, ["L0.H1", "L3.MLP"])
    with sl.apply_gates(m.model, m.adapter, *sub.gates()):
        logits = m.model(**batch).logits

The names below load on first use (module ``__getattr__``): ``import subnetlab`` and the command
line's help stay free of torch and transformers until a model is needed.
"""

from __future__ import annotations

import importlib

from subnetlab.errors import SubnetlabError

__version__ = "0.1.0"

_HOMES = {
    "subnetlab.api": ("prune", "discover", "transfer_subnetwork", "circuit", "circuit_eval"),  # a command's runs in one call
    "subnetlab.api_results": ("PruneResult", "DiscoverResult", "TransferResult", "CircuitResult", "CircuitEvalResult"),
    "subnetlab.runs.health": ("HealthWarning",),  # what the one-call functions warn with
    "subnetlab.intervene": ("ComponentValues", "apply_gates", "capture_activations", "collect_means", "mask_weights"),
    "subnetlab.models": ("build_model", "get_adapter", "load_model"),
    "subnetlab.subnetwork": ("Subnetwork",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = ["SubnetlabError", *_HOME_OF]


def __getattr__(name: str):
    if name in _HOME_OF:
        value = getattr(importlib.import_module(_HOME_OF[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'subnetlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
