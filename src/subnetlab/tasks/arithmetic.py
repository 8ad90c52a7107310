"""Modular arithmetic tasks (Subtask Induction, Zhang et al. 2024, section 4).

Sequences ``<a> <b> <sep> <c>`` of single tokens with ``a, b`` in
``[0, max_number)`` and ``c = op(a, b) mod p`` (``p = 7``, ``max_number =
1000`` in the paper). The model sees the prompt ``<a> <b> <sep>`` and predicts
``<c>`` as the next token, with its own word-level tokenizer (one token per
number) so that a GPT-2 built from a config can read it.

``op`` is any polynomial in ``a`` and ``b`` with integer coefficients, written
as in the paper: ``a+ab``, ``a^2+b^2``, ``a^2+ab``, ``a^2+ab+b^2``,
``a^3+ab``, ``a^2-b^2``, ``ab``, ``a+b``, ``a^2``, ``2a^2`` ...

Training sets (standard mode, the paper's ``T1``): ``n_train`` distinct pairs
in which every number appears as ``a`` and as ``b`` (the first ``max_number``
pairs pair two random permutations), the rest drawn uniformly. Ambiguous mode
(the paper's ``T2``): the ``max_number`` pairs ``a = b`` plus
``n_disambiguation`` pairs with ``a != b``. Evaluation and test sets
(``n_eval``, ``n_test``, 1000 each by default) are drawn uniformly from the
pairs not in training and never overlap; in ambiguous mode they are drawn
before the disambiguation rows from one permutation, so for a given seed they
are the same whatever ``n_disambiguation`` is, and the disambiguation rows for
``N`` are a prefix of those for ``N' > N``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import Example, Task
from subnetlab.tasks.sampling import seeded

PAPER_OPERATIONS = ("a+ab", "a^2+b^2", "a^2+ab", "a^2+ab+b^2", "a^3+ab", "a^2-b^2", "ab", "a+b", "a^2")
SEP, PAD, UNK = "<sep>", "<pad>", "<unk>"

_TERM = re.compile(r"^(\d*)((?:[ab](?:\^\d+)?)*)$")
_FACTOR = re.compile(r"([ab])(?:\^(\d+))?")


def parse_operation(op: str) -> Callable[[Tensor, Tensor, int], Tensor]:
    """A function ``(a, b, p) -> op(a, b) mod p`` for a polynomial such as ``a^2+ab``.

    Products may be written ``a*b`` (``*`` between factors); powers are ``a^2``. Any other
    character, and ``**``, is refused rather than dropped (``a**b`` is not ``ab``).
    """
    stray = sorted(set(re.sub(r"[0-9ab^+\-* ]", "", op)))
    if stray:
        raise SubnetlabError(f"arithmetic operation {op!r}: unexpected character(s) {' '.join(stray)} "
                             "(use a, b, digits, +, -, * and ^, e.g. a^2+ab)")
    if "**" in op.replace(" ", "") or re.search(r"(^|[+\-^*])\*|\*($|[+\-^])", op.replace(" ", "")):
        raise SubnetlabError(f"arithmetic operation {op!r}: '*' multiplies two factors (a*b); write powers as a^2")
    text = op.replace(" ", "").replace("*", "")
    if not text or text[-1] in "+-":
        raise SubnetlabError(f"arithmetic operation {op!r} is not a polynomial in a and b (e.g. a^2+ab)")
    terms: list[tuple[int, int, int]] = []  # (coefficient, power of a, power of b)
    for sign, body in re.findall(r"([+-]?)([^+-]+)", text):
        m = _TERM.match(body)
        if not m or not (m.group(1) or m.group(2)):
            raise SubnetlabError(f"arithmetic operation {op!r}: cannot read term {body!r} (e.g. a^2+ab)")
        coef = int(m.group(1) or 1) * (-1 if sign == "-" else 1)
        pa = pb = 0
        for var, power in _FACTOR.findall(m.group(2)):
            k = int(power or 1)
            pa, pb = (pa + k, pb) if var == "a" else (pa, pb + k)
        terms.append((coef, pa, pb))
    if "".join(s + b for s, b in re.findall(r"([+-]?)([^+-]+)", text)).lstrip("+") != text.lstrip("+"):
        raise SubnetlabError(f"arithmetic operation {op!r} is not a polynomial in a and b")

    def compute(a: Tensor, b: Tensor, p: int) -> Tensor:
        a, b = a.long() % p, b.long() % p  # op mod p depends only on a, b mod p; keeps int64 small
        total = torch.zeros_like(a)
        for coef, pa, pb in terms:
            total = (total + coef * (a**pa % p) * (b**pb % p)) % p
        return total % p

    return compute


def arithmetic_tokenizer(max_number: int = 1000):
    """Word-level tokenizer: number ``i`` is token id ``i``; then ``<sep>``, ``<pad>``, ``<unk>``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {str(i): i for i in range(max_number)}
    vocab.update({SEP: max_number, PAD: max_number + 1, UNK: max_number + 2})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        unk_token=UNK,
        sep_token=SEP,
        name_or_path=f"subnetlab/arithmetic-{max_number}",
        model_input_names=["input_ids", "attention_mask"],
    )


