"""Modular arithmetic data (Subtask Induction, section 4) and its tokenizer."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks import PAPER_OPERATIONS, get_task, parse_operation

REFERENCE = {
    "a+ab": lambda a, b: a + a * b,
    "a^2+b^2": lambda a, b: a**2 + b**2,
    "a^2+ab": lambda a, b: a**2 + a * b,
    "a^2+ab+b^2": lambda a, b: a**2 + a * b + b**2,
    "a^3+ab": lambda a, b: a**3 + a * b,
    "a^2-b^2": lambda a, b: a**2 - b**2,
    "ab": lambda a, b: a * b,
    "a+b": lambda a, b: a + b,
    "a^2": lambda a, b: a**2,
    "2a^2 - 3b + 5": lambda a, b: 2 * a**2 - 3 * b + 5,
}


@pytest.mark.parametrize("op", list(REFERENCE))
def test_operations_match_python_integers(op):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randint(0, 1000, (200,), generator=g), torch.randint(0, 1000, (200,), generator=g)
    got = parse_operation(op)(a, b, 7).tolist()
    assert got == [REFERENCE[op](x, y) % 7 for x, y in zip(a.tolist(), b.tolist())]


def test_paper_operations_all_parse():
    assert set(PAPER_OPERATIONS) <= set(REFERENCE)
    for bad in ("a^^2", "a+", "c", "a+*", "a/b", ""):
        with pytest.raises(SubnetlabError, match="arithmetic operation"):
            parse_operation(bad)


def _pairs(examples):
    return [tuple(int(t) for t in ex.text_a.split()[:2]) for ex in examples]


def test_standard_sets_cover_every_token_and_are_disjoint():
    task = get_task("arith:a+ab", n_train=3000, seed=1, max_number=1000)
    train, evals, test = _pairs(task.train), _pairs(task.eval_splits["eval"]), _pairs(task.eval_splits["test"])
    assert len(train) == len(set(train)) == 3000 and len(evals) == len(test) == 1000
    assert {a for a, _ in train} == set(range(1000)) == {b for _, b in train}
    assert not set(train) & set(evals) and not set(train) & set(test) and not set(evals) & set(test)
    for ex, (a, b) in zip(task.train, train):
        assert ex.label == (a + a * b) % 7 and ex.text_a.endswith(" <sep>")
    assert task.labels == [str(i) for i in range(7)] and task.kind == "lm"
    with pytest.raises(SubnetlabError, match="every number token appears"):
        get_task("arith:ab", n_train=999)


def test_ambiguous_set_and_nested_disambiguation():
    small = get_task("arith:a^2+ab", ambiguous=True, n_disambiguation=10, seed=0)
    large = get_task("arith:a^2+ab", ambiguous=True, n_disambiguation=100, seed=0)
    diag = [p for p, ex in zip(_pairs(small.train), small.train) if ex.group == "ambiguous"]
    assert diag == [(i, i) for i in range(1000)]
    dis_small = _pairs(small.train)[1000:]
    dis_large = _pairs(large.train)[1000:]
    assert len(dis_small) == 10 and dis_large[:10] == dis_small and all(a != b for a, b in dis_large)
    assert _pairs(small.eval_splits["test"]) == _pairs(large.eval_splits["test"])
    assert not set(dis_large) & set(_pairs(large.eval_splits["eval"]))


def test_tokenizer_and_lm_batches():
    task = get_task("arith:ab", n_train=1000, n_eval=5, n_test=5)
    tok = task.tokenizer
    assert tok("12 999 <sep>")["input_ids"] == [12, 999, 1000]
    batch = next(task.batches(tok, "eval", 5))
    assert batch["input_ids"].shape == (5, 3)
    assert batch["answer_index"].tolist() == [2] * 5
    assert batch["answer_token_ids"][0].tolist() == list(range(7))  # number c is token id c
    assert torch.equal(batch["target_ids"], batch["labels"])
    a, b = batch["input_ids"][:, 0], batch["input_ids"][:, 1]
    assert batch["labels"].tolist() == ((a * b) % 7).tolist()
