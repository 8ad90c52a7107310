"""The one mask trainer (``methods.l0.trainer``): its optimiser options against closed forms, and resume.

Head pruning and edge pruning share the loop; these tests use edge pruning (the granularity that gained AdamW,
clipping and accumulation from it) on a tiny GPT-2, and head pruning where its grid matters.
"""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.methods.edge_pruning.config import preset_config
from subnetlab.methods.edge_pruning.data import paired_data
from subnetlab.methods.edge_pruning.train import EdgePruner, prune_edges
from subnetlab.methods.l0.distribution import HardConcreteGates, HardConcreteMask
from tests.conftest import tiny_model


@pytest.fixture(autouse=True)
def one_thread(one_thread):  # conftest's, for every test here
    yield


@pytest.fixture(scope="module")
def setup():
    m = tiny_model("gpt2", seed=0, layers=2, heads=2, hidden=16)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 97, (32, 6), generator=g)
    corrupted = ids.clone()
    corrupted[:, :-1] = torch.randint(3, 97, (32, 5), generator=g)
    with torch.no_grad():
        answer = m.model(input_ids=ids).logits[:, -1].argmax(-1)
        wrong = m.model(input_ids=corrupted).logits[:, -1].argmax(-1)
    return m, paired_data(ids, corrupted, answer, wrong)


def _config(**kw):
    return preset_config("demo", 0.8, seed=1, batch_size=8, warmup_steps=10, total_steps=12, checkpoint_every=5,
                         lr_warmup_steps=0, lr_decay="constant", **kw)


def _one_step(m, data, **kw) -> tuple[EdgePruner, torch.Tensor]:
    trainer = EdgePruner(m.model, m.adapter, data, _config(**kw))
    before = trainer.edges.log_alpha.detach().clone()
    with trainer:
        trainer.step(0)
    return trainer, before


def test_adamw_decays_log_alphas_by_lr_times_decay(setup):
    """AdamW's update is Adam's plus ``-lr * wd * p`` (decoupled decay): the same sample, the same Adam part."""
    m, data = setup
    adam, start = _one_step(m, data)
    adamw, _ = _one_step(m, data, optimizer="adamw", weight_decay=0.25)
    lr = adam.config.lr
    expected = adam.edges.log_alpha.detach() - lr * 0.25 * start
    assert torch.allclose(adamw.edges.log_alpha.detach(), expected, atol=1e-5)
    assert not torch.allclose(adamw.edges.log_alpha.detach(), adam.edges.log_alpha.detach(), atol=1e-3)


def test_clipping_scales_the_whole_gradient_to_the_norm(setup, monkeypatch):
    """With ``max_grad_norm`` below the gradient's norm, the optimiser sees log-alphas and lambdas scaled together
    to exactly that norm; without it, the natural norm."""
    m, data = setup
    seen: dict[str, float] = {}

    def norms(max_grad_norm):
        trainer = EdgePruner(m.model, m.adapter, data, _config(max_grad_norm=max_grad_norm))
        params = [p for group in trainer.optimizer.param_groups for p in group["params"]]
        real_step = trainer.optimizer.step

        def record(*args, **kwargs):
            grads = [p.grad.flatten() for p in params if p.grad is not None]
            seen["norm"] = float(torch.cat(grads).norm())
            seen["ratio"] = float(params[0].grad.flatten()[0] / params[-1].grad) if params[-1].grad else 0.0
            return real_step(*args, **kwargs)

        monkeypatch.setattr(trainer.optimizer, "step", record)
        with trainer:
            trainer.step(0)
        return dict(seen)

    natural = norms(None)
    assert natural["norm"] > 1e-4
    clipped = norms(natural["norm"] / 10)
    assert clipped["norm"] == pytest.approx(natural["norm"] / 10, rel=1e-4)
    assert clipped["ratio"] == pytest.approx(natural["ratio"], rel=1e-4)  # one scale for every parameter


def test_accumulation_resumes_bit_identically_with_every_option(setup, tmp_path):
    m, data = setup
    cfg = _config(accumulation=2, optimizer="adamw", weight_decay=0.01, max_grad_norm=1.0)
    whole = prune_edges(m.model, m.adapter, data, cfg)

    class Killed(Exception):
        pass

    def kill(done: int) -> None:
        if done == 5:
            raise Killed

    with pytest.raises(Killed):
        prune_edges(m.model, m.adapter, data, cfg, run_dir=tmp_path, on_step=kill)
    resumed = prune_edges(m.model, m.adapter, data, cfg, run_dir=tmp_path)
    assert resumed.resumed_from == 5
    assert torch.equal(resumed.log_alpha_edges, whole.log_alpha_edges)
    assert torch.equal(resumed.selection.edges, whole.selection.edges)
    assert resumed.history == whole.history


@pytest.mark.parametrize("bad", [dict(optimizer="sgd"), dict(max_grad_norm=0.0), dict(weight_decay=-1.0),
                                 dict(accumulation=0)])
def test_optimiser_settings_are_checked(bad):
    with pytest.raises(SubnetlabError) as e:
        _config(**bad)
    assert e.value.setting == next(iter(bad))


def test_the_grid_is_the_flat_mask():
    """Head/MLP gates are a flat hard-concrete mask: same parameter, same draws, same closed forms."""
    gates = HardConcreteGates(3, 4, seed=7, init_std=0.5)
    flat = HardConcreteMask(3 * 4 + 3, seed=0)
    with torch.no_grad():
        flat.log_alpha.copy_(gates.log_alpha)
    flat.generator.set_state(gates.generator.get_state())
    heads, mlps = gates.sample()
    z = flat.sample()
    assert torch.equal(heads.flatten(), z[:12]) and torch.equal(mlps, z[12:])
    assert torch.equal(gates.log_alpha_heads.flatten(), gates.log_alpha[:12])
    assert gates.undecided() == flat.undecided()
    assert [n for n, _ in gates.named_parameters()] == ["log_alpha"]
    fixed = HardConcreteGates(3, 4, seed=7, prune_mlps=False)
    assert fixed.log_alpha.numel() == 12 and torch.equal(fixed.sample()[1], torch.ones(3))
