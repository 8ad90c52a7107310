"""The model a fine-tuning run starts from, fitted to its task.

The ``model`` setting is a builtin alias (``minilm``), a local Hugging Face directory,
a hub id, or ``gpt2-arith:<layers>``: a fresh GPT-2 built from a config as in
Subtask Induction (Appendix B.1: 4 heads, width 128, MLP 512, 2 to 12 layers)
over the arithmetic task's own word-level tokenizer. Classification tasks get
a sequence-classification head with one output per label (named in
``config.id2label``); LM tasks a causal-LM head.
"""

from __future__ import annotations

from pathlib import Path

from transformers import GPT2Config

from subnetlab.errors import SubnetlabError
from subnetlab.methods.model_fit import check_model_fits_task, new_head_notice
from subnetlab.models import LoadedModel, build_model, load_model, resolve
from subnetlab.models.loading import read_config, task_head_weights
from subnetlab.progress import stage
from subnetlab.tasks.base import Task

ARITH_PREFIX = "gpt2-arith:"


def arithmetic_gpt2_config(num_layers: int, vocab_size: int, pad_id: int, positions: int = 16) -> GPT2Config:
    """GPT-2 of Subtask Induction's arithmetic experiments: 4 heads, width 128, MLP 512."""
    return GPT2Config(
        vocab_size=vocab_size, n_positions=positions, n_embd=128, n_layer=num_layers, n_head=4, n_inner=512,
        bos_token_id=pad_id, eos_token_id=pad_id, pad_token_id=pad_id,
    )


def _parse_layers(spec: str) -> int:
    text = spec[len(ARITH_PREFIX):]
    if not text.isdigit() or not 1 <= int(text) <= 48:
        raise SubnetlabError(f"model {spec!r}: expected gpt2-arith:<layers> with 1-48 layers (the paper uses 2-12)")
    return int(text)


def _head_notice(spec: str, task: Task) -> str | None:
    """What happens to a saved model's head for ``task`` (``model_fit.new_head_notice``); None to keep it."""
    local = Path(resolve(spec)).expanduser()
    if not (local / "config.json").is_file():
        return None
    try:
        config = read_config(str(local))
    except (OSError, ValueError):
        return None  # load_model reports unreadable configs
    return new_head_notice(config, task, spec)


def model_for_task(spec: str, task: Task, *, seed: int = 0, new_weights: tuple[str, ...] | list[str] = ()) -> LoadedModel:
    """Load or build the model named ``spec`` with the head ``task`` needs, and its tokenizer.

    The task's own tokenizer (arithmetic) takes precedence over the model's.
    Fresh heads are initialised from ``seed``. A classification task's new head may be missing from the
    checkpoint (its weights: ``task_head_weights``); ``new_weights`` names any other weights that may.
    """
    import torch

    if spec.startswith(ARITH_PREFIX):
        if task.kind != "lm" or task.tokenizer is None:
            raise SubnetlabError(f"model {spec} is for the arithmetic tasks (arith:<op>), not {task.name}")
        tok = task.tokenizer
        config = arithmetic_gpt2_config(_parse_layers(spec), len(tok), tok.pad_token_id)
        return build_model(config, head="causal-lm", seed=seed, tokenizer=tok)
    if task.kind == "lm":
        loaded = load_model(spec, head="causal-lm", new_weights=tuple(new_weights))
        if loaded.new_weights:
            stage(f"new weights (freshly initialised): {', '.join(loaded.new_weights)}")
    else:
        n = len(task.labels)
        notice = _head_notice(spec, task)
        if notice is not None:
            stage(notice)
        torch.manual_seed(seed)  # the new classifier's initialisation
        head = task_head_weights(spec, "classification", n)  # the new classifier's weights, and only they, fresh
        loaded = load_model(spec, head="classification", num_labels=n, new_weights=(*head, *new_weights))
        if loaded.new_weights:
            stage(f"new task head (freshly initialised): {', '.join(loaded.new_weights)}")
        loaded.model.config.architectures = [type(loaded.model).__name__]  # the head it has now
        loaded.model.config.id2label = dict(enumerate(task.labels))
        loaded.model.config.label2id = {name: i for i, name in enumerate(task.labels)}
    if task.tokenizer is not None:
        loaded.tokenizer = task.tokenizer
    check_model_fits_task(loaded.model, loaded.tokenizer, task, spec)
    return loaded
