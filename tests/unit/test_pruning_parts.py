"""Pruning parts checked against hand computations: KL, Lagrangian, schedules, selection, data order."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates, collect_means
from subnetlab.methods.head_pruning.config import PruneConfig, preset_config
from subnetlab.methods.head_pruning.select import select_threshold, select_topk
from subnetlab.methods.l0.data import DataOrder, PruningData
from subnetlab.methods.l0.distribution import HardConcreteGates
from subnetlab.methods.l0.objective import FullModelOutputs, Lagrangian, kl_full_to_pruned
from subnetlab.methods.l0.schedule import LinearSchedule, StaircaseSchedule, paper_steps, parse_levels
from subnetlab.optim import lr_factor
from tests.conftest import tiny_inputs, tiny_model


def test_kl_matches_definition() -> None:
    g = torch.Generator().manual_seed(0)
    full, pruned = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    p, q = full.softmax(-1), pruned.softmax(-1)
    by_hand = (p * (p.log() - q.log())).sum(-1).mean()
    assert float(kl_full_to_pruned(full.log_softmax(-1), pruned)) == pytest.approx(float(by_hand), rel=1e-5)


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_open_gates_give_zero_kl_and_closing_gates_positive(ablation: str) -> None:
    m = tiny_model("bert")
    x = tiny_inputs("bert", batch=6, length=9, pad=2)
    data = PruningData.from_tensors(x)
    means = collect_means(m.model, m.adapter, [x]) if ablation == "mean" else None
    L, H = m.adapter.num_layers, m.adapter.num_heads
    with apply_gates(m.model, m.adapter, heads=torch.ones(L, H), mlps=torch.ones(L), ablation=means) as ctl:
        full = FullModelOutputs(m.model, ctl, data, "cache", batch_size=6)
        log_p = full.log_probs(list(range(6)), x)
        assert torch.equal(log_p, FullModelOutputs(m.model, ctl, data, "online").log_probs([], x))
        kl_open = kl_full_to_pruned(log_p, m.model(**x).logits)
        closed = torch.ones(L, H)
        closed[0, 1] = closed[1, 2] = 0.0
        ctl.set(closed, torch.ones(L))
        kl_closed = kl_full_to_pruned(log_p, m.model(**x).logits)
    if ablation == "zero":
        assert float(kl_open.detach()) == 0.0
    else:  # intervene.gates mixes as a + z * (x - a): at z = 1 that is x only up to float32 rounding
        assert abs(float(kl_open.detach())) < 1e-6
    assert float(kl_closed.detach()) > 1e-4


def test_lagrangian_ascent_raises_lambda1_below_target() -> None:
    lag = Lagrangian()
    opt = torch.optim.Adam([{"params": lag.parameters(), "lr": 1.0, "maximize": True}])
    sparsity = torch.tensor(0.1)
    value = lag(0.5, sparsity)
    assert float(value.detach()) == 0.0
    value.backward()
    assert float(lag.lambda1.grad) == pytest.approx(0.4) and float(lag.lambda2.grad) == pytest.approx(0.16)
    opt.step()
    assert float(lag.lambda1.detach()) > 0 and float(lag.lambda2.detach()) > 0
    s = torch.tensor(0.1, requires_grad=True)
    lag(0.5, s).backward()
    assert float(s.grad) < 0  # descent on the gates then raises the sparsity


def test_paper_steps_and_linear_schedule() -> None:
    assert paper_steps(0.5) == (9000, 9300)  # Appendix B: 9300 steps, 9000 warm-up
    assert paper_steps(0.7) == (10000, 10420)
    s = LinearSchedule(0.5, 100, 130)
    assert s.target(0) == 0.0 and s.target(50) == 0.25 and s.target(100) == 0.5 and s.target(129) == 0.5
    assert s.level_ends() == {130: 0.5}
    assert lr_factor(0, total=130) == 1.0 and lr_factor(65, total=130) == 0.5 and lr_factor(99, total=130, decay="constant") == 1.0
    cfg = preset_config("paper", 0.5)
    assert (cfg.lr, cfg.lambda_lr, cfg.effective_batch, cfg.max_length, cfg.total_steps) == (0.1, 1.0, 128, 128, 9300)
    with pytest.raises(SubnetlabError, match="outside"):
        PruneConfig(sparsity=1.2)


def test_staircase_schedule() -> None:
    levels = parse_levels("0.05:0.70:0.05")
    assert len(levels) == 14 and levels[0] == 0.05 and levels[-1] == 0.7
    s = StaircaseSchedule((0.1, 0.2, 0.3), ramp_steps=10, hold_steps=5, first_ramp_steps=20)
    assert s.total_steps == 25 + 15 + 15
    assert s.target(0) == 0.0 and s.target(10) == pytest.approx(0.05) and s.target(20) == 0.1 and s.target(24) == 0.1
    assert s.target(30) == pytest.approx(0.15) and s.target(35) == 0.2 and s.target(54) == 0.3
    assert s.level_ends() == {25: 0.1, 40: 0.2, 55: 0.3}
    with pytest.raises(SubnetlabError, match="increase"):
        StaircaseSchedule((0.3, 0.2), 1, 1)
    with pytest.raises(SubnetlabError, match="malformed"):
        parse_levels("0.05:x")


def _gates_with(heads: list[list[float]], mlps: list[float]) -> HardConcreteGates:
    gates = HardConcreteGates(len(heads), len(heads[0]), init_std=0.0)
    with torch.no_grad():
        gates.log_alpha_heads.copy_(torch.tensor(heads))
        gates.log_alpha_mlps.copy_(torch.tensor(mlps))
    return gates


def test_topk_keeps_the_largest_log_alphas() -> None:
    gates = _gates_with([[3.0, -1.0, 0.5, 2.0], [-2.0, 4.0, 1.0, -0.5]], [5.0, 0.0])
    sel = select_topk(gates, 0.5)  # 10 components: remove the 5 smallest
    assert sel.sparsity == 0.5
    # ascending: -2, -1, -0.5, 0, 0.5 | 1, 2, 3, 4, 5 -> keep 3, 2 (layer 0), 4, 1 (layer 1), MLP 0
    assert sel.heads.tolist() == [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]]
    assert sel.mlps.tolist() == [1.0, 0.0]
    assert select_topk(gates, 0.33).sparsity == pytest.approx(0.3)  # the nearest whole number of components


def test_threshold_grid_search_comes_closest_to_target() -> None:
    gates = _gates_with([[3.0, -1.0, 0.5, 2.0], [-2.0, 4.0, 1.0, -0.5]], [5.0, 0.0])
    det_h, det_m = gates.deterministic()
    values = torch.cat([det_h.flatten(), det_m])
    sel = select_threshold(gates, 0.5)
    grid = [round(i * 0.05, 10) for i in range(21)]
    best = min(grid, key=lambda t: (abs(float((values <= t).float().mean()) - 0.5), t))
    assert sel.threshold == best
    assert sel.sparsity == pytest.approx(float((values <= best).float().mean()))


def test_data_order_is_a_function_of_the_step() -> None:
    order = DataOrder(10, 3, seed=4)
    first_epoch = [i for m in range(3) for i in order.indices(m)]
    assert len(set(first_epoch)) == 9 and max(first_epoch) < 10
    again = DataOrder(10, 3, seed=4)
    assert again.indices(7) == order.indices(7) and order.indices(3) != order.indices(0)
    assert DataOrder(10, 3, seed=5).indices(0) != order.indices(0) or DataOrder(10, 3, seed=5).indices(1) != order.indices(1)
    with pytest.raises(SubnetlabError, match="larger"):
        DataOrder(2, 3, seed=0)


def test_means_are_token_weighted_and_cached(tmp_path) -> None:
    from subnetlab.methods.head_pruning.ablation import mean_activations

    m = tiny_model("bert")
    x = tiny_inputs("bert", batch=6, length=9, pad=3)
    data = PruningData.from_tensors(x)
    streamed = mean_activations(m.model, m.adapter, data, examples=6, batch_size=4, cache_dir=tmp_path)  # 4 + 2 rows
    whole = collect_means(m.model, m.adapter, [x])  # one batch: the reference
    for a, b in zip(streamed.heads + streamed.mlps, whole.heads + whole.mlps):
        assert torch.allclose(a, b, atol=1e-6)
    files = list(tmp_path.glob("means-*.safetensors"))
    assert len(files) == 1
    cached = mean_activations(m.model, m.adapter, data, examples=6, batch_size=4, cache_dir=tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(cached.heads, streamed.heads))
    mean_activations(m.model, m.adapter, data, examples=4, batch_size=4, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("means-*.safetensors"))) == 2  # other data, other key
