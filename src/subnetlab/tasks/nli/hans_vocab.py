"""Word lists for the HANS-style generator, and splitting them train / eval.

*Content* lists (nouns, verbs, adjectives, places, objects) can be split so
that evaluation sentences use words never seen in training. *Structural* lists
(prepositions, adverbs, connectives, embedding verbs) define the subcases
themselves, so both halves share them. Every surface word belongs to exactly
one list, which the tests check, so a split is a clean partition.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.sampling import Sampler

Noun = tuple[str, str]  # (singular, plural)
Verb = tuple[str, str]  # (past, past participle)
ObjectVerb = tuple[str, tuple[str, ...]]  # (past, objects it takes)

CONTENT_LISTS = ("nouns", "transitive", "intransitive", "adjectives", "locations", "understood_object", "nps_verbs", "npz_verbs", "participle_verbs")


@dataclass(frozen=True)
class Vocabulary:
    """The words the HANS-style templates are filled with."""

    # content: split between train and eval
    nouns: tuple[Noun, ...]
    transitive: tuple[Verb, ...]
    intransitive: tuple[str, ...]
    adjectives: tuple[str, ...]
    locations: tuple[str, ...]
    understood_object: tuple[ObjectVerb, ...]
    nps_verbs: tuple[str, ...]  # take an NP or a clause: "knew the students (thanked ...)"
    npz_verbs: tuple[str, ...]  # optionally transitive: "When the doctor hid (the managers ...)"
    participle_verbs: tuple[str, ...]  # past == participle, reduced relatives
    # structural: shared
    prepositions: tuple[str, ...] = ("near", "by", "behind", "beside", "next to", "in front of")
    relative_pronouns: tuple[str, ...] = ("who", "that")
    veridical_adverbs: tuple[str, ...] = ("certainly", "clearly", "obviously", "definitely", "without a doubt", "of course")
    nonveridical_adverbs: tuple[str, ...] = ("maybe", "perhaps", "probably", "hopefully", "supposedly", "possibly")
    factive_verbs: tuple[str, ...] = ("forgot", "learned", "realized", "noticed", "remembered", "found out")
    nonfactive_verbs: tuple[str, ...] = ("assumed", "thought", "hoped", "suspected", "claimed", "imagined")
    factive_connectives: tuple[str, ...] = ("since", "because", "although", "now that", "given that")
    main_clause_connectives: tuple[str, ...] = ("since", "because", "although", "before", "after", "while")
    conditional_connectives: tuple[str, ...] = ("if", "unless", "only if", "provided that", "as long as")
    embedding_conditionals: tuple[str, ...] = ("if", "unless", "whether or not", "only if", "provided that")
    temporal_subordinators: tuple[str, ...] = ("when", "after", "before", "while", "once", "as soon as")

    def content_words(self) -> set[str]:
        """Every surface word of the content lists (lower case)."""
        words: set[str] = set()
        for name in CONTENT_LISTS:
            for entry in getattr(self, name):
                words.update(_entry_words(entry))
        return words

    def structural_words(self) -> set[str]:
        words = {"the", "and", "or", "was", "were", "that", "in", ","}
        for f in fields(self):
            if f.name not in CONTENT_LISTS:
                for entry in getattr(self, f.name):
                    words.update(entry.split())
        return words

    def split(self, eval_fraction: float, generator: torch.Generator) -> tuple["Vocabulary", "Vocabulary"]:
        """(train, eval) vocabularies whose content lists are disjoint.

        Each content list is shuffled with ``generator`` and its first
        ``round(eval_fraction * len)`` entries (at least one) go to eval.
        """
        if not 0.0 < eval_fraction < 1.0:
            raise SubnetlabError(f"eval vocabulary fraction {eval_fraction} is outside (0, 1)")
        sampler = Sampler(generator)
        train: dict[str, tuple] = {}
        evals: dict[str, tuple] = {}
        for name in CONTENT_LISTS:
            entries = getattr(self, name)
            if len(entries) < 2:
                raise SubnetlabError(f"vocabulary list {name!r} has {len(entries)} entries; splitting needs at least 2")
            k = min(len(entries) - 1, max(1, round(eval_fraction * len(entries))))
            order = sampler.permutation(len(entries))
            evals[name] = tuple(entries[i] for i in sorted(order[:k]))
            train[name] = tuple(entries[i] for i in sorted(order[k:]))
        return replace(self, **train), replace(self, **evals)


def _entry_words(entry: object) -> list[str]:
    if isinstance(entry, str):
        return entry.split()
    out: list[str] = []
    for part in entry:  # tuples, possibly nested
        out.extend(_entry_words(part))
    return out


def _plural(noun: str) -> str:
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun + "s"


_NOUNS = (
    "banker senator actor student doctor lawyer judge professor artist athlete author tourist "
    "secretary scientist manager president chef pilot nurse farmer dancer singer teacher painter "
    "engineer soldier sailor editor poet clerk mayor coach"
).split()

DEFAULT_VOCABULARY = Vocabulary(
    nouns=tuple((n, _plural(n)) for n in _NOUNS),
    transitive=tuple(
        (v, v)
        for v in (
            "admired advised avoided called encouraged helped introduced mentioned recommended "
            "recognized stopped supported thanked contacted watched followed praised blamed greeted "
            "invited trusted warned"
        ).split()
    )
    + (("saw", "seen"), ("met", "met")),
    intransitive=tuple("slept waited arrived danced shouted laughed ran resigned smiled rested performed panicked stumbled cried sneezed yawned".split()),
    adjectives=tuple("angry happy tall young old famous quiet brave clever tired busy nervous proud lucky polite calm".split()),
    locations=tuple("museum library hotel office park station theater school hospital airport".split()),
    understood_object=(
        ("ate", ("cake", "bread")),
        ("read", ("book", "newspaper")),
        ("wrote", ("report", "essay")),
        ("cooked", ("dinner", "pasta")),
        ("sang", ("song", "anthem")),
        ("drew", ("picture", "map")),
        ("played", ("game", "piano")),
        ("baked", ("pie", "cookies")),
        ("drank", ("coffee", "tea")),
        ("cleaned", ("kitchen", "garage")),
    ),
    nps_verbs=tuple("knew believed heard understood confirmed reported announced doubted".split()),
    npz_verbs=tuple("hid paid moved attacked visited phoned served washed".split()),
    participle_verbs=tuple("investigated examined interviewed tested searched photographed treated filmed".split()),
)
