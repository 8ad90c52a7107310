"""The circuit methods and which of their settings each reads: one table for ``subnetlab circuit`` and ``sl.circuit``.

Edge pruning searches (a sweep of targets and seeds, a preset, an ablation, an evaluation split, a warm start,
the executor); the attribution methods score every edge (nap, nap-ig: every node) once on the training pairs,
with a metric, and the integrated ones over steps. ``ablation`` is read by edge-pruning (corrupted, mean or zero)
and by eap and nap (corrupted or mean: MIB's "EAP (mean)"); a value the method does not take is refused by its
own config. A setting the chosen method does not read, given, is refused rather than ignored.
"""

from __future__ import annotations

from typing import Any, Mapping

from subnetlab.errors import SubnetlabError
from subnetlab.methods.attribution.names import IG_METHODS, MEAN_METHODS, NODE_METHODS
from subnetlab.methods.attribution.names import METHODS as ATTRIBUTION_METHODS

CIRCUIT_METHODS = ("edge-pruning", *ATTRIBUTION_METHODS)

# The settings only some methods read, and which methods; every other setting is read by every method.
METHOD_SETTINGS: dict[str, tuple[str, ...]] = {
    "ablation": ("edge-pruning", *MEAN_METHODS),
    **{name: ("edge-pruning",) for name in ("preset", "settings", "split", "init_from", "warm_start",
                                            "control", "jobs", "device_map", "max_memory", "offload_folder",
                                            "dtype")},
    **{name: CIRCUIT_METHODS for name in ("sparsity", "seeds")},  # attribution: the circuits of a stability sweep
    "metric": ATTRIBUTION_METHODS,
    "ig_steps": IG_METHODS,
    "kv_readers": tuple(m for m in ATTRIBUTION_METHODS if m not in NODE_METHODS),  # a graph's readers: edges
    # the edge gradient methods (a node method scores a batch in one backward to the node outputs)
    "position_chunk": tuple(m for m in ATTRIBUTION_METHODS if m != "exact" and m not in NODE_METHODS),
}


def check_method(method: str) -> None:
    if method not in CIRCUIT_METHODS:
        raise SubnetlabError(f"method {method!r}: choose one of {', '.join(CIRCUIT_METHODS)}", setting="method")


def readers(setting: str) -> tuple[str, ...]:
    """The methods that read ``setting``."""
    return METHOD_SETTINGS.get(setting, CIRCUIT_METHODS)


def joined(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def refuse_unused(method: str, given: Mapping[str, Any]) -> None:
    """The first setting given (not None) that ``method`` does not read, refused in the library's terms."""
    for name, value in given.items():
        users = readers(name)
        if value is not None and method not in users:
            raise SubnetlabError(f"{name}: not used by method {method} (used only by {joined(users)})", setting=name)


__all__ = ["ATTRIBUTION_METHODS", "CIRCUIT_METHODS", "IG_METHODS", "MEAN_METHODS", "METHOD_SETTINGS", "NODE_METHODS", "check_method", "joined",
           "readers", "refuse_unused"]
