"""The one exception type users see: bad input, named precisely.

Every public function that validates input raises ``SubnetlabError`` with a
message that names the value or the ``file:line`` at fault. The CLI turns it
into a single ``error: ...`` line on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints


class SubnetlabError(ValueError):
    """Bad input or an unsupported model: the message says which value is at fault.

    ``setting`` names the configuration setting at fault in the library's own
    terms (``"sparsity"``, ``"eval_data"``); the CLI maps it to the flag the user typed.
    """

    def __init__(self, message: str = "", *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


def require(condition: bool, message: str) -> None:
    """Raise ``SubnetlabError(message)`` unless ``condition`` holds."""
    if not condition:
        raise SubnetlabError(message)


# -- bounds on counts -------------------------------------------------------------------------
# A count no real study meets is refused before any work, naming its bound: a typo (an extra zero, a range
# 0-1000000) would otherwise run for days, allocate without end or wait for ever. One table for the command
# line, the Python API and every study (the runs layer's checks read it).
COUNT_BOUNDS: dict[str, tuple[int, str]] = {
    "total_steps": (10_000_000, "optimiser steps"),  # the papers' longest runs: ~10^4 steps
    "max_steps": (10_000_000, "optimiser steps"),
    "epochs": (100_000, "epochs"),
    "seeds": (1_000, "seeds"),  # the papers: 5 to 20 seeds
    "sparsity": (100, "target sparsities"),  # a curve: about ten
    "ig_steps": (64, "integrated-gradient step counts"),  # a stability study: a handful
    "bootstrap": (100_000, "bootstrap resamples"),  # a 95% interval: 1,000 to 10,000
    "random_circuits": (10_000, "random circuits"),  # a null at p < 0.01 needs 99; CD-T draws 100 to 1,000
    "jobs": (1_024, "worker processes"),
    "samples": (100_000_000, "rows"),
}


def check_count(setting: str, count: int, given: Any = None, listed: bool = False) -> int:
    """``count`` (its value, or with ``listed`` how many values it lists) within ``COUNT_BOUNDS[setting]``, or
    refuse naming the bound; ``given`` is what the message shows of the value (default: the count)."""
    bound, what = COUNT_BOUNDS[setting]
    if count > bound:
        problem = (f"{given}: {count:,} {what}, more than" if given is not None else
                   f": {count:,} {what} given, more than" if listed else f" {count:,} is more than")
        problem = problem if problem.startswith(":") else " " + problem.lstrip()
        raise SubnetlabError(f"{setting}{problem} the bound of {bound:,} {what} (no real study needs more; a "
                             "typo?)", setting=setting)
    return count


def check_whole_numbers(setting: str, values: Any, *, least: int = 0, distinct: bool = True,
                        bounded: bool = True) -> list[int]:
    """``values`` (one integer or a list of them) as a list: each a whole number of at least ``least`` (not a
    bool, NaN or text), none twice where ``distinct``, no more than ``COUNT_BOUNDS[setting]`` of them."""
    items = [values] if isinstance(values, int) and not isinstance(values, bool) else values
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple, range)):
        raise SubnetlabError(f"{setting} {values!r}: expected a whole number or a list of them", setting=setting)
    items = list(items)
    if not items:
        raise SubnetlabError(f"{setting}: an empty list; give at least one", setting=setting)
    if bounded and setting in COUNT_BOUNDS:
        check_count(setting, len(items), listed=True)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise SubnetlabError(f"{setting} {item!r}: expected a whole number", setting=setting)
        if item < least:
            raise SubnetlabError(f"{setting} {item}: must be at least {least}", setting=setting)
    repeated = sorted({v for v in items if items.count(v) > 1})
    if distinct and repeated:
        raise SubnetlabError(f"{setting} {', '.join(map(str, repeated))} given twice: each once", setting=setting)
    return items


def check_distinct_names(setting: str, values: Any) -> list[str]:
    """A list of names (controls, conditions ...): each non-empty text, none twice."""
    items = [values] if isinstance(values, str) else values
    if not isinstance(items, (list, tuple)):
        raise SubnetlabError(f"{setting} {values!r}: expected a list of names", setting=setting)
    items = list(items)
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise SubnetlabError(f"{setting} {item!r}: an empty name (or not text); give a name", setting=setting)
    repeated = sorted({v for v in items if items.count(v) > 1})
    if repeated:
        raise SubnetlabError(f"{setting} {', '.join(repeated)} given twice: each once", setting=setting)
    return items


# -- typed settings ----------------------------------------------------------------------------
# Settings typed on a command line (``KEY=VALUE``) or read from a JSON config arrive as text or
# as whatever YAML / JSON made of them; ``typed`` reads them as the type their field declares,
# so ``batch_size=abc`` fails naming the key and the type instead of deep inside a run.

def type_name(hint: Any) -> str:
    """How a message calls the values of a type: ``an integer``, ``a number or null`` ..."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple, Sequence):
        inner = args[0] if args else Any
        return "a list" + ("" if inner is Any else f" of {_plural(type_name(inner))}")
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return "a mapping of KEY: VALUE"
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


