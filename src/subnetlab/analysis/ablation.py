"""Ablation tables of listed heads (Bhaskar et al., 2024, Table 3).

Mean-ablates heads of the full model and measures accuracy in-domain and on
every out-of-domain column: with no head ablated, with each listed head ablated
alone, averaged over single ablations of the heads *not* listed ("Avg.
(non-HC)", the baseline that says whether the listed heads matter more than
any head), with the ``joint`` heads ablated together and, as an extra row, all
listed heads together.

The joint row is the paper's: the ``k`` listed heads (3) whose single ablations
lower out-of-domain accuracy most (``rank_columns``). It is *super-additive* on
a column when it lowers accuracy and its drop exceeds the sum of the single
drops **of exactly those heads** (a head outside the joint set, or whose single
ablation raises accuracy and is not in it, does not count); equal drops are
compared with a tolerance of ``TOLERANCE`` so rounding cannot decide.

Control rows repeat each single and joint ablation with other replacement
values (``zero``: the component's output set to 0; ``resample``: its output on
another example of the batch), so a reader sees whether a sign depends on the
mean being the replacement.

The accuracy measurement is a callable (``Evaluator``) so that the table does
not depend on how a task is evaluated; ``task_evaluator`` builds one from a
task with ``subnetlab.methods.evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import ComponentGates, ComponentValues, apply_gates
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


REPLACEMENTS: tuple[str, ...] = ("mean", "zero", "resample")


@dataclass
class AblationRow:
    label: str
    heads: list[str]
    accuracy: dict[str, float]
    kind: str = "single"  # none | average | single | joint | all
    replacement: str = "mean"  # mean | zero | resample (control rows)


@dataclass
class AblationTable:
    """Rows of Table 3, with the verdict on super-additivity per column."""

    columns: list[str]
    rows: list[AblationRow]
    id_columns: list[str] = field(default_factory=list)
    averaged_heads: list[str] = field(default_factory=list)  # heads behind the "Avg. (non-HC)" row
    rank_columns: list[str] = field(default_factory=list)  # the columns whose drops chose the joint heads

    def row(self, label: str) -> AblationRow:
        for r in self.rows:
            if r.label == label:
                return r
        raise KeyError(label)

    @property
    def base(self) -> dict[str, float]:
        return next(r for r in self.rows if r.kind == "none").accuracy

    def of(self, kind: str, replacement: str = "mean") -> list[AblationRow]:
        return [r for r in self.rows if r.kind == kind and r.replacement == replacement]

    @property
    def singles(self) -> list[AblationRow]:
        return self.of("single")

    @property
    def joint(self) -> AblationRow | None:
        rows = self.of("joint") or self.of("all")
        return rows[0] if rows else None

    def super_additivity(self, joint: AblationRow | None = None) -> dict[str, dict[str, float | bool]]:
        """Per column: the joint drop, the sum of the single drops of the same heads (same replacement), and
        whether the joint one is a larger, real drop."""
        joint = joint if joint is not None else self.joint
        if joint is None:
            return {}
        singles = {r.heads[0]: r for r in self.of("single", joint.replacement)}
        missing = [h for h in joint.heads if h not in singles]
        if missing:
            raise SubnetlabError(f"no single ablation of {', '.join(missing)} to compare the joint row with")
        out: dict[str, dict[str, float | bool]] = {}
        for c in self.columns:
            summed = sum(self.base[c] - singles[h].accuracy[c] for h in joint.heads)
            drop = self.base[c] - joint.accuracy[c]
            out[c] = {"joint_drop": drop, "sum_single_drops": summed,
                      "super_additive": drop > TOLERANCE and drop > summed + TOLERANCE}
        return out

    def mean_drop(self, row: AblationRow, columns: Sequence[str]) -> float:
        """Mean accuracy drop of ``row`` over ``columns`` (positive = worse than the full model)."""
        cols = [c for c in columns if c in self.columns]
        return sum(self.base[c] - row.accuracy[c] for c in cols) / len(cols) if cols else float("nan")

    def to_dict(self) -> dict:
        alls = self.of("all")
        return {"columns": self.columns, "id_columns": self.id_columns, "averaged_heads": self.averaged_heads,
                "rank_columns": self.rank_columns,
                "rows": [{"label": r.label, "heads": r.heads, "accuracy": r.accuracy, "kind": r.kind,
                          "replacement": r.replacement} for r in self.rows],
                "super_additivity": self.super_additivity(),
                "super_additivity_all": self.super_additivity(alls[0]) if alls else {}}

    @classmethod
    def from_dict(cls, data: dict) -> "AblationTable":
        """Read back ``to_dict`` (also tables written before rows had kinds: the kinds are inferred, their one
        multi-head row being the joint one)."""
        rows = []
        for r in data["rows"]:
            kind = r.get("kind") or ("none" if r["label"] == NONE_ROW else "average" if r["label"] == AVERAGE_ROW
                                     else "single" if len(r["heads"]) == 1 else "joint")
            rows.append(AblationRow(r["label"], list(r["heads"]), dict(r["accuracy"]), kind, r.get("replacement", "mean")))
        return cls(list(data["columns"]), rows, list(data.get("id_columns", [])), list(data.get("averaged_heads", [])),
                   list(data.get("rank_columns", [])))


def _mean_rows(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {c: sum(r[c] for r in rows) / len(rows) for c in rows[0]}


ReplacementContext = Callable[[ComponentGates], AbstractContextManager]


def top_ood_heads(rows: Sequence[AblationRow], base: dict[str, float], columns: Sequence[str], k: int) -> list[str]:
    """The ``k`` heads whose single ablation lowers the mean accuracy over ``columns`` most (ties: by name)."""
    def drop(r: AblationRow) -> float:
        return sum(base[c] - r.accuracy[c] for c in columns) / len(columns)
    ranked = sorted(rows, key=lambda r: (-drop(r), r.heads[0]))
    return [r.heads[0] for r in ranked[:k]]


def ablation_table(
    model: nn.Module,
    adapter: Adapter,
    heads: Sequence[tuple[int, int]],
    evaluate: Evaluator,
    means: ComponentValues | None,
    *,
    joint: int | Sequence[tuple[int, int]] | None = 3,
    all_jointly: bool = True,
    non_listed: int | str | None = "all",
    seed: int = 0,
    id_columns: Sequence[str] = (),
    rank_columns: Sequence[str] | Callable[[str], bool] | None = None,
    controls: Sequence[str] = (),
    resample: ReplacementContext | None = None,
    on_step: Callable[[str], None] | None = None,
) -> AblationTable:
    """Evaluate the model with no head, each listed head, non-listed heads, the joint heads and all listed heads ablated.

    ``means`` are the replacement values (mean ablation); None zero-ablates.
    ``joint``: an int ``k`` ablates together the ``k`` listed heads with the
    largest single drops on ``rank_columns`` (names, or a test of a column's name; default: every non-ID
    column); a
    list of heads ablates exactly those; None or 0 skips the row.
    ``all_jointly`` adds a row with every listed head ablated (when that differs
    from the joint set). ``non_listed``: ``"all"`` averages single ablations of
    every head not listed (the paper's row), an int ``k`` a random sample of
    ``k`` of them (drawn from ``seed``), None skips the row. ``controls``
    (``zero``, ``resample``) repeat the single and joint rows with those
    replacements; ``resample`` is the context that makes a forward resample
    (``subnetlab.intervene.resample.resampling`` bound to a generator).
    """
    L, H = adapter.num_layers, adapter.num_heads
    listed = list(dict.fromkeys(heads))
    if not listed:
        raise SubnetlabError("an ablation table needs at least one head")
    bad = [c for c in controls if c not in REPLACEMENTS or c == "mean"]
    if bad:
        raise SubnetlabError(f"ablation controls {bad}: expected some of zero, resample", setting="controls")
    if "resample" in controls and resample is None:
        raise SubnetlabError("a resample control needs a resampling context")
    by_name = {head_name(*hd): hd for hd in listed}

    def run(label: str, ablated: Sequence[tuple[int, int]], replacement: str = "mean") -> dict[str, float]:
        if on_step is not None:
            on_step(label)
        if not ablated:
            return evaluate()
        values = means if replacement == "mean" else None
        with apply_gates(model, adapter, heads=head_gates(L, H, ablated), ablation=values) as ctl:
            if replacement == "resample":
                with resample(ctl):  # type: ignore[misc]
                    return evaluate()
            return evaluate()

    rows = [AblationRow(NONE_ROW, [], run(NONE_ROW, []), "none")]
    columns = list(rows[0].accuracy)
    if callable(rank_columns):
        ranking = [c for c in columns if rank_columns(c)]
    else:
        ranking = list(rank_columns) if rank_columns is not None else [c for c in columns if c not in id_columns]
    if not ranking and (rank_columns is None or callable(rank_columns)):
        ranking = columns  # no out-of-domain split (a user's own data has only its held-out rows): rank by those
    unknown = [c for c in ranking if c not in columns]
    if unknown or not ranking:
        raise SubnetlabError(f"rank_columns {ranking}: expected some of {columns}")
    others = [(l, h) for l in range(L) for h in range(H) if (l, h) not in listed]
    if non_listed == "all":
        chosen = others
    elif isinstance(non_listed, int) and not isinstance(non_listed, bool) and non_listed > 0:
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(others), generator=g)[: min(non_listed, len(others))].tolist()
        chosen = sorted(others[i] for i in order)
    elif non_listed in (None, 0):
        chosen = []
    else:
        raise SubnetlabError(f"non_listed must be 'all', a positive number or None, not {non_listed!r}")
    if chosen:
        singles = [run(head_name(*hd), [hd]) for hd in chosen]
        rows.append(AblationRow(AVERAGE_ROW, [head_name(*hd) for hd in chosen], _mean_rows(singles), "average"))
    single_rows = [AblationRow(name, [name], run(name, [hd])) for name, hd in by_name.items()]
    rows.extend(single_rows)
    if isinstance(joint, int) and not isinstance(joint, bool):
        joint_names = top_ood_heads(single_rows, rows[0].accuracy, ranking, joint) if joint > 1 else []
    elif joint is None:
        joint_names = []
    else:
        joint_names = [head_name(*hd) for hd in dict.fromkeys(joint)]
        missing = [n for n in joint_names if n not in by_name]
        if missing:
            raise SubnetlabError(f"joint heads {', '.join(missing)} are not among the listed heads", setting="joint_heads")
    multi: list[tuple[str, list[str]]] = []
    if len(joint_names) > 1:
        multi.append(("joint", joint_names))
    if all_jointly and len(listed) > 1 and set(joint_names) != set(by_name):
        multi.append(("all", list(by_name)))
    for kind, names in multi:
        label = " & ".join(names) if kind == "joint" else f"all {len(names)} listed heads"
        rows.append(AblationRow(label, names, run(label, [by_name[n] for n in names]), kind))
    repeated = [*single_rows, *(x for x in rows if x.kind == "joint")]
    for replacement in controls:
        for r in repeated:
            label = f"{r.label} ({replacement})"
            rows.append(AblationRow(label, r.heads, run(label, [by_name[n] for n in r.heads], replacement), r.kind,
                                    replacement))
    for r in rows:
        if list(r.accuracy) != columns:
            raise SubnetlabError(f"the evaluator returned columns {list(r.accuracy)} for row {r.label}, expected {columns}")
    return AblationTable(columns, rows, [c for c in id_columns if c in columns], [head_name(*hd) for hd in chosen],
                         ranking)
