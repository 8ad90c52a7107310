"""Ablation tables of listed heads (Bhaskar et al., 2024, Table 3).

Mean-ablates heads of the full model and measures accuracy in-domain and on
every out-of-domain column: with no head ablated, with each listed head ablated
alone, averaged over single ablations of the heads *not* listed ("Avg.
(non-HC)", the baseline that says whether the listed heads matter more than
any head), and with the listed heads ablated jointly. The joint ablation is
*super-additive* on a column when it lowers accuracy and its drop exceeds the
sum of the single drops (a joint ablation that raises accuracy is not; equal
drops are compared with a tolerance of ``TOLERANCE`` so rounding cannot decide).

The accuracy measurement is a callable (``Evaluator``) so that the table does
not depend on how a task is evaluated; ``task_evaluator`` builds one from a
task with ``subnetlab.methods.evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import ComponentValues, apply_gates
from subnetlab.models.adapters import Adapter, head_name
from subnetlab.subnetwork import component_index

Evaluator = Callable[[], dict[str, float]]  # accuracy per column of the model as it is now (gated or not)

NONE_ROW = "None"
AVERAGE_ROW = "Avg. (non-HC)"
TOLERANCE = 1e-9  # accuracy differences below this are rounding, not effects


def parse_heads(names: Sequence[str], num_layers: int, num_heads: int) -> list[tuple[int, int]]:
    """``["L4.H0", "L2.H5"]`` -> ``[(4, 0), (2, 5)]``; unknown names and MLPs are refused."""
    index = component_index(num_layers, num_heads)
    heads: list[tuple[int, int]] = []
    for raw in names:
        name = raw.strip()
        if name not in index or index[name][1] is None:
            raise SubnetlabError(f"heads: {name!r} is not a head of this model (expected e.g. L4.H0 with "
                                 f"layers 0-{num_layers - 1}, heads 0-{num_heads - 1})", setting="heads")
        if index[name] not in heads:
            heads.append(index[name])  # type: ignore[arg-type]
    if not heads:
        raise SubnetlabError("heads: no head given", setting="heads")
    return heads


def head_gates(num_layers: int, num_heads: int, ablated: Sequence[tuple[int, int]]) -> Tensor:
    """``[layers, heads]`` gates: 0 for the ablated heads, 1 elsewhere."""
    gates = torch.ones(num_layers, num_heads)
    for layer, head in ablated:
        gates[layer, head] = 0.0
    return gates


@dataclass
class AblationRow:
    label: str
    heads: list[str]
    accuracy: dict[str, float]


@dataclass
class AblationTable:
    """Rows of Table 3, with the verdict on super-additivity per column."""

    columns: list[str]
    rows: list[AblationRow]
    id_columns: list[str] = field(default_factory=list)
    averaged_heads: list[str] = field(default_factory=list)  # heads behind the "Avg. (non-HC)" row

    def row(self, label: str) -> AblationRow:
        for r in self.rows:
            if r.label == label:
                return r
        raise KeyError(label)

    @property
    def base(self) -> dict[str, float]:
        return self.row(NONE_ROW).accuracy

    @property
    def singles(self) -> list[AblationRow]:
        return [r for r in self.rows if len(r.heads) == 1 and r.label not in (NONE_ROW, AVERAGE_ROW)]

    @property
    def joint(self) -> AblationRow | None:
        multi = [r for r in self.rows if len(r.heads) > 1 and r.label != AVERAGE_ROW]
        return multi[0] if multi else None

    def super_additivity(self) -> dict[str, dict[str, float | bool]]:
        """Per column: the joint drop, the sum of single drops, and whether the joint one is a larger, real drop."""
        joint = self.joint
        if joint is None:
            return {}
        out: dict[str, dict[str, float | bool]] = {}
        for c in self.columns:
            singles = sum(self.base[c] - r.accuracy[c] for r in self.singles)
            drop = self.base[c] - joint.accuracy[c]
            out[c] = {"joint_drop": drop, "sum_single_drops": singles,
                      "super_additive": drop > TOLERANCE and drop > singles + TOLERANCE}
        return out

    def mean_drop(self, row: AblationRow, columns: Sequence[str]) -> float:
        """Mean accuracy drop of ``row`` over ``columns`` (positive = worse than the full model)."""
        cols = [c for c in columns if c in self.columns]
        return sum(self.base[c] - row.accuracy[c] for c in cols) / len(cols) if cols else float("nan")

    def to_dict(self) -> dict:
        return {"columns": self.columns, "id_columns": self.id_columns, "averaged_heads": self.averaged_heads,
                "rows": [{"label": r.label, "heads": r.heads, "accuracy": r.accuracy} for r in self.rows],
                "super_additivity": self.super_additivity()}


def _mean_rows(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {c: sum(r[c] for r in rows) / len(rows) for c in rows[0]}


def ablation_table(
    model: nn.Module,
    adapter: Adapter,
    heads: Sequence[tuple[int, int]],
    evaluate: Evaluator,
    means: ComponentValues | None,
    *,
    joint: bool = True,
    non_listed: int | str | None = "all",
    seed: int = 0,
    id_columns: Sequence[str] = (),
    on_step: Callable[[str], None] | None = None,
) -> AblationTable:
    """Evaluate the model with no head, each listed head, non-listed heads, and all listed heads ablated.

    ``means`` are the replacement values (mean ablation); None zero-ablates.
    ``non_listed``: ``"all"`` averages single ablations of every head not listed
    (the paper's row), an int ``k`` a random sample of ``k`` of them (drawn from
    ``seed``; cheaper on a CPU), None skips the row.
    """
    L, H = adapter.num_layers, adapter.num_heads
    listed = list(dict.fromkeys(heads))
    if not listed:
        raise SubnetlabError("an ablation table needs at least one head")

    def run(label: str, ablated: Sequence[tuple[int, int]]) -> dict[str, float]:
        if on_step is not None:
            on_step(label)
        if not ablated:
            return evaluate()
        with apply_gates(model, adapter, heads=head_gates(L, H, ablated), ablation=means):
            return evaluate()

    rows = [AblationRow(NONE_ROW, [], run(NONE_ROW, []))]
    columns = list(rows[0].accuracy)
    others = [(l, h) for l in range(L) for h in range(H) if (l, h) not in listed]
    if non_listed == "all":
        chosen = others
    elif isinstance(non_listed, int) and non_listed > 0:
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(others), generator=g)[: min(non_listed, len(others))].tolist()
        chosen = sorted(others[i] for i in order)
    elif non_listed in (None, 0):
        chosen = []
    else:
        raise SubnetlabError(f"non_listed must be 'all', a positive number or None, not {non_listed!r}")
    if chosen:
        singles = [run(head_name(*hd), [hd]) for hd in chosen]
        rows.append(AblationRow(AVERAGE_ROW, [head_name(*hd) for hd in chosen], _mean_rows(singles)))
    for hd in listed:
        rows.append(AblationRow(head_name(*hd), [head_name(*hd)], run(head_name(*hd), [hd])))
    if joint and len(listed) > 1:
        label = " & ".join(head_name(*hd) for hd in listed)
        rows.append(AblationRow(label, [head_name(*hd) for hd in listed], run(label, listed)))
    for r in rows:
        if list(r.accuracy) != columns:
            raise SubnetlabError(f"the evaluator returned columns {list(r.accuracy)} for row {r.label}, expected {columns}")
    return AblationTable(columns, rows, [c for c in id_columns if c in columns], [head_name(*hd) for hd in chosen])
