"""The exported model's directory, and loading it back.

A directory a user can ship::

    config.json                  the source model's config, with ``model_type`` "subnetlab_export" (the
                                 source's type is kept as ``subnetlab_model_type``)
    subnetlab_model.safetensors  the sliced weights (tied weights stored once)
    subnetlab_pruning.json       heads / key-value heads / MLPs kept per layer, the biases added, the source
                                 model's and the subnetwork's fingerprints, parameter counts before and after
    README.md                    what the directory is and how to load it
    tokenizer files              when the source had a tokenizer
    model.onnx                   optional

transformers configs have one head count and one MLP width for every layer and no
way to say "this MLP is gone", so the per-layer shapes live in
``subnetlab_pruning.json``. ``load_exported`` builds the model from the config,
applies the recorded plan (``slicing.apply_plan``) to get the smaller modules,
and loads the weights into them; ``subnetlab.load_model`` calls it when it finds
``subnetlab_pruning.json``.

Why plain transformers refuses the directory. Its ``from_pretrained`` builds
every layer at the config's full shape: a weight with a smaller shape (a layer
that lost heads) is an error, but a weight that is *absent* (a removed MLP, the
projections of a layer with no head left) is filled with fresh random values
with only a log line, and a bias it has no place for (one added to hold folded
means) is dropped. So a directory that looked like a transformers checkpoint
loaded *wrong* for some masks (one MLP removed, every head kept: logits off by
6e-3 on the model that found it, by more than 0.5 on the tiny test models) and
refused others.
Three ways out were weighed:

* express the removals in a standard config: per-layer head counts and a
  per-layer (or zero) MLP width are not fields of BERT, RoBERTa, GPT-2, Llama
  or ViT configs (transformers' ``per_layer_config`` is read only by a few
  model families, none of these), so this cannot be done;
* keep removed components as zero weights at the config's full shapes: loads
  exactly for zero ablation, but then nothing is smaller (the point of
  exporting), and mean ablation's folded constants need biases that Llama's
  projections do not have; exporting some masks small and others full-size
  would make two kinds of directory, harder to trust than one;
* (chosen) make every exported directory one that only subnetlab reads:
  ``config.json``'s ``model_type`` is ``subnetlab_export``, so ``AutoConfig``
  and every ``AutoModel*`` class refuse it ("model type `subnetlab_export` ...
  not recognised"), and the weights are named ``subnetlab_model.safetensors``,
  so a family's own class (``GPT2LMHeadModel``, which reads any config as its
  own) finds no weights file and refuses too, whatever the mask. The README
  in the directory says how to load it. ``subnetlab.load_model(DIR).model`` is
  an ordinary transformers model (same classes, smaller modules) for pipelines.

Directories of the first format (``subnetlab.export/1``: the source's config
unchanged, ``model.safetensors``) still load through subnetlab; plain
transformers may load them wrongly, so re-export them.

The directory is written under a temporary name beside its final place and
renamed when complete, so an interrupted export never leaves a directory that
looks finished.

This module imports only the models layer's adapters (not ``subnetlab.models``
itself), because ``subnetlab.models.loading`` imports it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.export.slicing import Plan, apply_plan
from subnetlab.io import (
    WRITE_ERRORS,
    default_mode,
    load_tensors,
    read_json,
    save_tensors,
    seal_directory,
    write_failed,
    write_json,
    write_text,
)
from subnetlab.models.adapters import FAMILIES

PRUNING_FILE = "subnetlab_pruning.json"
WEIGHTS_FILE = "subnetlab_model.safetensors"
FORMAT = "subnetlab.export/2"
WEIGHTS_OF_FORMAT = {"subnetlab.export/1": "model.safetensors", FORMAT: WEIGHTS_FILE}  # formats still read
EXPORT_MODEL_TYPE = "subnetlab_export"  # a model_type no transformers class knows: plain loading refuses
SOURCE_TYPE_KEY = "subnetlab_model_type"  # config.json's key for the source's own model_type
README = """# A model exported by subnetlab

This directory holds a model with some attention heads and MLPs physically removed
(`subnetlab export`). Its layers have different numbers of heads, which a transformers
config cannot describe, so transformers' own `from_pretrained` refuses it (its
`config.json` has `model_type` "subnetlab_export" and its weights are in
`subnetlab_model.safetensors`). Load it with subnetlab:

```python
import subnetlab
small = subnetlab.load_model("DIRECTORY", head="{head}")  # small.model is a {architecture}
```

