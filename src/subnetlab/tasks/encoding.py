"""Tokenizing examples once per tokenizer, and collating them into padded batches.

Kept apart from the Task class so the cache key and padding rules can be read
(and tested) on their own. Encoding needs only an example's texts (``TextPair``:
``text_a`` and ``text_b``), so this module does not depend on ``subnetlab.tasks.base``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError

_CHUNK = 2048  # examples per tokenizer call: bounds peak memory on large splits


class TextPair(Protocol):
    """What encoding reads of an example (``subnetlab.tasks.base.Example`` is one)."""

    @property
    def text_a(self) -> str: ...

    @property
    def text_b(self) -> str | None: ...


@dataclass
class EncodedSplit:
    """Unpadded token ids of one split; ``token_type_ids`` when the tokenizer makes them."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None


def tokenizer_key(tokenizer: Any) -> tuple[str, int, str]:
    """What identifies a tokenizer for caching: its name or path, vocabulary size and class."""
    name = str(getattr(tokenizer, "name_or_path", "") or "")
    try:
        size = len(tokenizer)
    except TypeError:
        size = int(getattr(tokenizer, "vocab_size", 0))
    return (name, size, type(tokenizer).__name__)


def encode_examples(tokenizer: Any, examples: Sequence[TextPair], *, max_length: int, lm: bool) -> EncodedSplit:
    """Tokenize ``examples`` (pairs with the model's pair template; LM prompts without specials)."""
    if max_length < 2:
        raise SubnetlabError(f"max_length {max_length} must be at least 2")
    wants_types = "token_type_ids" in getattr(tokenizer, "model_input_names", ())
    input_ids: list[list[int]] = [[] for _ in examples]
    types: list[list[int]] | None = [[] for _ in examples] if wants_types and not lm else None
    pair_idx = [i for i, ex in enumerate(examples) if ex.text_b is not None]
    single_idx = [i for i, ex in enumerate(examples) if ex.text_b is None]
    for idx, pair in ((pair_idx, True), (single_idx, False)):
        for start in range(0, len(idx), _CHUNK):
            chunk = idx[start : start + _CHUNK]
            a = [examples[i].text_a for i in chunk]
            kwargs: dict[str, Any] = {"truncation": True, "max_length": max_length}
            if lm:
                kwargs["add_special_tokens"] = False
            if pair:
                out = tokenizer(a, [examples[i].text_b for i in chunk], **kwargs)
            else:
                out = tokenizer(a, **kwargs)
            for j, i in enumerate(chunk):
                input_ids[i] = list(out["input_ids"][j])
                if types is not None:
                    types[i] = list(out["token_type_ids"][j]) if "token_type_ids" in out else [0] * len(input_ids[i])
    for i, ids in enumerate(input_ids):
        if not ids:
            raise SubnetlabError(f"example {i} ({examples[i].text_a[:40]!r}) tokenizes to no tokens")
    return EncodedSplit(input_ids=input_ids, token_type_ids=types)


def pad_id(tokenizer: Any) -> int:
    """The id ``collate`` pads rows with: the tokenizer's pad token, else its end-of-text token (GPT-2 has no
    pad token), else its unknown token, else 0; the attention mask leaves padded positions out."""
    for attr in ("pad_token_id", "eos_token_id", "unk_token_id"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            return int(value)
    return 0


def collate(
    encoded: EncodedSplit,
    indices: Sequence[int],
    labels: Sequence[int],
    *,
    pad_id: int,
    answer_token_ids: Tensor | None = None,
) -> dict[str, Tensor]:
    """Right-pad the rows at ``indices`` to their longest; add labels (and LM answer keys)."""
    if not indices:
        raise SubnetlabError("cannot collate an empty batch")
    rows = [encoded.input_ids[i] for i in indices]
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    width = int(lengths.max())
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # [B, T]
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, T]
    for b, r in enumerate(rows):
        input_ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
        attention_mask[b, : len(r)] = 1
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if encoded.token_type_ids is not None:
        token_types = torch.zeros((len(rows), width), dtype=torch.long)
        for b, i in enumerate(indices):
            t = encoded.token_type_ids[i]
            token_types[b, : len(t)] = torch.tensor(t, dtype=torch.long)
        batch["token_type_ids"] = token_types
    label_tensor = torch.tensor(list(labels), dtype=torch.long)  # [B]
    batch["labels"] = label_tensor
    if answer_token_ids is not None:
        batch["answer_index"] = lengths - 1  # [B] the last prompt position predicts the answer
        batch["answer_token_ids"] = answer_token_ids.unsqueeze(0).repeat(len(rows), 1)  # [B, C]
        batch["target_ids"] = answer_token_ids[label_tensor]  # [B]
    return batch
