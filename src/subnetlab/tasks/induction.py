"""Repeated random token spans: the data on which small transformers form induction heads (Olsson et al., 2022).

A sequence of ``length`` tokens starts with ``<bos>``; somewhere in it a span
of ``k`` random tokens is followed, after a gap of ``g`` tokens, by a copy of
itself. Every other token is drawn without replacement from ``vocab_size``, so
each token of the copy has exactly one earlier occurrence and the token after
that occurrence is the answer. ``k`` (``min_span .. max_span``), ``g`` (``0 ..
max_gap``) and where the pair of spans sits are drawn per sequence: the
distance between a token and its earlier occurrence, and their absolute
positions, change from sequence to sequence, so copying by position (attend a
fixed number of tokens back, or to a fixed place) does not predict the copy,
and a content-based mechanism must (Olsson et al.'s: a previous-token head
whose output is the key of an induction head).

Besides training batches (``repeated_sequences``), this module builds the
circuit task on the same data (``induction_pairs``), one prompt pair per row:

* **clean**: the first ``length - 1`` tokens of a sequence whose copy ends the
  sequence; the answer is its last token (the last token of the span);
* **corrupted**: the same prompt with the *first* span replaced by fresh tokens
  (used nowhere else in the row), so the query token has no earlier occurrence
  and induction has nothing to copy; prefix, second span and positions are
  unchanged, so the pair has equal length;
* **wrong answer**: the corrupted prompt's token at the answer's source
  position, i.e. the token a model that copies *by position* would output on
  the corrupted prompt. On the clean prompt induction and positional copying
  agree; the logit difference ``answer - wrong`` on the corrupted prompt is
  about 0 for an induction model and negative for a positional copier.

The tokenizer is word-level (``t0 ... t{V-1}``, then ``<bos>``, ``<pad>``,
``<unk>``) so the prompts can also be written as text (``as_rows``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError

BOS, PAD, UNK = "<bos>", "<pad>", "<unk>"


@dataclass(frozen=True)
class InductionConfig:
    """The shape of the data: vocabulary, sequence length and the range of span lengths."""

    vocab_size: int = 32
    length: int = 24
    min_span: int = 6
    max_span: int = 11
    max_gap: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "length", "min_span", "max_span", "max_gap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SubnetlabError(f"induction task: {name} {value!r} is not an integer", setting=name)
        if self.min_span < 2:
            raise SubnetlabError(f"induction task: min_span {self.min_span} must be at least 2 (a span of one token "
                                 "repeats nothing after its first token)", setting="min_span")
        if self.max_span < self.min_span:
            raise SubnetlabError(f"induction task: max_span {self.max_span} is below min_span {self.min_span}",
                                 setting="max_span")
        if 1 + 2 * self.max_span > self.length:
            raise SubnetlabError(f"induction task: two spans of max_span={self.max_span} tokens and <bos> do not fit "
                                 f"in length {self.length}", setting="max_span")
        if self.max_gap < 0:
            raise SubnetlabError(f"induction task: max_gap {self.max_gap} is negative", setting="max_gap")
        if self.vocab_size < self.length:
            raise SubnetlabError(f"induction task: vocab_size {self.vocab_size} must be at least length = "
                                 f"{self.length} (the tokens before the repeat, and the corrupted span's fresh "
                                 "tokens, are all different)", setting="vocab_size")

    @property
    def bos_id(self) -> int:
        return self.vocab_size

    @property
    def model_vocab_size(self) -> int:
        """Tokens the model embeds: the random ones, ``<bos>``, ``<pad>`` and ``<unk>``."""
        return self.vocab_size + 3

    def to_dict(self) -> dict:
        return asdict(self)


def induction_tokenizer(vocab_size: int):
    """Word-level tokenizer: ``t{i}`` is id ``i``; then ``<bos>``, ``<pad>``, ``<unk>``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    vocab.update({BOS: vocab_size, PAD: vocab_size + 1, UNK: vocab_size + 2})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, pad_token=PAD, unk_token=UNK,
                                   name_or_path=f"subnetlab/induction-{vocab_size}",
                                   model_input_names=["input_ids", "attention_mask"])


@dataclass(frozen=True)
class RepeatedBatch:
    """``input_ids [n, length]``; ``span [n]`` (k); ``predictable [n, length]``: the position's token follows,
    by induction, from the tokens before it (the second span after its first token)."""

    input_ids: Tensor
    span: Tensor
    predictable: Tensor
    start: Tensor  # [n] the first span's first position
    gap: Tensor  # [n] tokens between the span and its copy


def _fresh_tokens(cfg: InductionConfig, n: int, count: int, generator: torch.Generator) -> Tensor:
    """``[n, count]`` tokens, all different within a row (a random permutation's prefix per row)."""
    return torch.argsort(torch.rand(n, cfg.vocab_size, generator=generator), dim=1)[:, :count]


