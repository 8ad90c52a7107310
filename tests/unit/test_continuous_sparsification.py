"""Continuous sparsification: the beta schedule, the masks and the L0 term against their formulas."""

from __future__ import annotations

import math

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.weight_masks import mask_modules, mask_weights
from subnetlab.methods.continuous_sparsification import (
    SELECTION_RULES,
    ContinuousMask,
    ContinuousSparsification,
    LambdaChoice,
    beta_at,
    kept_percentages,
    sweep,
)
from subnetlab.transfer.data import LMSplit
from subnetlab.transfer.train import accuracy, last_logits, loss_on
from tests.conftest import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_beta_schedule_multiplies_by_the_nth_root_each_epoch():
    n, final = 50, 100.0
    betas = [beta_at(e, n, final) for e in range(n + 3)]
    assert betas[0] == 1.0
    for e in range(1, n):
        assert betas[e] / betas[e - 1] == pytest.approx(final ** (1 / n), rel=1e-12)
    assert betas[n - 1] == pytest.approx(final ** ((n - 1) / n))
    assert betas[n] == pytest.approx(final) and betas[n + 2] == final  # capped at beta_final
    assert beta_at(3, 10, 100.0, beta_start=2.0) == pytest.approx(2.0 * 100 ** 0.3)
    with pytest.raises(SubnetlabError):
        beta_at(0, 0)


def test_strategy_beta_matches_schedule_and_validates():
    cs = ContinuousSparsification(epochs=7, beta_final=30.0)
    assert [cs.beta(e) for e in range(7)] == [beta_at(e, 7, 30.0) for e in range(7)]
    for bad in (dict(epochs=0), dict(keep="first"), dict(include=("embeddings",)), dict(beta_final=0.5)):
        with pytest.raises(SubnetlabError):
            ContinuousSparsification(**bad)


def test_mask_soft_in_training_hard_in_eval():
    mask = ContinuousMask((2, 3), init=-0.1, beta=4.0)
    assert torch.equal(mask.s.detach(), torch.full((2, 3), -0.1))
    with torch.no_grad():
        mask.s.copy_(torch.tensor([[-0.3, 0.0, 0.2], [1e-4, -1e-4, 0.7]]))
    mask.train()
    soft = mask().detach()
    for i in range(2):
        for j in range(3):
            assert float(soft[i, j]) == pytest.approx(_sigmoid(4.0 * float(mask.s.detach()[i, j])), rel=1e-6)
    mask.eval()
    assert mask().tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 1.0]]  # 1[s > 0]: s = 0 is removed


def test_l0_penalty_and_its_gradient_match_the_formula():
    g = torch.Generator().manual_seed(0)
    cs = ContinuousSparsification(l0_lambda=5e-3)
    masks = {"a": ContinuousMask((3, 4), beta=2.5), "b": ContinuousMask((5,), beta=2.5)}
    with torch.no_grad():
        for m in masks.values():
            m.s.copy_(torch.randn(m.s.shape, generator=g))
    pen = cs.penalty(masks)  # differentiable
    expected = 5e-3 * sum(_sigmoid(2.5 * float(v)) for m in masks.values() for v in m.s.detach().reshape(-1))
    assert float(pen.detach()) == pytest.approx(expected, rel=1e-6)
    pen.backward()
    for m in masks.values():
        for s, grad in zip(m.s.detach().reshape(-1), m.s.grad.reshape(-1)):
            sig = _sigmoid(2.5 * float(s))
            assert float(grad) == pytest.approx(5e-3 * 2.5 * sig * (1 - sig), rel=1e-5)


def test_the_step_reuses_the_forward_soft_mask_for_l0_with_the_same_loss_and_gradients():
    """``step`` sums the soft masks its forward computed (``l0(reuse=True)``) instead of computing them again:
    the same penalty, and the same gradients as the separate computation up to float rounding."""
    loaded = tiny_model("gpt2", seed=1)
    model, adapter = loaded.model.eval(), loaded.adapter
    for p in model.parameters():
        p.requires_grad_(False)
    cs = ContinuousSparsification(l0_lambda=1e-3)
    masks = cs.create_masks(adapter)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in masks.values():
            m.s.copy_(torch.randn(m.s.shape, generator=g))
            m.beta.fill_(3.0)
    x = _data(16, 0)

    def grads(reuse: bool):
        for m in masks.values():
            m.s.grad, m.last_soft = None, None
        with mask_weights(model, dict(masks)):
            for m in masks.values():
                m.train()
            loss = loss_on(last_logits(model, x.input_ids), x.targets)
            pen = cs.penalty(masks, reuse=reuse)
            (loss + pen).backward()
        return float(pen.detach()), {n: m.s.grad.clone() for n, m in masks.items()}

    pen_reused, reused = grads(True)
    assert all(m.last_soft is not None for m in masks.values())  # every mask was reached by the forward
    pen_fresh, fresh = grads(False)
    assert pen_reused == pen_fresh
    for name in masks:
        assert torch.allclose(reused[name], fresh[name], rtol=1e-5, atol=1e-9)
    opt = cs.optimizer(masks)
    with mask_weights(model, dict(masks)):
        cs.step(model, masks, opt, lambda m, b: loss_on(last_logits(m, b.input_ids), b.targets), x)
    assert all(m.last_soft is None for m in masks.values())  # nothing keeps a spent graph


