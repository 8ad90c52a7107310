"""A frozen model larger than one device: accelerate's device map, checked before any weight is read.

``DeviceMap`` says where each module of a model lives: ``auto`` (accelerate fills the
devices in order, within ``max_memory``), or a mapping from module names
(``transformer.h.3``, ``model.layers.0``) to ``cpu``, ``cuda[:N]``, ``mps`` or ``disk``.
transformers' ``from_pretrained(device_map=...)`` hands it to accelerate, which places
each module's weights and adds hooks that move them to the module's execution device
when it runs: a module mapped to ``disk`` (or to ``cpu`` beside a GPU) keeps its
weights on PyTorch's ``meta`` device between calls and runs on the map's main device
(the first accelerator it names, else the CPU). Gates, edge masks and ablation values
are moved to the device of the activation they change, so each layer's masks meet
its activations wherever accelerate runs the layer; trainable masks stay on the main
device (``runtime.model_device``), where the optimiser keeps them.

transformers does not check the map's names (a typo leaves a module nowhere);
``check_layers`` does, against the model built from its config on the meta device.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subnetlab.errors import SubnetlabError
from subnetlab.runtime import resolve_device

if TYPE_CHECKING:
    from torch import Tensor, nn

STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's own placements
PLACES = "cpu, disk, cuda, cuda:N or mps"
ACCELERATE = "accelerate>=1.1"  # tested with 1.15.0
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?\s*$", re.IGNORECASE)


def accelerate_available() -> bool:
    """Whether the ``accelerate`` package (which places and offloads the modules) is installed."""
    return importlib.util.find_spec("accelerate") is not None


def _check_place(place: Any, where: str) -> str:
    """A device of the map as accelerate takes it (``cuda:0`` for ``0``, ``disk``); refused if absent here."""
    if isinstance(place, bool) or not isinstance(place, (str, int)):
        raise SubnetlabError(f"device_map: {where}: {place!r} is not a device ({PLACES})", setting="device_map")
    text = f"cuda:{place}" if isinstance(place, int) else place.strip().lower()
    if text == "disk":
        return text
    if text in ("auto", "meta"):
        raise SubnetlabError(f"device_map: {where}: {place!r} is not a device ({PLACES})", setting="device_map")
    try:
        device = resolve_device(text)
    except SubnetlabError as e:
        raise SubnetlabError(f"device_map: {where}: {e}", setting="device_map") from None
    return str(device)


UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def _check_size(value: Any, where: str) -> int:
    """A size in bytes: an integer, or text such as ``20GiB`` or ``500MB`` (read here: accelerate's own
    reader knows no TB and reads a lower-case ``gb`` as gigabits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    found = _SIZE.match(value) if isinstance(value, str) else None
    if found and float(found.group(1)) > 0:
        return int(float(found.group(1)) * UNITS[(found.group(2) or "").upper()])
    raise SubnetlabError(f"max_memory: {where}: {value!r} is not a size (bytes, or e.g. 20GiB, 500MB)",
                         setting="max_memory")


def parse_max_memory(value: Mapping[Any, Any] | str | None) -> dict[int | str, int] | None:
    """accelerate's ``max_memory`` in bytes (``{0: 20 * 2**30, "cpu": 60 * 2**30}``) from a mapping or text
    (``0=20GiB,cpu=60GiB``)."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        pairs = {}
        for part in value.split(","):
            key, sep, size = part.partition("=")
            if not sep or not key.strip():
                raise SubnetlabError(f"max_memory: expected DEVICE=SIZE, e.g. 0=20GiB,cpu=60GiB; got {part!r}",
                                     setting="max_memory")
            pairs[key.strip()] = size.strip()
        value = pairs
    if not isinstance(value, Mapping):
        raise SubnetlabError(f"max_memory: expected a mapping DEVICE: SIZE, got {type(value).__name__}",
                             setting="max_memory")
    out: dict[int | str, int] = {}
    for key, size in value.items():
        text = str(key).strip().lower()
        place = int(text) if text.isdigit() else text
        try:
            place = _check_place(place, f"device {key!r}")
        except SubnetlabError as e:
            raise SubnetlabError(str(e).replace("device_map", "max_memory"), setting="max_memory") from None
        gpu = place.startswith("cuda")
        out[int(place.partition(":")[2] or 0) if gpu else place] = _check_size(size, f"device {key!r}")
    return out


def _read_layers(value: Any) -> str | dict[str, str]:
    """A strategy name, a mapping, a JSON file holding a mapping, or a mapping written as JSON text."""
    if isinstance(value, Path) or (isinstance(value, str) and value.strip() not in STRATEGIES):
        text = str(value).strip()
        if not text.startswith("{"):
            path = Path(text).expanduser()
            if not path.is_file():
                raise SubnetlabError(f"device_map {text!r}: expected {', '.join(STRATEGIES)}, a JSON file of "
                                     "MODULE: DEVICE or that mapping as JSON text", setting="device_map")
            text = path.read_text(encoding="utf-8")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise SubnetlabError(f"device_map {str(value)[:60]!r}: not valid JSON ({e.msg}, line {e.lineno})",
                                 setting="device_map") from None
        except RecursionError:
            raise SubnetlabError(f"device_map {str(value)[:60]!r}: JSON nested too deep to read",
                                 setting="device_map") from None
    if isinstance(value, str):
        return value.strip()
    if not isinstance(value, Mapping) or not value:
        raise SubnetlabError(f"device_map: expected {', '.join(STRATEGIES)} or a non-empty mapping MODULE: DEVICE",
                             setting="device_map")
    out = {}
    for name, place in value.items():
        if not isinstance(name, str):
            raise SubnetlabError(f"device_map: module name {name!r} is not text", setting="device_map")
        out[name] = _check_place(place, f"module {name!r}")
    return out


@dataclass(frozen=True)
class DeviceMap:
    """Where a model's modules live (``layers``), how much each device may hold, and where offloaded weights go.

    ``layers`` is a strategy (``auto``...) or ``{module name: device}``; ``max_memory``
    is accelerate's (``{0: "20GiB", "cpu": "60GiB"}``) and only shapes a strategy;
    ``offload_folder`` holds weights offloaded to ``disk`` that are not already in a
    ``.safetensors`` file (safetensors weights are read in place).
    """

    layers: str | dict[str, str] = "auto"
    max_memory: dict[int | str, int] | None = None
    offload_folder: str | None = None

    @classmethod
    def parse(cls, layers: Any, max_memory: Any = None, offload_folder: str | Path | None = None) -> "DeviceMap":
        """The map from a user's values (a strategy, a mapping, a JSON file or text), each checked once."""
        if isinstance(layers, DeviceMap):
            return layers
        parsed = _read_layers(layers)
        if isinstance(parsed, str) and parsed not in STRATEGIES:
            raise SubnetlabError(f"device_map {parsed!r}: expected {', '.join(STRATEGIES)} or MODULE: DEVICE",
                                 setting="device_map")
        memory = parse_max_memory(max_memory)
        if memory is not None and not isinstance(parsed, str):
            raise SubnetlabError("max_memory shapes a device map strategy (auto...); a map that names each module's "
                                 "device does not use it", setting="max_memory")
        folder = None if offload_folder in (None, "") else str(Path(offload_folder).expanduser())
        if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
            raise SubnetlabError(f"offload_folder {folder}: exists and is not a directory", setting="offload_folder")
        if folder is not None:  # a side output: creatable and writable, checked before any work
            from subnetlab.run_directory import check_writable

            check_writable(folder, setting="offload_folder")
        return cls(parsed, memory, folder)

    @classmethod
    def given(cls, layers: Any, max_memory: Any = None, offload_folder: str | Path | None = None) -> "DeviceMap | None":
        """``parse`` where a map is given; None (the whole model on one device) where none is, refusing its options."""
        if layers is not None:
            return cls.parse(layers, max_memory, offload_folder)
        for setting, value in (("max_memory", max_memory), ("offload_folder", offload_folder)):
            if value not in (None, "", {}):
                raise SubnetlabError(f"{setting} is an option of a device map; give the map too "
                                     "(auto, or MODULE: DEVICE)", setting=setting)
        return None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DeviceMap":
        """The map a run's ``config.json`` recorded (``to_dict``)."""
        if not isinstance(data, Mapping) or set(data) - {"layers", "max_memory", "offload_folder"}:
            raise SubnetlabError(f"device_map: expected keys layers, max_memory, offload_folder; got {data!r}",
                                 setting="device_map")
        return cls.parse(data.get("layers", "auto"), data.get("max_memory"), data.get("offload_folder"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"layers": self.layers}
        if self.max_memory is not None:
            out["max_memory"] = {str(k): v for k, v in self.max_memory.items()}
        if self.offload_folder is not None:
            out["offload_folder"] = self.offload_folder
        return out

    def describe(self) -> str:
        """``auto (max memory 0=20GiB, cpu=60GiB)`` or ``cpu: 10 modules, disk: 4 modules``: what a command prints."""
        if isinstance(self.layers, str):
            limits = ", ".join(f"{k}={v}" for k, v in (self.max_memory or {}).items())
            return self.layers + (f" (max memory {limits})" if limits else "")
        counts: dict[str, int] = {}
        for place in self.layers.values():
            counts[place] = counts.get(place, 0) + 1
        return ", ".join(f"{place}: {n} module{'s' * (n != 1)}" for place, n in counts.items())

    def loading_options(self) -> dict[str, Any]:
        """The keyword arguments of ``from_pretrained`` that place the model."""
        if not accelerate_available():
            raise SubnetlabError(f"a device map needs the accelerate package: pip install '{ACCELERATE}' "
                                 "(or subnetlab[device-map])", setting="device_map")
        out: dict[str, Any] = {"device_map": self.layers}
        if self.max_memory is not None:
            out["max_memory"] = dict(self.max_memory)
        if self.offload_folder is not None:
            out["offload_folder"] = self.offload_folder
        return out

    def check_layers(self, model: nn.Module) -> None:
        """Refuse names that are not modules of ``model`` and parameters the map leaves without a device.

        ``model`` may live on the meta device: only its module and parameter names are read.
        """
        if isinstance(self.layers, str):
            return
        modules = {name for name, _ in model.named_modules()}
        unknown = sorted(set(self.layers) - modules)
        if unknown:
            hint = ", ".join(name for name, _ in model.named_children())
            raise SubnetlabError(f"device_map: the model has no module {unknown[0]!r}"
                                 + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
                                 + f"; its top modules are {hint}", setting="device_map")
        placed: dict[int, tuple[str, str]] = {}  # a tied parameter (GPT-2's lm_head and wte) has one place
        for name, param in model.named_parameters(remove_duplicate=False):
            owners = [key for key in self.layers if key == "" or name == key or name.startswith(key + ".")]
            if not owners:
                raise SubnetlabError(f"device_map: no device for the parameter {name!r} (map one of the modules "
                                     "that hold it)", setting="device_map")
            place = self.layers[max(owners, key=len)]
            first = placed.setdefault(id(param), (name, place))
            if first[1] != place:
                raise SubnetlabError(f"device_map: {first[0]} and {name} are one tied weight, so their modules need "
                                     f"the same device (the map gives {first[1]} and {place})", setting="device_map")


def offloaded(model: nn.Module) -> list[str]:
    """Names of the parameters accelerate keeps off any device between calls (on ``meta``: cpu or disk offload)."""
    return [name for name, p in model.named_parameters() if p.device.type == "meta"]


def stored_value(model: nn.Module, name: str, tensor: Tensor) -> Tensor:
    """State-dict entry ``name`` of ``model`` (``tensor``), or for a weight its device map offloads, the copy
    accelerate keeps for it (read from disk one tensor at a time): what hashing the weights needs."""
    if tensor.device.type != "meta":
        return tensor
    module_name, _, attr = name.rpartition(".")
    hook = getattr(model.get_submodule(module_name), "_hf_hook", None)
    for each in getattr(hook, "hooks", [hook]):  # accelerate's SequentialHook holds several
        weights = getattr(each, "weights_map", None)
        if weights is not None and attr in weights:
            return weights[attr]
    raise SubnetlabError(f"{name} is on the meta device and no device map holds its values", setting="device_map")


def refuse_offloaded(model: nn.Module, what: str) -> None:
    """Refuse ``what`` on a model whose device map offloads weights (``what`` reads them outside the module's call)."""
    names = offloaded(model)
    if names:
        raise SubnetlabError(f"{what} cannot run on a model whose device map offloads weights to the CPU or disk "
                             f"({len(names)} parameters, the first {names[0]}): they read weights outside the module's "
                             "own call; map every module to a device (cpu or a GPU) instead", setting="device_map")


def is_dispatched(model: nn.Module) -> bool:
    """Whether accelerate placed ``model`` with a device map (then it must not be moved with ``.to``)."""
    return bool(getattr(model, "hf_device_map", None))


__all__ = ["ACCELERATE", "DeviceMap", "STRATEGIES", "accelerate_available", "is_dispatched", "offloaded",
           "parse_max_memory", "refuse_offloaded", "stored_value"]
