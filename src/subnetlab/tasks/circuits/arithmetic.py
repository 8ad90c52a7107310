"""Modular arithmetic as prompt pairs: Subtask Induction's task (``tasks.arithmetic``) for circuit methods.

The clean prompt is an arithmetic prompt ``a b <sep>`` whose answer is
``op(a, b) mod p``; the corrupted prompt changes one operand (``b`` by default,
``operand="a"`` for the other) to a number drawn with the task's seed that
changes the answer (the other operand where this one cannot: ``a^2+ab`` with
``a = 0 mod 7`` ignores ``b``; the pair's ``group`` says which), and the wrong
answer is the corrupted prompt's own answer. A prompt no operand change can alter (``ab`` with both operands
``0 mod 7``) has no pair and is left out, so a split may hold a few pairs fewer than its prompts.
Both prompts are three tokens of the arithmetic tokenizer, so every pair fits.

The pairs come from the arithmetic task built with the same options as the
model's training run (``n_train``, ``seed``, ``modulus``, ``max_number`` ...):
its ``eval`` split becomes this task's ``train`` split (for finding a circuit)
and its ``test`` split this task's ``eval`` split, so no pair was seen in
training.
"""

from __future__ import annotations

from typing import Literal

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.arithmetic import SEP, make_arithmetic_task, parse_operation
from subnetlab.tasks.base import Example
from subnetlab.tasks.circuits.pairs import CircuitPair, CircuitTask
from subnetlab.tasks.sampling import Sampler, seeded

_TRIES = 200  # numbers drawn for one pair before concluding the answer does not depend on the operand


def make_arithmetic_pairs_task(op: str, *, n_train: int = 200_000, n_eval: int = 1000, n_test: int = 1000,
                               seed: int = 0, modulus: int = 7, max_number: int = 1000,
                               operand: Literal["a", "b"] = "b") -> CircuitTask:
    """``circuit:arith:<op>``: the arithmetic task's held-out prompts as pairs (module doc)."""
    if operand not in ("a", "b"):
        raise SubnetlabError(f"arithmetic pairs: operand {operand!r} is not 'a' or 'b'", setting="task_options")
    arith = make_arithmetic_task(op, n_train=n_train, n_eval=n_eval, n_test=n_test, seed=seed, modulus=modulus,
                                 max_number=max_number)
    compute = parse_operation(op)
    pick = Sampler(seeded(seed + 7))
    name = f"circuit:arith:{op}"

    def answer(a: int, b: int) -> int:
        return int(compute(torch.tensor([a]), torch.tensor([b]), modulus)[0])

    def pair(example: Example, split: str, i: int) -> CircuitPair | None:
        """A corrupted prompt whose answer differs; None where no operand changes it (a*b with both operands 0 mod
        7: one prompt in 49), a prompt left out rather than the task refused."""
        a, b = (int(t) for t in example.text_a.split()[:2])
        right = answer(a, b)
        for which in (operand, "b" if operand == "a" else "a"):  # a^2+ab with a = 0 mod 7 ignores b
            for _ in range(_TRIES):
                x = pick.index(max_number)
                a2, b2 = (x, b) if which == "a" else (a, x)
                wrong = answer(a2, b2)
                if wrong != right:
                    return CircuitPair(example.text_a, f"{a2} {b2} {SEP}", f" {right}", f" {wrong}",
                                       where=f"{name} {split} pair {i}", group=f"corrupted {which}")
        return None

    def pairs_of(split: str, examples: list[Example]) -> list[CircuitPair]:
        found = [pair(ex, split, i) for i, ex in enumerate(examples)]
        kept = [p for p in found if p is not None]
        if examples and not kept:
            raise SubnetlabError(f"task {name}: no other operand changes the answer of any {split} prompt ({op} mod "
                                 f"{modulus} looks constant)", setting="task")
        return kept

    pairs = {"train": pairs_of("train", arith.eval_splits["eval"]), "eval": pairs_of("eval", arith.eval_splits["test"])}
    options = dict(arith.options, operand=operand)
    return CircuitTask(name, lambda tokenizer: pairs, ("train", "eval"), options=options, tokenizer=arith.tokenizer)
