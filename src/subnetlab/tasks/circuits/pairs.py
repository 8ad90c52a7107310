"""Circuit tasks: prompt pairs (clean, corrupted) with the correct and the wrong answer token.

Circuit discovery (Edge Pruning, ACDC, EAP, the MIB benchmark) measures a
subnetwork on pairs of prompts that differ only where the task's information
is: the clean prompt ``When Mary and John went to the store, John gave a drink
to`` and a corrupted one with other names. A removed edge (or node) delivers
its writer's output on the corrupted prompt, so both prompts must have the same
number of tokens, position by position. The answer (`` Mary``) and the wrong
answer (`` John``) are each one token: the logit difference between them is
the task's metric.

An answer is the text that follows the clean prompt *as written*, with its
leading space when a word follows a space (`` Mary``) and without one when it
continues the last token (``32`` after ``the year 17``). "One token" means
what the tokenizer does in context: ``prompt + answer`` tokenizes to the
prompt's tokens plus exactly one more.

Which pairs a tokenizer can read is only known once the tokenizer is: a
``CircuitTask`` is *bound* to a tokenizer (``bind``) before its first batch.
Builtin generators (``ioi``, ``greater_than``, ``arithmetic``) then choose
names and numbers that are single tokens for it; pairs read from a file are
checked, and the first that fails ends the run naming its ``file:line``.
Commands call ``bind`` right after loading the model, before any work.

The class is an ordinary ``Task`` (kind ``lm``) over the clean prompts, so
node-level methods (Heuristic Core pruning) run on it unchanged;
``pair_batches`` adds the corrupted prompts and both answers for circuit
methods and for ``subnetlab.tasks.circuits.metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import Example, Task
from subnetlab.tasks.circuits.metrics import METRICS, circuit_metrics
from subnetlab.tasks.encoding import EncodedSplit, pad_id, tokenizer_key


@dataclass(frozen=True)
class CircuitPair:
    """One clean prompt, its corrupted twin, and the two answers that follow the clean prompt."""

    clean: str
    corrupted: str
    answer: str  # the continuation of the clean prompt, as written (" Mary", "32")
    wrong: str  # the continuation a model that lost the task's information would give (" John")
    where: str = ""  # "file:line", or "ioi pair 3": what error messages name
    group: str | None = None  # e.g. the template ("ABBA", "BABA")


@dataclass(frozen=True)
class TokenizedPair:
    clean: list[int]
    corrupted: list[int]
    answer: int
    wrong: int


def token_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens, as language-model prompts are encoded."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def continuation(tokenizer: Any, prompt: str, answer: str, prompt_ids: list[int] | None = None) -> int | str:
    """The one token ``answer`` adds after ``prompt``, or a sentence saying why there is not one."""
    base = token_ids(tokenizer, prompt) if prompt_ids is None else prompt_ids
    full = token_ids(tokenizer, prompt + answer)
    if full[: len(base)] != base:
        return f"answer {answer!r} merges with the prompt's last token (the prompt is tokenized differently with it)"
    extra = len(full) - len(base)
    if extra != 1:
        return f"answer {answer!r} is {extra} tokens after the prompt, not 1"
    return full[-1]


def pair_problem(tokenizer: Any, pair: CircuitPair) -> TokenizedPair | str:
    """The pair's token ids, or a sentence saying which check it fails for this tokenizer."""
    clean, corrupted = token_ids(tokenizer, pair.clean), token_ids(tokenizer, pair.corrupted)
    if not clean:
        return "the clean prompt tokenizes to no tokens"
    if len(clean) != len(corrupted):
        return (f"the clean prompt is {len(clean)} tokens and the corrupted prompt {len(corrupted)}; a pair must "
                "have equal lengths, position by position")
    ids = []
    for answer in (pair.answer, pair.wrong):
        token = continuation(tokenizer, pair.clean, answer, clean)
        if isinstance(token, str):
            hint = "" if answer[:1].isspace() else \
                " (answers follow the prompt as written: a word after a space starts with one)"
            return token + hint
        ids.append(token)
    if ids[0] == ids[1]:
        return f"the answer {pair.answer!r} and the wrong answer {pair.wrong!r} are the same token"
    return TokenizedPair(clean, corrupted, ids[0], ids[1])


