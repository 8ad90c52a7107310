"""Which model kinds and families each command accepts: one table, read by each command's help and `subnetlab models`.

``COMMAND_MODELS`` maps a command name to the model kinds it takes (``encoder``:
text classifiers; ``decoder``: causal language models; ``vision``: image models,
the ``kind`` of each ``FamilySpec`` in ``FAMILIES``) and whether it needs heads and
MLPs (gates, pruning, attention) or only weights. ``accepted_models(command)`` turns
an entry into the sentence each command's help ends with, listing the families
of ``FAMILIES`` that qualify, so a new family appears in every help text at once.
Commands that load no model (``core``, ``results``, ``lottery-stability``) have no entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from subnetlab.models.adapters import FAMILIES

KIND_NAMES = {"encoder": "text encoders", "decoder": "causal language models", "vision": "image models"}


@dataclass(frozen=True)
class Accepts:
    """The model kinds a command takes; ``components``: only families with heads and MLPs."""

    kinds: tuple[str, ...]
    components: bool = True
    note: str = ""


_TEXT = ("encoder", "decoder")
_TEXT_NOTE = ("classification tasks need a classifier head of one output per label (fine-tune first); "
              "language-model tasks (arith:*, an answer column) need a causal language model")

_LM_NOTE = ("language-model tasks: arithmetic (arith:*), or your own data in the answer form (an answer column; "
            "it reports the data file's test split, the same rows for every command and seed)")

COMMAND_MODELS: dict[str, Accepts] = {
    "inspect": Accepts(("encoder", "decoder", "vision"), components=False),
    "finetune": Accepts(_TEXT, note="a classification task gets a new classifier head when the model has none "
                                    "or one of another size; language-model tasks (arith:*, an answer column) "
                                    "need a causal language model"),
    "evaluate": Accepts(_TEXT, note=_TEXT_NOTE),
    "prune": Accepts(_TEXT, note=_TEXT_NOTE),
    "effective-size": Accepts(_TEXT, note=_TEXT_NOTE),
    "ablate": Accepts(_TEXT, note=_TEXT_NOTE),
    "attention": Accepts(_TEXT),
    "export": Accepts(("encoder", "decoder", "vision")),
    "discover": Accepts(("decoder",), note=_LM_NOTE),
    "transfer": Accepts(("decoder",), note=_LM_NOTE),
    "lottery-prune": Accepts(_TEXT, note=_TEXT_NOTE),
    "lottery-retrain": Accepts(_TEXT, note=_TEXT_NOTE),
    "lottery-patterns": Accepts(("encoder",)),
    "circuit-eval": Accepts(("decoder",), note="circuit tasks (prompt pairs: circuit:ioi, circuit:greater-than, "
                                               "circuit:arith:*, your own file with a corrupted column); edge circuits "
                                               "need a pre-LN model, node circuits (heads and MLPs) any of these"),
    "circuit": Accepts(("decoder",), note="circuit tasks (prompt pairs); edge circuits need a pre-LN model (GPT-2, "
                                          "Llama, Mistral, Qwen)"),
    "plan": Accepts(_TEXT, note="only the config is read (no weights); circuit plans need a causal language model"),
}


def families_of(kind: str, components: bool = True) -> list[str]:
    """Family names of ``kind`` (with heads and MLPs only, when ``components``), in ``FAMILIES`` order."""
    return [spec.family for spec in FAMILIES.values()
            if spec.kind == kind and (spec.has_components or not components)]


def accepted_models(command: str) -> str | None:
    """The sentence naming the model kinds and families ``command`` accepts; None for a command without models."""
    accepts = COMMAND_MODELS.get(command)
    if accepts is None:
        return None
    parts = []
    for kind in accepts.kinds:
        names = families_of(kind, accepts.components)
        if names:
            parts.append(f"{KIND_NAMES[kind]} ({', '.join(names)})")
    text = "Models: " + "; ".join(parts) + "."
    return f"{text} {accepts.note[0].upper()}{accepts.note[1:]}." if accepts.note else text


__all__ = ["COMMAND_MODELS", "KIND_NAMES", "Accepts", "accepted_models", "families_of"]
