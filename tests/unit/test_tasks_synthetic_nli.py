"""The synthetic in-domain NLI corpus: heuristics hold on majority examples, fail on minority ones."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks import DEFAULT_VOCABULARY, NLI3, generate_synthetic_nli, get_task
from subnetlab.tasks.nli.synthetic import CorpusWords


def overlap(ex) -> bool:
    """The lexical-overlap heuristic: every hypothesis word is in the premise."""
    p = set(ex.text_a.lower().split())
    return set(ex.text_b.lower().split()) <= p


def test_heuristic_predicts_majority_and_fails_on_minority():
    data = generate_synthetic_nli(3000, generator=torch.Generator().manual_seed(0), minority_fraction=0.2)
    groups = Counter(ex.group for ex in data)
    assert abs(groups["minority"] / len(data) - 0.2) < 0.03
    for ex in data:
        heuristic_says_entailed = overlap(ex)
        if ex.group == "majority":
            assert heuristic_says_entailed == (NLI3[ex.label] == "entailment"), ex
        else:
            assert heuristic_says_entailed != (NLI3[ex.label] == "entailment"), ex
    majority_labels = Counter(ex.label for ex in data if ex.group == "majority")
    assert min(majority_labels.values()) / max(majority_labels.values()) > 0.85


def test_fraction_zero_and_seeds():
    a = generate_synthetic_nli(200, generator=torch.Generator().manual_seed(3), minority_fraction=0.0)
    assert {ex.group for ex in a} == {"majority"}
    assert a == generate_synthetic_nli(200, generator=torch.Generator().manual_seed(3), minority_fraction=0.0)
    with pytest.raises(SubnetlabError, match="minority fraction 1.5"):
        generate_synthetic_nli(10, generator=torch.Generator(), minority_fraction=1.5)


def test_vocabulary_stays_out_of_the_hans_style_evaluation():
    hans_content = DEFAULT_VOCABULARY.content_words() - {w for n in DEFAULT_VOCABULARY.nouns for w in n}
    assert not CorpusWords().words() & hans_content
    task = get_task("nli-synthetic", n_train=300, n_eval=50, hans_per_subcase=2, seed=5)
    train_words = {w for ex in task.train for s in (ex.text_a, ex.text_b) for w in s.lower().split()}
    eval_words = {w for ex in task.eval_splits["hans-synthetic"] for s in (ex.text_a, ex.text_b) for w in s.lower().split()}
    assert not (train_words & eval_words) - DEFAULT_VOCABULARY.structural_words() - {"."}
    assert task.split_labels("hans-synthetic") == ["entailment", "non-entailment"]


def test_the_in_domain_split_holds_no_training_example():
    """Independent draws of the corpus repeat each other; the in-domain split skips the repeats (issue 26)."""
    from subnetlab.tasks.sampling import seeded

    task = get_task("nli-synthetic", n_train=2000, n_eval=400, hans_per_subcase=1, seed=0)
    rows = lambda examples: [(e.text_a, e.text_b, e.label) for e in examples]  # noqa: E731
    train = set(rows(task.train))
    raw = rows(generate_synthetic_nli(800, generator=seeded(2), nouns=DEFAULT_VOCABULARY.split(0.5, seeded(0))[0].nouns))
    assert sum(r in train for r in raw[:400]) > 0  # the premise: a plain draw of 400 repeats training rows
    assert rows(task.eval_splits["id"]) == [r for r in raw if r not in train][:400]
    assert not set(rows(task.eval_splits["id"])) & train
