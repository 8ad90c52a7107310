"""Issue 16 item 6: the released code's choices as settings, each against an independent computation.

Loss over the whole sequence (Hugging Face's own ``labels`` loss), accuracy over
the whole vocabulary (hand-built logits), the AdamW step at the paper's and the
demo's learning rates (Adam's closed-form first step), epochs and steps
(``schedule``), ties between epochs (a model that cannot change), and the
masked matrices' re-initialisation at std 0.02 (the sample's spread).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.subtask_induction.reproduce import PRESETS, Settings, schedule
from subnetlab.methods.finetune.model import arithmetic_gpt2_config
from subnetlab.models import build_model
from subnetlab.runs.transfer import DiscoverJobConfig, TransferJobConfig
from subnetlab.subnetwork import Subnetwork
from subnetlab.transfer import LMSplit, TrainSettings, build_transfer_model, train_model
from subnetlab.transfer.train import accuracy, correct, task_loss
from tests.conftest import tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def _gpt2(seed: int = 0):
    config = tiny_config("gpt2")
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
    return build_model(config, head="causal-lm", seed=seed)


def _split(n: int = 24, seed: int = 0) -> LMSplit:
    g = torch.Generator().manual_seed(seed)
    return LMSplit(torch.randint(3, 90, (n, 3), generator=g), torch.randint(0, 7, (n,), generator=g), torch.arange(7))


def test_sequence_loss_is_the_causal_lm_loss_of_the_whole_sequence():
    model = _gpt2().model.eval()
    split = _split()
    full = torch.cat([split.input_ids, split.targets.unsqueeze(1)], dim=1)  # <a> <b> <sep> <c>
    with torch.no_grad():
        expected = model(input_ids=full, labels=full).loss  # transformers shifts the labels itself
        ours = task_loss(model, split.input_ids, split.targets, "sequence")
        last = task_loss(model, split.input_ids, split.targets, "last-token")
        answer_only = F.cross_entropy(model(input_ids=split.input_ids).logits[:, -1], split.targets)
    assert float(ours) == pytest.approx(float(expected), rel=1e-5)
    assert float(last) == pytest.approx(float(answer_only), rel=1e-6)
    assert abs(float(ours) - float(last)) > 1e-3  # the two losses are different objectives
    with pytest.raises(SubnetlabError, match="loss"):
        task_loss(model, split.input_ids, split.targets, "tokens")


def test_vocabulary_accuracy_counts_a_non_answer_argmax_as_wrong():
    split = LMSplit(torch.zeros(4, 3, dtype=torch.long), torch.tensor([2, 5, 0, 6]), torch.arange(7))
    logits = torch.full((4, 20), -5.0)
    logits[0, 2] = 3.0  # right, and the argmax over everything
    logits[1, 5], logits[1, 12] = 3.0, 4.0  # right among the answers, a number token 12 above it
    logits[2, 1] = 1.0  # wrong either way
    logits[3, 6], logits[3, 19] = 2.0, 1.0  # right, and the argmax over everything
    assert correct(logits, split, slice(0, 4), "answers").tolist() == [1.0, 1.0, 0.0, 1.0]
    assert correct(logits, split, slice(0, 4), "vocabulary").tolist() == [1.0, 0.0, 0.0, 1.0]


def test_vocabulary_accuracy_of_a_model_against_a_hand_count():
    model = _gpt2(seed=2).model.eval()
    split = _split(30, seed=3)
    with torch.no_grad():
        logits = model(input_ids=split.input_ids).logits[:, -1]
    expected = float((logits.argmax(-1) == split.targets).float().mean())
    assert accuracy(model, split, batch_size=7, over="vocabulary") == pytest.approx(expected)


@pytest.mark.parametrize("lr", [2e-4, 1e-3])  # the paper preset's and the demo's transfer learning rates
def test_one_epoch_of_one_batch_is_adamw_first_step_in_closed_form(lr):
    model = _gpt2(seed=4).model
    split = _split(16, seed=5)
    reference = copy.deepcopy(model).train()
    loss = task_loss(reference, split.input_ids, split.targets, "sequence")
    grads = torch.autograd.grad(loss, list(reference.parameters()))
    before = [p.detach().clone() for p in model.parameters()]
    train_model(model, split, split, None, TrainSettings(epochs=1, lr=lr, batch_size=16, loss="sequence"), seed=0,
                keep_best=False)
    wd, eps = 0.01, 1e-8
    for w0, g, w1 in zip(before, grads, model.parameters()):
        # AdamW's first step: decoupled decay, then m_hat / (sqrt(v_hat) + eps) = g / (|g| + eps)
        expected = w0 * (1 - lr * wd) - lr * g / (g.abs() + eps)
        # where |g| is near eps the step depends on the last bits of g (the batch's row order): left out
        clear = g.abs() > 1e-5
        assert torch.allclose(w1.detach()[clear], expected[clear], atol=1e-8, rtol=1e-5)
        assert torch.all((w1.detach() - w0 * (1 - lr * wd)).abs() <= lr + 1e-6)  # |step| <= lr everywhere


def test_epochs_and_steps_of_the_two_presets():
    paper, demo = PRESETS["paper"], PRESETS["demo"]
    assert (paper["transfer_lr"], paper["transfer_epochs"], demo["transfer_lr"], demo["transfer_epochs"]) == (
        2e-4, 100, 1e-3, 80)
    # paper: 1,000 ambiguous rows + N, batch 50, 100 epochs, no minimum
    assert schedule(paper, 10) == (100, 1)
    # demo: 100 + N rows at batch 64, raised to at least 500 steps, about 25 evaluations
    for size in (10, 30, 100):
        per_epoch = math.ceil((100 + size) / 64)
        epochs = max(80, math.ceil(500 / per_epoch))
        assert schedule(demo, size) == (epochs, max(1, epochs // 25))


@pytest.mark.parametrize("ties, expected", [("earliest", 0), ("latest", 4)])
def test_ties_between_epochs_pick_the_earliest_or_the_latest(ties, expected):
    model = _gpt2(seed=6).model
    split = _split(16, seed=7)
    settings = TrainSettings(epochs=5, lr=1e-12, batch_size=16, weight_decay=0.0, ties=ties)
    result = train_model(model, split, split, split, settings, seed=0)
    accs = [c["eval_accuracy"] for c in result.curve]
    assert len(set(accs)) == 1  # lr 1e-12: the model cannot change, every epoch ties
    assert result.best_epoch == expected
    assert TrainSettings(ties="latest").improves(0.5, 0.5) and not TrainSettings().improves(0.5, 0.5)
    assert TrainSettings().improves(0.0, -1.0) and TrainSettings(ties="latest").improves(0.0, -1.0)


def _arith_model(layers: int = 4):
    config = arithmetic_gpt2_config(layers, vocab_size=103, pad_id=101)
    return build_model(config, head="causal-lm", seed=1)


@pytest.mark.parametrize("init_std", [None, 0.02])
def test_masked_matrices_redrawn_at_std_002_as_the_released_code(init_std):
    trained = _arith_model()
    adapter = trained.adapter
    g = torch.Generator().manual_seed(0)
    masks = {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.05 for n in adapter.weight_matrices()}
    sub = Subnetwork.from_weight_masks(adapter, masks, method="continuous-sparsification")
    tm = build_transfer_model(trained.model, "subnetwork", seed=3, subnetwork=sub, reinit="masked", init_std=init_std)
    n_layer = trained.model.config.n_layer
    for name, mask in masks.items():
        fresh = tm.model.get_submodule(name.rsplit(".", 1)[0]).parametrizations.weight.original.detach()
        seen = tm.effective_weight(name)
        assert torch.equal(seen[mask], trained.model.get_parameter(name).detach()[mask])  # kept values transferred
        # transformers draws c_proj at 0.02 / sqrt(2 n_layer), the other matrices at 0.02; the released code all at 0.02
        want = 0.02 if init_std is not None or not name.endswith("c_proj.weight") else 0.02 / math.sqrt(2 * n_layer)
        assert float(fresh.std()) == pytest.approx(want, rel=0.05)
        assert abs(float(fresh.mean())) < 3 * want / math.sqrt(fresh.numel())
    scratch = build_transfer_model(trained.model, "scratch", seed=3, init_std=init_std)  # the model's own init
    c_proj = next(n for n in masks if n.endswith("c_proj.weight"))
    assert float(scratch.model.get_parameter(c_proj).detach().std()) == pytest.approx(0.02 / math.sqrt(2 * n_layer), rel=0.05)


def test_bad_choices_are_refused_naming_the_setting():
    for bad in (dict(loss="tokens"), dict(accuracy="all"), dict(ties="middle")):
        with pytest.raises(SubnetlabError) as info:
            TrainSettings(**bad)
        assert info.value.setting == next(iter(bad))
    base = {"model": "m", "task": "arith:ab", "cs": {"l0_lambda": 1e-6}}
    assert DiscoverJobConfig.from_dict({**base, "loss": "sequence", "accuracy": "vocabulary"}).loss_name == "sequence"
    with pytest.raises(SubnetlabError):
        DiscoverJobConfig.from_dict({**base, "loss": "tokens"})
    run = {"model": "m", "task": "arith:a^2+ab", "runs": [{"condition": "scratch", "size": 0, "seed": 0}]}
    with pytest.raises(SubnetlabError):
        TransferJobConfig.from_dict({**run, "init_std": -0.02})
    with pytest.raises(SubnetlabError):
        TransferJobConfig.from_dict({**run, "train": {"ties": "middle"}})
    for key, value in (("transfer_loss", "x"), ("cs_accuracy", "x"), ("transfer_ties", "x"), ("transfer_init_std", 0)):
        with pytest.raises(SubnetlabError) as info:
            Settings.from_dict({**PRESETS["demo"], key: value})
        assert info.value.setting == key
    Settings.from_dict(PRESETS["paper"])
    Settings.from_dict(PRESETS["demo"])
