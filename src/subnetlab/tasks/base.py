"""The Task API: examples, label spaces, tokenized batches, task logits, scores.

Every method in subnetlab (pruning, subtask induction, lottery tickets,
fine-tuning, evaluation) talks to data through this one class, so that a new
dataset is a new loader, never a change to a method.

Shape of the API::

    task = get_task("nli-synthetic", seed=0)          # subnetlab.tasks.registry
    task.labels                                        # label names the model's head predicts
    task.train, task.eval_splits["hans"]              # lists of Example
    for batch in task.batches(tok, "hans", 64):        # dict of tensors
        out = model(**task.model_inputs(batch))
        logits = task.task_logits(out, batch)          # [B, C]
        preds = task.predictions(logits, "hans")       # label ids in the split's label space
    task.score(all_preds, "hans")                      # accuracy, per subcase / heuristic / label

Conventions
-----------
* ``Example.label`` indexes the label space of the split it belongs to
  (``task.split_labels(split)``); usually that is ``task.labels``. HANS splits
  are 2-way (``entailment`` / ``non-entailment``): a 3-way NLI model is scored
  on them by merging neutral and contradiction into non-entailment after the
  argmax, as McCoy et al. (2019) do.
* ``Example.subcase`` / ``heuristic`` name an out-of-domain subcase with the
  HANS file's own names (``ln_subject/object_swap``, ``lexical_overlap``).
  ``Example.group`` marks in-domain slices such as the synthetic corpus's
  ``majority`` / ``minority`` examples. Whether a split is in-domain is a
  property of the split (``"id"`` by convention), not of its examples.
* Classification tasks (``kind="classification"``): ``task_logits`` is the
  model's ``logits`` ``[B, C]``.
* Language-model tasks (``kind="lm"``, e.g. modular arithmetic): the model
  input is the prompt only (``<a> <b> <sep>``); the answer is the next token.
  Batches carry ``answer_index`` ``[B]`` (the last prompt position),
  ``answer_token_ids`` ``[B, C]`` (token ids of the label strings) and
  ``target_ids`` ``[B]`` (the gold answer's token id). ``next_token_logits``
  gives the full-vocabulary logits ``[B, V]`` (what ``loss`` trains on);
  ``task_logits`` restricts them to the ``C`` answer tokens, so every task
  returns ``[B, C]`` and predictions are an argmax over the answers only.
* Tokenization is cached per tokenizer (name_or_path, vocabulary size, class)
  and ``max_length``; batches are padded on the right to their longest row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.encoding import EncodedSplit, collate, encode_examples, pad_id, tokenizer_key

NLI3 = ["entailment", "neutral", "contradiction"]
NLI2 = ["entailment", "non-entailment"]
PARAPHRASE = ["not_duplicate", "duplicate"]

MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class Example:
    """One labelled input; ``label`` indexes the label space of its split."""

    text_a: str
    text_b: str | None
    label: int
    subcase: str | None = None  # OOD subcase, e.g. "ln_subject/object_swap"
    heuristic: str | None = None  # e.g. "lexical_overlap"
    group: str | None = None  # in-domain slice, e.g. "minority"


class Task:
    """A dataset as a task: label space, splits, tokenized batches and metric."""

    def __init__(
        self,
        name: str,
        kind: Literal["classification", "lm"],
        labels: Sequence[str],
        train: list[Example],
        eval_splits: dict[str, list[Example]],
        *,
        split_labels: dict[str, Sequence[str]] | None = None,
        options: dict[str, Any] | None = None,
        tokenizer: Any = None,
        manifest: Any = None,
    ) -> None:
        if kind not in ("classification", "lm"):
            raise SubnetlabError(f"task kind {kind!r} is not 'classification' or 'lm'")
        self.name = name
        self.kind = kind
        self.labels = list(labels)
        self.train = train
        self.eval_splits = dict(eval_splits)
        self._split_labels = {k: list(v) for k, v in (split_labels or {}).items()}
        self.options = dict(options or {})
        self.tokenizer = tokenizer  # a task-specific tokenizer (arithmetic), else None
        self.manifest = manifest  # your own data: which rows of the file each split holds (tasks.splits), else None
        self._cache: dict[tuple, EncodedSplit] = {}
        self._answer_cache: dict[tuple, Tensor] = {}

    # ------------------------------------------------------------ tokenizer
    tokenizer_dependent = False  # True where the examples are made for a tokenizer (circuit tasks' prompt pairs)

    def bind(self, tokenizer: Any) -> "Task":
        """Make the examples that depend on ``tokenizer`` and check them (commands call it once the model's
        tokenizer is known, before any work); a no-op for tasks whose examples do not depend on it."""
        return self

    # ----------------------------------------------------------------- splits
    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v)}" for k, v in self.eval_splits.items())
        return f"Task({self.name!r}, {self.kind}, labels={self.labels}, train={len(self.train)}, {sizes})"

    @property
    def split_names(self) -> list[str]:
        return ["train", *self.eval_splits]

    def examples(self, split: str) -> list[Example]:
        """The examples of ``split`` (``"train"`` or an evaluation split)."""
        if split == "train":
            return self.train
        if split not in self.eval_splits:
            known = ", ".join(self.split_names)
            raise SubnetlabError(f"task {self.name}: unknown split {split!r} (known: {known})")
        return self.eval_splits[split]

    def replace_examples(self, split: str, examples: list[Example]) -> None:
        """Put ``examples`` in place of ``split``'s (as many, same label space); encodings made so far are dropped."""
        if len(examples) != len(self.examples(split)):
            raise SubnetlabError(f"task {self.name}: split {split!r} holds {len(self.examples(split))} examples, "
                                 f"not {len(examples)}")
        if split == "train":
            self.train = list(examples)
        else:
            self.eval_splits[split] = list(examples)
        self._cache.clear()
        self._answer_cache.clear()

    def split_labels(self, split: str) -> list[str]:
        """Label names that the examples of ``split`` index into."""
        self.examples(split)
        return self._split_labels.get(split, self.labels)

    def add_eval_split(self, name: str, examples: list[Example], labels: Sequence[str] | None = None) -> None:
        """Attach another evaluation split (e.g. the real HANS file to a synthetic task)."""
        if not examples:
            raise SubnetlabError(f"task {self.name}: evaluation split {name!r} is empty")
        if name == "train" or name in self.eval_splits:
            raise SubnetlabError(f"task {self.name}: split {name!r} already exists")
        split_labels = list(labels) if labels is not None else self.labels
        if not self._compatible(len(self.labels), split_labels):
            raise SubnetlabError(
                f"task {self.name}: split {name!r} has labels {split_labels}, "
                f"which a model with labels {self.labels} cannot be scored on"
            )
        self.eval_splits[name] = examples
        if labels is not None and list(labels) != self.labels:
            self._split_labels[name] = split_labels

    # ------------------------------------------------------------ model heads
    @staticmethod
    def _compatible(num_outputs: int, split_labels: list[str]) -> bool:
        return num_outputs == len(split_labels) or (split_labels == NLI2 and num_outputs == 3)

    def model_labels(self, num_outputs: int) -> list[str]:
        """Label names (in order) that a model with ``num_outputs`` outputs must predict.

        Raises SubnetlabError when such a model cannot be scored on this task.
        """
        if self.kind == "lm":
            return list(self.labels)
        if num_outputs == len(self.labels):
            return list(self.labels)
        if self.labels == NLI2 and num_outputs == 3:
            return list(NLI3)
        raise SubnetlabError(
            f"task {self.name} has {len(self.labels)} labels ({', '.join(self.labels)}) "
            f"but the model's head has {num_outputs} outputs"
        )

    # ------------------------------------------------------------ tokenization
    def encoded(self, tokenizer: Any, split: str, max_length: int = 128) -> EncodedSplit:
        """Token ids of every example in ``split``; cached per tokenizer and max_length."""
        key = (tokenizer_key(tokenizer), max_length, split)
        if key not in self._cache:
            self._cache[key] = encode_examples(
                tokenizer, self.examples(split), max_length=max_length, lm=self.kind == "lm"
            )
        return self._cache[key]

    def answer_token_ids(self, tokenizer: Any) -> Tensor:
        """``[C]`` token ids of the label strings (LM tasks); each must be one token."""
        key = tokenizer_key(tokenizer)
        if key in self._answer_cache:
            return self._answer_cache[key]
        ids = []
        for label in self.labels:
            toks = tokenizer.encode(" " + label, add_special_tokens=False)
            if len(toks) != 1:
                raise SubnetlabError(f"task {self.name}: answer {label!r} is {len(toks)} tokens for this tokenizer, not 1")
            ids.append(toks[0])
        self._answer_cache[key] = torch.tensor(ids, dtype=torch.long)
        return self._answer_cache[key]

    def batch_at(self, tokenizer: Any, split: str, indices: Sequence[int] | Tensor, *, max_length: int = 128) -> dict[str, Tensor]:
        """Collate the examples at ``indices`` of ``split`` into one padded batch."""
        enc = self.encoded(tokenizer, split, max_length)
        idx = indices.tolist() if isinstance(indices, Tensor) else list(indices)
        labels = [self.examples(split)[i].label for i in idx]
        answers = self.answer_token_ids(tokenizer) if self.kind == "lm" else None
        return collate(enc, idx, labels, pad_id=pad_id(tokenizer), answer_token_ids=answers)

    def batches(
        self,
        tokenizer: Any,
        split: str,
        batch_size: int,
        *,
        max_length: int = 128,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Tensor]]:
        """Padded batches of ``split``: model inputs plus ``labels`` (and LM answer keys).

        ``limit`` keeps the examples ``subset(split, limit)`` chooses, before
        any shuffling; ``shuffle`` draws the order from ``generator``.
        """
        if batch_size < 1:
            raise SubnetlabError(f"batch size {batch_size} must be at least 1")
        chosen = self.subset(split, limit)
        if shuffle:
            chosen = [chosen[i] for i in torch.randperm(len(chosen), generator=generator).tolist()]
        for start in range(0, len(chosen), batch_size):
            yield self.batch_at(tokenizer, split, chosen[start : start + batch_size], max_length=max_length)

    def subset(self, split: str, limit: int | None = None) -> list[int]:
        """Indices of the examples a ``limit`` keeps, in split order.

        The first ``limit`` examples; when the split has subcases, the first
        ones of every subcase in turn, so a limited HANS evaluation still
        covers all 30 subcases evenly.
        """
        examples = self.examples(split)
        if limit is None or limit >= len(examples):
            return list(range(len(examples)))
        if limit < 1:
            raise SubnetlabError(f"limit {limit} must be at least 1")
        groups: dict[str | None, list[int]] = {}
        for i, ex in enumerate(examples):
            groups.setdefault(ex.subcase, []).append(i)
        if len(groups) == 1:
            return list(range(limit))
        chosen: list[int] = []
        depth = 0
        while len(chosen) < limit:
            for members in groups.values():
                if depth < len(members) and len(chosen) < limit:
                    chosen.append(members[depth])
            depth += 1
        return sorted(chosen)

    def num_batches(self, split: str, batch_size: int, limit: int | None = None) -> int:
        return (len(self.subset(split, limit)) + batch_size - 1) // batch_size

    @staticmethod
    def model_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Only the keys a Hugging Face model's forward takes."""
        return {k: v for k, v in batch.items() if k in MODEL_INPUT_KEYS}

    # ----------------------------------------------------------------- logits
    def next_token_logits(self, outputs: Any, batch: dict[str, Tensor]) -> Tensor:
        """``[B, V]`` logits for the token after the prompt (LM tasks)."""
        logits = _logits(outputs)  # [B, T, V]
        if logits.dim() != 3:
            raise SubnetlabError(f"task {self.name} needs a causal-LM head; the model returned logits of shape {tuple(logits.shape)}")
        rows = torch.arange(logits.shape[0], device=logits.device)
        return logits[rows, batch["answer_index"].to(logits.device)]

    def task_logits(self, outputs: Any, batch: dict[str, Tensor]) -> Tensor:
        """``[B, C]`` scores over the task's labels."""
        if self.kind == "classification":
            logits = _logits(outputs)
            if logits.dim() != 2:
                raise SubnetlabError(f"task {self.name} needs a classification head; the model returned logits of shape {tuple(logits.shape)}")
            return logits
        full = self.next_token_logits(outputs, batch)  # [B, V]
        return full.gather(1, batch["answer_token_ids"].to(full.device))

    def loss(self, outputs: Any, batch: dict[str, Tensor]) -> Tensor:
        """Training loss: cross-entropy over labels (classification) or the full vocabulary (LM)."""
        if self.kind == "classification":
            logits = self.task_logits(outputs, batch)
            return F.cross_entropy(logits, batch["labels"].to(logits.device))
        full = self.next_token_logits(outputs, batch)
        return F.cross_entropy(full, batch["target_ids"].to(full.device))

    def predictions(self, task_logits: Tensor, split: str) -> Tensor:
        """Label ids in ``split``'s label space from ``[B, C]`` task logits."""
        target = self.split_labels(split)
        n_out = task_logits.shape[-1]
        pred = task_logits.argmax(dim=-1)
        if n_out == len(target):
            return pred
        if target == NLI2 and n_out == 3:  # McCoy et al.: neutral + contradiction -> non-entailment
            return (pred != 0).long()
        raise SubnetlabError(f"split {split!r} has {len(target)} labels but the logits have {n_out} columns")

    # ----------------------------------------------------------------- scores
    def score(self, predictions: Tensor | Sequence[int], split: str, limit: int | None = None) -> dict[str, Any]:
        """Accuracy overall, per label, per subcase, per heuristic and per group.

        ``predictions`` follow the order ``batches(split, limit=limit)`` yields
        without shuffling: the examples ``subset(split, limit)`` (all when None).
        """
        examples = [self.examples(split)[i] for i in self.subset(split, limit)]
        preds = predictions.tolist() if isinstance(predictions, Tensor) else list(predictions)
        if len(preds) != len(examples):
            raise SubnetlabError(f"split {split!r}: {len(preds)} predictions for {len(examples)} examples")
        names = self.split_labels(split)
        correct = [int(p == ex.label) for p, ex in zip(preds, examples)]
        result: dict[str, Any] = {"accuracy": _mean(correct), "n": len(correct)}
        by_label = _grouped(correct, [names[ex.label] for ex in examples])
        result["labels"] = {name: by_label[name] for name in names if name in by_label}
        for field, key in (("subcase", "subcases"), ("heuristic", "heuristics"), ("group", "groups")):
            values = [getattr(ex, field) for ex in examples]
            if any(v is not None for v in values):
                result[key] = _grouped(correct, values)
        if "heuristics" in result:
            pairs = [f"{ex.heuristic}/{names[ex.label]}" if ex.heuristic else None for ex in examples]
            result["heuristic_labels"] = _grouped(correct, pairs)
        return result


def _logits(outputs: Any) -> Tensor:
    if isinstance(outputs, Tensor):
        return outputs
    logits = getattr(outputs, "logits", None)
    if logits is None and isinstance(outputs, (tuple, list)):
        logits = outputs[0]
    if logits is None:
        raise SubnetlabError("the model's output has no logits (load it with a classification or causal-lm head)")
    return logits


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _grouped(correct: list[int], keys: list[str | None]) -> dict[str, float]:
    buckets: dict[str, list[int]] = {}
    for c, k in zip(correct, keys):
        if k is not None:
            buckets.setdefault(k, []).append(c)
    return {k: _mean(v) for k, v in buckets.items()}
