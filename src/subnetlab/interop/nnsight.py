"""A subnetlab node or edge circuit inside an ``nnsight.NNsight``-wrapped Hugging Face model.

nnsight runs the module it wraps (``wrapped._module``), the user's ``transformers`` model, so subnetlab's own
interventions (``intervene.gates`` for heads and MLPs, ``intervene.edges`` for edges: PyTorch hooks on that
model's modules) apply as they are and fire inside every ``with wrapped.trace(...)``: what the user saves or
edits there is the circuit's activations. The hooks are removed when the ``with`` ends.

    with apply_subnetwork(wrapped, sub, corrupted_ids):   # removed parts patched from the corrupted prompts
        with wrapped.trace(input_ids):
            logits = wrapped.output.logits.save()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import get_adapter


def unwrap(wrapped: Any) -> torch.nn.Module:
    """The ``transformers`` model behind an ``NNsight`` / ``LanguageModel`` wrapper (or the model itself)."""
    model = wrapped if isinstance(wrapped, torch.nn.Module) else wrapped.__dict__.get("_module")
    if not isinstance(model, torch.nn.Module):
        raise SubnetlabError(f"{type(wrapped).__name__} wraps no PyTorch module to apply a subnetwork to")
    return model


@contextmanager
def apply_subnetwork(wrapped: Any, subnetwork: Any, corrupted_tokens: Tensor | None = None, *,
                     values: Any = None) -> Iterator[None]:
    """Apply a ``Subnetwork`` (kind ``structured``: heads and MLPs; kind ``edges``) to the wrapped model.

    The same arguments as ``interop.transformer_lens.apply_subnetwork``: removed parts deliver their output on
    ``corrupted_tokens`` ``[batch, pos]`` (patching; the clean batch must have the same shape) or zero (None).
    ``values`` instead gives what they deliver directly, as for subnetlab's own interventions
    (``ComponentValues`` for nodes, e.g. means; ``WriterValues`` for edges)."""
    from subnetlab.intervene.activations import capture_activations
    from subnetlab.intervene.edges import apply_edges, capture_writers
    from subnetlab.intervene.gates import apply_gates

    if corrupted_tokens is not None and values is not None:
        raise SubnetlabError("give corrupted tokens or values for the removed parts, not both")
    model = unwrap(wrapped)
    adapter = get_adapter(model)
    device = next(model.parameters()).device
    if corrupted_tokens is not None:
        inputs = {"input_ids": corrupted_tokens.to(device), "attention_mask": torch.ones_like(corrupted_tokens).to(device)}
        with torch.no_grad():
            capture = capture_writers if subnetwork.kind == "edges" else capture_activations
            values = capture(model, adapter, inputs)
    if subnetwork.kind == "edges":
        circuit = subnetwork.circuit()
        with apply_edges(model, adapter, circuit.graph, circuit.kept().float().to(device), values):
            yield
    elif subnetwork.kind == "structured":
        with apply_gates(model, adapter, subnetwork.heads.float().to(device), subnetwork.mlps.float().to(device),
                         ablation=values):
            yield
    else:
        raise SubnetlabError(f"a {subnetwork.kind} subnetwork has no heads, MLPs or edges to apply")
