"""`subnetlab reproduce circuits --preset demo` end to end: the trained model forms the known mechanism.

Independent checks of one another: the attention scores (a layer-0 previous-token head, layer-1 induction heads)
and the edge intervention (cutting the previous-token head's edges into the induction heads' keys removes most of
the task, cutting its edges into their queries or values does not); Edge Pruning's sparsest faithful circuit
keeps one of those key edges.
"""

from __future__ import annotations

import pytest

from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.io import read_json

pytestmark = pytest.mark.integration


def test_circuits_demo_finds_the_induction_mechanism(tmp_path):
    module = get_reproduction("circuits")
    # the search controls are checked at a toy size in tests/unit/test_circuits_study.py
    s = settings_for(module, "demo", {"node_pruning": "null", "ioi": "null", "search_controls": "null"})
    module.run(s, tmp_path)
    training = read_json(tmp_path / "training.json")
    assert training["curve"][-1]["repeat_accuracy"] > 0.9
    assert training["curve"][0]["repeat_accuracy"] < 0.1
    scores = read_json(tmp_path / "head_scores.json")
    assert scores["previous_token_head"]["layer"] == 0 and scores["previous_token_head"]["score"] > 0.8
    assert scores["induction_heads"] and max(h["score"] for h in scores["induction_heads"]) > 0.8
    m = read_json(tmp_path / "mechanism.json")
    full, empty = m["full"]["logit_diff"], m["corrupted"]["logit_diff"]
    assert full - empty > 5.0

    def kept(name: str) -> float:  # the share of the full-minus-corrupted logit difference left
        return (m["cut"][name]["logit_diff"] - empty) / (full - empty)

    n = len(m["key_edges"])
    assert kept(f"all {n} k edges") < 0.5
    assert kept(f"all {n} q edges") > 0.9 and kept(f"all {n} v edges") > 0.9
    runs = read_json(tmp_path / "curves.json")["key_edges_kept"]
    faithful = [r for r in runs if r["faithfulness"]["logit_diff"] >= 0.5]
    assert faithful and any(max(faithful, key=lambda r: r["sparsity"])["key_edges"].values())
