"""A HANS-style generator (McCoy, Pavlick, Linzen 2019), written from scratch.

Three syntactic heuristics an NLI model may adopt, each tested by five
subcases where the heuristic gives the right answer (entailment) and five
where it fails (non-entailment), with the HANS subcase names:

* lexical_overlap: every hypothesis word occurs in the premise;
* subsequence: the hypothesis is a contiguous subsequence of the premise;
* constituent: the hypothesis is a constituent of the premise's parse tree.

Each template builds the premise as a small phrase-structure tree, so the
constituent property can be checked against the tree itself. Sentences are
rendered as in the HANS file: space-separated tokens, capitalised first word,
a final `` .``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import NLI2, Example
from subnetlab.tasks.nli.hans_trees import T, Tree, constituents, leaves, render
from subnetlab.tasks.nli.hans_vocab import DEFAULT_VOCABULARY, Vocabulary
from subnetlab.tasks.sampling import Sampler

__all__ = ["SUBCASES", "GeneratedPair", "generate_hans_style", "sample_pair", "T", "Tree", "constituents", "leaves", "render"]

@dataclass(frozen=True)
class GeneratedPair:
    premise: Tree
    hypothesis: Tree
    template: str


class _Builder:
    """Phrase builders over one vocabulary and one sampler."""

    def __init__(self, vocab: Vocabulary, s: Sampler) -> None:
        self.v, self.s = vocab, s
        self._lemma = {form: sing for sing, plural in vocab.nouns for form in (sing, plural)}
        self._plurals = {plural for sing, plural in vocab.nouns if plural != sing}

    def nps(self, k: int) -> list[Tree]:
        """``k`` noun phrases with different nouns, each singular or plural."""
        return [T("NP", "the", n[1] if self.s.coin() else n[0]) for n in self.s.distinct(self.v.nouns, k)]

    def same_noun(self, a: Tree, b: Tree) -> bool:
        return self._lemma.get(leaves(a)[-1]) == self._lemma.get(leaves(b)[-1])

    def verbs(self, k: int) -> list[tuple[str, str]]:
        return self.s.distinct(self.v.transitive, k)

    def passive_verb(self) -> tuple[str, str]:
        """A verb whose participle is its past form, so the passive shares its words."""
        return self.s.choice([v for v in self.v.transitive if v[0] == v[1]])

    def vi(self) -> str:
        return self.s.choice(self.v.intransitive)

    def clause(self, subj: Tree | None = None, obj: Tree | None = None) -> Tree:
        """A simple clause: ``NP Vi`` or ``NP Vt NP`` (subject and object differ)."""
        if subj is None:
            subj = self.nps(1)[0]
        if obj is None and self.s.coin():
            return T("S", subj, T("VP", self.vi()))
        if obj is None:
            obj = next(np for np in self.nps(2) if not self.same_noun(np, subj))
        return T("S", subj, T("VP", self.verbs(1)[0][0], obj))

    def two_clauses(self) -> tuple[Tree, Tree]:
        a, b, c, d = self.nps(4)
        return self.clause(a, c if self.s.coin() else None), self.clause(b, d if self.s.coin() else None)

    def pp(self, np: Tree) -> Tree:
        return T("PP", self.s.choice(self.v.prepositions), np)

    def aux(self, np: Tree) -> str:
        return "were" if leaves(np)[-1] in self._plurals else "was"


# Each template returns (premise, hypothesis); the subcase table below lists them.
def _ln_swap(b: _Builder):
    n1, n2 = b.nps(2)
    v = b.verbs(1)[0][0]
    return T("S", n1, T("VP", v, n2)), T("S", n2, T("VP", v, n1))


def _ln_passive(b: _Builder):
    n1, n2 = b.nps(2)
    past, part = b.passive_verb()
    return T("S", n1, T("VP", b.aux(n1), part, T("PP", "by", n2))), T("S", n1, T("VP", past, n2))


def _ln_conj_subj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", T("NP", n1, "and", n2), T("VP", v, n3)), T("S", n1, T("VP", v, n2))


def _ln_conj_obj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", n1, T("VP", v, T("NP", n2, "and", n3))), T("S", n2, T("VP", v, n3))


def _ln_prep_subj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", T("NP", n1, b.pp(n2)), T("VP", v, n3)), T("S", n2, T("VP", v, n1))


def _ln_prep_obj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", n1, T("VP", v, T("NP", n2, b.pp(n3)))), T("S", n2, T("VP", v, n1))


def _rel_obj_gap(b: _Builder):
    """the N1 that the N2 V1 V2 the N3 (N1 is V1's object)."""
    n1, n2, n3 = b.nps(3)
    (v1, _), (v2, _) = b.verbs(2)
    prem = T("S", T("NP", n1, T("SBAR", "that", T("S", n2, T("VP", v1)))), T("VP", v2, n3))
    return prem, (n1, n2, n3, v1, v2)


def _rel_on_obj(b: _Builder):
    """the N1 V1 the N2 who V2 the N3."""
    n1, n2, n3 = b.nps(3)
    (v1, _), (v2, _) = b.verbs(2)
    prem = T("S", n1, T("VP", v1, T("NP", n2, T("SBAR", b.s.choice(b.v.relative_pronouns), T("VP", v2, n3)))))
    return prem, (n1, n2, n3, v1, v2)


def _ln_rel_1(b):
    p, (n1, n2, n3, v1, v2) = _rel_obj_gap(b)
    return p, T("S", n2, T("VP", v2, n1))


def _ln_rel_2(b):
    p, (n1, n2, n3, v1, v2) = _rel_on_obj(b)
    return p, T("S", n2, T("VP", v1, n1))


def _le_rel_1(b):
    p, (n1, n2, n3, v1, v2) = _rel_obj_gap(b)
    return p, T("S", n2, T("VP", v1, n1))


def _le_rel_2(b):
    p, (n1, n2, n3, v1, v2) = _rel_on_obj(b)
    return p, T("S", n2, T("VP", v2, n3))


def _le_around_pp(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", T("NP", n1, b.pp(n2)), T("VP", v, n3)), T("S", n1, T("VP", v, n3))


def _le_around_rel_1(b: _Builder):
    n1, n2 = b.nps(2)
    v = b.verbs(1)[0][0]
    return T("S", T("NP", n1, T("SBAR", b.s.choice(b.v.relative_pronouns), T("VP", b.vi()))), T("VP", v, n2)), T("S", n1, T("VP", v, n2))


def _le_around_rel_2(b: _Builder):
    n1, n2, n3 = b.nps(3)
    (v1, _), (v2, _) = b.verbs(2)
    rel = T("SBAR", b.s.choice(b.v.relative_pronouns), T("VP", v1, n2))
    return T("S", T("NP", n1, rel), T("VP", v2, n3)), T("S", n1, T("VP", v2, n3))


def _le_conj_subj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", T("NP", n1, "and", n2), T("VP", v, n3)), T("S", n1, T("VP", v, n3))


def _le_conj_obj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", n1, T("VP", v, T("NP", n2, "and", n3))), T("S", n1, T("VP", v, n3))


def _le_passive(b: _Builder):
    n1, n2 = b.nps(2)
    past, part = b.passive_verb()
    return T("S", n1, T("VP", b.aux(n1), part, T("PP", "by", n2))), T("S", n2, T("VP", past, n1))


def _sn_nps(b: _Builder):
    n1, n2, n3 = b.nps(3)
    vs, v = b.s.choice(b.v.nps_verbs), b.verbs(1)[0][0]
    return T("S", n1, T("VP", vs, T("S", n2, T("VP", v, n3)))), T("S", n1, T("VP", vs, n2))


def _sn_npz(b: _Builder):
    n1, n2, n3 = b.nps(3)
    vz = b.s.choice(b.v.npz_verbs)
    main = T("VP", b.vi()) if b.s.coin() else T("VP", b.verbs(1)[0][0], n3)
    sub = T("SBAR", b.s.choice(b.v.temporal_subordinators), T("S", n1, T("VP", vz)))
    return T("S", sub, T("S", n2, main)), T("S", n1, T("VP", vz, n2))


def _sn_pp_subj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    vp = T("VP", b.vi()) if b.s.coin() else T("VP", b.verbs(1)[0][0], n3)
    return T("S", T("NP", n1, b.pp(n2)), vp), T("S", n2, vp)


def _sn_rel_subj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v1 = b.verbs(1)[0][0]
    vp = T("VP", b.vi()) if b.s.coin() else T("VP", b.verbs(1)[0][0], n3)
    rel = T("SBAR", b.s.choice(b.v.relative_pronouns), T("VP", v1, n2))
    return T("S", T("NP", n1, rel), vp), T("S", n2, vp)


def _participle_phrase(b: _Builder) -> tuple[str, Tree]:
    return b.s.choice(b.v.participle_verbs), T("PP", "in", T("NP", "the", b.s.choice(b.v.locations)))


def _sn_part_subj(b: _Builder):
    n1, n2 = b.nps(2)
    vp_part, loc = _participle_phrase(b)
    v = b.verbs(1)[0][0]
    return T("S", T("NP", n1, T("VP", vp_part, loc)), T("VP", v, n2)), T("S", n1, T("VP", vp_part, loc))


def _sn_part_obj(b: _Builder):
    n1, n2 = b.nps(2)
    vp_part, loc = _participle_phrase(b)
    v = b.verbs(1)[0][0]
    return T("S", n1, T("VP", v, T("NP", n2, T("VP", vp_part, loc)))), T("S", n2, T("VP", vp_part, loc))


def _se_conj_subj(b: _Builder):
    n1, n2 = b.nps(2)
    vi = b.vi()
    return T("S", T("NP", n1, "and", n2), T("VP", vi)), T("S", n2, T("VP", vi))


def _se_conj_obj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", n1, T("VP", v, T("NP", n2, "and", n3))), T("S", n1, T("VP", v, n2))


def _se_adjective(b: _Builder):
    noun = b.s.choice(b.v.nouns)[1]
    vp = T("VP", b.vi()) if b.s.coin() else T("VP", b.verbs(1)[0][0], b.nps(1)[0])
    return T("S", T("NP", T("ADJP", b.s.choice(b.v.adjectives)), noun), vp), T("S", T("NP", noun), vp)


def _se_understood(b: _Builder):
    n1 = b.nps(1)[0]
    verb, objects = b.s.choice(b.v.understood_object)
    return T("S", n1, T("VP", verb, T("NP", "the", b.s.choice(objects)))), T("S", n1, T("VP", verb))


def _se_rel_obj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    (v1, _), (v2, _) = b.verbs(2)
    rel_vp = T("VP", b.vi()) if b.s.coin() else T("VP", v2, n3)
    prem = T("S", n1, T("VP", v1, T("NP", n2, T("SBAR", b.s.choice(b.v.relative_pronouns), rel_vp))))
    return prem, T("S", n1, T("VP", v1, n2))


def _se_pp_obj(b: _Builder):
    n1, n2, n3 = b.nps(3)
    v = b.verbs(1)[0][0]
    return T("S", n1, T("VP", v, T("NP", n2, b.pp(n3)))), T("S", n1, T("VP", v, n2))


def _subordinate(connectives: str, take_embedded: bool) -> Callable[[_Builder], tuple[Tree, Tree]]:
    def template(b: _Builder):
        s1, s2 = b.two_clauses()
        prem = T("S", T("SBAR", b.s.choice(getattr(b.v, connectives)), s1), ",", s2)
        return prem, s1 if take_embedded else s2

    return template


def _coordinated(conj: str) -> Callable[[_Builder], tuple[Tree, Tree]]:
    def template(b: _Builder):
        s1, s2 = b.two_clauses()
        return T("S", s1, ",", conj, s2), s1 if b.s.coin() else s2

    return template


def _embedded_under(verbs: str) -> Callable[[_Builder], tuple[Tree, Tree]]:
    def template(b: _Builder):
        n0 = b.nps(1)[0]
        inner = b.clause(next(np for np in b.nps(2) if not b.same_noun(np, n0)))
        return T("S", n0, T("VP", b.s.choice(getattr(b.v, verbs)), T("SBAR", "that", inner))), inner

    return template


def _adverb(adverbs: str) -> Callable[[_Builder], tuple[Tree, Tree]]:
    def template(b: _Builder):
        inner = b.clause()
        return T("S", T("ADVP", b.s.choice(getattr(b.v, adverbs))), inner), inner

    return template


# subcase -> (heuristic, label, templates); label is an index into NLI2.
ENT, NON = NLI2.index("entailment"), NLI2.index("non-entailment")
SUBCASES: dict[str, tuple[str, int, tuple[Callable[[_Builder], tuple[Tree, Tree]], ...]]] = {
    "ln_subject/object_swap": ("lexical_overlap", NON, (_ln_swap,)),
    "ln_passive": ("lexical_overlap", NON, (_ln_passive,)),
    "ln_conjunction": ("lexical_overlap", NON, (_ln_conj_subj, _ln_conj_obj)),
    "ln_preposition": ("lexical_overlap", NON, (_ln_prep_subj, _ln_prep_obj)),
    "ln_relative_clause": ("lexical_overlap", NON, (_ln_rel_1, _ln_rel_2)),
    "le_relative_clause": ("lexical_overlap", ENT, (_le_rel_1, _le_rel_2)),
    "le_around_prepositional_phrase": ("lexical_overlap", ENT, (_le_around_pp,)),
    "le_around_relative_clause": ("lexical_overlap", ENT, (_le_around_rel_1, _le_around_rel_2)),
    "le_conjunction": ("lexical_overlap", ENT, (_le_conj_subj, _le_conj_obj)),
    "le_passive": ("lexical_overlap", ENT, (_le_passive,)),
    "sn_NP/S": ("subsequence", NON, (_sn_nps,)),
    "sn_PP_on_subject": ("subsequence", NON, (_sn_pp_subj,)),
    "sn_relative_clause_on_subject": ("subsequence", NON, (_sn_rel_subj,)),
    "sn_past_participle": ("subsequence", NON, (_sn_part_subj, _sn_part_obj)),
    "sn_NP/Z": ("subsequence", NON, (_sn_npz,)),
    "se_conjunction": ("subsequence", ENT, (_se_conj_subj, _se_conj_obj)),
    "se_adjective": ("subsequence", ENT, (_se_adjective,)),
    "se_understood_object": ("subsequence", ENT, (_se_understood,)),
    "se_relative_clause_on_obj": ("subsequence", ENT, (_se_rel_obj,)),
    "se_PP_on_obj": ("subsequence", ENT, (_se_pp_obj,)),
    "cn_embedded_under_if": ("constituent", NON, (_subordinate("embedding_conditionals", True),)),
    "cn_after_if_clause": ("constituent", NON, (_subordinate("conditional_connectives", False),)),
    "cn_embedded_under_verb": ("constituent", NON, (_embedded_under("nonfactive_verbs"),)),
    "cn_disjunction": ("constituent", NON, (_coordinated("or"),)),
    "cn_adverb": ("constituent", NON, (_adverb("nonveridical_adverbs"),)),
    "ce_embedded_under_since": ("constituent", ENT, (_subordinate("factive_connectives", True),)),
    "ce_after_since_clause": ("constituent", ENT, (_subordinate("main_clause_connectives", False),)),
    "ce_embedded_under_verb": ("constituent", ENT, (_embedded_under("factive_verbs"),)),
    "ce_conjunction": ("constituent", ENT, (_coordinated("and"),)),
    "ce_adverb": ("constituent", ENT, (_adverb("veridical_adverbs"),)),
}


def sample_pair(subcase: str, vocabulary: Vocabulary, sampler: Sampler) -> GeneratedPair:
    """One premise / hypothesis tree pair for ``subcase``."""
    if subcase not in SUBCASES:
        raise SubnetlabError(f"unknown HANS subcase {subcase!r} (known: {', '.join(SUBCASES)})")
    templates = SUBCASES[subcase][2]
    k = sampler.index(len(templates))
    premise, hypothesis = templates[k](_Builder(vocabulary, sampler))
    return GeneratedPair(premise, hypothesis, f"{subcase}#{k + 1}")


def generate_hans_style(
    n_per_subcase: int,
    *,
    generator: torch.Generator,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    subcases: Sequence[str] | None = None,
) -> list[Example]:
    """``n_per_subcase`` examples for each subcase (all 30 by default), labels in NLI2."""
    if n_per_subcase < 1:
        raise SubnetlabError(f"examples per subcase {n_per_subcase} must be at least 1")
    sampler = Sampler(generator)
    out = []
    for subcase in subcases or list(SUBCASES):
        heuristic, label, _ = SUBCASES.get(subcase, (None, None, None))
        for _ in range(n_per_subcase):
            pair = sample_pair(subcase, vocabulary, sampler)
            out.append(Example(render(pair.premise), render(pair.hypothesis), label, subcase=subcase, heuristic=heuristic))
    return out