`subnetlab_pruning.json` lists what each layer keeps (`subnetlab.export.read_plan` reads it).
"""


def is_exported(directory: str | Path) -> bool:
    """Whether ``directory`` holds a model written by ``export_subnetwork``."""
    return (Path(directory) / PRUNING_FILE).is_file()


def read_record(directory: str | Path) -> dict[str, Any]:
    """The directory's ``subnetlab_pruning.json``, checked for its format."""
    path = Path(directory) / PRUNING_FILE
    record = read_json(path)
    if not isinstance(record, dict) or record.get("format") not in WEIGHTS_OF_FORMAT:
        raise SubnetlabError(f"{path}: not a subnetlab export record (format "
                             f"{record.get('format') if isinstance(record, dict) else None!r}, expected {FORMAT})")
    return record


def exported_config(directory: str | Path) -> Any:
    """The config an exported directory was built from: its ``config.json`` with the source's ``model_type``.

    A directory of the first format kept the source's config unchanged.
    """
    from transformers import CONFIG_MAPPING

    path = Path(directory) / "config.json"
    data = read_json(path)
    if not isinstance(data, dict):
        raise SubnetlabError(f"{path}: not a model config (a JSON object)")
    if data.get("model_type") == EXPORT_MODEL_TYPE:
        data["model_type"] = data.pop(SOURCE_TYPE_KEY, None)
    model_type = data.get("model_type")
    if model_type not in CONFIG_MAPPING:
        raise SubnetlabError(f"{path}: the exported model's type {model_type!r} is not a transformers model type")
    return CONFIG_MAPPING[model_type].from_dict(data)


def export_config_json(config: Any, architecture: str) -> str:
    """``config.json`` of an export: the model's config, its ``model_type`` one only subnetlab reads."""
    data = json.loads(config.to_json_string(use_diff=False))
    data["architectures"] = [architecture]
    data[SOURCE_TYPE_KEY] = data["model_type"]
    data["model_type"] = EXPORT_MODEL_TYPE
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def read_plan(directory: str | Path) -> Plan:
    return Plan.from_json(read_record(directory).get("plan"), str(Path(directory) / PRUNING_FILE))


# the model class a source was saved as -> the subnetlab head that rebuilds it
HEAD_SUFFIXES = (("ForSequenceClassification", "classification"), ("ForCausalLM", "causal-lm"),
                 ("LMHeadModel", "causal-lm"), ("ForImageClassification", "image-classification"))


def head_for(model_class_names: list[str] | None) -> str:
    """The ``load_model`` head that rebuilds a model saved as one of ``model_class_names``."""
    for name in model_class_names or []:
        for suffix, head in HEAD_SUFFIXES:
            if name.endswith(suffix):
                return head
    return "base"


# -- writing ------------------------------------------------------------------------------------
def unique_state(model: nn.Module) -> dict[str, Tensor]:
    """The state dict with each tied tensor once (safetensors refuses shared storage).

    The first name in module order is kept (the input embedding, before the
    output head tied to it); the loader re-ties through the rebuilt model.
    """
    state: dict[str, Tensor] = {}
    seen: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        state[name] = tensor
    return state


