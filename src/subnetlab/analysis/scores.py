"""Turning evaluation results into the columns of the paper's tables.

``subnetlab.methods.evaluate.evaluate`` returns ``{split: score}`` where a score
has ``accuracy`` and, for out-of-domain splits, ``subcases``. The Heuristic Core
tables use the in-domain accuracy and a few OOD subcases as columns; the OOD
accuracy of a model is the mean over those subcases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from subnetlab.errors import SubnetlabError

# The four HANS subcases the paper studies (Table 1): where BERT partially generalizes.
PAPER_SUBCASES: tuple[str, ...] = (
    "ln_subject/object_swap", "ln_preposition", "cn_embedded_under_if", "cn_embedded_under_verb",
)
SHORT_NAMES: dict[str, str] = {
    "id": "ID",
    "ln_subject/object_swap": "SO-Swap [LO]",
    "ln_preposition": "Prep [LO]",
    "cn_embedded_under_if": "Embed-If [C]",
    "cn_embedded_under_verb": "Embed-Verb [C]",
    "se_relative_clause_on_obj": "Rel-Clause [S]",
    "ce_embedded_under_since": "Embed-Since [C]",
}


HEURISTIC_SHORT = {"lexical_overlap": "LO", "subsequence": "S", "constituent": "C"}


def short_name(column: str) -> str:
    """The paper's abbreviation of a HANS subcase column (``subcase`` or ``split/subcase``); a heuristic's
    entailment column ``SPLIT:HEURISTIC`` reads ``Entailed [LO]`` (prefixed by the split unless it is ``entailed``)."""
    if column in SHORT_NAMES:
        return SHORT_NAMES[column]
    split, sep, heuristic = column.rpartition(":")
    if sep and heuristic in HEURISTIC_SHORT:
        name = f"Entailed [{HEURISTIC_SHORT[heuristic]}]"
        return name if split in ("entailed", "ood-entailed") else f"{split.removesuffix('-entailed')}: {name}"
    for sub, short in SHORT_NAMES.items():
        if column.endswith("/" + sub):
            return f"{column[: -len(sub) - 1]}: {short}"
    return column


def score_columns(
    results: Mapping[str, Mapping[str, Any]],
    id_splits: Sequence[str],
    subcases: Sequence[str] | None = None,
) -> dict[str, float]:
    """``{column: accuracy}``: each ID split, then each chosen subcase of each OOD split.

    OOD columns are named by the subcase alone when there is one OOD split,
    ``split/subcase`` otherwise. An OOD split without subcases gives one column.
    ``subcases`` (None = every subcase) are kept in the given order; a subcase
    missing from every OOD split is an error that names it.
    """
    columns: dict[str, float] = {}
    for split in id_splits:
        if split not in results:
            raise SubnetlabError(f"no evaluation of in-domain split {split!r} (have {', '.join(results)})")
        columns[split] = float(results[split]["accuracy"])
    ood = [s for s in results if s not in id_splits]
    seen: set[str] = set()
    for split in ood:
        found = results[split].get("subcases") or {}
        if not found:
            columns[split] = float(results[split]["accuracy"])
            continue
        chosen = [s for s in (subcases if subcases is not None else found) if s in found]
        seen.update(chosen)
        for sub in chosen:
            columns[sub if len(ood) == 1 else f"{split}/{sub}"] = float(found[sub])
    missing = [s for s in (subcases or []) if s not in seen]
    if missing and any(results[s].get("subcases") for s in ood):
        raise SubnetlabError(f"subcase(s) {', '.join(missing)} not found in the out-of-domain splits {', '.join(ood)}")
    return columns


def ood_columns(columns: Mapping[str, float], id_splits: Sequence[str]) -> list[str]:
    return [c for c in columns if c not in id_splits]


def mean_of(columns: Mapping[str, float], names: Sequence[str]) -> float:
    """Mean accuracy over ``names`` (NaN when empty)."""
    values = [float(columns[n]) for n in names]
    return sum(values) / len(values) if values else float("nan")
