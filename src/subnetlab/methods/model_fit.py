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


def family_kind(model: Any) -> str | None:
    """``encoder``, ``decoder`` or ``vision`` for a supported family (of a model or its config); None otherwise."""
    model_type = getattr(getattr(model, "config", model), "model_type", None)
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


def position_limit(model: Any) -> int | None:
    """The most tokens a model's learned position table takes; None without one (rotary: Llama-style).

    ``model`` is a model or its config (to check before the weights are loaded).
    """
    config = getattr(model, "config", model)
    if config is None or family_kind(model) == "vision":
        return None
    if any(getattr(config, key, None) is not None for key in ("rope_theta", "rope_parameters", "rope_scaling")):
        return None
    if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute"):
        return None
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    if limit is None:
        return None
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        limit -= int(getattr(config, "pad_token_id", 1) or 0) + 1  # positions start after the padding index
    return int(limit)


def check_lengths_fit(model: Any, tokenizer: Any, task: Task, max_length: int, model_name: str,
                      splits: Any = None) -> None:
    """Refuse a ``max_length`` past the model's positions when some input of ``task`` is longer than them.

    A ``max_length`` above the limit is harmless while every input is shorter (arithmetic
    prompts of 3 tokens on a 16-position GPT-2 with the default 128); otherwise the model
    would fail half-way through a run. The splits are tokenized with the task's own cache,
    so the run reuses the work.
    """
    limit = position_limit(model)
    if limit is None or max_length <= limit:
        return
    names = list(splits) if splits is not None else list(task.split_names)
    for split in names:
        if not task.examples(split):
            continue
        lengths = [len(ids) for ids in task.encoded(tokenizer, split, max_length).input_ids]
        longest = max(lengths)
        if longest > limit:
            raise SubnetlabError(
                f"max_length {max_length} exceeds the {limit} positions of model {model_name}, and split {split} of "
                f"task {task.name} has inputs of up to {longest} tokens; set max_length to at most {limit}",
                setting="max_length")


__all__ = ["check_lengths_fit", "check_model_fits_task", "family_kind", "position_limit", "vocabulary_size"]