def tokenize_pairs(tokenizer: Any, pairs: Sequence[CircuitPair], task: str) -> list[TokenizedPair]:
    """Every pair's token ids; the first pair that fails a check ends it, naming where the pair came from."""
    out = []
    for pair in pairs:
        result = pair_problem(tokenizer, pair)
        if isinstance(result, str):
            raise SubnetlabError(f"{pair.where or task}: {result}", setting="task")
        out.append(result)
    return out


PairSource = Callable[[Any], dict[str, list[CircuitPair]]]  # tokenizer -> split -> pairs


class CircuitTask(Task):
    """A language-model task over prompt pairs; see the module doc.

    ``source(tokenizer)`` returns the pairs of every split (``train`` and the
    evaluation splits) for that tokenizer; ``bind`` calls it, checks every pair
    and fills the ``Task`` splits with the clean prompts.
    """

    tokenizer_dependent = True

    def __init__(self, name: str, source: PairSource, splits: Sequence[str], *, options: dict[str, Any] | None = None,
                 tokenizer: Any = None, manifest: Any = None) -> None:
        super().__init__(name, "lm", [], [], {s: [] for s in splits if s != "train"}, options=options,
                         tokenizer=tokenizer, manifest=manifest)
        self._source = source
        self._bound_to: tuple | None = None
        self._pairs: dict[str, list[CircuitPair]] = {}
        self._tokens: dict[str, list[TokenizedPair]] = {}
        self._label_ids: Tensor | None = None

    # ---------------------------------------------------------------- binding
    def bind(self, tokenizer: Any) -> "CircuitTask":
        """Make (or read) the pairs for ``tokenizer`` and check them all; a no-op when already bound to it."""
        key = tokenizer_key(tokenizer)
        if key == self._bound_to:
            return self
        pairs = self._source(tokenizer)
        tokens = {split: tokenize_pairs(tokenizer, rows, self.name) for split, rows in pairs.items()}
        for split, rows in pairs.items():
            if not rows:
                raise SubnetlabError(f"task {self.name}: split {split!r} has no pairs", setting="task")
        answers = sorted({(p.answer, t.answer) for split in pairs for p, t in zip(pairs[split], tokens[split])})
        label_of = {}
        for text, token in answers:
            label_of.setdefault(text, (len(label_of), token))
        self.labels = list(label_of)
        self._label_ids = torch.tensor([token for _, token in label_of.values()], dtype=torch.long)
        examples = {split: [Example(p.clean, None, label_of[p.answer][0], group=p.group) for p in rows]
                    for split, rows in pairs.items()}
        self.train = examples.get("train", [])
        self.eval_splits = {s: examples[s] for s in pairs if s != "train"}
        self._pairs, self._tokens, self._bound_to = pairs, tokens, key
        self._cache.clear()
        self._answer_cache.clear()
        return self

    def check_positions(self, limit: int | None, model_name: str) -> None:
        """Refuse the first pair (after ``bind``) whose prompt is longer than ``limit``, the model's positions."""
        self._require_bound()
        if limit is None:
            return
        for split, rows in self._tokens.items():
            for i, (pair, tokens) in enumerate(zip(self._pairs[split], rows)):
                longest = max(len(tokens.clean), len(tokens.corrupted))
                if longest > limit:
                    where = pair.where or f"task {self.name}, {split} pair {i}"
                    raise SubnetlabError(f"{where}: the prompt is {longest} tokens, which exceeds the {limit} "
                                         f"positions of model {model_name}; shorten the prompts", setting="task")

    # ---------------------------------------------------------------- metrics
    @property
    def metric_names(self) -> tuple[str, ...]:
        """The metrics ``metrics`` returns (a task may add its own to ``tasks.circuits.metrics.METRICS``)."""
        return METRICS

    def metrics(self, logits: Tensor, batch: dict[str, Tensor], full_logits: Tensor) -> dict[str, Tensor]:
        """``[B]`` per metric of a pair batch, from the logits of a model (or circuit) and of the full model."""
        return circuit_metrics(logits, batch, full_logits)

    def pairs(self, split: str) -> list[CircuitPair]:
        """The pairs of ``split`` (after ``bind``)."""
        self._require_bound()
        self.examples(split)
        return self._pairs[split]

    def permute_answers(self, split: str, order: Sequence[int]) -> None:
        """Pair ``i`` of ``split`` takes the answer and wrong answer (tokens and texts) of pair ``order[i]``; the
        prompts stay. The clean prompts' labels follow their new answers."""
        self._require_bound()
        pairs, tokens = self.pairs(split), self._tokens[split]
        if sorted(order) != list(range(len(pairs))):
            raise SubnetlabError(f"task {self.name}: not a permutation of the {len(pairs)} pairs of {split!r}")
        self._pairs[split] = [replace(p, answer=pairs[j].answer, wrong=pairs[j].wrong) for p, j in zip(pairs, order)]
        self._tokens[split] = [replace(t, answer=tokens[j].answer, wrong=tokens[j].wrong) for t, j in zip(tokens, order)]
        examples = self.examples(split)
        self.replace_examples(split, [replace(e, label=examples[j].label) for e, j in zip(examples, order)])

    def permute_corrupted(self, split: str, order: Sequence[int]) -> None:
        """Pair ``i`` of ``split`` takes the corrupted prompt (text and tokens) of pair ``order[i]``; the clean
        prompts and answers stay (permuted pairs: the corruption no longer isolates the task's variable). Pairs of
        unequal lengths are refused (patching is position by position)."""
        self._require_bound()
        pairs, tokens = self.pairs(split), self._tokens[split]
        if sorted(order) != list(range(len(pairs))):
            raise SubnetlabError(f"task {self.name}: not a permutation of the {len(pairs)} pairs of {split!r}")
        for i, j in enumerate(order):
            if len(tokens[i].clean) != len(tokens[j].corrupted):
                raise SubnetlabError(f"task {self.name}: pair {i} ({len(tokens[i].clean)} tokens) cannot take the "
                                     f"corrupted prompt of pair {j} ({len(tokens[j].corrupted)} tokens)")
        self._pairs[split] = [replace(p, corrupted=pairs[j].corrupted) for p, j in zip(pairs, order)]
        self._tokens[split] = [replace(t, corrupted=tokens[j].corrupted) for t, j in zip(tokens, order)]

    def repairing(self, split: str, seed: int, limit: int | None = None) -> list[int]:
        """A random re-pairing of the first ``limit`` pairs of ``split`` (all when None) for ``permute_corrupted``:
        within each group of prompts of one token length, a random cycle through the group (seeded ``seed``), so
        every pair with a same-length partner takes another pair's corrupted prompt; a pair alone in its length,
        and every pair past ``limit``, keeps its own."""
        self._require_bound()
        tokens = self._tokens[split]
        n = len(tokens) if limit is None else min(limit, len(tokens))
        groups: dict[int, list[int]] = {}
        for i in range(n):
            groups.setdefault(len(tokens[i].clean), []).append(i)
        g = torch.Generator().manual_seed(int(seed))
        order = list(range(len(tokens)))
        for length in sorted(groups):
            members = groups[length]
            if len(members) < 2:
                continue
            cycle = [members[k] for k in torch.randperm(len(members), generator=g).tolist()]
            for a, b in zip(cycle, cycle[1:] + cycle[:1]):
                order[a] = b
        return order

    def _require_bound(self) -> None:
        if self._bound_to is None:
            raise SubnetlabError(f"task {self.name}: its prompt pairs depend on the tokenizer; bind it to one first")

    # --------------------------------------------------- the Task API, bound
    def encoded(self, tokenizer: Any, split: str, max_length: int = 128) -> EncodedSplit:
        self.bind(tokenizer)
        return super().encoded(tokenizer, split, max_length)

    def answer_token_ids(self, tokenizer: Any) -> Tensor:
        """``[C]`` the answers' tokens in context (a label's text may carry its leading space)."""
        self.bind(tokenizer)
        assert self._label_ids is not None
        return self._label_ids

    def batches(self, tokenizer: Any, split: str, batch_size: int, **kwargs: Any) -> Iterator[dict[str, Tensor]]:
        self.bind(tokenizer)
        return super().batches(tokenizer, split, batch_size, **kwargs)

    # ------------------------------------------------------------ pair batches
    def pair_batch(self, tokenizer: Any, split: str, indices: Sequence[int]) -> dict[str, Tensor]:
        """Clean and corrupted prompts of the pairs at ``indices``, right-padded alike, with both answers.

        Keys: ``input_ids`` / ``attention_mask`` ``[B, T]`` (clean), ``corrupted_input_ids`` ``[B, T]``
        (same padding: a pair has equal lengths), ``answer_index`` ``[B]`` (the last prompt position),
        ``answer_id`` and ``wrong_id`` ``[B]``.
        """
        self.bind(tokenizer)
        self.examples(split)
        if not indices:
            raise SubnetlabError("cannot collate an empty batch")
        rows = [self._tokens[split][i] for i in indices]
        width = max(len(r.clean) for r in rows)
        pad = pad_id(tokenizer)
        clean = torch.full((len(rows), width), pad, dtype=torch.long)  # [B, T]
        corrupted = torch.full((len(rows), width), pad, dtype=torch.long)  # [B, T]
        mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, T]
        for b, r in enumerate(rows):
            clean[b, : len(r.clean)] = torch.tensor(r.clean)
            corrupted[b, : len(r.corrupted)] = torch.tensor(r.corrupted)
            mask[b, : len(r.clean)] = 1
        return {"input_ids": clean, "attention_mask": mask, "corrupted_input_ids": corrupted,
                "answer_index": torch.tensor([len(r.clean) - 1 for r in rows]),
                "answer_id": torch.tensor([r.answer for r in rows]), "wrong_id": torch.tensor([r.wrong for r in rows])}

    def pair_batches(self, tokenizer: Any, split: str, batch_size: int,
                     limit: int | None = None) -> Iterator[dict[str, Tensor]]:
        """``pair_batch`` over the first ``limit`` pairs of ``split`` (all when None), in order."""
        if batch_size < 1:
            raise SubnetlabError(f"batch size {batch_size} must be at least 1")
        self.bind(tokenizer)
        n = len(self.examples(split)) if limit is None else min(limit, len(self.examples(split)))
        for start in range(0, n, batch_size):
            yield self.pair_batch(tokenizer, split, list(range(start, min(start + batch_size, n))))


def clean_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The model inputs of a pair batch's clean prompts."""
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def corrupted_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The model inputs of a pair batch's corrupted prompts (same attention mask: equal lengths)."""
    return {"input_ids": batch["corrupted_input_ids"], "attention_mask": batch["attention_mask"]}


def fitting_pairs(tokenizer: Any, candidates: Iterator[CircuitPair], n: int, task: str, what: str, *, limit: int,
                  exclude: set[str] | frozenset[str] = frozenset()) -> list[CircuitPair]:
    """The first ``n`` of at most ``limit`` candidates that pass every check for ``tokenizer`` and whose clean
    prompt is not in ``exclude`` (generators draw until they have them; evaluation pairs exclude training ones)."""
    out: list[CircuitPair] = []
    tried = 0
    for pair in candidates:
        if tried >= limit:
            break
        tried += 1
        if pair.clean not in exclude and not isinstance(pair_problem(tokenizer, pair), str):
            out.append(pair)
            if len(out) == n:
                return out
    raise SubnetlabError(f"task {task}: only {len(out)} of {tried} {what} drawn fit this tokenizer (equal lengths, "
                         f"one-token answers, not a training prompt); {n} were asked for", setting="task_options")