def remove_stale_exports(out: Path) -> list[Path]:
    """Remove the temporary directories that killed exports to ``out`` left beside it; returns them.

    An export writes ``.NAME.export-PID.XXXX.tmp`` beside ``out`` and renames it when
    complete; a ``kill -9`` before the rename leaves it (``out``'s parent is the user's,
    not a run directory, so no other cleanup sees it). Only directories of that name
    whose process is gone are removed: a live export to the same place keeps its own.
    """
    pattern = re.compile(rf"\.{re.escape(out.name)}\.export-(\d+)\.[^/]*\.tmp")
    removed = []
    if not out.parent.is_dir():
        return removed
    for path in sorted(out.parent.iterdir()):
        found = pattern.fullmatch(path.name)
        if found and path.is_dir() and not path.is_symlink() and not _alive(int(found.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_directory(out: Path, model: nn.Module, record: dict[str, Any], tokenizer: Any = None,
                    extra: Callable[[Path], None] | None = None) -> None:
    """Write the export into a temporary directory beside ``out``, then rename it to ``out``.

    ``out`` must not exist or be empty (checked by the caller before any work).
    ``extra(tmp)`` writes optional files (ONNX) into the temporary directory.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_exports(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-{os.getpid()}.", suffix=".tmp", dir=out.parent))
    os.chmod(tmp, default_mode(directory=True))  # mkdtemp makes 0700; the export is for colleagues too
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would keep a model meant for shipping from other users
    try:
        write_text(tmp / "config.json", export_config_json(model.config, type(model).__name__))
        save_tensors(tmp / WEIGHTS_FILE, unique_state(model), {"format": "pt"})
        write_text(tmp / "README.md", README.replace("{head}", head_for([type(model).__name__]))
                   .replace("{architecture}", type(model).__name__))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        if extra is not None:
            extra(tmp)
        write_json(tmp / PRUNING_FILE, record)  # last: its presence marks the export complete
        seal_directory(tmp)  # the tokenizer's and ONNX files too: umask modes, on disk before the rename
        if out.exists():
            out.rmdir()  # empty (checked); a non-empty one would make rmdir fail rather than be overwritten
        os.replace(tmp, out)
    except WRITE_ERRORS as e:  # a writer (tokenizer, ONNX, safetensors) on a full disk: an error naming the export
        raise write_failed(out, e) from None
    except SubnetlabError as e:  # subnetlab's own atomic writes name the temporary directory, which goes away
        raise SubnetlabError(str(e).replace(str(tmp), str(out)), setting=e.setting) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# -- loading ------------------------------------------------------------------------------------
def load_exported(directory: str | Path, model_class: Any, config: Any, attn_implementation: str = "sdpa",
                  dtype: torch.dtype | None = None) -> nn.Module:
    """Build ``model_class`` from ``config``, shrink it to the recorded plan, and load the saved weights.

    ``model_class`` is a transformers Auto class (``AutoModel``,
    ``AutoModelForSequenceClassification``, ...). A model exported with a task
    head loads as its base model (the head's weights are left out), and a base
    export into a model with a head leaves the head as initialised, as
    ``from_pretrained`` does.
    """
    directory = Path(directory)
    record = read_record(directory)
    plan = Plan.from_json(record.get("plan"), str(directory / PRUNING_FILE))
    if plan.family not in FAMILIES or not FAMILIES[plan.family].has_components:
        raise SubnetlabError(f"{directory / PRUNING_FILE}: unknown family {plan.family!r}")
    spec = FAMILIES[plan.family]
    if config.model_type not in spec.model_types:
        raise SubnetlabError(f"{directory}: config.json is a {config.model_type} model, the pruning record "
                             f"a {plan.family} one")
    weights = directory / WEIGHTS_OF_FORMAT[record["format"]]
    state = load_tensors(weights)
    floating = [t.dtype for t in state.values() if t.is_floating_point()]
    config._attn_implementation = attn_implementation
    model = model_class.from_config(config, attn_implementation=attn_implementation)
    model.to(dtype or (floating[0] if floating else torch.float32))
    apply_plan(model, spec, plan)
    state, optional = _match_prefix(model, state, spec.layers)
    _load_state(model, state, weights, optional)
    model.eval()
    return model


def _match_prefix(model: nn.Module, state: dict[str, Tensor], layers: str) -> tuple[dict[str, Tensor], Callable[[str], bool]]:
    """Map saved names onto ``model``'s (strip or add the base model's prefix, ``bert.``).

    Returns the mapped weights and which of the model's weights may stay as
    initialised, as ``from_pretrained`` leaves them: a task head when a base
    export loads into a model with one; a base model's own extras (ViT's pooler)
    when an export with a head loads as its base model. Transformer layers never.
    """
    prefix = getattr(model, "base_model_prefix", "")
    names = set(model.state_dict())
    if not prefix or any(name in names for name in state):
        return state, lambda name: False
    lead = prefix + "."
    if any(name.startswith(lead) for name in state):  # a model with a head, loaded as its base model
        return ({name[len(lead):]: t for name, t in state.items() if name.startswith(lead)},
                lambda name: not name.startswith(layers + "."))
    return {lead + name: t for name, t in state.items()}, lambda name: not name.startswith(lead)


def _load_state(model: nn.Module, state: dict[str, Tensor], where: Path, optional: Callable[[str], bool]) -> None:
    own = model.state_dict()
    for name, tensor in state.items():
        if name not in own:
            raise SubnetlabError(f"{where}: weight {name} has no place in the rebuilt model; the pruning record "
                                 "and the weights do not belong together")
        if tuple(own[name].shape) != tuple(tensor.shape):
            raise SubnetlabError(f"{where}: weight {name} has shape {tuple(tensor.shape)}, the rebuilt model "
                                 f"{tuple(own[name].shape)}")
    result = model.load_state_dict(state, strict=False)
    loaded = {own[name].data_ptr() for name in state if own[name].numel()}  # tied weights share storage
    missing = [name for name in result.missing_keys
               if own[name].numel() and own[name].data_ptr() not in loaded and not optional(name)]
    if missing:
        raise SubnetlabError(f"{where}: no saved weight for {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
