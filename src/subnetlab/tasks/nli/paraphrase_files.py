"""Loaders for paraphrase files: QQP (GLUE TSV, JSONL) and PAWS-QQP (TSV, JSONL).

Both use the label space ``not_duplicate, duplicate`` (0 / 1 as in GLUE QQP
and PAWS), so a QQP model is scored on PAWS-QQP directly. PAWS-QQP sentences
are wrapped as Python bytes literals (``b'...'`` / ``b"..."``); the wrapper is
parsed with ``ast.literal_eval`` (a literal parser, not code execution) so
escapes inside it come out right.
"""

from __future__ import annotations

import ast
import os

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import PARAPHRASE, Example
from subnetlab.tasks.files import (
    TsvTable,
    first_fields,
    is_jsonl,
    label_index,
    read_jsonl,
    require_examples,
    require_text,
)

_ALIASES = {
    "not_paraphrase": "not_duplicate",
    "not paraphrase": "not_duplicate",
    "not_equivalent": "not_duplicate",
    "paraphrase": "duplicate",
    "equivalent": "duplicate",
}


def strip_bytes_literal(text: str, where: str) -> str:
    """``b'How are you ?'`` -> ``How are you ?``; other text is returned unchanged."""
    t = text.strip()
    if len(t) >= 2 and t[0] == "b" and t[1] in "'\"":
        if len(t) < 3 or t[-1] != t[1]:
            raise SubnetlabError(f"{where}: unterminated bytes literal {t[:40]!r}")
        try:
            value = ast.literal_eval(t)
        except (ValueError, SyntaxError):
            raise SubnetlabError(f"{where}: malformed bytes literal {t[:40]!r}") from None
        if not isinstance(value, bytes):
            raise SubnetlabError(f"{where}: malformed bytes literal {t[:40]!r}")
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise SubnetlabError(f"{where}: bytes literal is not UTF-8") from None
    return t


def _label(raw: object, where: str) -> int:
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw.strip())
    return label_index(raw, PARAPHRASE, where, aliases=_ALIASES)


def load_paraphrase(path: str | os.PathLike, *, not_equivalent_only: bool = False) -> list[Example]:
    """Read sentence pairs labelled 0 (not duplicate) / 1 (duplicate).

    Accepts GLUE QQP TSV (``question1, question2, is_duplicate``), PAWS TSV
    (``sentence1, sentence2, label``) and JSONL with either set of keys.
    ``not_equivalent_only`` keeps only label-0 pairs, as the Heuristic Core
    paper does for PAWS-QQP.
    """
    examples = []
    for where, a, b, raw in _rows(path):
        label = _label(raw, where)
        if not_equivalent_only and label != 0:
            continue
        a_text = strip_bytes_literal(require_text(a, where, "first sentence"), where)
        b_text = strip_bytes_literal(require_text(b, where, "second sentence"), where)
        if not a_text or not b_text:
            raise SubnetlabError(f"{where}: empty sentence after removing the b'...' wrapper")
        examples.append(Example(a_text, b_text, label))
    return require_examples(examples, path, "pairs" + (" labelled 0" if not_equivalent_only else ""))


def _rows(path: str | os.PathLike):
    if is_jsonl(path):
        for where, rec in read_jsonl(path):
            a = rec.get("question1", rec.get("sentence1"))
            b = rec.get("question2", rec.get("sentence2"))
            raw = rec.get("is_duplicate", rec.get("label"))
            if raw is None:
                raise SubnetlabError(f"{where}: record has no 'label' or 'is_duplicate'")
            yield where, a, b, raw
        return
    fields = first_fields(path)
    if "question1" in fields:
        cols = ("question1", "question2", "is_duplicate")
    elif "sentence1" in fields:
        cols = ("sentence1", "sentence2", "label")
    else:
        raise SubnetlabError(
            f"{path}:1: expected a header with question1/question2/is_duplicate (QQP) "
            f"or sentence1/sentence2/label (PAWS), found: {', '.join(fields)}"
        )
    table = TsvTable(path, cols)
    for where, row in table.rows():
        yield where, row[cols[0]], row[cols[1]], row[cols[2]]


__all__ = ["load_paraphrase", "strip_bytes_literal", "PARAPHRASE"]
