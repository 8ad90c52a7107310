"""A synthetic in-domain NLI corpus (3-way), standing in for MNLI's training set.

On most examples (*majority*) the syntactic heuristics predict the label:
entailed hypotheses are made of premise words; neutral and contradicting
hypotheses bring in new words. A tunable fraction of *minority* examples
contradicts the heuristics: the hypothesis reuses only premise words but is
not entailed (role swaps, comparatives, dropped ``never`` / ``almost``), or is
entailed while sharing few words. Tu et al. (2020) show that such minority
examples drive late out-of-domain generalization.

The templates are disjoint from the HANS-style ones (no passives, relative
clauses, prepositional modifiers of people, embedded clauses or sentence
adverbs; objects are things, not people), and the words other than people
nouns are disjoint from the HANS vocabulary, so HANS-style evaluation stays
out of domain. People nouns come from the caller's (training) vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import NLI3, Example
from subnetlab.tasks.nli.hans_vocab import DEFAULT_VOCABULARY, Noun
from subnetlab.tasks.sampling import Sampler

ENT, NEU, CON = (NLI3.index(x) for x in ("entailment", "neutral", "contradiction"))


@dataclass(frozen=True)
class CorpusWords:
    """Words of the synthetic corpus besides people nouns."""

    verbs: tuple[tuple[str, str], ...] = tuple(
        tuple(p.split("/"))  # type: ignore[misc]
        for p in (
            "bought/buy sold/sell opened/open closed/close found/find lost/lose built/build broke/break "
            "fixed/fix carried/carry borrowed/borrow returned/return ordered/order delivered/deliver rented/rent packed/pack"
        ).split()
    )
    antonyms: tuple[tuple[str, str], ...] = (("bought", "sold"), ("opened", "closed"), ("found", "lost"), ("borrowed", "returned"), ("fixed", "broke"))
    objects: tuple[str, ...] = tuple("car house bike boat laptop phone window door box bag watch camera ticket chair lamp guitar".split())
    adjectives: tuple[str, ...] = tuple("red blue green small large cheap expensive heavy shiny wooden".split())
    manner: tuple[str, ...] = ("quickly", "slowly", "carefully", "eagerly", "secretly", "gladly")
    times: tuple[str, ...] = ("yesterday", "on monday", "last week", "this morning", "at noon", "on friday")
    comparatives: tuple[str, ...] = ("taller", "older", "richer", "stronger", "faster", "smarter")
    ditransitive: tuple[str, ...] = ("gave", "sent", "showed", "offered", "handed", "lent")

    def words(self) -> set[str]:
        out: set[str] = {"the", "with", "for", "did", "not", "nobody", "also", "is", "are", "than", "never", "almost", "someone", "something"}
        for group in (self.objects, self.adjectives, self.manner, self.times, self.comparatives, self.ditransitive):
            for entry in group:
                out.update(entry.split())
        for past, base in self.verbs:
            out.update((past, base))
        return out


class _Corpus:
    def __init__(self, nouns: tuple[Noun, ...], words: CorpusWords, s: Sampler) -> None:
        self.nouns, self.w, self.s = nouns, words, s
        self._antonym = {a: b for a, b in words.antonyms} | {b: a for a, b in words.antonyms}

    def people(self, k: int, same_number: bool = False) -> list[tuple[str, bool]]:
        """``k`` distinct ``("the banker", plural?)`` phrases (all singular or all plural if asked)."""
        out = []
        shared = self.s.coin()
        for sing, plural in self.s.distinct(self.nouns, k):
            many = shared if same_number else self.s.coin()
            out.append((f"the {plural if many else sing}", many))
        return out

    def event(self) -> tuple[str, str, str, str]:
        """(subject, past verb, base verb, object phrase)."""
        (subj, _), = self.people(1)
        past, base = self.s.choice(self.w.verbs)
        return subj, past, base, f"the {self.s.choice(self.w.objects)}"

    # ---- majority: the overlap heuristic predicts the label
    def ent_drop_manner(self):
        n, v, _, o = self.event()
        return f"{n} {self.s.choice(self.w.manner)} {v} {o}", f"{n} {v} {o}", ENT

    def ent_drop_time(self):
        n, v, _, o = self.event()
        return f"{n} {v} {o} {self.s.choice(self.w.times)}", f"{n} {v} {o}", ENT

    def ent_drop_adjective(self):
        n, v, _, o = self.event()
        return f"{n} {v} the {self.s.choice(self.w.adjectives)} {o[4:]}", f"{n} {v} {o}", ENT

    def ent_drop_companion(self):
        (n, _), (m, _) = self.people(2)
        _, v, _, o = self.event()
        return f"{n} {v} {o} with {m}", f"{n} {v} {o}", ENT

    def neu_add_time(self):
        n, v, _, o = self.event()
        return f"{n} {v} {o}", f"{n} {v} {o} {self.s.choice(self.w.times)}", NEU

    def neu_add_beneficiary(self):
        (n, _), (m, _) = self.people(2)
        _, v, _, o = self.event()
        return f"{n} {v} {o}", f"{n} {v} {o} for {m}", NEU

    def neu_other_event(self):
        n, v, _, o = self.event()
        _, v2, _, o2 = self.event()
        return f"{n} {v} {o}", f"{n} also {v2} {o2}", NEU

    def con_negation(self):
        n, v, base, o = self.event()
        return f"{n} {v} {o}", f"{n} did not {base} {o}", CON

    def con_antonym(self):
        n, _, _, o = self.event()
        v = self.s.choice(list(self._antonym))
        return f"{n} {v} {o}", f"{n} {self._antonym[v]} {o}", CON

    def con_nobody(self):
        n, v, _, o = self.event()
        return f"{n} {v} {o}", f"nobody {v} {o}", CON

    # ---- minority: the overlap heuristic is wrong
    def min_role_swap(self):
        (n, _), (m, _) = self.people(2)
        v, o = self.s.choice(self.w.ditransitive), self.s.choice(self.w.objects)
        return f"{n} {v} {m} the {o}", f"{m} {v} {n} the {o}", NEU

    def min_comparative_swap(self):
        (n, plural), (m, _) = self.people(2, same_number=True)  # same verb form, so full overlap
        c, be = self.s.choice(self.w.comparatives), "are" if plural else "is"
        return f"{n} {be} {c} than {m}", f"{m} {be} {c} than {n}", CON

    def min_drop_never(self):
        n, v, _, o = self.event()
        return f"{n} never {v} {o}", f"{n} {v} {o}", CON

    def min_drop_almost(self):
        n, v, _, o = self.event()
        return f"{n} almost {v} {o}", f"{n} {v} {o}", CON

    def min_low_overlap_entailment(self):
        n, v, _, o = self.event()
        return f"{n} {v} {o}", f"someone {v} something", ENT


MAJORITY: dict[int, tuple[Callable[[_Corpus], tuple[str, str, int]], ...]] = {
    ENT: (_Corpus.ent_drop_manner, _Corpus.ent_drop_time, _Corpus.ent_drop_adjective, _Corpus.ent_drop_companion),
    NEU: (_Corpus.neu_add_time, _Corpus.neu_add_beneficiary, _Corpus.neu_other_event),
    CON: (_Corpus.con_negation, _Corpus.con_antonym, _Corpus.con_nobody),
}
MINORITY = (
    _Corpus.min_role_swap,
    _Corpus.min_comparative_swap,
    _Corpus.min_drop_never,
    _Corpus.min_drop_almost,
    _Corpus.min_low_overlap_entailment,
)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + " ."


def generate_synthetic_nli(
    n: int,
    *,
    generator: torch.Generator,
    minority_fraction: float = 0.1,
    nouns: tuple[Noun, ...] = DEFAULT_VOCABULARY.nouns,
    words: CorpusWords = CorpusWords(),
) -> list[Example]:
    """``n`` examples, labels in NLI3 (uniform over the three on majority
    examples), each minority with probability ``minority_fraction``;
    ``Example.group`` is ``"majority"`` or ``"minority"``."""
    if n < 1:
        raise SubnetlabError(f"corpus size {n} must be at least 1")
    if not 0.0 <= minority_fraction <= 1.0:
        raise SubnetlabError(f"minority fraction {minority_fraction} is outside [0, 1]")
    if len(nouns) < 2:
        raise SubnetlabError("the synthetic corpus needs at least 2 people nouns")
    s = Sampler(generator)
    corpus = _Corpus(tuple(nouns), words, s)
    out = []
    for _ in range(n):
        if s.coin(minority_fraction):
            premise, hypothesis, label = s.choice(MINORITY)(corpus)
            group = "minority"
        else:
            premise, hypothesis, label = s.choice(MAJORITY[s.index(3)])(corpus)
            group = "majority"
        out.append(Example(_sentence(premise), _sentence(hypothesis), label, group=group))
    return out
