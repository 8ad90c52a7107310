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


def load_mnli(path: str | os.PathLike) -> list[Example]:
    """Read MNLI-style pairs from a GLUE TSV (header with sentence1/sentence2), a
    plain ``label<TAB>premise<TAB>hypothesis`` TSV, or JSONL."""
    if is_jsonl(path):
        return require_examples(_mnli_jsonl(path), path)
    fields = first_fields(path)
    if "sentence1" in fields and "sentence2" in fields:
        return require_examples(_mnli_glue(path), path)
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


def _mnli_glue(path: str | os.PathLike) -> list[Example]:
    fields = first_fields(path)
    label_col = "gold_label" if "gold_label" in fields else "label"
    table = TsvTable(path, ["sentence1", "sentence2", label_col])
    examples = []
    for where, row in table.rows():
        if row[label_col].strip() == _NO_GOLD:
            continue
        label = label_index(row[label_col], NLI3, where)
        examples.append(Example(require_text(row["sentence1"], where, "sentence1"), require_text(row["sentence2"], where, "sentence2"), label))
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
    """Read a HANS TSV (header with gold_label, sentence1, sentence2, heuristic, subcase).

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
        table = TsvTable(path, ["gold_label", "sentence1", "sentence2", "heuristic", "subcase"])
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
