"""A study's typed settings: one frozen dataclass per study, built from a preset plus overrides and checked once.

Each field is one key of the study's presets and of the ``settings`` mapping its ``config.json`` holds, in the
presets' order (``preset``, the preset's name, last), so ``to_dict()`` writes what the presets spell. A field that
only some presets carry is ``optional()``: absent from ``to_dict()`` while None. Nested settings (a study's
``finetune``, ``prune``, ``studies``) stay the JSON mappings the presets give; the steps that use them check them.

Building one reads every value as its field's type (numbers written as text are read, as on a command line) and
then runs the study's ``check()`` for ranges and choices, so a bad value fails naming its key before anything runs.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar, get_type_hints

import yaml

from subnetlab.errors import SubnetlabError, type_name, typed

S = TypeVar("S", bound="StudySettings")


def optional(default: Any = None) -> Any:
    """A setting only some presets carry: left out of ``to_dict()`` while it is None."""
    return dataclasses.field(default=default, metadata={"optional": True})


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudySettings:
    """Base class: ``from_preset`` and ``from_dict`` check the keys and types, the subclass's ``check`` the rest."""

    reproduction: ClassVar[str] = "study"  # the reproduction's name (``reproduce NAME``), as messages call it
    preset: str | None = optional()

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            ok, read = typed(value, hints.get(f.name, Any))
            if not ok:
                raise SubnetlabError(f"setting {f.name} of {self.reproduction}: expected {type_name(hints[f.name])}, "
                                     f"got {value!r}", setting=f.name)
            if read is not value:
                object.__setattr__(self, f.name, read)
        self.check()

    def check(self) -> None:
        """Ranges, choices and combinations of this study's settings (raise ``SubnetlabError``)."""

    @classmethod
    def of(cls: type[S], settings: S | Mapping[str, Any]) -> S:
        """``settings`` as this class: a mapping (``config.json``'s, a test's) is read with ``from_dict``."""
        return settings if isinstance(settings, cls) else cls.from_dict(settings)

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any]) -> S:
        if not isinstance(data, Mapping):
            raise SubnetlabError(f"settings of {cls.reproduction}: expected a mapping, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise SubnetlabError(f"unknown setting(s) {', '.join(unknown)} for {cls.reproduction}; known: "
                                 f"{', '.join(sorted(known))}", setting=unknown[0])
        missing = [n for n, f in known.items() if n not in data and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise SubnetlabError(f"missing setting(s) {', '.join(missing)} for {cls.reproduction}", setting=missing[0])
        return cls(**data)

    @classmethod
    def from_preset(cls: type[S], presets: Mapping[str, Mapping[str, Any]], preset: str,
                    overrides: Mapping[str, Any] | None = None) -> S:
        """Preset ``preset`` with ``overrides`` (``KEY: VALUE``; text is read as YAML, then as the key's type)."""
        if preset not in presets:
            raise SubnetlabError(f"unknown preset {preset!r} for {cls.reproduction}; choose one of {', '.join(presets)}")
        values = copy.deepcopy(dict(presets[preset]))
        hints = get_type_hints(cls)
        for key, text in (overrides or {}).items():
            if key not in values:
                raise SubnetlabError(f"unknown setting {key!r} for {cls.reproduction}; known: {', '.join(sorted(values))}",
                                     setting=key)
            values[key] = cls._override(key, text, hints[key], values[key])
        return cls.from_dict({**values, "preset": preset})

    @classmethod
    def _override(cls, key: str, text: Any, hint: Any, example: Any) -> Any:
        """``text`` read as YAML ("3" -> 3, "[0, 1]" -> a list), then as ``hint``; text is kept where ``hint`` wants
        text (``model=1.0`` names a model "1.0")."""
        try:
            value = yaml.safe_load(text) if isinstance(text, str) else text
        except yaml.YAMLError:
            raise SubnetlabError(f"setting {key} of {cls.reproduction}: cannot read {text!r}", setting=key) from None
        ok, read = typed(value, hint)
        if not ok and isinstance(text, str):
            ok, read = typed(text, hint)
        if not ok:
            shown = repr(example)
            has = f" (the preset has {shown})" if example is not None and len(shown) <= 60 else ""
            raise SubnetlabError(f"setting {key} of {cls.reproduction}: expected {type_name(hint)}{has}, got {text!r}",
                                 setting=key)
        return read

    def to_dict(self) -> dict[str, Any]:
        """The settings as the presets spell them (what ``config.json`` holds); ``preset`` last."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)
               if f.name != "preset" and not (f.metadata.get("optional") and getattr(self, f.name) is None)}
        if self.preset is not None:
            out["preset"] = self.preset
        return out