_NAMES: dict[Any, str] = {int: "an integer", float: "a number", bool: "true or false", str: "text",
                          type(None): "null", list: "a list", tuple: "a list", dict: "a mapping of KEY: VALUE"}


def _plural(name: str) -> str:
    return {"an integer": "integers", "a number": "numbers", "true or false": "true/false values",
            "text": "texts"}.get(name, name)


def _read_text(value: str, hint: Any) -> Any:
    """A string where ``hint`` wants a number or a boolean: the value it spells, else ``value`` unchanged."""
    text = value.strip()
    try:
        if hint is int and re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        if hint is float:
            number = float(text)  # "1e-3", which YAML 1.1 leaves a string
            return number if math.isfinite(number) else value
    except ValueError:
        return value
    if hint is bool and text.lower() in ("true", "false", "yes", "no", "on", "off"):
        return text.lower() in ("true", "yes", "on")
    return value


def typed(value: Any, hint: Any) -> tuple[bool, Any]:
    """``(ok, value)``: whether ``value`` is of type ``hint``, reading numbers written as text."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any or isinstance(hint, (str, TypeVar)):
        return True, value  # unresolved or open annotations: the owner's own checks decide
    if origin in (Union, types.UnionType):
        for arg in args:  # exact matches first: "1" for ``int | str`` stays text
            ok, _ = typed(value, arg) if not isinstance(value, str) or arg is str else (False, None)
            if ok:
                return True, value
        for arg in args:
            ok, read = typed(value, arg)
            if ok:
                return True, read
        return False, value
    if hint is type(None):
        return value is None, value
    if origin is Literal:
        return value in args, value
    if isinstance(value, str) and hint in (int, float, bool):
        value = _read_text(value, hint)
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value), value
    if hint is str:
        return isinstance(value, str), value
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False, value
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            inner: Any = args[0]
        elif origin is tuple and args:
            if len(args) != len(value):
                return False, value
            pairs = [typed(v, a) for v, a in zip(value, args)]
            return all(ok for ok, _ in pairs), type(value)(v for _, v in pairs)
        else:
            inner = args[0] if args else Any
        pairs = [typed(v, inner) for v in value]
        return all(ok for ok, _ in pairs), type(value)(v for _, v in pairs)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return isinstance(value, Mapping), value
    if isinstance(hint, type):
        return isinstance(value, hint), value
    return True, value


def check_typed(owner: str, key: str, value: Any, hint: Any) -> Any:
    """``value`` read as type ``hint``; ``SubnetlabError`` naming ``owner``, ``key`` and the type otherwise."""
    ok, read = typed(value, hint)
    if not ok:
        raise SubnetlabError(f"{owner} {key}: expected {type_name(hint)}, got {value!r}", setting=key)
    return read


def check_field_types(obj: Any, owner: str) -> None:
    """Read every field of the dataclass instance ``obj`` as its declared type (frozen ones too), or refuse."""
    hints = get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        hint = hints.get(f.name, Any)
        value = getattr(obj, f.name)
        read = check_typed(owner, f.name, value, hint)
        if read is not value:
            object.__setattr__(obj, f.name, read)


# -- presets ------------------------------------------------------------------------------------
def preset_values(presets: Mapping[str, Mapping[str, Any]], preset: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A command's settings from a named preset: the preset's values, each one the caller gave (not None) winning.

    The one rule of every ``preset`` that lists a command's settings (fine-tuning, discovery, transfer training,
    lottery pruning); the hard-concrete and edge presets add step counts that scale with the target."""
    if preset not in presets:
        raise SubnetlabError(f"preset {preset!r}: expected one of {', '.join(presets)}", setting="preset")
    values = dict(presets[preset])
    values.update({key: value for key, value in given.items() if value is not None})
    return values
