"""m-pruning: exactly the smallest weights go, 10% of the remaining per step, stop before the threshold."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.methods.lottery.magnitude import magnitude_prune, remaining_schedule, smallest_k
from subnetlab.subnetwork import Subnetwork
from tests.conftest import tiny_model
from tests.unit.lottery_helpers import one_thread  # noqa: F401  (autouse fixture)


def test_smallest_k_breaks_ties_by_index():
    scores = torch.tensor([3.0, 1.0, 2.0, 1.0, 1.0, 0.5])
    assert smallest_k(scores, 3).tolist() == [False, True, False, True, False, True]
    assert smallest_k(scores, 0).sum() == 0 and smallest_k(scores, 6).all()
    with pytest.raises(SubnetlabError):
        smallest_k(scores, 7)


def test_schedule_removes_ten_percent_of_the_remaining():
    remaining = remaining_schedule(12345, 0.1, 10)
    previous = 12345
    for r in remaining:
        assert previous - r == round(0.1 * previous)
        previous = r
    assert len(remaining) == 10


def _effective_density(adapter, names) -> float:
    """The measured fraction of non-zero weights the model computes with (masks applied or not)."""
    nonzero = total = 0
    for name in names:
        module_name, _, attr = name.rpartition(".")
        w = getattr(adapter.model.get_submodule(module_name), attr)
        nonzero += int((w != 0).sum())
        total += w.numel()
    return nonzero / total


def test_magnitude_prune_removes_exactly_the_smallest_and_stops_before_threshold(tmp_path):
    m = tiny_model("bert")
    a = m.adapter
    names = a.weight_matrices()
    calls = []

    def evaluate() -> float:
        calls.append(_effective_density(a, names))
        return calls[-1]

    result = magnitude_prune(a, evaluate, threshold=0.7, seed=0)
    # density after steps 1..4: 0.9, 0.81, 0.729, 0.656 -> step 4 falls below 0.7 and is rejected
    assert [s.accepted for s in result.history] == [True, True, True, False]
    assert calls[0] == 1.0 and len(calls) == 5
    sub = result.subnetwork
    total = sum(a.parameter(n).numel() for n in names)
    expected_kept = remaining_schedule(total, 0.1, 3)[-1]
    assert [s.removed for s in result.history] == [total - r for r in remaining_schedule(total, 0.1, 4)]
    # the evaluated models really computed with those masks: density measured inside evaluate()
    assert calls[1:] == pytest.approx([1 - s.removed / total for s in result.history])
    assert sub.count() == expected_kept
    # independent check: a stable sort of all magnitudes; the removed ones are exactly its head
    flat = np.concatenate([a.parameter(n).detach().abs().flatten().numpy() for n in names])
    order = np.argsort(flat, kind="stable")
    removed = np.zeros(total, dtype=bool)
    removed[order[: total - expected_kept]] = True
    got = np.concatenate([(sub.weights[n] == 0).flatten().numpy() for n in names])
    assert np.array_equal(got, removed)
    # no embedding / classifier weights are masked; the model is left unmasked
    assert set(sub.weights) == set(names)
    assert _effective_density(a, names) == 1.0
    sub.save(tmp_path / "m.safetensors")
    loaded = Subnetwork.load(tmp_path / "m.safetensors", adapter=a)
    assert loaded.kind == "weights" and loaded.method == "magnitude"


def test_magnitude_prune_all_ten_steps_when_metric_holds():
    m = tiny_model("bert")
    result = magnitude_prune(m.adapter, lambda: 1.0)
    assert len(result.history) == 10 and all(s.accepted for s in result.history)
    assert result.subnetwork.sparsity == pytest.approx(1 - 0.9 ** 10, abs=1e-3)
