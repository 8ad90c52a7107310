"""Activation checkpointing of a model's blocks: each block keeps only its input for the backward and runs its
forward again there (``torch.utils.checkpoint``, non-reentrant), so a step keeps one block's activations at a
time instead of every block's. It holds for frozen models in eval mode, where Hugging Face's own
``gradient_checkpointing_enable`` does nothing (it checks ``self.training``).

    with checkpointed_blocks(adapter, when=lambda hidden: hidden.shape[:2].numel() > 2048):
        loss(model(**x)).backward()

Hooks inside a block run again when it is recomputed. A hook with a side effect beyond its output (one that
appends a writer's output to a buffer, ``intervene.edges``) asks ``recomputing()`` and skips the side effect: the
recomputed forward sees the same inputs and weights and gives the same values. The key/value cache is not passed
to a checkpointed block (the recomputation would append to it twice); the forwards this serves read no cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import Adapter

_local = threading.local()


def recomputing() -> bool:
    """True while a checkpointed block's forward runs again in the backward."""
    return getattr(_local, "depth", 0) > 0


@contextmanager
def _recompute() -> Iterator[None]:
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def _is_cache(value: Any) -> bool:
    return hasattr(value, "get_seq_length") and hasattr(value, "update")


def _checkpointed(forward: Callable, when: Callable[[Tensor], bool]) -> Callable:
    def run_block(*args: Any, **kwargs: Any) -> Any:
        hidden = args[0] if args else kwargs.get("hidden_states")
        if not torch.is_grad_enabled() or not isinstance(hidden, Tensor) or not when(hidden):
            return forward(*args, **kwargs)
        args = tuple(None if _is_cache(a) else a for a in args)
        kwargs = {k: None if _is_cache(v) else v for k, v in kwargs.items()}
        first = [True]

        def body(*a: Any, **k: Any) -> Any:
            if first[0]:
                first[0] = False
                return forward(*a, **k)
            with _recompute():
                return forward(*a, **k)

        return checkpoint(body, *args, use_reentrant=False, **kwargs)
    return run_block


@contextmanager
def checkpointed_blocks(adapter: Adapter, when: Callable[[Tensor], bool] | None = None) -> Iterator[None]:
    """Every block of ``adapter``'s model checkpointed while the context lasts (``when(hidden_states)``: for
    which forwards; default all that need a gradient); the blocks' ``forward`` is replaced on the instance and
    restored on exit."""
    blocks = list(adapter.layers())
    replaced = []
    try:
        for block in blocks:
            if "forward" in block.__dict__:
                raise SubnetlabError(f"{type(block).__name__}'s forward is already replaced on this instance "
                                     "(blocks checkpointed twice?)")
            block.forward = _checkpointed(block.forward, when or (lambda hidden: True))
            replaced.append(block)
        yield
    finally:
        for block in replaced:
            block.__dict__.pop("forward", None)


__all__ = ["checkpointed_blocks", "recomputing"]
