"""Every training condition, in one table: what it copies and freezes, what it re-initialises.

``CONDITIONS`` are the transfer conditions of Subtask Induction (section 4 and
appendix B), the starting models ``build_transfer_model`` builds, in the order
sweeps run them. ``SHAPE_BIAS_CONDITIONS`` are the conditions of the shape-bias
study (section 5, Table 1): a different set with the paper's own names, since two
of them fine-tune the base model rather than build a transfer model. Its
``subtask-induction``, ``random-matched`` and ``scratch`` start from the transfer
conditions ``subnetwork``, ``random-matched`` and ``scratch``.

    from subnetlab.transfer.conditions import check_conditions

    for c in check_conditions(["subnetwork", "scratch"], has_subnetwork=False):  # refuses: no subnetwork
        print(c.name, c.frozen, c.reinit)

``reinit`` describes the paper's text (``reinit="all"``); with ``reinit="masked"``
(its released code) only the masked matrices are re-initialised, every other
parameter is copied from the trained model and trains. With ``freeze=False``
(appendix B.3) the copied weights train too. ``empty-mask`` is the control for
``reinit="masked"``: the same starting model with nothing transferred from the
masked matrices (under ``reinit="all"`` it is ``scratch``, by construction).
``random-released`` is the random control as the released code draws it (n - k
weights per matrix), beside ``random-matched``, the text's (k).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from subnetlab.errors import SubnetlabError, check_distinct_names


@dataclass(frozen=True)
class Condition:
    """One condition: its name, what is copied from the trained model and frozen, what is re-initialised."""

    name: str
    frozen: str  # what is copied from the trained model and kept frozen
    reinit: str  # what is re-initialised (freshly drawn, then trained)
    needs_subnetwork: bool  # built from a discovered subnetwork (or a control matched to it)
    description: str


def _table(*conditions: Condition) -> dict[str, Condition]:
    return {c.name: c for c in conditions}


CONDITIONS: dict[str, Condition] = _table(
    Condition("subnetwork", "the subnetwork's weights", "every weight outside the subnetwork", True,
              "the discovered subnetwork, frozen in a re-initialised model"),
    Condition("random-matched", "as many weights per matrix as the subnetwork keeps, at random positions",
              "every other weight", True,
              "control: a random subnetwork of the same size per matrix (subnetlab.transfer.random_matched)"),
    Condition("random-released", "all but as many weights per matrix as the subnetwork keeps (n - k), at random "
              "positions", "the k others", True,
              "control as the authors' released code draws it (NeuroSurgeon's _sample_mask_randomly, used by "
              "math/transfer.py): n - k weights per matrix kept, not the k of the paper's text "
              "(subnetlab.transfer.random_released)"),
    Condition("complement-matched", "as many weights per matrix as the subnetwork keeps, all outside it",
              "every other weight", True,
              "control: a random subnetwork disjoint from the discovered one (subnetlab.transfer.complement_matched)"),
    Condition("empty-mask", "no weight of the masked matrices (with reinit 'masked', every other parameter is "
              "copied and trains)", "the masked matrices (with reinit 'all': every weight, as scratch)", True,
              "control: the masked conditions' starting model with an empty mask, i.e. what the copied embeddings, "
              "norms, biases and head carry alone"),
    Condition("scratch", "nothing", "every weight", False, "a freshly initialised model"),
    Condition("full", "nothing (every trained weight is copied in and trains)", "nothing", False,
              "the whole trained model, fine-tuned"),
    Condition("embeddings", "the token and position embeddings", "every other weight", False,
              "a fresh model with only the trained embeddings copied in"),
)

# the conditions built from a subnetwork, in table order
MASKED_CONDITIONS: tuple[str, ...] = tuple(name for name, c in CONDITIONS.items() if c.needs_subnetwork)

# what ``reinit`` may say: "all" (the paper's text) or "masked" (its released code)
REINIT: tuple[str, ...] = ("all", "masked")

SHAPE_BIAS_CONDITIONS: dict[str, Condition] = _table(
    Condition("subtask-induction", "the subnetwork's weights", "every weight outside the subnetwork", True,
              "the subnetwork found on mean-pooled images, frozen in a re-initialised model trained on original images"),
    Condition("random-matched", "as many weights per matrix as the subnetwork keeps, at random positions",
              "every other weight", True,
              "control: a random subnetwork of the same size per matrix (section 4's control; not in Table 1)"),
    Condition("scratch", "nothing", "every weight", False, "a fresh model trained on original images"),
    Condition("data-mixture", "nothing (the base model is copied in and trains)", "nothing", False,
              "the base model fine-tuned on original plus mean-pooled images"),
    Condition("linear-ft", "every weight but the classifier's", "nothing", False,
              "the base model with only its classifier trained"),
)


def check_conditions(
    names: Iterable[str],
    *,
    has_subnetwork: bool | None = None,
    table: Mapping[str, Condition] = CONDITIONS,
    setting: str = "condition",
) -> list[Condition]:
    """The conditions called ``names``, in the given order; refuses unknown names and an empty list.

    ``has_subnetwork=False`` also refuses every condition that needs a subnetwork.
    ``table`` is ``CONDITIONS`` or ``SHAPE_BIAS_CONDITIONS``; ``setting`` names the
    setting that holds the names, for the error.
    """
    names = list(names)
    known = ", ".join(table)
    if not names:
        raise SubnetlabError(f"{setting}: no condition given; choose from {known}", setting=setting)
    check_distinct_names(setting, names)  # '' or a condition twice: refused, not run twice
    for name in names:
        if name not in table:
            raise SubnetlabError(f"{setting} {name!r}: unknown condition; choose from {known}", setting=setting)
    chosen = [table[name] for name in names]
    if has_subnetwork is False:
        for condition in chosen:
            if condition.needs_subnetwork:
                raise SubnetlabError(f"condition {condition.name!r} needs a subnetwork, and none was given",
                                     setting="subnetwork")
    return chosen


def get_condition(name: str, *, has_subnetwork: bool | None = None) -> Condition:
    """The transfer condition called ``name`` (see ``check_conditions``)."""
    return check_conditions([name], has_subnetwork=has_subnetwork)[0]


def check_reinit(reinit: str) -> str:
    """``reinit`` if it is ``"all"`` or ``"masked"``."""
    if reinit not in REINIT:
        raise SubnetlabError(f"reinit {reinit!r}: choose 'all' (the paper's text) or 'masked' (its released code)",
                             setting="reinit")
    return reinit


__all__ = [
    "CONDITIONS", "Condition", "MASKED_CONDITIONS", "REINIT", "SHAPE_BIAS_CONDITIONS", "check_conditions",
    "check_reinit", "get_condition",
]