def _examples(pairs: Tensor, op: Callable, p: int, max_number: int, group: str | None = None) -> list[Example]:
    a, b = pairs // max_number, pairs % max_number
    c = op(a, b, p)
    return [Example(f"{x} {y} {SEP}", None, z, group=group) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]


def make_arithmetic_task(
    op: str,
    *,
    n_train: int = 200_000,
    ambiguous: bool = False,
    n_disambiguation: int = 0,
    n_eval: int = 1000,
    n_test: int = 1000,
    seed: int = 0,
    modulus: int = 7,
    max_number: int = 1000,
) -> Task:
    """An ``lm`` Task with splits ``train``, ``eval`` and ``test`` (see the module doc)."""
    fn = parse_operation(op)
    if modulus < 2 or modulus > max_number:
        raise SubnetlabError(f"modulus {modulus} must be in [2, max_number={max_number}]")
    if max_number < 2:
        raise SubnetlabError(f"max_number {max_number} must be at least 2")
    if min(n_eval, n_test) < 1 or n_disambiguation < 0:
        raise SubnetlabError(f"n_eval={n_eval}, n_test={n_test} must be >= 1 and n_disambiguation={n_disambiguation} >= 0")
    total, g = max_number**2, seeded(seed)
    if ambiguous:
        off = torch.randperm(total, generator=g)
        off = off[off // max_number != off % max_number]  # pairs with a != b
        need = n_eval + n_test + n_disambiguation
        if need > len(off):
            raise SubnetlabError(f"{need} evaluation, test and disambiguation pairs exceed the {len(off)} pairs with a != b")
        eval_p, test_p = off[:n_eval], off[n_eval : n_eval + n_test]
        diag = torch.arange(max_number) * (max_number + 1)
        train = _examples(diag, fn, modulus, max_number, "ambiguous")
        train += _examples(off[n_eval + n_test : need], fn, modulus, max_number, "disambiguation")
    else:
        if n_train < max_number:
            raise SubnetlabError(f"n_train={n_train} must be at least max_number={max_number} so that every number token appears")
        if n_train + n_eval + n_test > total:
            raise SubnetlabError(f"n_train + n_eval + n_test = {n_train + n_eval + n_test} exceeds the {total} distinct pairs")
        cover = torch.randperm(max_number, generator=g) * max_number + torch.randperm(max_number, generator=g)
        is_cover = torch.zeros(total, dtype=torch.bool)
        is_cover[cover] = True
        rest = torch.randperm(total, generator=g)
        rest = rest[~is_cover[rest]]
        k = n_train - max_number
        train = _examples(torch.cat([cover, rest[:k]]), fn, modulus, max_number)
        eval_p, test_p = rest[k : k + n_eval], rest[k + n_eval : k + n_eval + n_test]
    options = dict(op=op, n_train=len(train), ambiguous=ambiguous, n_disambiguation=n_disambiguation,
                   n_eval=n_eval, n_test=n_test, seed=seed, modulus=modulus, max_number=max_number)
    return Task(
        f"arith:{op}",
        "lm",
        [str(i) for i in range(modulus)],
        train,
        {"eval": _examples(eval_p, fn, modulus, max_number), "test": _examples(test_p, fn, modulus, max_number)},
        options=options,
        tokenizer=arithmetic_tokenizer(max_number),
    )
