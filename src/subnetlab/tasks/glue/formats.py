"""The nine GLUE tasks: label spaces, metrics, and readers for the GLUE TSV files and the hub.

Each task reads the TSV files of the GLUE release (``download_glue_data.py``:
``CoLA/train.tsv``, ``MNLI/dev_matched.tsv`` ...) or, through ``datasets``,
a hub spec ``hub:nyu-mll/glue:<config>@<split>`` (``tasks.hub`` explains the
syntax). Label order is the hub's, so models fine-tuned on either source agree:

=======  ==============================  ======  ===========================
task     labels (index order)            metric  TSV columns (text, label)
=======  ==============================  ======  ===========================
cola     unacceptable, acceptable        mcc     no header: source, label, -, sentence
sst2     negative, positive              acc     sentence, label
mrpc     not_equivalent, equivalent      acc     #1 String, #2 String, Quality
stsb     (regression, 0-5)               corr    sentence1, sentence2, score
qqp      not_duplicate, duplicate        acc     question1, question2, is_duplicate
mnli     entailment, neutral, contra.    acc     sentence1, sentence2, gold_label
qnli     entailment, not_entailment      acc     question, sentence, label
rte      entailment, not_entailment      acc     sentence1, sentence2, label
wnli     not_entailment, entailment      acc     sentence1, sentence2, label
=======  ==============================  ======  ===========================

The metric column is the one Prasanna et al.'s code prunes against
(``find_head_mlp_masks.py`` / ``find_global_weight_mask.py``: ``metric_name``
defaults: MCC for CoLA, the mean of Pearson and Spearman for STS-B, accuracy
for every other task, MRPC and QQP included). GLUE itself also reports F1 for
MRPC and QQP and both correlations for STS-B; the task option ``metric`` picks
any metric the task's scores contain.

Rows without a gold label (MNLI's ``-``) are skipped. QQP's training file has a
few rows with missing fields; GLUE's own processor skips them, and so does this
reader (it counts them in ``Task.options['skipped_rows']``); in every other file
a short row is an error naming ``file:line``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.base import Example
from subnetlab.tasks.files import check_file, label_index, read_lines, require_text


@dataclass(frozen=True)
class GlueFormat:
    """How one GLUE task is stored and scored."""

    name: str
    directory: str  # the folder name in the GLUE release
    hub_config: str
    labels: tuple[str, ...]  # () for regression (STS-B)
    metric: str  # the default stop / report metric (the authors' metric_name)
    metrics: tuple[str, ...]  # every metric its scores hold
    text: str | int  # TSV column (name, or index for the headerless CoLA)
    text_pair: str | None
    label: str | int
    hub_text: str
    hub_text_pair: str | None
    dev_files: tuple[tuple[str, str], ...] = (("id", "dev.tsv"),)
    label_aliases: tuple[tuple[str, str], ...] = ()

    @property
    def regression(self) -> bool:
        return not self.labels


_ACC = ("accuracy", "mcc")
_BIN = ("accuracy", "mcc", "f1", "acc_and_f1")
GLUE: dict[str, GlueFormat] = {f.name: f for f in [
    GlueFormat("cola", "CoLA", "cola", ("unacceptable", "acceptable"), "mcc", _BIN, 3, None, 1, "sentence", None),
    GlueFormat("sst2", "SST-2", "sst2", ("negative", "positive"), "accuracy", _BIN, "sentence", None, "label",
               "sentence", None),
    GlueFormat("mrpc", "MRPC", "mrpc", ("not_equivalent", "equivalent"), "accuracy", _BIN, "#1 String", "#2 String",
               "Quality", "sentence1", "sentence2"),
    GlueFormat("stsb", "STS-B", "stsb", (), "corr", ("pearson", "spearman", "corr", "mse"), "sentence1", "sentence2",
               "score", "sentence1", "sentence2"),
    GlueFormat("qqp", "QQP", "qqp", ("not_duplicate", "duplicate"), "accuracy", _BIN, "question1", "question2",
               "is_duplicate", "question1", "question2"),
    GlueFormat("mnli", "MNLI", "mnli", ("entailment", "neutral", "contradiction"), "accuracy", _ACC, "sentence1",
               "sentence2", "gold_label", "premise", "hypothesis",
               dev_files=(("id", "dev_matched.tsv"), ("id-mismatched", "dev_mismatched.tsv"))),
    GlueFormat("qnli", "QNLI", "qnli", ("entailment", "not_entailment"), "accuracy", _BIN, "question", "sentence",
               "label", "question", "sentence", label_aliases=(("not-entailment", "not_entailment"),)),
    GlueFormat("rte", "RTE", "rte", ("entailment", "not_entailment"), "accuracy", _BIN, "sentence1", "sentence2",
               "label", "sentence1", "sentence2", label_aliases=(("not-entailment", "not_entailment"),)),
    GlueFormat("wnli", "WNLI", "wnli", ("not_entailment", "entailment"), "accuracy", _BIN, "sentence1", "sentence2",
               "label", "sentence1", "sentence2"),
]}


def glue_format(name: str) -> GlueFormat:
    if name not in GLUE:
        raise SubnetlabError(f"unknown GLUE task {name!r} (known: {', '.join(GLUE)})")
    return GLUE[name]


def _label(fmt: GlueFormat, raw: Any, where: str) -> int | float:
    if fmt.regression:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise SubnetlabError(f"{where}: similarity score {raw!r} is not a number") from None
        if value != value:  # nan
            raise SubnetlabError(f"{where}: similarity score is not a number")
        return value
    if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        raw = int(raw.strip())
    return label_index(raw, list(fmt.labels), where, aliases=dict(fmt.label_aliases) or None)


def read_glue_tsv(fmt: GlueFormat, path: str | os.PathLike) -> tuple[list[Example], int]:
    """Examples of a GLUE TSV file and how many short rows were skipped (QQP only)."""
    p = check_file(path)
    lines = read_lines(p)
    index: dict[str | int, int]
    if isinstance(fmt.text, int):  # CoLA: no header
        index = {fmt.text: fmt.text, fmt.label: fmt.label}
        width = max(fmt.text, int(fmt.label)) + 1
    else:
        try:
            lineno, header = next(lines)
        except StopIteration:
            raise SubnetlabError(f"{p}: empty file") from None
        columns = [c.strip() for c in header.split("\t")]
        wanted = [c for c in (fmt.text, fmt.text_pair, fmt.label) if c is not None]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise SubnetlabError(f"{p}:{lineno}: header lacks column(s) {', '.join(map(str, missing))} for GLUE "
                                 f"{fmt.name} (found: {', '.join(columns)})")
        index = {c: columns.index(c) for c in wanted}
        width = max(index.values()) + 1
    examples, skipped = [], 0
    for lineno, line in lines:
        where = f"{p}:{lineno}"
        fields = line.split("\t")
        if len(fields) < width:
            if fmt.name == "qqp":
                skipped += 1
                continue
            raise SubnetlabError(f"{where}: expected at least {width} tab-separated fields, got {len(fields)}")
        raw_label = fields[index[fmt.label]].strip()
        if raw_label == "-":  # MNLI: no annotator consensus
            continue
        a = require_text(fields[index[fmt.text]], where, str(fmt.text))
        b = require_text(fields[index[fmt.text_pair]], where, fmt.text_pair) if fmt.text_pair else None
        examples.append(Example(a, b, _label(fmt, raw_label, where)))  # type: ignore[arg-type]
    if not examples:
        raise SubnetlabError(f"{p}: no labelled GLUE {fmt.name} rows found")
    return examples, skipped


def read_glue_hub(fmt: GlueFormat, spec: str) -> list[Example]:
    """Examples from a hub spec through ``datasets`` (unlabelled rows, label -1, are skipped)."""
    from subnetlab.tasks.hub import parse_hub_spec

    dataset, config, split = parse_hub_spec(spec)
    try:
        import datasets
    except ImportError:
        raise SubnetlabError("loading from the hub needs the 'datasets' package") from None
    try:
        rows = datasets.load_dataset(dataset, config or fmt.hub_config, split=split)
    except Exception as e:  # network, unknown dataset or split: one line for the user
        raise SubnetlabError(f"{spec}: cannot load from the hub ({type(e).__name__}: {e})") from None
    out: list[Example] = []
    for i, row in enumerate(rows):
        where = f"{spec}:{i}"
        raw = row.get("label")
        if raw is None or (not fmt.regression and int(raw) < 0):
            continue
        a = require_text(row.get(fmt.hub_text), where, fmt.hub_text)
        b = require_text(row.get(fmt.hub_text_pair), where, fmt.hub_text_pair) if fmt.hub_text_pair else None
        out.append(Example(a, b, _label(fmt, raw, where)))  # type: ignore[arg-type]
    if not out:
        raise SubnetlabError(f"{spec}: no labelled examples")
    return out


def read_glue(fmt: GlueFormat, source: str | os.PathLike) -> tuple[list[Example], int]:
    """A GLUE TSV file or a ``hub:`` spec."""
    if isinstance(source, str) and source.startswith("hub:"):
        return read_glue_hub(fmt, source), 0
    return read_glue_tsv(fmt, source)


def release_files(fmt: GlueFormat, data_dir: str | os.PathLike) -> tuple[Path, dict[str, Path]]:
    """``train.tsv`` and the development files of the task's folder in a GLUE release.

    ``data_dir`` may be the task's own folder (``glue/CoLA``) or the release root (``glue``).
    """
    root = Path(data_dir)
    folder = root / fmt.directory if (root / fmt.directory).is_dir() else root
    if not folder.is_dir():
        raise SubnetlabError(f"{root}: no such GLUE data directory", setting="task_options")
    dev = {split: folder / name for split, name in fmt.dev_files if (folder / name).is_file()}
    if not dev:
        names = ", ".join(name for _, name in fmt.dev_files)
        raise SubnetlabError(f"{folder}: no GLUE {fmt.name} development file ({names})", setting="task_options")
    return folder / "train.tsv", dev


__all__ = ["GLUE", "GlueFormat", "glue_format", "read_glue", "read_glue_hub", "read_glue_tsv", "release_files"]
