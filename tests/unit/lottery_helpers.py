"""A word-level tokenizer and a tiny NLI-like task that tiny BERTs (vocabulary 97) can train on."""

from __future__ import annotations

import pytest
import torch

from subnetlab.tasks.base import NLI3, Example, Task

WORDS = ["the", "a", "cat", "dog", "bird", "sat", "ran", "slept", "not", "never", "big", "small", "."]


def word_tokenizer(words: list[str] | None = None):
    """A BERT-style fast tokenizer over ``words`` (default ``WORDS``; word ids and offsets work, as layouts need)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertTokenizerFast

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *(WORDS if words is None else words)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return BertTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                             sep_token="[SEP]")


def tiny_nli_task(n_train: int = 48, n_eval: int = 24, seed: int = 0) -> Task:
    """Label = entailment when the hypothesis repeats the premise, contradiction when negated, else neutral."""
    g = torch.Generator().manual_seed(seed)
    nouns, verbs = ["cat", "dog", "bird"], ["sat", "ran", "slept"]

    def pick(xs):
        return xs[int(torch.randint(len(xs), (1,), generator=g))]

    def example() -> Example:
        n, v = pick(nouns), pick(verbs)
        premise = f"the {n} {v} ."
        label = int(torch.randint(3, (1,), generator=g))
        if label == 0:
            hyp = f"a {n} {v} ."
        elif label == 1:
            hyp = f"the {pick([x for x in nouns if x != n])} {v} ."
        else:
            hyp = f"the {n} never {v} ."
        return Example(premise, hyp, label)

    train = [example() for _ in range(n_train)]
    dev = [example() for _ in range(n_eval)]
    return Task("tiny-nli", "classification", NLI3, train, {"id": dev})


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run faster on one thread (no OpenMP hand-offs), above all on a busy machine.

    Import it into a test module (``from tests.unit.lottery_helpers import one_thread``) to apply it there.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
