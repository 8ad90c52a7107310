"""Evaluation data of the Heuristic Core reproduction: which OOD subcases, and files holding just those.

The paper studies the four HANS subcases on which its model partially
generalizes. The reproduction does the same for whatever model it trains:
``choose_subcases`` takes the paper's four, a given list, or a rule over the
fine-tuned model's per-subcase accuracies:

* ``auto`` (= ``balanced``): the heuristic-resistant (non-entailment) subcases
  ranked by *balanced* accuracy, the mean of the subcase's accuracy and of the
  model's accuracy on the same heuristic's entailment subcases, among heuristics
  whose entailment subcases the model gets right at least ``entailment_floor``
  of the time. A model that answers "non-entailment" to every overlapping pair
  scores 100% on a non-entailment subcase without having learned anything about
  it; ranked by that accuracy alone, such subcases would be chosen first, and
  any ablation that weakens the overlap -> entailment feature would "raise OOD
  accuracy". The balanced rule does not choose them.
* ``best-non-entailment``: the non-entailment subcases with the
  highest plain accuracy (kept by name, for comparison).

``write_hans_tsv`` then writes the chosen subcases' pairs in the HANS TSV
format, so every pruning run and every checkpoint's evaluation (run by other
modules from a JSON config) scores exactly those, and nothing else.
``entailment_subcases`` names the matching heuristic-consistent subcases, which
the ablation table reports beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from subnetlab.analysis.scores import PAPER_SUBCASES
from subnetlab.errors import SubnetlabError
from subnetlab.io import write_text
from subnetlab.tasks.base import NLI2, Example
from subnetlab.tasks.nli.hans_generator import SUBCASES as HANS_SUBCASES

HANS_HEADER = ("gold_label", "sentence1", "sentence2", "pairID", "heuristic", "subcase", "template")


def non_entailment_subcases() -> list[str]:
    """The 15 HANS subcases whose label is non-entailment (where the heuristics fail)."""
    return [name for name, (_, label, _) in HANS_SUBCASES.items() if NLI2[label] == "non-entailment"]


RULES = ("paper", "auto", "balanced", "best-non-entailment")


def entailment_subcases(heuristic: str) -> list[str]:
    """The HANS subcases of ``heuristic`` whose label is entailment (where the heuristic gives the right answer)."""
    return [name for name, (h, label, _) in HANS_SUBCASES.items() if h == heuristic and NLI2[label] == "entailment"]


def heuristic_of(subcase: str) -> str:
    return HANS_SUBCASES[subcase][0]


def balanced_accuracies(final_scores: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Per non-entailment subcase in ``final_scores``: its accuracy, its heuristic's entailment accuracy, their mean."""
    out: dict[str, dict[str, float]] = {}
    for sub in non_entailment_subcases():
        if sub not in final_scores:
            continue
        entailed = [float(final_scores[e]) for e in entailment_subcases(heuristic_of(sub)) if e in final_scores]
        if not entailed:
            continue
        ent = sum(entailed) / len(entailed)
        out[sub] = {"non_entailment": float(final_scores[sub]), "entailment": ent,
                    "balanced": 0.5 * (float(final_scores[sub]) + ent)}
    return out


