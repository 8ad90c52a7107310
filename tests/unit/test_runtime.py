"""runtime (device, threads) and optim (schedule, optimiser groups) against closed forms and monkeypatched hardware."""

from __future__ import annotations

import math

import pytest
import torch

from subnetlab import optim, runtime
from subnetlab.errors import SubnetlabError


def _hardware(monkeypatch, cuda: int = 0, mps: bool = False) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
    monkeypatch.setattr(runtime, "_mps_available", lambda: mps)


def test_auto_picks_cuda_then_mps_then_the_cpu(monkeypatch):
    _hardware(monkeypatch, cuda=2, mps=True)
    assert runtime.resolve_device("auto") == torch.device("cuda") and runtime.resolve_device(None) == torch.device("cuda")
    assert runtime.resolve_device("cuda:1") == torch.device("cuda:1")
    _hardware(monkeypatch, cuda=0, mps=True)
    assert runtime.resolve_device("auto") == torch.device("mps")
    _hardware(monkeypatch, cuda=0, mps=False)
    assert runtime.resolve_device("auto") == torch.device("cpu") and runtime.resolve_device("CPU") == torch.device("cpu")


@pytest.mark.parametrize("name, message", [("cuda", "no CUDA device here"), ("cuda:3", "2 CUDA device"),
                                           ("mps", "no Apple GPU"), ("gpu", "expected auto, cpu"), ("cuda:x", "expected")])
def test_a_device_this_machine_lacks_is_refused(monkeypatch, name, message):
    _hardware(monkeypatch, cuda=2 if name == "cuda:3" else 0)
    with pytest.raises(SubnetlabError, match=message) as refused:
        runtime.resolve_device(name)
    assert refused.value.setting == "device"


def test_torch_threads_restores_the_callers_count():
    before = torch.get_num_threads()
    with runtime.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with runtime.torch_threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_lr_factor_closed_forms():
    assert [optim.lr_factor(s, total=6, warmup=2) for s in range(7)] == [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0]
    assert [optim.lr_factor(s, total=10, warmup=2, warmup_from_one=True, decay="constant") for s in (0, 1, 5)] == [0.5, 1.0, 1.0]
    for s in (2, 6, 10):
        expected = 0.5 * (1 + math.cos(math.pi * (s - 2) / 8))
        assert optim.lr_factor(s, total=10, warmup=2, decay="cosine") == pytest.approx(expected, abs=1e-7)
    with pytest.raises(SubnetlabError, match="learning-rate decay 'step'"):
        optim.lr_factor(0, total=3, decay="step")


def test_no_decay_1d_groups_matrices_apart_from_biases_and_norms():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    model[1].weight.requires_grad_(False)
    opt = optim.make_optimizer(model, "adamw", lr=0.1, weight_decay=0.01, no_decay_1d=True)
    decayed, plain = opt.param_groups
    assert [p.shape for p in decayed["params"]] == [torch.Size([4, 3])] and decayed["weight_decay"] == 0.01
    assert [p.shape for p in plain["params"]] == [torch.Size([4]), torch.Size([4])] and plain["weight_decay"] == 0.0
