"""The one table of training conditions, and every check that reads it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.shape_bias import steps as shape_bias_steps
from subnetlab.experiments.subtask_induction import reproduce as subtask_induction
from subnetlab.subnetwork import Subnetwork
from subnetlab.transfer import (
    CONDITIONS,
    MASKED_CONDITIONS,
    REINIT,
    SHAPE_BIAS_CONDITIONS,
    Condition,
    build_transfer_model,
    check_conditions,
    check_reinit,
    get_condition,
)
from subnetlab.transfer import build as transfer_build
from tests.conftest import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

TRANSFER = ["subnetwork", "random-matched", "random-released", "complement-matched", "empty-mask", "scratch", "full",
            "embeddings"]
SHAPE_BIAS = ["subtask-induction", "random-matched", "scratch", "data-mixture", "linear-ft"]


@pytest.fixture(scope="module")
def trained():
    return tiny_model("gpt2", seed=7)


def test_the_table_keeps_names_and_order_and_everything_derives_from_it() -> None:
    assert list(CONDITIONS) == TRANSFER and list(SHAPE_BIAS_CONDITIONS) == SHAPE_BIAS
    assert MASKED_CONDITIONS == ("subnetwork", "random-matched", "random-released", "complement-matched", "empty-mask")
    assert MASKED_CONDITIONS == tuple(n for n, c in CONDITIONS.items() if c.needs_subnetwork)
    assert REINIT == ("all", "masked")
    assert transfer_build.CONDITIONS is CONDITIONS and transfer_build.MASKED_CONDITIONS is MASKED_CONDITIONS
    # the reproduction's figure: every transfer condition but "embeddings" (empty-mask is that control), in order
    assert subtask_induction.FIGURE_CONDITIONS == [n for n in TRANSFER if n != "embeddings"]
    assert isinstance(subtask_induction.FIGURE_CONDITIONS, list)
    for preset in subtask_induction.PRESETS.values():
        check_conditions(preset["conditions"])
        check_conditions(preset["secondary_conditions"])
        assert preset["reinit"] == "masked"  # the released code's reinit leads
    assert subtask_induction.PRESETS["paper"]["secondary_reinit"] == "all"  # the text's, as a second table
    assert subtask_induction.PRESETS["demo"]["secondary_reinit"] is None  # one setting away in the demo
    assert set(subtask_induction.DEMO_CONDITIONS) <= set(subtask_induction.FIGURE_CONDITIONS)
    assert shape_bias_steps.CONDITIONS == tuple(SHAPE_BIAS)
    for table in (CONDITIONS, SHAPE_BIAS_CONDITIONS):
        for name, condition in table.items():
            assert isinstance(condition, Condition) and condition.name == name
            assert condition.frozen and condition.reinit and condition.description
    with pytest.raises(dataclasses.FrozenInstanceError):
        CONDITIONS["scratch"].needs_subnetwork = True  # type: ignore[misc]


def test_check_conditions_returns_them_in_the_order_given() -> None:
    assert [c.name for c in check_conditions(["scratch", "subnetwork"])] == ["scratch", "subnetwork"]
    assert get_condition("full") is CONDITIONS["full"]
    assert [c.name for c in check_conditions(SHAPE_BIAS, table=SHAPE_BIAS_CONDITIONS)] == SHAPE_BIAS
    assert check_conditions(MASKED_CONDITIONS, has_subnetwork=True) == [CONDITIONS[n] for n in MASKED_CONDITIONS]
    assert check_reinit("masked") == "masked"


@pytest.mark.parametrize("table", [CONDITIONS, SHAPE_BIAS_CONDITIONS], ids=["transfer", "shape-bias"])
def test_unknown_names_list_the_known_ones_in_library_terms(table) -> None:
    with pytest.raises(SubnetlabError) as bad:
        check_conditions(["scratch", "lottery"], table=table, setting="conditions")
    message = str(bad.value)
    assert message.startswith("conditions 'lottery': unknown condition") and bad.value.setting == "conditions"
    assert message.endswith("choose from " + ", ".join(table)) and "--" not in message
    with pytest.raises(SubnetlabError, match="no condition given") as empty:
        check_conditions([], table=table)
    assert empty.value.setting == "condition" and ", ".join(table) in str(empty.value)
    # a study's names are not transfer conditions, and the other way round
    other = "subnetwork" if table is SHAPE_BIAS_CONDITIONS else "linear-ft"
    with pytest.raises(SubnetlabError, match=f"'{other}': unknown condition"):
        check_conditions([other], table=table)
    with pytest.raises(SubnetlabError, match=r"reinit 'some': choose 'all' .* or 'masked'") as reinit:
        check_reinit("some")
    assert reinit.value.setting == "reinit"


@pytest.mark.parametrize("name", TRANSFER)
def test_every_condition_that_needs_a_subnetwork_is_refused_without_one(trained, name) -> None:
    condition = CONDITIONS[name]
    if not condition.needs_subnetwork:
        assert check_conditions([name], has_subnetwork=False) == [condition]
        tm = build_transfer_model(trained.model, name, seed=0)  # builds without one
        assert tm.condition == name
        return
    with pytest.raises(SubnetlabError, match=f"condition '{name}' needs a subnetwork") as refused:
        check_conditions(["scratch", name], has_subnetwork=False)
    assert refused.value.setting == "subnetwork"
    with pytest.raises(SubnetlabError, match=f"condition '{name}' needs a subnetwork"):
        build_transfer_model(trained.model, name, seed=0)


def test_the_masked_conditions_build_from_a_subnetwork(trained) -> None:
    adapter = trained.adapter
    g = torch.Generator().manual_seed(0)
    masks = {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.1 for n in adapter.weight_matrices()}
    sub = Subnetwork.from_weight_masks(adapter, masks, method="continuous-sparsification")
    k = sum(int(m.sum()) for m in masks.values())
    n = sum(m.numel() for m in masks.values())
    expected = {"random-released": n - k, "empty-mask": 0}  # the released control keeps n - k; the empty mask none
    for name in MASKED_CONDITIONS:
        tm = build_transfer_model(trained.model, name, seed=0, subnetwork=sub)
        assert tm.condition == name and tm.transferred == expected.get(name, k)
        assert (tm.handle is None) == (name == "empty-mask")
        if tm.handle is not None:
            tm.handle.remove()
