"""Loading task data from the Hugging Face hub through ``datasets`` (online users).

A hub spec is ``hub:<dataset id>[:<config>]@<split>``, for example
``hub:nyu-mll/glue:mnli@validation_matched``, ``hub:jhu-cogsci/hans@validation``
or ``hub:nyu-mll/glue:qqp@train``. Field names and integer labels follow the
hub's conventions (GLUE MNLI: 0 entailment, 1 neutral, 2 contradiction; HANS:
0 entailment, 1 non-entailment; QQP / PAWS: 0 not duplicate, 1 duplicate).
Unlabelled rows (label -1, as in GLUE test splits) are skipped.

Not exercised by the test suite: no hub is reachable where it runs.
"""

from __future__ import annotations

from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import Example
from subnetlab.tasks.nli.paraphrase_files import strip_bytes_literal

_FIELDS = {  # format -> (first text, second text)
    "mnli": (("premise", "sentence1"), ("hypothesis", "sentence2")),
    "hans": (("premise", "sentence1"), ("hypothesis", "sentence2")),
    "qqp": (("question1", "sentence1"), ("question2", "sentence2")),
    "paws-qqp": (("sentence1", "question1"), ("sentence2", "question2")),
}


def is_hub_spec(path: object) -> bool:
    return isinstance(path, str) and path.startswith("hub:")


def parse_hub_spec(spec: str) -> tuple[str, str | None, str]:
    """``hub:glue:mnli@train`` -> ``("glue", "mnli", "train")``."""
    body = spec[len("hub:") :]
    if "@" not in body or not body.split("@", 1)[1]:
        raise SubnetlabError(f"hub spec {spec!r} names no split (expected hub:<dataset>[:<config>]@<split>)")
    name, split = body.rsplit("@", 1)
    dataset, _, config = name.partition(":")
    if not dataset:
        raise SubnetlabError(f"hub spec {spec!r} names no dataset")
    return dataset, config or None, split


def _first(row: dict[str, Any], keys: tuple[str, ...], where: str) -> str:
    for k in keys:
        if k in row and isinstance(row[k], str) and row[k].strip():
            return row[k].strip()
    raise SubnetlabError(f"{where}: none of the fields {', '.join(keys)} holds text")


def load_hub(fmt: str, spec: str, *, perturbed: str = "exclude", not_equivalent_only: bool = False) -> list[Example]:
    """Examples of format ``fmt`` from the hub dataset named by ``spec``."""
    if fmt not in _FIELDS:
        raise SubnetlabError(f"no hub loader for format {fmt!r}")
    dataset, config, split = parse_hub_spec(spec)
    try:
        import datasets
    except ImportError:
        raise SubnetlabError("loading from the hub needs the 'datasets' package") from None
    try:
        rows = datasets.load_dataset(dataset, config, split=split)
    except Exception as e:  # network, unknown dataset or split: one line for the user
        raise SubnetlabError(f"{spec}: cannot load from the hub ({type(e).__name__}: {e})") from None
    first, second = _FIELDS[fmt]
    out: list[Example] = []
    for i, row in enumerate(rows):
        where = f"{spec}:{i}"
        label = row.get("label", row.get("is_duplicate"))
        if label is None or int(label) < 0:
            continue
        if fmt == "paws-qqp" and not_equivalent_only and int(label) != 0:
            continue
        if fmt == "hans" and perturbed == "only":
            continue  # the hub's HANS has no perturbed rows
        a, b = _first(row, first, where), _first(row, second, where)
        if fmt == "paws-qqp":
            a, b = strip_bytes_literal(a, where), strip_bytes_literal(b, where)
        extra = {"subcase": row.get("subcase"), "heuristic": row.get("heuristic")} if fmt == "hans" else {}
        out.append(Example(a, b, int(label), **extra))
    if not out:
        raise SubnetlabError(f"{spec}: no labelled examples")
    return out
