"""Loaders for NLI files: MNLI (GLUE TSV, plain TSV, JSONL) and HANS (TSV).

MNLI examples use the 3-way label space ``entailment, neutral, contradiction``
(the GLUE / Hugging Face order); HANS examples the 2-way space
``entailment, non-entailment`` with their subcase and heuristic, so that a
3-way model can be scored on them per subcase.
"""

from __future__ import annotations

import os
from typing import Literal

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import NLI2, NLI3, Example
from subnetlab.tasks.files import (
    TsvTable,
    first_fields,
    is_jsonl,
    label_index,
    read_jsonl,
    read_lines,
    require_examples,
    require_text,
)

PerturbedFilter = Literal["exclude", "only", "all"]
_NO_GOLD = "-"  # SNLI / MNLI rows whose annotators reached no consensus

# header names of the columns of a pair file, in order of preference (GLUE's first, then the hub's)
PREMISE_COLUMNS = ("sentence1", "premise")
HYPOTHESIS_COLUMNS = ("sentence2", "hypothesis")
LABEL_COLUMNS = ("gold_label", "label")


def header_columns(fields: list[str], path: str | os.PathLike) -> tuple[str, str, str] | None:
    """The (premise, hypothesis, label) column names of a header row; None when ``fields`` is not a header.

    A first line that names a premise and a hypothesis column (``sentence1`` / ``premise``,
    ``sentence2`` / ``hypothesis``) in any order is a header, not an example; it must
    then name a label column (``gold_label`` / ``label``) too.
    """
    lowered = [f.strip().lower() for f in fields]
    premise = next((c for c in PREMISE_COLUMNS if c in lowered), None)
    hypothesis = next((c for c in HYPOTHESIS_COLUMNS if c in lowered), None)
    if premise is None or hypothesis is None:
        return None
    label = next((c for c in LABEL_COLUMNS if c in lowered), None)
    if label is None:
        raise SubnetlabError(f"{path}:1: header names {premise} and {hypothesis} but no label column "
                             f"({' or '.join(LABEL_COLUMNS)}); found: {', '.join(fields)}")
    return premise, hypothesis, label


def _header_table(path: str | os.PathLike, required: list[str]) -> TsvTable:
    """A ``TsvTable`` whose column names are matched case-insensitively (``Premise`` is ``premise``)."""
    table = TsvTable(path, [])
    table.columns = [c.lower() for c in table.columns]
    table.index = {c: i for i, c in enumerate(table.columns)}
    missing = [c for c in required if c not in table.index]
    if missing:
        raise SubnetlabError(f"{path}:1: header lacks column(s) {', '.join(missing)} (found: {', '.join(table.columns)})")
    return table


def load_mnli(path: str | os.PathLike) -> list[Example]:
    """Read MNLI-style pairs from a TSV with a header row naming its columns (GLUE's
    sentence1 / sentence2 / gold_label, or premise / hypothesis / label, any order),
    a plain ``label<TAB>premise<TAB>hypothesis`` TSV without a header, or JSONL."""
    if is_jsonl(path):
        return require_examples(_mnli_jsonl(path), path)
    columns = header_columns(first_fields(path), path)
    if columns is not None:
        return require_examples(_mnli_header(path, columns), path)
    return require_examples(_mnli_plain(path), path)


def _mnli_plain(path: str | os.PathLike) -> list[Example]:
    examples = []
    for lineno, line in read_lines(path):
        where = f"{path}:{lineno}"
        fields = line.split("\t")
        if len(fields) != 3:
            raise SubnetlabError(f"{where}: expected 3 tab-separated fields (label, premise, hypothesis), got {len(fields)}")
        label = label_index(fields[0], NLI3, where)
        examples.append(Example(require_text(fields[1], where, "premise"), require_text(fields[2], where, "hypothesis"), label))
    return examples


def _mnli_header(path: str | os.PathLike, columns: tuple[str, str, str]) -> list[Example]:
    premise, hypothesis, label_col = columns
    table = _header_table(path, list(columns))
    examples = []
    for where, row in table.rows():
        if row[label_col].strip() == _NO_GOLD:
            continue
        label = label_index(row[label_col], NLI3, where)
        examples.append(Example(require_text(row[premise], where, premise), require_text(row[hypothesis], where, hypothesis), label))
    return examples


def _mnli_jsonl(path: str | os.PathLike) -> list[Example]:
    examples = []
    for where, rec in read_jsonl(path):
        premise = rec.get("premise", rec.get("sentence1"))
        hypothesis = rec.get("hypothesis", rec.get("sentence2"))
        if "gold_label" in rec:
            raw = rec["gold_label"]
        elif "label" in rec:
            raw = rec["label"]
        else:
            raise SubnetlabError(f"{where}: record has no 'label' or 'gold_label'")
        if raw == _NO_GOLD:
            continue
        label = label_index(raw, NLI3, where)
        examples.append(Example(require_text(premise, where, "premise"), require_text(hypothesis, where, "hypothesis"), label))
    return examples


def load_hans(path: str | os.PathLike, perturbed: PerturbedFilter = "exclude") -> list[Example]:
    """Read a HANS TSV (header with gold_label, sentence1, sentence2, heuristic, subcase; or label,
    premise, hypothesis in place of the first three).

    ``perturbed`` selects rows by the optional ``perturbed`` column of the
    HANS-perturbed release: ``exclude`` keeps the original (``not-perturbed``)
    rows, ``only`` the perturbed ones, ``all`` both. JSONL with the same keys
    (or the hub's ``premise`` / ``hypothesis``) is read too.
    """
    if perturbed not in ("exclude", "only", "all"):
        raise SubnetlabError(f"perturbed filter {perturbed!r} is not one of exclude, only, all")
    if is_jsonl(path):
        rows = read_jsonl(path)
    else:
        columns = header_columns(first_fields(path), path) or ("gold_label", "sentence1", "sentence2")
        table = _header_table(path, [*columns, "heuristic", "subcase"])
        if perturbed == "only" and "perturbed" not in table.columns:
            raise SubnetlabError(f"{path}: no 'perturbed' column, so there are no perturbed rows to keep")
        rows = table.rows()
    examples = []
    for where, row in rows:
        flag = str(row.get("perturbed", "not-perturbed")).strip().lower()
        if flag not in ("perturbed", "not-perturbed", "true", "false"):
            raise SubnetlabError(f"{where}: perturbed value {flag!r} is not 'perturbed' or 'not-perturbed'")
        is_perturbed = flag in ("perturbed", "true")
        if (perturbed == "exclude" and is_perturbed) or (perturbed == "only" and not is_perturbed):
            continue
        raw = row["gold_label"] if "gold_label" in row else row.get("label")
        if raw is None:
            raise SubnetlabError(f"{where}: record has no 'gold_label' or 'label'")
        label = label_index(raw, NLI2, where, aliases={"non_entailment": "non-entailment", "nonentailment": "non-entailment"})
        premise = row.get("sentence1", row.get("premise"))
        hypothesis = row.get("sentence2", row.get("hypothesis"))
        heuristic = require_text(row.get("heuristic"), where, "heuristic")
        subcase = require_text(row.get("subcase"), where, "subcase")
        examples.append(
            Example(require_text(premise, where, "sentence1"), require_text(hypothesis, where, "sentence2"), label, subcase=subcase, heuristic=heuristic)
        )
    return require_examples(examples, path, f"HANS rows (perturbed={perturbed})")


__all__ = ["load_mnli", "load_hans", "NLI2", "NLI3"]
