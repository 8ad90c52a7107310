"""Property tests of the HANS-style generator against independent checks."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks import DEFAULT_VOCABULARY, NLI2, generate_hans_style
from subnetlab.tasks.nli.hans_generator import SUBCASES, constituents, leaves, render, sample_pair
from subnetlab.tasks.nli.hans_vocab import CONTENT_LISTS
from subnetlab.tasks.sampling import Sampler
from tests.conftest import SHARED_DATA

HANS = SHARED_DATA / "hans" / "hans_subset_val.tsv"


def words(sentence: str) -> list[str]:
    """Lower-cased tokens without the final period."""
    toks = sentence.lower().split()
    assert toks[-1] == "."
    return toks[:-1]


def is_contiguous(sub: list[str], seq: list[str]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_subcase_names_and_labels_match_the_real_hans_file():
    if HANS.exists():
        real = {}
        for line in HANS.read_text().splitlines()[1:]:
            f = line.split("\t")
            real[f[5]] = (f[4], f[0])
        assert set(real) == set(SUBCASES)
        for name, (heuristic, label, _) in SUBCASES.items():
            assert real[name] == (heuristic, NLI2[label])
    assert Counter(h for h, _, _ in SUBCASES.values()) == {"lexical_overlap": 10, "subsequence": 10, "constituent": 10}
    assert Counter((h, lab) for h, lab, _ in SUBCASES.values()) == {(h, lab): 5 for h in ("lexical_overlap", "subsequence", "constituent") for lab in (0, 1)}


def test_properties_of_every_pair():
    sampler = Sampler(torch.Generator().manual_seed(7))
    for subcase, (heuristic, label, templates) in SUBCASES.items():
        for _ in range(40):
            pair = sample_pair(subcase, DEFAULT_VOCABULARY, sampler)
            p, h = words(render(pair.premise)), words(render(pair.hypothesis))
            assert [w.lower() for w in leaves(pair.premise)] == p  # the tree spells the premise
            assert set(h) <= set(p), (subcase, p, h)  # every heuristic implies lexical overlap
            if heuristic == "lexical_overlap":
                assert not is_contiguous(h, p), (subcase, p, h)  # HANS keeps the heuristics apart
            if heuristic in ("subsequence", "constituent"):
                assert is_contiguous(h, p), (subcase, p, h)
            if heuristic == "constituent":
                spans = [[w.lower() for w in span] for span in constituents(pair.premise)]
                assert h in spans, (subcase, p, h)
                assert h != p


def test_examples_labels_follow_subcase_and_seed_reproduces():
    a = generate_hans_style(3, generator=torch.Generator().manual_seed(1))
    b = generate_hans_style(3, generator=torch.Generator().manual_seed(1))
    c = generate_hans_style(3, generator=torch.Generator().manual_seed(2))
    assert a == b and a != c and len(a) == 90
    for ex in a:
        heuristic, label, _ = SUBCASES[ex.subcase]
        assert (ex.heuristic, ex.label) == (heuristic, label)
        assert NLI2[ex.label] == ("entailment" if ex.subcase[1] == "e" else "non-entailment")
        assert ex.text_a[0].isupper() and ex.text_a.endswith(" .")


def test_vocabulary_split_keeps_eval_words_out_of_training():
    lists = {name: DEFAULT_VOCABULARY.__getattribute__(name) for name in CONTENT_LISTS}
    seen: Counter[str] = Counter()
    for name, entries in lists.items():
        for w in DEFAULT_VOCABULARY.__class__(**{**{n: () for n in CONTENT_LISTS}, name: entries}).content_words():
            seen[w] += 1
    assert max(seen.values()) == 1  # every content word is in exactly one list
    assert not DEFAULT_VOCABULARY.content_words() & DEFAULT_VOCABULARY.structural_words()

    train, evals = DEFAULT_VOCABULARY.split(0.5, torch.Generator().manual_seed(0))
    assert not train.content_words() & evals.content_words()
    assert train.content_words() | evals.content_words() == DEFAULT_VOCABULARY.content_words()
    train_examples = generate_hans_style(5, generator=torch.Generator().manual_seed(0), vocabulary=train)
    eval_examples = generate_hans_style(5, generator=torch.Generator().manual_seed(0), vocabulary=evals)
    train_words = {w for ex in train_examples for s in (ex.text_a, ex.text_b) for w in words(s)}
    eval_words = {w for ex in eval_examples for s in (ex.text_a, ex.text_b) for w in words(s)}
    assert not (train_words & eval_words) - DEFAULT_VOCABULARY.structural_words()
    assert eval_words - DEFAULT_VOCABULARY.structural_words() <= evals.content_words()


def test_bad_arguments():
    with pytest.raises(SubnetlabError, match="unknown HANS subcase 'ln_nope'"):
        generate_hans_style(1, generator=torch.Generator(), subcases=["ln_nope"])
    with pytest.raises(SubnetlabError, match="outside"):
        DEFAULT_VOCABULARY.split(1.5, torch.Generator())
