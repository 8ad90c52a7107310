"""Pruning a tiny trained model: the target is reached, seeds are reproducible, kills resume bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from subnetlab.intervene import collect_means
from subnetlab.methods.head_pruning.config import PruneConfig
from subnetlab.methods.head_pruning.train import prune
from subnetlab.methods.l0.checkpoint import load_checkpoint
from subnetlab.methods.l0.data import PruningData
from subnetlab.methods.l0.objective import NonFiniteLoss
from tests.conftest import VOCAB, tiny_model

N, T = 256, 8


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run faster on one thread (no OpenMP hand-offs), above all on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def trained():
    """A tiny BERT trained to tell which third of the vocabulary most of a sequence's tokens come from."""
    loaded = tiny_model("bert", seed=0, layers=2, heads=4, hidden=32)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (N, T), generator=g)
    bins = (ids - 3) * 3 // (VOCAB - 3)
    labels = torch.stack([(bins == c).sum(1) for c in range(3)], 1).argmax(1)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(N, T, dtype=torch.long)}
    model = loaded.model
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(40):
        idx = torch.randint(0, N, (32,), generator=g)
        loss = F.cross_entropy(model(input_ids=ids[idx], attention_mask=inputs["attention_mask"][idx]).logits, labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    for p in model.parameters():
        p.grad = None
    data = PruningData.from_tensors(inputs)
    means = collect_means(model, loaded.adapter, [inputs])
    return loaded, data, means


def config(**kw) -> PruneConfig:
    # scaled for an 80-step run: gates start at log-alpha 3 (not 10) and move 3x faster than the paper's
    base = dict(sparsity=0.5, seed=0, warmup_steps=40, total_steps=80, batch_size=16, accumulation=1,
                init_log_alpha=3.0, lr=0.3, lambda_lr=0.2, checkpoint_every=10, eval_batch_size=64)
    return PruneConfig(**{**base, **kw})


def test_reaches_target_and_same_seed_same_subnetwork(trained) -> None:
    loaded, data, means = trained
    frozen = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    first = prune(loaded.model, loaded.adapter, data, config(), ablation=means)
    again = prune(loaded.model, loaded.adapter, data, config(), ablation=means)
    other = prune(loaded.model, loaded.adapter, data, config(seed=1), ablation=means)
    assert first.selection.sparsity == 0.5  # top-k: exactly the target (10 components, 5 removed)
    assert abs(float(first.gates.expected_sparsity().detach()) - 0.5) < 0.12  # the gates themselves got there
    assert abs(first.selections["threshold"].sparsity - 0.5) <= 0.2
    assert first.history[-1]["target"] == 0.5
    assert torch.equal(first.gates.log_alpha_heads, again.gates.log_alpha_heads)
    assert torch.equal(first.selection.heads, again.selection.heads)
    assert not torch.equal(first.gates.log_alpha_heads, other.gates.log_alpha_heads)
    # the model itself is untouched and no hook is left behind
    assert all(torch.equal(v, frozen[k]) for k, v in loaded.model.state_dict().items())
    assert all(p.requires_grad for p in loaded.model.parameters())


class Killed(Exception):
    pass


@pytest.mark.parametrize("ablation,accumulation", [("mean", 1), ("resample", 2)])
def test_kill_and_resume_is_bit_identical(trained, tmp_path: Path, ablation: str, accumulation: int) -> None:
    loaded, data, means = trained
    cfg = config(total_steps=30, warmup_steps=20, ablation=ablation, accumulation=accumulation)
    values = means if ablation == "mean" else None
    whole = prune(loaded.model, loaded.adapter, data, cfg, ablation=values, run_dir=tmp_path / "whole")

    def kill_at_17(step: int) -> None:
        if step == 17:
            raise Killed

    with pytest.raises(Killed):
        prune(loaded.model, loaded.adapter, data, cfg, ablation=values, run_dir=tmp_path / "killed", on_step=kill_at_17)
    assert load_checkpoint(tmp_path / "killed").step == 10  # checkpoints every 10 steps
    resumed = prune(loaded.model, loaded.adapter, data, cfg, ablation=values, run_dir=tmp_path / "killed")
    assert resumed.resumed_from == 10
    for name in ("log_alpha_heads", "log_alpha_mlps"):
        assert torch.equal(getattr(whole.gates, name), getattr(resumed.gates, name))
    assert torch.equal(whole.lagrangian.lambda1, resumed.lagrangian.lambda1)
    assert whole.history == resumed.history
    assert torch.equal(whole.selection.heads, resumed.selection.heads)


def test_nan_loss_stops_naming_the_step_and_keeps_the_checkpoint(trained, tmp_path: Path) -> None:
    loaded, data, means = trained
    calls = {"n": 0}

    def poison(module, args, output):
        calls["n"] += 1
        return output * float("nan") if calls["n"] > 26 else None  # two forwards a step (online teacher)

    handle = loaded.model.classifier.register_forward_hook(poison)
    try:
        with pytest.raises(NonFiniteLoss, match=r"nan at step 14; the last good checkpoint is .*checkpoint.safetensors"):
            prune(loaded.model, loaded.adapter, data, config(teacher="online", total_steps=30, warmup_steps=20),
                  ablation=means, run_dir=tmp_path)
    finally:
        handle.remove()
    assert load_checkpoint(tmp_path).step == 10


def test_staircase_saves_every_level_at_its_sparsity(trained) -> None:
    loaded, data, means = trained
    seen = []
    cfg = config(schedule="staircase", levels=(0.2, 0.4, 0.6), sparsity=0.6, ramp_steps=8, hold_steps=6,
                 first_ramp_steps=15, lr_decay="constant", ablation="zero")
    expected = {}
    result = prune(loaded.model, loaded.adapter, data, cfg,
                   on_level=lambda level, sel, step: (seen.append((level, step, sel["topk"].sparsity)),
                                                      expected.update({step: sel["topk"].expected_sparsity})))
    assert [(lvl, step) for lvl, step, _ in seen] == [(0.2, 21), (0.4, 35), (0.6, 49)]
    assert [s for _, _, s in seen] == pytest.approx([0.2, 0.4, 0.6])
    assert result.selection.sparsity == pytest.approx(0.6)
    # each level's selection reports the gates' expected sparsity there (what runs.health judges against the level)
    recorded = {h["step"]: h["expected_sparsity"] for h in result.history}
    assert expected == pytest.approx({step: recorded[step] for step in (21, 35, 49)})


def test_authors_recipe_adamw_warmup_and_sampled_sparsity(trained) -> None:
    """The paper preset's recipe, checked against the authors' building blocks: torch's AdamW (weight decay 0.01 on
    both groups, lambdas maximised) stepped by transformers' get_linear_schedule_with_warmup(200); and the Lagrangian
    on the sampled gates' sparsity."""
    from transformers import get_linear_schedule_with_warmup

    from subnetlab.methods.head_pruning.config import preset_config
    from subnetlab.methods.head_pruning.train import Pruner

    paper = preset_config("paper", 0.5)
    assert (paper.optimizer, paper.weight_decay, paper.lr_warmup_steps, paper.sparsity_estimate) == (
        "adamw", 0.01, 200, "sample")
    loaded, data, means = trained
    cfg = config(optimizer="adamw", weight_decay=0.01, lr_warmup_steps=5, sparsity_estimate="sample", total_steps=12,
                 warmup_steps=6)
    with Pruner(loaded.model, loaded.adapter, data, cfg, ablation=means) as p:
        assert isinstance(p.optimizer, torch.optim.AdamW)
        assert [g["weight_decay"] for g in p.optimizer.param_groups] == [0.01, 0.01]
        # the reference: the authors' scheduler on an identical optimizer over two dummy parameters
        a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
        ref = torch.optim.AdamW([{"params": [a], "lr": cfg.lr}, {"params": [b], "lr": cfg.lambda_lr}])
        sched = get_linear_schedule_with_warmup(ref, num_warmup_steps=5, num_training_steps=12)
        for step in range(12):
            p.step(step)
            assert [g["lr"] for g in p.optimizer.param_groups] == pytest.approx([g["lr"] for g in ref.param_groups])
            ref.step()
            sched.step()
        assert p.optimizer.param_groups[0]["lr"] == pytest.approx(cfg.lr * 1 / 7)  # (12 - 11) / (12 - 5)
