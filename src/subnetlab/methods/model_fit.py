"""Whether a model can run a task: its kind, its tokenizer, its vocabulary. Checked before any work.

Every command that loads a model for a task calls ``check_model_fits_task``
right after loading, so a mismatch ends within seconds with one message that
names the model, the task, the values that disagree and what to do, instead
of an ``IndexError`` from the embedding half-way through a sweep, or
meaningless accuracies from a model that cannot do the task:

* a language-model task (``arith:*``) needs a causal LM (GPT-2, Llama-style);
* a text task needs a text model (not ViT / ResNet);
* a usable tokenizer must exist: the task's own (arithmetic) or the model's;
  a model folder without tokenizer files has none (transformers 5 would return
  one that knows only its special tokens);
* every token id the tokenizer produces must be below the model's vocabulary size.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import FAMILIES
from subnetlab.tasks.base import Task


def family_kind(model: nn.Module) -> str | None:
    """``encoder``, ``decoder`` or ``vision`` for a supported family; None otherwise."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    for spec in FAMILIES.values():
        if model_type in spec.model_types:
            return spec.kind
    return None


def vocabulary_size(model: nn.Module) -> int | None:
    """Rows of the input embedding (None for models without one)."""
    try:
        embedding = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    return int(embedding.num_embeddings) if embedding is not None and hasattr(embedding, "num_embeddings") else None


def check_model_fits_task(model: nn.Module, tokenizer: Any, task: Task, model_name: str) -> None:
    """Refuse, naming both, a model that cannot run ``task`` with ``tokenizer``."""
    kind = family_kind(model)
    model_type = getattr(model.config, "model_type", "?")
    if kind == "vision":
        raise SubnetlabError(f"model {model_name} is an image model ({model_type}); task {task.name} is a text task",
                             setting="model")
    if task.kind == "lm" and kind != "decoder":
        raise SubnetlabError(f"model {model_name} ({model_type}) is not a causal language model; task {task.name} "
                             "needs one (use a GPT-2 or Llama-style model)", setting="model")
    if tokenizer is None:
        raise SubnetlabError(f"model {model_name} has no tokenizer (no tokenizer files beside it) and task {task.name} "
                             "brings none; save one beside the model with tokenizer.save_pretrained", setting="model")
    rows = vocabulary_size(model)
    if rows is not None and len(tokenizer) > rows:
        raise SubnetlabError(f"model {model_name} has a vocabulary of {rows} tokens, but the tokenizer for task "
                             f"{task.name} has {len(tokenizer)}: token ids would fall outside the embedding",
                             setting="model")


__all__ = ["check_model_fits_task", "family_kind", "vocabulary_size"]