def repeated_sequences(cfg: InductionConfig, n: int, generator: torch.Generator, *,
                       end_aligned: bool = False) -> RepeatedBatch:
    """``n`` sequences with one repeated span (see the module doc), drawn from ``generator``.

    The span (``k`` tokens) and the gap before its copy (``0 .. max_gap`` tokens) are drawn per sequence, and so
    is where the copy sits (anywhere that fits; at the very end with ``end_aligned``); all other tokens are fresh.
    """
    if n < 1:
        raise SubnetlabError(f"induction task: {n} sequences requested; need at least 1")
    T = cfg.length
    k = torch.randint(cfg.min_span, cfg.max_span + 1, (n,), generator=generator)
    room = T - 1 - 2 * k  # tokens outside the two spans (after <bos>)
    gap = torch.minimum((torch.rand(n, generator=generator) * (cfg.max_gap + 1)).long(), room)
    slack = room - gap  # where the pair of spans can start
    start = 1 + (slack if end_aligned else (torch.rand(n, generator=generator) * (slack + 1)).long())
    copy = (start + k + gap).unsqueeze(1)  # first position of the copy
    tokens = _fresh_tokens(cfg, n, T, generator)
    pos = torch.arange(T).unsqueeze(0)  # [1, T]
    second = (pos >= copy) & (pos < copy + k.unsqueeze(1))
    source = torch.where(second, pos - (k + gap).unsqueeze(1), pos)
    ids = tokens.gather(1, source.expand(n, T))
    ids[:, 0] = cfg.bos_id
    return RepeatedBatch(ids, k, second & (pos > copy), start, gap)


@dataclass(frozen=True)
class InductionPairs:
    """Prompt pairs of the circuit task (see the module doc); prompts are ``[n, length - 1]``."""

    clean: Tensor
    corrupted: Tensor
    answer: Tensor  # [n] the correct next token (the span's last token)
    wrong: Tensor  # [n] the corrupted prompt's token at the answer's source position
    span: Tensor  # [n]
    gap: Tensor  # [n]

    def __len__(self) -> int:
        return int(self.answer.numel())

    def as_rows(self, tokenizer) -> list[dict[str, str]]:
        """Text rows ``{clean, corrupted, answer, wrong}`` (``t3 t17 ...``) for files and text-based tools."""
        def text(ids: Tensor) -> str:
            return " ".join(tokenizer.convert_ids_to_tokens(ids.tolist()))

        return [{"clean": text(c), "corrupted": text(x), "answer": text(a.view(1)), "wrong": text(w.view(1))}
                for c, x, a, w in zip(self.clean, self.corrupted, self.answer, self.wrong)]


def induction_pairs(cfg: InductionConfig, n: int, seed: int) -> InductionPairs:
    """``n`` clean/corrupted prompt pairs from seed ``seed`` (see the module doc)."""
    g = torch.Generator().manual_seed(int(seed))
    batch = repeated_sequences(cfg, n, g, end_aligned=True)
    T = cfg.length
    clean, answer = batch.input_ids[:, : T - 1], batch.input_ids[:, T - 1]
    pos = torch.arange(T - 1).unsqueeze(0)
    first = (pos >= batch.start.unsqueeze(1)) & (pos < (batch.start + batch.span).unsqueeze(1))  # the first span
    # fresh tokens: a permutation of the vocabulary with the row's own tokens moved to the end
    used = torch.zeros(n, cfg.vocab_size + 1, dtype=torch.bool).scatter_(1, clean, True)[:, : cfg.vocab_size]
    order = torch.argsort(torch.rand(n, cfg.vocab_size, generator=g) + used.float(), dim=1)  # unused first
    rank = first.long().cumsum(1) - 1  # 0 .. k-1 along the first span
    fresh = order.gather(1, rank.clamp(min=0))
    corrupted = torch.where(first, fresh, clean)
    source = (T - 1 - batch.span - batch.gap).unsqueeze(1)  # the answer's earlier occurrence
    wrong = corrupted.gather(1, source).squeeze(1)
    return InductionPairs(clean, corrupted, answer, wrong, batch.span, batch.gap)




def make_induction_task(n_train: int = 200, n_eval: int = 200, seed: int = 0, vocab_size: int = 32, length: int = 32,
                        min_span: int = 4, max_span: int = 10, max_gap: int = 8):
    """``circuit:induction``: the prompt pairs above as a circuit task (splits ``train`` and ``eval``, drawn from
    ``seed`` and ``seed + 1``), for a model trained on ``InductionConfig`` data with the same shape settings.
    Answers are written as they follow the prompt (`` t9``), with the task's own word-level tokenizer."""
    from subnetlab.tasks.circuits.pairs import CircuitPair, CircuitTask

    cfg = InductionConfig(vocab_size=vocab_size, length=length, min_span=min_span, max_span=max_span, max_gap=max_gap)
    if n_train < 1 or n_eval < 1:
        raise SubnetlabError(f"induction: n_train={n_train} and n_eval={n_eval} must be at least 1",
                             setting="task_options")
    tokenizer = induction_tokenizer(vocab_size)

    def rows(n: int, draw: int, split: str) -> list[CircuitPair]:
        return [CircuitPair(r["clean"], r["corrupted"], " " + r["answer"], " " + r["wrong"],
                            where=f"induction {split} pair {i}")
                for i, r in enumerate(induction_pairs(cfg, n, draw).as_rows(tokenizer))]

    pairs = {"train": rows(n_train, seed, "train"), "eval": rows(n_eval, seed + 1, "eval")}
    options = dict(n_train=n_train, n_eval=n_eval, seed=seed, **cfg.to_dict())
    return CircuitTask("circuit:induction", lambda tok: pairs, ("train", "eval"), options=options, tokenizer=tokenizer)


__all__ = ["BOS", "InductionConfig", "InductionPairs", "RepeatedBatch", "induction_pairs", "induction_tokenizer",
           "make_induction_task", "repeated_sequences"]
