"""Transfer training: task tensors, best-on-evaluation selection, and stacked training equal to single."""

from __future__ import annotations

import copy

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.models import build_model
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks.registry import get_task
from subnetlab.transfer import (
    LMSplit,
    TrainSettings,
    accuracy,
    build_transfer_model,
    last_logits,
    lm_split,
    random_matched,
    train_model,
)
from subnetlab.transfer.stacked import functional_parts, train_stacked
from tests.conftest import tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(seed: int = 0):
    config = tiny_config("gpt2")
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0  # single and stacked then agree exactly
    return build_model(config, head="causal-lm", seed=seed)


def test_lm_split_matches_the_task():
    task = get_task("arith:a^2+ab", ambiguous=True, n_disambiguation=5, max_number=20, n_eval=10, n_test=10, seed=1)
    split = lm_split(task, "train")
    assert split.input_ids.shape == (25, 3) and len(split) == 25
    sep = task.tokenizer.convert_tokens_to_ids("<sep>")
    assert torch.all(split.input_ids[:, 2] == sep)
    a, b = split.input_ids[:, 0], split.input_ids[:, 1]
    assert torch.equal(split.targets, (a * a + a * b) % 7)  # number tokens are their own ids
    assert torch.equal(split.labels(), split.targets)  # answers "0".."6" are tokens 0..6
    assert torch.all(a[:20] == b[:20])  # the ambiguous rows first
    with pytest.raises(SubnetlabError):
        lm_split(get_task("hans-synthetic", n_per_subcase=1, eval_per_subcase=1), "train")


def test_accuracy_against_hand_count():
    loaded = _model()
    g = torch.Generator().manual_seed(0)
    split = LMSplit(torch.randint(3, 90, (30, 3), generator=g), torch.randint(0, 7, (30,), generator=g), torch.arange(7))
    with torch.no_grad():
        logits = loaded.model(input_ids=split.input_ids).logits[:, -1, :7]
    expected = float((logits.argmax(-1) == split.targets).float().mean())
    assert accuracy(loaded.model, split, batch_size=7) == pytest.approx(expected)


def test_train_model_keeps_the_best_epoch_on_evaluation():
    loaded = _model()
    g = torch.Generator().manual_seed(1)
    train = LMSplit(torch.randint(3, 90, (40, 3), generator=g), torch.randint(0, 7, (40,), generator=g), torch.arange(7))
    result = train_model(loaded.model, train, train, train, TrainSettings(epochs=6, lr=5e-3, batch_size=8), seed=0)
    accs = [c["eval_accuracy"] for c in result.curve]
    assert result.eval_accuracy == max(accs) and result.best_epoch == accs.index(max(accs))
    assert accuracy(loaded.model, train) == pytest.approx(result.eval_accuracy)  # the best weights restored
    assert result.test_accuracy == pytest.approx(result.eval_accuracy)  # test = eval here
    assert result.sequences == 6 * 40


def test_stacked_training_equals_single_runs():
    trained = _model(seed=5)
    adapter = trained.adapter
    g = torch.Generator().manual_seed(0)
    sub = Subnetwork.from_weight_masks(
        adapter, {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.2 for n in adapter.weight_matrices()})
    models = [build_transfer_model(trained.model, "subnetwork", seed=1, subnetwork=sub),
              build_transfer_model(trained.model, "random-matched", seed=2, subnetwork=random_matched(sub, 2))]
    singles = [copy.deepcopy(m) for m in models]
    splits = [LMSplit(torch.randint(3, 90, (24, 3), generator=g), torch.randint(0, 7, (24,), generator=g), torch.arange(7))
              for _ in range(4)]
    settings = TrainSettings(epochs=3, lr=1e-2, batch_size=8)
    stacked = train_stacked(models, splits[:2], splits[2:], [None, None], settings, [0, 1])
    single = [train_model(m.model, splits[i], splits[2 + i], None, settings, seed=i) for i, m in enumerate(singles)]
    for a, b in zip(stacked, single):
        assert a.best_epoch == b.best_epoch and a.eval_accuracy == pytest.approx(b.eval_accuracy)
        assert [c["loss"] for c in a.curve] == pytest.approx([c["loss"] for c in b.curve], rel=1e-4)
    probe = torch.randint(3, 90, (16, 3), generator=g)
    for a, b in zip(models, singles):
        # same function after training (parameters may differ where the gradient is exactly zero, e.g. key
        # biases, which Adam moves by float noise differently in the two computations)
        with torch.no_grad():
            assert torch.allclose(last_logits(a.model, probe), last_logits(b.model, probe), atol=1e-4)
        assert sorted(functional_parts(a)[2]) == sorted(sub.weights)
        for name, mask in sub.weights.items():  # kept weights still frozen in the stacked run
            if a.condition == "subnetwork":
                assert torch.equal(a.effective_weight(name)[mask.bool()], trained.model.get_parameter(name)[mask.bool()])


def test_stacked_refuses_mixed_roles():
    trained = _model()
    g = torch.Generator().manual_seed(0)
    split = LMSplit(torch.randint(3, 90, (8, 3), generator=g), torch.randint(0, 7, (8,), generator=g), torch.arange(7))
    models = [build_transfer_model(trained.model, "scratch", seed=0), build_transfer_model(trained.model, "embeddings", seed=0)]
    with pytest.raises(SubnetlabError, match="share"):
        train_stacked(models, [split] * 2, [split] * 2, [None] * 2, TrainSettings(epochs=1), [0, 1])