def test_masks_created_eagerly_over_attention_and_mlp_matrices_only():
    loaded = tiny_model("gpt2")
    cs = ContinuousSparsification(include=("mlp",))
    masks = cs.create_masks(loaded.adapter)
    assert sorted(masks) == sorted(loaded.adapter.weight_matrices(("mlp",)))
    for name, m in masks.items():
        assert m.s.shape == loaded.adapter.parameter(name).shape
        assert set(m.state_dict()) == {"s", "beta"}
    both = ContinuousSparsification().targets(loaded.adapter)
    assert not any("wte" in n or "wpe" in n or "ln_" in n or "lm_head" in n for n in both)
    assert len(both) == 4 * loaded.adapter.num_layers


def _data(n: int, seed: int) -> LMSplit:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(3, 90, (n, 3), generator=g)
    return LMSplit(x, torch.randint(0, 7, (n,), generator=g), torch.arange(7))


def test_fit_keeps_model_weights_and_follows_schedule():
    torch.manual_seed(0)
    loaded = tiny_model("gpt2", seed=1)
    model, adapter = loaded.model, loaded.adapter
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = _data(64, 0)
    # targets = the full model's own predictions: a subtask the full model solves
    with torch.no_grad():
        data.targets = last_logits(model.eval(), data.input_ids)[:, :7].argmax(-1)
    cs = ContinuousSparsification(epochs=4, lr=0.05, batch_size=16, l0_lambda=1e-3, beta_final=20.0, keep="last")
    g = torch.Generator().manual_seed(0)
    seen_betas = []
    result = cs.fit(
        model, adapter,
        batches=lambda e: [(data.input_ids[r], data.targets[r]) for r in data.batches(16, g)],
        loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]),
        evaluate=lambda m: accuracy(m, data),
        log=lambda rec: seen_betas.append(rec.beta),
    )
    assert seen_betas == [beta_at(e, 4, 20.0) for e in range(4)]
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) and p.requires_grad  # frozen during, restored after
    assert sorted(result.masks) == sorted(adapter.weight_matrices())
    for name, m in result.masks.items():
        assert m.dtype == torch.uint8 and m.shape == adapter.parameter(name).shape
    assert result.epoch == 3 and len(result.history) == 4
    assert 0.0 < result.kept_fraction < 1.0
    assert result.history[-1].kept_fraction == pytest.approx(result.kept_fraction)


def test_larger_lambda_keeps_fewer_weights():
    loaded = tiny_model("gpt2", seed=2)
    data = _data(48, 1)
    with torch.no_grad():
        data.targets = last_logits(loaded.model.eval(), data.input_ids)[:, :7].argmax(-1)

    def run(strategy: ContinuousSparsification):
        g = torch.Generator().manual_seed(0)
        return strategy.fit(loaded.model, loaded.adapter,
                            batches=lambda e: [(data.input_ids[r], data.targets[r]) for r in data.batches(16, g)],
                            loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]),
                            evaluate=lambda m: accuracy(m, data))

    base = ContinuousSparsification(epochs=3, lr=0.05, batch_size=16, beta_final=10.0, keep="last")
    best, results = sweep(base, [0.0, 1.0], run)
    assert [r.l0_lambda for r in results] == [0.0, 1.0]
    assert results[1].kept_fraction < results[0].kept_fraction
    assert best is max(results, key=lambda r: (r.eval_accuracy, -r.kept_fraction))


def test_kept_percentages_by_hand():
    loaded = tiny_model("gpt2")
    adapter = loaded.adapter
    names = adapter.weight_matrices()
    masks = {n: torch.zeros(adapter.parameter(n).shape, dtype=torch.uint8) for n in names}
    masks[names[0]].view(-1)[:10] = 1  # layer 0
    masks[names[-1]].view(-1)[:30] = 1  # layer 1
    out = kept_percentages(masks, adapter)
    total = sum(m.numel() for m in masks.values())
    layer0 = sum(masks[n].numel() for n in names[:4])
    assert out["kept"] == 40 and out["total"] == total
    assert out["overall"] == pytest.approx(100 * 40 / total)
    assert out["per_layer"]["0"] == pytest.approx(100 * 10 / layer0)
    assert out["per_layer"]["1"] == pytest.approx(100 * 30 / (total - layer0))
    with pytest.raises(SubnetlabError):
        kept_percentages({"transformer.wte.weight": torch.ones(2, 2)}, adapter)