def choose_subcases(spec: str | Sequence[str], final_scores: Mapping[str, float] | None, count: int = 4,
                    entailment_floor: float = 0.5) -> list[str]:
    """``paper`` -> the paper's four; a list -> itself; ``auto``/``balanced`` -> the ``count`` non-entailment
    subcases with the highest balanced accuracy whose heuristic's entailment accuracy is at least
    ``entailment_floor`` (ties broken by name); ``best-non-entailment`` -> the ``count`` with the highest plain accuracy.

    When no heuristic reaches the floor, the balanced ranking is used without it (the report shows both columns)."""
    if isinstance(spec, str) and spec == "paper":
        return list(PAPER_SUBCASES)
    if isinstance(spec, str) and spec in ("auto", "balanced", "best-non-entailment"):
        if not final_scores:
            raise SubnetlabError(f"ood_subcases={spec} needs the fine-tuned model's per-subcase accuracies")
        if spec == "best-non-entailment":
            ranked = sorted((s for s in non_entailment_subcases() if s in final_scores),
                            key=lambda s: (-float(final_scores[s]), s))
        else:
            scores = balanced_accuracies(final_scores)
            if not scores:
                raise SubnetlabError(f"ood_subcases={spec}: the OOD evaluation has no non-entailment HANS subcase "
                                     "together with an entailment subcase of the same heuristic")
            passing = [s for s in scores if scores[s]["entailment"] >= entailment_floor]
            ranked = sorted(passing or scores, key=lambda s: (-scores[s]["balanced"], s))
        if not ranked:
            raise SubnetlabError(f"ood_subcases={spec}: the OOD evaluation has no non-entailment HANS subcase")
        return ranked[:count]
    names = [spec] if isinstance(spec, str) else list(spec)
    unknown = [s for s in names if s not in HANS_SUBCASES]
    if unknown:
        raise SubnetlabError(f"ood_subcases: unknown HANS subcase(s) {', '.join(unknown)}")
    return names


def select(examples: Sequence[Example], subcases: Sequence[str], per_subcase: int | None) -> list[Example]:
    """The first ``per_subcase`` examples of each chosen subcase, in the chosen order."""
    out: list[Example] = []
    for sub in subcases:
        rows = [ex for ex in examples if ex.subcase == sub]
        if not rows:
            raise SubnetlabError(f"no example of subcase {sub!r} to evaluate on")
        out.extend(rows if per_subcase is None else rows[:per_subcase])
    return out


def _clean(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())


def write_hans_tsv(path: str | Path, examples: Sequence[Example]) -> Path:
    """Write 2-way HANS-style examples as a HANS TSV (read back by ``subnetlab.tasks.load_hans``)."""
    lines = ["\t".join(HANS_HEADER)]
    for i, ex in enumerate(examples):
        if ex.subcase is None or ex.heuristic is None:
            raise SubnetlabError(f"example {i} has no HANS subcase / heuristic")
        lines.append("\t".join([NLI2[ex.label], _clean(ex.text_a), _clean(ex.text_b or ""), f"ex{i}",
                                ex.heuristic, ex.subcase, "subnetlab"]))
    write_text(path, "\n".join(lines) + "\n")
    return Path(path)


def write_pairs_jsonl(path: str | Path, examples: Sequence[Example]) -> Path:
    """Write labelled sentence pairs (paraphrase format) as JSONL, read back by ``load_paraphrase``."""
    import json

    lines = [json.dumps({"sentence1": ex.text_a, "sentence2": ex.text_b, "label": ex.label}) for ex in examples]
    write_text(path, "\n".join(lines) + "\n")
    return Path(path)


def interleave(examples: Sequence[Example], keep: Callable[[Example], bool], count: int) -> list[Example]:
    """Up to ``count`` examples passing ``keep``, taken round-robin over their subcases (a varied sample)."""
    by: dict[str | None, list[Example]] = {}
    for ex in examples:
        if keep(ex):
            by.setdefault(ex.subcase, []).append(ex)
    out: list[Example] = []
    depth = 0
    while len(out) < count and any(depth < len(v) for v in by.values()):
        out.extend(v[depth] for v in by.values() if depth < len(v))
        depth += 1
    return out[:count]


def synthetic_ood_examples(task_options: Mapping[str, Any], per_subcase: int) -> list[Example]:
    """HANS-style pairs in the held-out vocabulary of the synthetic corpus (``per_subcase`` of each subcase)."""
    from subnetlab.tasks.registry import get_task

    options = {k: v for k, v in task_options.items() if k in ("seed", "eval_vocab_fraction")}
    task = get_task("hans-synthetic", n_per_subcase=1, eval_per_subcase=per_subcase, **options)
    return task.eval_splits["hans-synthetic"]
