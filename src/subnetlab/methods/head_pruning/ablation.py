"""What a pruned component is replaced with: its mean (default), zero, or another input's value.

Mean activations are collected once per model and dataset and cached as a
safetensors file named by a hash of the model (architecture fingerprint and
weights) and the data (task, split, examples, tokenizer, length), so the twelve
seeds of a sweep, and reruns, reuse them.

Resample ablation replaces a component's output on each example by its output
on another example of the same batch (the batch rolled by a random shift), so
positions line up without padding tricks.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import ComponentValues, collect_means
from subnetlab.intervene.gates import ComponentGates
from subnetlab.intervene.resample import rolled_values
from subnetlab.methods.l0.data import PruningData, to_device
from subnetlab.models.adapters import Adapter
from subnetlab.models.digest import weights_digest
from subnetlab.progress import stage
from subnetlab.runtime import model_device


def means_key(adapter: Adapter, model: nn.Module, data: PruningData, examples: int) -> str:
    """The cache key of the mean activations of ``model`` on the first ``examples`` of ``data``."""
    text = json.dumps({"fingerprint": adapter.fingerprint(), "weights": weights_digest(model),
                       "data": data.key_text(), "examples": min(examples, data.size)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def mean_activations(model: nn.Module, adapter: Adapter, data: PruningData, examples: int,
                     batch_size: int = 64, cache_dir: str | Path | None = None) -> ComponentValues:
    """Mean head and MLP outputs over the first ``examples`` training examples (cached on disk)."""
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"means-{means_key(adapter, model, data, examples)}.safetensors"
        if path.is_file():
            return ComponentValues.load(path)
    stage(f"collecting mean activations over {min(examples, data.size)} examples")
    device = model_device(model)
    batches = (to_device(data.model_inputs(data.batch_at(idx)), device) for idx in data.batches(batch_size, limit=examples))
    values = _token_weighted_means(model, adapter, batches)
    values.architecture = adapter.family
    if path is not None:
        values.save(path, {"data": data.key_text(), "examples": str(min(examples, data.size))})
    return values


def _token_weighted_means(model: nn.Module, adapter: Adapter, batches) -> ComponentValues:
    """``collect_means`` one batch at a time, combined by each batch's count of real tokens.

    Equal to one streaming ``collect_means`` pass over all batches; done batch by
    batch because ``collect_means`` of this version fails on a second batch when
    ``per_position=False`` (its scalar token count is indexed in ``add_padded``).
    """
    heads: list[Tensor] | None = None
    mlps: list[Tensor] | None = None
    tokens = 0.0
    for batch in batches:
        mask = batch.get("attention_mask")
        first = next(iter(batch.values()))
        n = float(mask.sum()) if mask is not None else float(first.shape[0] * first.shape[1])
        part = collect_means(model, adapter, [batch])
        if heads is None:
            heads = [h.double() * n for h in part.heads]
            mlps = [m.double() * n for m in part.mlps]
        else:
            heads = [a + h.double() * n for a, h in zip(heads, part.heads)]
            mlps = [a + m.double() * n for a, m in zip(mlps, part.mlps)]
        tokens += n
    if heads is None or mlps is None or tokens == 0:
        raise SubnetlabError("no training examples to collect mean activations from")
    return ComponentValues([h.div(tokens).float() for h in heads], [m.div(tokens).float() for m in mlps])


def ablation_values(kind: str, model: nn.Module, adapter: Adapter, data: PruningData, examples: int,
                    batch_size: int = 64, cache_dir: str | Path | None = None) -> ComponentValues | None:
    """The fixed replacement values for ``kind``: means, or None (zero; resample is per batch)."""
    if kind == "mean":
        return mean_activations(model, adapter, data, examples, batch_size, cache_dir)
    if kind in ("zero", "resample"):
        return None
    raise SubnetlabError(f"ablation {kind!r}: expected mean, zero or resample")


def resample_values(model: nn.Module, adapter: Adapter, gates: ComponentGates, inputs: dict[str, Tensor],
                    generator: torch.Generator) -> ComponentValues:
    """Every component's output on the batch rolled by a random non-zero shift (ungated)."""
    return rolled_values(model, adapter, gates, inputs, generator)