def test_fit_with_seed_is_reproducible_despite_dropout():
    loaded = tiny_model("gpt2", seed=3)  # GPT-2's default dropout is on in training mode
    data = _data(32, 2)

    def run():
        g = torch.Generator().manual_seed(0)
        cs = ContinuousSparsification(epochs=2, lr=0.05, batch_size=16, l0_lambda=1e-3, keep="last")
        return cs.fit(loaded.model, loaded.adapter,
                      batches=lambda e: [(data.input_ids[r], data.targets[r]) for r in data.batches(16, g)],
                      loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]),
                      evaluate=lambda m: accuracy(m, data), seed=3)

    first, second = run(), run()
    assert [h.loss for h in first.history] == [h.loss for h in second.history]
    assert all(torch.equal(first.masks[n], second.masks[n]) for n in first.masks)


def test_discovery_runs_the_frozen_model_in_eval_mode():
    """Same input, same mask -> the same loss twice: dropout is off while the masks train (NeuroSurgeon's
    ``CircuitModel`` keeps the frozen model in eval mode); the masks stay soft, and the model's mode is restored."""
    loaded = tiny_model("gpt2", seed=4)
    model = loaded.model
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    assert dropouts  # the tiny GPT-2 has dropout, so a model left in training mode would fail below
    model.train()
    data = _data(32, 3)
    pairs, soft = [], []

    def loss_fn(m, batch):
        first = loss_on(last_logits(m, batch[0]), batch[1])
        second = loss_on(last_logits(m, batch[0]), batch[1])  # no optimiser step between: same mask
        pairs.append((float(first.detach()), float(second.detach())))
        masks = mask_modules(m)
        soft.append(bool(masks) and all(mask.training for mask in masks.values())
                    and not any(d.training for d in dropouts))
        return first

    g = torch.Generator().manual_seed(0)
    cs = ContinuousSparsification(epochs=2, lr=0.05, batch_size=16, l0_lambda=1e-3, keep="last")
    cs.fit(model, loaded.adapter, batches=lambda e: [(data.input_ids[r], data.targets[r]) for r in data.batches(16, g)],
           loss_fn=loss_fn, evaluate=lambda m: accuracy(m, data))
    assert len(pairs) == 4 and all(a == b for a, b in pairs), pairs
    assert all(soft)  # the masks train (soft sigmoid) while every dropout is off
    assert model.training and all(d.training for d in dropouts)  # the caller's mode is back


SWEEP = [  # discover_job metrics of a lambda sweep, by hand
    {"l0_lambda": 1e-6, "eval_accuracy": 1.0, "kept_percent": 11.0},
    {"l0_lambda": 3e-6, "eval_accuracy": 1.0, "kept_percent": 6.3},
    {"l0_lambda": 1e-5, "eval_accuracy": 0.995, "kept_percent": 3.0},
    {"l0_lambda": 3e-5, "eval_accuracy": 0.9, "kept_percent": 1.0},
]


def test_selection_rules_pick_by_hand():
    from subnetlab.runs.transfer import select_best

    assert SELECTION_RULES == ("sparsest", "best-accuracy", "lambda")
    # the default: the sparsest within 1 point of the best accuracy (3% keeps 99.5%; 1% loses 10 points)
    assert select_best(SWEEP) is SWEEP[2]
    assert select_best(SWEEP, LambdaChoice("sparsest", tolerance=0.0)) is SWEEP[1]  # only the perfect ones
    assert select_best(SWEEP, LambdaChoice("sparsest", tolerance=0.2)) is SWEEP[3]
    assert select_best(SWEEP, LambdaChoice("best-accuracy")) is SWEEP[1]  # the earlier rule: best, ties to the sparser
    assert select_best(SWEEP, LambdaChoice("lambda", l0_lambda=1e-6)) is SWEEP[0]  # the released code's fixed lambda
    tie = [dict(SWEEP[1]), {**SWEEP[1], "l0_lambda": 5e-6, "eval_accuracy": 0.999}]
    assert select_best(tie) is tie[0]  # equally sparse: the more accurate
    with pytest.raises(SubnetlabError, match="selection_lambda 5e-07 is not among") as missing:
        select_best(SWEEP, LambdaChoice("lambda", l0_lambda=5e-7))
    assert missing.value.setting == "selection_lambda"
    for bad, setting in ((dict(rule="densest"), "selection"), (dict(tolerance=-0.1), "selection_tolerance"),
                         (dict(rule="lambda"), "selection_lambda")):
        with pytest.raises(SubnetlabError) as refused:
            LambdaChoice(**bad)
        assert refused.value.setting == setting and "--" not in str(refused.value)
    with pytest.raises(SubnetlabError, match="no discovery results"):
        select_best([])