def test_stacked_training_equals_single_runs_with_the_released_codes_choices():
    """Sequence loss, vocabulary accuracy, latest of tied epochs: stacked as single."""
    trained = _model(seed=5)
    adapter = trained.adapter
    g = torch.Generator().manual_seed(1)
    sub = Subnetwork.from_weight_masks(
        adapter, {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.2 for n in adapter.weight_matrices()})
    models = [build_transfer_model(trained.model, "subnetwork", seed=s, subnetwork=sub, reinit="masked", init_std=0.02)
              for s in (1, 2)]
    singles = [copy.deepcopy(m) for m in models]
    splits = [LMSplit(torch.randint(3, 90, (24, 3), generator=g), torch.randint(0, 7, (24,), generator=g), torch.arange(7))
              for _ in range(4)]
    settings = TrainSettings(epochs=3, lr=1e-2, batch_size=8, loss="sequence", accuracy="vocabulary", ties="latest")
    stacked = train_stacked(models, splits[:2], splits[2:], [None, None], settings, [0, 1])
    single = [train_model(m.model, splits[i], splits[2 + i], None, settings, seed=i) for i, m in enumerate(singles)]
    for a, b in zip(stacked, single):
        assert a.best_epoch == b.best_epoch and a.eval_accuracy == pytest.approx(b.eval_accuracy)
        assert [c["loss"] for c in a.curve] == pytest.approx([c["loss"] for c in b.curve], rel=1e-4)
        assert [c["eval_accuracy"] for c in a.curve] == [c["eval_accuracy"] for c in b.curve]


def test_plateau_stops_exactly_where_the_rule_says():
    from subnetlab.optim import Plateau

    # best 0.1 -> 0.5 (eval 1); 0.5 and 0.52 are not more than 0.05 above it; 0.6 is (eval 4); then 3 without gain
    values = [0.1, 0.5, 0.5, 0.52, 0.6, 0.6, 0.64, 0.6, 0.9]
    tracker = Plateau(patience=3, min_delta=0.05).tracker()
    stops = [tracker.update(v) for v in values[:8]]
    assert stops == [False] * 7 + [True] and tracker.best == 0.6
    losses = [2.0, 1.0, 0.99, 0.5, 0.5]  # "min": 0.99 is no gain beyond 0.1 below 1.0
    tracker = Plateau(patience=1, min_delta=0.1, mode="min").tracker()
    assert [tracker.update(v) for v in losses[:3]] == [False, False, True]
    with pytest.raises(SubnetlabError, match="patience"):
        Plateau(patience=0)


def _curve_split(g, rows=24):
    return LMSplit(torch.randint(3, 90, (rows, 3), generator=g), torch.randint(0, 7, (rows,), generator=g), torch.arange(7))


def test_train_model_stops_at_the_plateau_and_records_it():
    loaded = _model()
    g = torch.Generator().manual_seed(1)
    train = _curve_split(g, 40)
    settings = TrainSettings(epochs=40, lr=5e-3, batch_size=8, patience=2, min_delta=0.0)
    result = train_model(loaded.model, train, train, None, settings, seed=0)
    accs = [c["eval_accuracy"] for c in result.curve]
    # independent reading of the rule on the recorded curve: the first evaluation 2 after the last strict record
    best, since, stop = None, 0, None
    for i, a in enumerate(accs):
        best, since = (a, 0) if best is None or a > best else (best, since + 1)
        if since >= 2:
            stop = i
            break
    assert stop is not None and stop == len(accs) - 1  # it stopped there, before the cap
    assert result.stopping["reason"] == f"plateau at epoch {result.curve[stop]['epoch']}"
    assert result.stopping["rule"] == "plateau" and result.stopping["cap"] == 40 and result.stopping["patience"] == 2
    assert result.sequences == result.stopping["epochs_run"] * 40 < 40 * 40
    fixed = train_model(_model().model, train, train, None, TrainSettings(epochs=3, lr=5e-3, batch_size=8), seed=0)
    assert fixed.stopping == {"rule": "fixed", "cap": 3, "epochs_run": 3, "reason": "cap reached"}


def test_stacked_with_per_run_stopping_equals_each_run_alone():
    """One run of the stack stops at its plateau (frozen) while the other trains on: each equals its run alone."""
    trained = _model(seed=5)
    g = torch.Generator().manual_seed(3)
    models = [build_transfer_model(trained.model, "scratch", seed=s) for s in (1, 2)]
    singles = [copy.deepcopy(m) for m in models]
    trains = [_curve_split(g), _curve_split(g)]
    evals = [_curve_split(g), trains[1]]  # run 0: held-out noise (plateaus early); run 1: its own rows (keeps rising)
    settings = TrainSettings(epochs=12, lr=1e-2, batch_size=8, patience=2)
    stacked = train_stacked(models, trains, evals, [None, None], settings, [0, 1], keep_best=False)
    single = [train_model(m.model, trains[i], evals[i], None, settings, seed=i, keep_best=False)
              for i, m in enumerate(singles)]
    assert stacked[0].stopping["epochs_run"] < stacked[1].stopping["epochs_run"]  # the case under test
    probe = torch.randint(3, 90, (16, 3), generator=g)
    for a, b, ma, mb in zip(stacked, single, models, singles):
        assert a.stopping == b.stopping and a.sequences == b.sequences
        assert [c["eval_accuracy"] for c in a.curve] == [c["eval_accuracy"] for c in b.curve]
        assert [c["loss"] for c in a.curve] == pytest.approx([c["loss"] for c in b.curve], rel=1e-4)
        with torch.no_grad():  # the last weights: a stopped run's frozen at its stopping epoch
            assert torch.allclose(last_logits(ma.model, probe), last_logits(mb.model, probe), atol=1e-4)
