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
* every token id the tokenizer produces must be below the model's vocabulary size;
* a classification task needs a classifier head of one output per label: a
  model whose head has another number of outputs is refused (evaluate, prune:
  they measure the head the model was fine-tuned with), while fine-tuning says
  that a new head replaces it (``new_head_notice``).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import FAMILIES
from subnetlab.tasks.base import NLI2, Task


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


def head_outputs(model_or_config: Any) -> int | None:
    """Outputs of a sequence-classification head (a model, or a saved model's config); None without one."""
    config = getattr(model_or_config, "config", model_or_config)
    names = [type(model_or_config).__name__] if hasattr(model_or_config, "config") else []
    names += list(getattr(config, "architectures", None) or []) if not names else []
    if not any(name.endswith("ForSequenceClassification") for name in names):
        return None
    return int(getattr(config, "num_labels", 0) or 0)


def head_fits(outputs: int, task: Task) -> bool:
    """Whether a head of ``outputs`` outputs can be scored on ``task`` (a 3-way NLI head on 2-way HANS can)."""
    return outputs == len(task.labels) or (task.labels == NLI2 and outputs == 3)


def _label_list(task: Task) -> str:
    shown = ", ".join(task.labels[:8]) + (", ..." if len(task.labels) > 8 else "")
    return f"{len(task.labels)} label{'s' if len(task.labels) != 1 else ''} ({shown})"


def check_head_fits_task(model: nn.Module, task: Task, model_name: str) -> None:
    """Refuse a classifier whose number of outputs differs from the task's labels, naming both numbers."""
    if task.kind != "classification":
        return
    outputs = head_outputs(model)
    saved = getattr(model.config, "architectures", None) or []  # what the checkpoint held (empty: built here)
    if outputs is not None and saved and head_outputs(model.config) is None:
        raise SubnetlabError(
            f"model {model_name} has no trained classification head (saved as {', '.join(saved)}), and task "
            f"{task.name} has {_label_list(task)}; fine-tune the model on this task first (fine-tuning adds "
            f"a new head of {len(task.labels)} outputs)", setting="model")
    if outputs is not None and not head_fits(outputs, task):
        raise SubnetlabError(
            f"model {model_name} has a classification head with {outputs} outputs, but task {task.name} has "
            f"{_label_list(task)}; the head must match: fine-tune the model on this task first "
            f"(fine-tuning adds a new head of {len(task.labels)} outputs)", setting="model")


def new_head_notice(config: Any, task: Task, model_name: str) -> str | None:
    """What fine-tuning does to the head of a saved model (its ``config``) for ``task``; None when it keeps it.

    A classifier of another size is replaced by a new one of one output per label; a
    model without a classifier (a base model, a language model) gets one added.
    """
    if task.kind != "classification":
        return None
    outputs = head_outputs(config)
    if outputs is None:
        archs = ", ".join(getattr(config, "architectures", None) or []) or "no head"
        return (f"model {model_name} has no classification head ({archs}): a new head of {len(task.labels)} "
                f"outputs is added for task {task.name} ({_label_list(task)})")
    if outputs != len(task.labels):
        return (f"model {model_name} has a classification head with {outputs} outputs, but task {task.name} has "
                f"{_label_list(task)}: a new head of {len(task.labels)} outputs replaces it")
    return None


def check_model_fits_task(model: nn.Module, tokenizer: Any, task: Task, model_name: str) -> None:
    """Refuse, naming both, a model that cannot run ``task`` with ``tokenizer``."""
    kind = family_kind(model)
    model_type = getattr(model.config, "model_type", "?")
    if kind == "vision":
        raise SubnetlabError(f"model {model_name} is an image model ({model_type}); task {task.name} is a text task",
                             setting="model")
    check_head_fits_task(model, task, model_name)
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
    if task.kind == "lm":
        try:
            task.answer_token_ids(tokenizer)  # every answer must be one token of this tokenizer
        except SubnetlabError as e:
            raise SubnetlabError(f"model {model_name}: {e}; the next-token form needs answers of one token each "
                                 "(shorter answers, or a model whose tokenizer has them as words)",
                                 setting="model") from None


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


def check_max_length(model: Any, max_length: int, model_name: str) -> None:
    """Refuse a ``max_length`` past the model's positions, whatever the inputs' lengths.

    For a length the user asked for: it says how long an input may be, and a model
    cannot take more tokens than its position table holds (``check_lengths_fit``
    judges a default by the inputs instead). ``model`` is a model or its config.
    """
    limit = position_limit(model)
    if limit is not None and max_length > limit:
        raise SubnetlabError(f"max_length {max_length} exceeds the {limit} positions of model {model_name}; set it to "
                             f"at most {limit}", setting="max_length")


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


__all__ = ["check_head_fits_task", "check_lengths_fit", "check_max_length", "check_model_fits_task", "family_kind",
           "head_fits", "head_outputs", "new_head_notice", "position_limit", "vocabulary_size"]