def test_keep_best_latest_takes_the_later_of_tied_epochs_as_the_released_code():
    loaded = tiny_model("gpt2", seed=5)
    data = _data(32, 4)

    def run(keep: str):
        g = torch.Generator().manual_seed(0)
        marks = iter([0.5, 1.0, 1.0, 0.9])  # epochs 1 and 2 tie at the best accuracy
        cs = ContinuousSparsification(epochs=4, lr=0.05, batch_size=16, l0_lambda=1e-3, keep=keep)
        return cs.fit(loaded.model, loaded.adapter,
                      batches=lambda e: [(data.input_ids[r], data.targets[r]) for r in data.batches(16, g)],
                      loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]), evaluate=lambda m: next(marks))

    latest, best, last = run("best-latest"), run("best"), run("last")
    assert latest.epoch == 2 and last.epoch == 3 and latest.eval_accuracy == 1.0 and last.eval_accuracy == 0.9
    sparser = min((1, 2), key=lambda e: (best.history[e].kept_fraction, e))
    assert best.epoch == sparser and best.kept_fraction == pytest.approx(best.history[sparser].kept_fraction)
    assert latest.kept_fraction == pytest.approx(latest.history[2].kept_fraction)


def test_each_epoch_reports_its_undecided_masks():
    """The raw number runs.health judges: masks whose soft value at the epoch's beta is in (0.05, 0.95). Epoch 0
    trains at beta 1, where sigmoid(s) of logits near -0.1 is about 0.475: every mask undecided; epoch 1 at
    beta = 1e12 ** (1/2) = 1e6, where only logits within 3e-6 of zero would be: none, the logits stay near -0.1."""
    loaded = tiny_model("gpt2", seed=4)
    data = _data(32, 3)
    g = torch.Generator().manual_seed(0)
    cs = ContinuousSparsification(epochs=2, lr=1e-3, batch_size=16, l0_lambda=1e-7, beta_final=1e12)
    found = cs.fit(loaded.model, loaded.adapter,
                   batches=lambda e: [(data.input_ids[r], data.targets[r]) for r in data.batches(16, g)],
                   loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]), evaluate=lambda m: accuracy(m, data))
    total = sum(loaded.adapter.parameter(n).numel() for n in cs.targets(loaded.adapter))
    assert [r.masked for r in found.history] == [total, total]
    assert [r.undecided for r in found.history] == [total, 0]


def test_plateau_stopping_on_the_held_out_objective():
    """Stops at the epoch the rule reads off the recorded held-out objective; beta keeps the cap's schedule."""
    loaded = tiny_model("gpt2", seed=1)
    train, held = _data(64, 0), _data(32, 5)
    cs = ContinuousSparsification(epochs=30, lr=0.05, batch_size=16, l0_lambda=1e-3, beta_final=20.0,
                                  patience=2, min_delta=0.05)
    g = torch.Generator().manual_seed(0)
    result = cs.fit(loaded.model, loaded.adapter,
                    batches=lambda e: [(train.input_ids[r], train.targets[r]) for r in train.batches(16, g)],
                    loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]),
                    evaluate=lambda m: accuracy(m, held),
                    held_out_loss=lambda m: loss_on(last_logits(m, held.input_ids), held.targets), seed=0)
    values = [r.held_out_objective for r in result.history]
    best, since, stop = None, 0, None
    for i, v in enumerate(values):  # the rule by hand: 2 epochs without a fall of more than 0.05 below the best
        best, since = (v, 0) if best is None or best - v > 0.05 else (best, since + 1)
        if since >= 2:
            stop = i
            break
    assert stop is not None and stop == len(values) - 1 < 29
    assert result.stopping == {"rule": "plateau", "monitor": "held_out_objective", "patience": 2, "min_delta": 0.05,
                               "mode": "min", "cap": 30, "epochs_run": stop + 1, "reason": f"plateau at epoch {stop}"}
    assert [r.beta for r in result.history] == [beta_at(e, 30, 20.0) for e in range(stop + 1)]
    fixed = ContinuousSparsification(epochs=2, lr=0.05, batch_size=16).fit(
        loaded.model, loaded.adapter, batches=lambda e: [(train.input_ids[r], train.targets[r]) for r in train.batches(16, g)],
        loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]), evaluate=lambda m: accuracy(m, held))
    assert fixed.stopping["reason"] == "cap reached" and fixed.stopping["rule"] == "fixed" and len(fixed.history) == 2
