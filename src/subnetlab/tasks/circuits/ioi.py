"""Indirect object identification (Wang et al. 2022, "Interpretability in the Wild"), written here.

A clean prompt names two people, then repeats one of them (the subject S); the
model should complete it with the other (the indirect object IO)::

    When Mary and John went to the store, John gave a drink to    -> " Mary" (IO), not " John" (S)

Templates come in both name orders of the paper, ABBA (IO first) and BABA (S
first); the pair's ``group`` says which. Corrupted prompts, as in the IOI
literature:

* ``abc`` (default): the paper's ABC distribution, every name position replaced
  by three other distinct names, so the prompt no longer says who the IO is;
* ``s2-io``: the repeated name S2 replaced by the IO ("..., Mary gave a drink
  to"), which flips the answer (MIB's ``s2_io_flip`` counterfactual).

Names are drawn only from those that are one token (after a space) for the
tokenizer the task is bound to; at least five are needed. Every random choice
comes from ``seed`` (train and evaluation pairs from separate streams).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.circuits.pairs import CircuitPair, CircuitTask, continuation, fitting_pairs
from subnetlab.tasks.sampling import Sampler, seeded

NAMES = ("Mary", "John", "Tom", "James", "Dan", "Sid", "Martin", "Amy", "Lisa", "Michael", "Paul", "Kate", "Anna",
         "David", "Sarah", "Emma", "Alex", "Laura", "Ben", "Jack", "Mark", "Peter", "Susan", "Helen", "George",
         "Robert", "Jane", "Alice", "Bob", "Chris", "Steve", "Rachel", "Eric", "Max", "Sam", "Joe", "Brian", "Kevin",
         "Adam", "Ryan", "Linda", "Karen", "Nancy", "Emily", "Luke", "Henry", "Grace", "Rose", "Jim", "Frank")
PLACES = ("store", "garden", "park", "school", "hospital", "restaurant", "office", "station", "market", "house")
OBJECTS = ("drink", "book", "ring", "bottle", "key", "gift", "letter", "ball", "bag", "snack")
TEMPLATES = (  # {A} and {B} are the first two names, {S} the repeated subject
    "When {A} and {B} went to the {place}, {S} gave a {object} to",
    "After {A} and {B} went to the {place}, {S} gave a {object} to",
    "While {A} and {B} were working at the {place}, {S} gave a {object} to",
    "Then, {A} and {B} went to the {place}. {S} gave a {object} to",
    "When {A} and {B} got a {object} at the {place}, {S} decided to give it to",
)
Corruption = Literal["abc", "s2-io"]


def single_token_names(tokenizer: Any, names: tuple[str, ...] = NAMES) -> list[str]:
    """The names that are one token after a space for ``tokenizer``, in ``names``' order."""
    return [n for n in names if not isinstance(continuation(tokenizer, "and", " " + n), str)]


def _candidates(names: list[str], seed: int, corruption: str, split: str) -> Iterator[CircuitPair]:
    pick = Sampler(seeded(seed))
    i = 0
    while True:
        template, place, obj = pick.choice(TEMPLATES), pick.choice(PLACES), pick.choice(OBJECTS)
        io, s, c, d, e = pick.distinct(names, 5)
        order = "ABBA" if pick.coin() else "BABA"
        first, second = (io, s) if order == "ABBA" else (s, io)
        clean = template.format(A=first, B=second, S=s, place=place, object=obj)
        if corruption == "abc":
            corrupted = template.format(A=c, B=d, S=e, place=place, object=obj)
        else:
            corrupted = template.format(A=first, B=second, S=io, place=place, object=obj)
        yield CircuitPair(clean, corrupted, " " + io, " " + s, where=f"ioi {split} pair {i}", group=order)
        i += 1


def make_ioi_task(n_train: int = 200, n_eval: int = 200, seed: int = 0, corruption: Corruption = "abc") -> CircuitTask:
    """``circuit:ioi``: splits ``train`` and ``eval`` of IOI prompt pairs (module doc)."""
    if corruption not in ("abc", "s2-io"):
        raise SubnetlabError(f"ioi corruption {corruption!r} is not 'abc' or 's2-io'", setting="task_options")
    if n_train < 1 or n_eval < 1:
        raise SubnetlabError(f"ioi: n_train={n_train} and n_eval={n_eval} must be at least 1", setting="task_options")
    name = "circuit:ioi"

    def source(tokenizer: Any) -> dict[str, list[CircuitPair]]:
        names = single_token_names(tokenizer)
        if len(names) < 5:
            raise SubnetlabError(f"task {name}: only {len(names)} of the {len(NAMES)} names are one token for this "
                                 f"tokenizer ({', '.join(names) or 'none'}); the task needs five", setting="task")
        limit = 20 * (n_train + n_eval)
        train = fitting_pairs(tokenizer, _candidates(names, seed, corruption, "train"), n_train, name,
                              "IOI prompt pairs", limit=limit)
        held = fitting_pairs(tokenizer, _candidates(names, seed + 1, corruption, "eval"), n_eval, name,
                             "IOI prompt pairs", limit=limit, exclude={p.clean for p in train})
        return {"train": train, "eval": held}

    options = dict(n_train=n_train, n_eval=n_eval, seed=seed, corruption=corruption)
    return CircuitTask(name, source, ("train", "eval"), options=options)

