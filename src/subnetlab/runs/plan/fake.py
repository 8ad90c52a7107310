"""The model a plan runs on: its config (``read_model_config``), the model built from it (``fake_model``: under
``FakeTensorMode`` its weights take no memory) and batches of the right shapes (``fake_data``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.runs.plan.settings import PlanSettings

ENCODER_METHODS = ("head-pruning", "finetune", "lottery-prune")  # the others need a causal language model
PACKAGED_CONFIGS = Path(__file__).resolve().parents[2] / "models" / "configs"  # bert-base, gpt2-small, ...


def read_model_config(source: str) -> Any:
    """A model's config from a ``config.json`` file, a directory holding one, a config shipped with subnetlab by
    name (``llama-3.1-8b``: ``PACKAGED_CONFIGS``), a hub id already in the local cache (nothing is downloaded), or
    ``gpt2-arith:<layers>``, the fine-tuning command's arithmetic GPT-2 (``arithmetic_config``)."""
    from transformers import AutoConfig

    from subnetlab.methods.finetune.model import ARITH_PREFIX
    from subnetlab.models.aliases import resolve

    if source.startswith(ARITH_PREFIX):
        return arithmetic_config(source)

    path = Path(resolve(source)).expanduser()
    packaged = PACKAGED_CONFIGS / f"{source.removesuffix('.json')}.json"
    if not path.exists() and "/" not in source and packaged.is_file():
        path = packaged
    if path.is_dir() and not (path / "config.json").is_file():
        raise SubnetlabError(f"{source}: a directory without a config.json", setting="model")
    if not path.exists() and (source.startswith((".", "/", "~")) or source.endswith(".json") or source.count("/") > 1):
        raise SubnetlabError(f"{source}: no such file or directory", setting="model")
    try:
        if path.is_file():
            config = AutoConfig.from_pretrained(str(path))
        else:
            config = AutoConfig.from_pretrained(str(path) if path.exists() else source, local_files_only=True)
    except Exception as e:  # noqa: BLE001 -- OSError, ValueError, and transformers 5's own validation errors
        first = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        where = "" if path.exists() else " (a hub id is read from the local cache only; plan downloads nothing)"
        raise SubnetlabError(f"{source}: not a model config{where}: {first}", setting="model") from None
    return config


def arithmetic_config(source: str) -> Any:
    """``gpt2-arith:<layers>``: Subtask Induction's arithmetic GPT-2 (4 heads, width 128, MLP 512) over the
    arithmetic tokenizer of the default numbers (0-999 and three special tokens), as ``finetune`` builds it."""
    from subnetlab.methods.finetune.model import ARITH_PREFIX, arithmetic_gpt2_config
    from subnetlab.tasks.arithmetic import arithmetic_tokenizer

    layers = source[len(ARITH_PREFIX):]
    if not layers.isdigit() or not 1 <= int(layers) <= 48:
        raise SubnetlabError(f"{source}: expected gpt2-arith:<layers> with 1-48 layers", setting="model")
    tokenizer = arithmetic_tokenizer()
    return arithmetic_gpt2_config(int(layers), len(tokenizer), tokenizer.pad_token_id)


def fake_model(config: Any, settings: PlanSettings) -> tuple[Any, Any]:
    """The model of ``config`` with the head the method uses (a decoder's language-model head; an encoder's
    classifier), in ``settings.weights_dtype``; under ``FakeTensorMode`` its weights take no memory."""
    import copy

    import torch

    from subnetlab.models.adapters import FAMILIES, attention_for, get_adapter
    from subnetlab.models.loading import HEADS, check_config_values

    kind = next((s.kind for s in FAMILIES.values() if getattr(config, "model_type", None) in s.model_types), None)
    if kind is None:
        get_adapter(type("Unsupported", (), {"config": config})())  # the families' own refusal
    if settings.method not in ENCODER_METHODS and kind != "decoder":
        raise SubnetlabError(f"{settings.method} needs a causal language model; {config.model_type} is not one",
                             setting="model")
    check_config_values(config, getattr(config, "_name_or_path", "") or "the model")
    config = copy.deepcopy(config)
    if kind != "decoder":
        config.num_labels = settings.labels
    head = "causal-lm" if kind == "decoder" else "classification"
    try:
        model = HEADS[head].from_config(config, dtype=getattr(torch, settings.weights_dtype),
                                        attn_implementation=attention_for(config.model_type, "sdpa"))
    except Exception as e:  # noqa: BLE001 -- a config whose values disagree (heads that do not divide the width)
        text = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        raise SubnetlabError(f"{getattr(config, '_name_or_path', '') or 'the model'}: config.json describes no model "
                             f"that can be built ({type(e).__name__}{': ' + text if text else ''})",
                             setting="model") from None
    model.eval()
    return model, get_adapter(model)


def fake_data(model: Any, adapter: Any, size: int, length: int) -> Any:
    """``size`` examples of ``length`` tokens: prompt pairs for a decoder (the answer at the last position),
    classification rows for an encoder; made when a batch is asked for (under the fake mode: no memory).

    Without padding: a padded batch carries an attention mask, which under fake tensors transformers always
    expands to ``[batch, 1, length, length]`` (it cannot read that the mask is all ones), sending attention to
    the kernel that keeps its weights; real batches of equal length skip the mask."""
    import torch

    from subnetlab.methods.edge_pruning.data import prediction_logits
    from subnetlab.methods.l0.data import PruningData

    decoder = adapter.spec.kind == "decoder"

    def batch_at(indices: Any) -> dict[str, Any]:
        n = len(list(indices))
        ids = torch.zeros(n, length, dtype=torch.long)
        batch = {"input_ids": ids, "attention_mask": None}  # no padding: the causal kernel without a mask
        if decoder:
            batch.update(corrupted_input_ids=torch.zeros(n, length, dtype=torch.long),
                         answer_index=torch.full((n,), length - 1, dtype=torch.long),
                         answer_id=torch.zeros(n, dtype=torch.long), wrong_id=torch.ones(n, dtype=torch.long))
        return batch

    if decoder:
        return PruningData(size, batch_at, prediction_logits, key={"plan": size})
    return PruningData(size, batch_at, key={"plan": size})


__all__ = ["ENCODER_METHODS", "PACKAGED_CONFIGS", "arithmetic_config", "fake_data", "fake_model", "read_model_config"]
