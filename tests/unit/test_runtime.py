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


def test_fused_adamw_is_the_same_update_and_only_for_float32_cpu_or_cuda_tensors():
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(5, 7, generator=g), torch.randn(11, generator=g)]
    grads = [[torch.randn(t.shape, generator=g) for t in start] for _ in range(4)]
    results = []
    for fused in (False, True):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = optim.make_optimizer(params, "adamw", lr=0.1, weight_decay=0.01, fused=fused)
        assert bool(opt.defaults.get("fused")) is fused
        for step in grads:
            for p, grad in zip(params, step):
                p.grad = grad.clone()
            opt.step()
        results.append([p.detach() for p in params])
    for a, b in zip(*results):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)
    half = [torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))]
    assert not optim.make_optimizer(half, "adamw", lr=0.1, fused=True).defaults.get("fused")
    assert optim.make_optimizer([torch.nn.Parameter(torch.zeros(3))], "adam", lr=0.1).defaults.get("fused")  # default
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))]}, {"params": [torch.nn.Parameter(torch.zeros(1))]}]
    assert optim.make_optimizer(groups, "adamw", lr=0.1).defaults.get("fused")  # parameter groups too


def test_dtypes_resolve_per_device_and_float16_is_refused_on_the_cpu():
    assert runtime.resolve_dtype(None) == torch.float32 and runtime.resolve_dtype("BFloat16", "cpu") == torch.bfloat16
    assert runtime.resolve_dtype("float16", torch.device("cuda")) == torch.float16  # a name check: no CUDA needed
    with pytest.raises(SubnetlabError, match="dtype float16: half-precision .* on the CPU use float32 or bfloat16") as e:
        runtime.resolve_dtype("float16", "cpu")
    assert e.value.setting == "dtype"
    with pytest.raises(SubnetlabError, match="dtype 'fp8': expected float32, bfloat16, float16"):
        runtime.resolve_dtype("fp8", "cpu")


def test_bfloat16_autocast_on_the_cpu_rounds_a_matrix_product_like_bfloat16_inputs():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g)
    with runtime.autocast("cpu", torch.bfloat16):
        low = a @ b
    assert low.dtype == torch.bfloat16
    expected = (a.bfloat16().float() @ b.bfloat16().float()).bfloat16()  # bfloat16 inputs, float accumulation
    assert torch.allclose(low.float(), expected.float(), rtol=1e-2, atol=1e-2)
    with runtime.autocast("cpu", torch.float32):
        assert (a @ b).dtype == torch.float32 and torch.equal(a @ b, torch.mm(a, b))


def test_describe_and_record_the_resolved_device(monkeypatch):
    assert runtime.describe_runtime(torch.device("cpu")) == "device cpu, dtype float32"
    assert runtime.describe_runtime(torch.device("cpu"), torch.bfloat16) == "device cpu, dtype bfloat16 (autocast)"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Fake GPU")
    assert runtime.describe_runtime(torch.device("cuda")) == "device cuda:0 (Fake GPU), dtype float32"
    assert runtime.runtime_record(torch.device("cuda:1"), torch.float16) == {"resolved_device": "cuda:1",
                                                                              "resolved_dtype": "float16"}


def test_where_a_run_ran_is_not_part_of_its_identity(tmp_path):
    from subnetlab.run_directory import check_config, claim, finished_metrics, record_runtime

    config = {"model": "m", "task": "t", "seed": 0, "device": "cuda", "nested": {"device": "cuda", "lr": 1.0}}
    claim(tmp_path, config)
    record_runtime(tmp_path, runtime.runtime_record(torch.device("cuda:0"), torch.bfloat16))
    (tmp_path / "metrics.json").write_text("{}")
    elsewhere = {**config, "device": "cpu", "nested": {"device": "auto", "lr": 1.0}}  # the same run, another machine
    assert check_config(tmp_path, elsewhere) and finished_metrics(tmp_path, elsewhere) == {}
    with pytest.raises(SubnetlabError, match=r"differs in seed\)"):
        check_config(tmp_path, {**elsewhere, "seed": 1})
