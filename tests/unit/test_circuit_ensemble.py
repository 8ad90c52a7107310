"""Ensembles: averaged scores against a hand computation, and ``circuit --warm-start`` (EAP-IG -> Edge Pruning in
one command) bit for bit equal to the two commands it replaces."""

from __future__ import annotations

import json

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.io import load_tensors
from subnetlab.methods.attribution.ensemble import average_scores
from tests.unit.test_circuit_eval_cli import TASK, _run, tiny  # noqa: F401 (the fixture)


def test_averaged_scores_equal_a_hand_computation():
    eap = torch.tensor([2.0, -4.0, 1.0, 0.0])  # max |score| 4
    pruning = torch.tensor([0.5, 0.25, -1.0, 1.0])  # max |score| 1
    # by hand: eap / 4 = [0.5, -1, 0.25, 0]; mean with pruning = [0.5, -0.375, -0.375, 0.5]
    assert torch.equal(average_scores([eap, pruning]), torch.tensor([0.5, -0.375, -0.375, 0.5]))
    # raw mean, as the shared task's parallel ensemble of EAP variants (one scale): [1.25, -1.875, 0, 0.5]
    assert torch.equal(average_scores([eap, pruning], normalisation="none"), torch.tensor([1.25, -1.875, 0.0, 0.5]))
    # weights 3:1 -> 0.75 * eap/4 + 0.25 * pruning = [0.5, -0.6875, -0.0625, 0.25]
    assert torch.equal(average_scores([eap, pruning], weights=[3, 1]), torch.tensor([0.5, -0.6875, -0.0625, 0.25]))
    assert torch.equal(average_scores([torch.zeros(4), pruning]), pruning / 2)  # all-zero scores stay zero
    with pytest.raises(SubnetlabError, match="same number of edges"):
        average_scores([eap, torch.ones(3)])
    with pytest.raises(SubnetlabError, match="normalisation"):
        average_scores([eap, pruning], normalisation="rank-ish")
    with pytest.raises(SubnetlabError, match="at least one"):
        average_scores([])
    with pytest.raises(SubnetlabError, match="weights"):
        average_scores([eap, pruning], weights=[1, -1])


def test_warm_start_in_one_command_equals_the_two_commands(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    root = tiny[0]
    sweep = ["--method", "edge-pruning", "--sparsity", "0.9", "--seeds", "0", "--preset", "demo", "--set",
             "total_steps=4", "--set", "warmup_steps=2", "--set", "batch_size=2", "--device", "cpu"]
    _run(["circuit", "--model", str(root / "model"), *TASK, "--method", "eap-ig", "--out", str(tmp_path / "ig"),
          "--device", "cpu"], capsys)
    two = tmp_path / "two"
    _run(["circuit", "--model", str(root / "model"), *TASK, *sweep, "--init-from",
          str(tmp_path / "ig" / "scores.safetensors"), "--out", str(two)], capsys)
    one = tmp_path / "one"
    _run(["circuit", "--model", str(root / "model"), *TASK, *sweep, "--warm-start", "eap-ig", "--out", str(one)],
         capsys)
    assert torch.equal(load_tensors(one / "warm-start" / "scores.safetensors")["edges"],
                       load_tensors(tmp_path / "ig" / "scores.safetensors")["edges"])
    run = "sparsity-0.900/seed-0"
    assert (one / run / "graph.json").read_bytes() == (two / run / "graph.json").read_bytes()
    assert torch.equal(load_tensors(one / run / "subnetwork.safetensors")["edges"],
                       load_tensors(two / run / "subnetwork.safetensors")["edges"])
    metrics = [json.loads((d / run / "metrics.json").read_text()) for d in (one, two)]
    assert metrics[0]["eval"] == metrics[1]["eval"] and metrics[0]["faithfulness"] == metrics[1]["faithfulness"]
