"""``--preset quick``: a user's own small model pruned in under a minute per run, its gates decided, its steps by
the formula its help states; the other training commands' quick presets typed and stated in their help."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError, preset_values
from subnetlab.intervene import collect_means
from subnetlab.methods.continuous_sparsification import DISCOVERY_PRESETS, ContinuousSparsification
from subnetlab.methods.head_pruning.config import PRESETS, QUICK_HOLD_STEPS, preset_config
from subnetlab.methods.head_pruning.select import GateSelection
from subnetlab.methods.head_pruning.train import prune
from subnetlab.methods.l0.data import PruningData
from subnetlab.methods.l0.distribution import BETA, LEFT, RIGHT
from subnetlab.runs.health import MAX_UNDECIDED_SHARE, TARGET_TOLERANCE
from subnetlab.runs.lottery import LOTTERY_PRUNE_PRESETS, LotteryPruneJobConfig
from subnetlab.runs.prune import pruning_health
from subnetlab.transfer import TrainSettings
from subnetlab.transfer.train import TRANSFER_PRESETS
from tests.conftest import VOCAB, tiny_model


@pytest.mark.parametrize("sparsity, warmup, total", [(0.5, 200, 600), (0.7, 240, 640)])
def test_quick_steps_follow_100_plus_2sp_then_a_400_step_hold(sparsity, warmup, total):
    cfg = preset_config("quick", sparsity, seed=1)
    assert QUICK_HOLD_STEPS == 400
    assert (cfg.warmup_steps, cfg.total_steps) == (warmup, total)
    assert (cfg.batch_size, cfg.accumulation, cfg.max_length, cfg.train_limit) == (16, 1, 64, 2000)
    assert (cfg.lr, cfg.sparsity_estimate) == (0.3, "sample")
    paper = preset_config("paper", sparsity)
    assert cfg.total_steps * cfg.effective_batch * 30 < paper.total_steps * paper.effective_batch  # rows seen


def test_quick_keeps_the_demo_sizes_and_changes_only_rate_and_estimate():
    changed = {k for k in PRESETS["quick"].keys() | PRESETS["demo"].keys()
               if PRESETS["quick"].get(k) != PRESETS["demo"].get(k)}
    assert changed == {"lr", "sparsity_estimate"}
    assert PRESETS["paper"]["lr"] == 0.1 and PRESETS["paper"]["sparsity_estimate"] == "sample"


@pytest.mark.parametrize("command", ["prune", "effective-size"])
def test_the_help_states_what_quick_costs(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("quick (your own small model on a CPU: 600-640 steps of 16 rows per run at lr 0.3, under a minute per "
            "run for a 2-layer model)") in text


@pytest.mark.parametrize("schedule, steps", [("linear", "total_steps (now 925)"), ("staircase", "hold_steps (now 33)")])
def test_an_undecided_run_says_which_of_its_settings_to_raise(schedule, steps):
    cfg = preset_config("quick", 0.5, schedule=schedule, levels=(0.5,), total_steps=925, hold_steps=33, lr=0.25)
    sel = GateSelection("topk", torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([1.0, 0.0]), undecided=5,
                        num_gates=6, expected_sparsity=0.5)
    (message,) = pruning_health(sel, cfg, 0.5).messages()
    assert message == ("undecided: 5 of 6 gates (83%) still between 0.05 and 0.95 at the end (more than 10%); "
                       f"raise {steps} or lr (now 0.25)")
    expected = dataclasses.replace(cfg, sparsity_estimate="expected")
    assert pruning_health(sel, expected, 0.5).messages()[0].endswith(
        f"raise {steps} or lr (now 0.25), or set sparsity_estimate=sample (now expected)")


# -- every command's preset table is typed ------------------------------------------------------------------------
@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("sparsity", [0.05, 0.5, 0.95])
def test_every_pruning_preset_builds_a_valid_config(preset, sparsity):
    cfg = preset_config(preset, sparsity, seed=2)
    for key, value in PRESETS[preset].items():
        assert getattr(cfg, key) == value


def test_a_wrongly_typed_preset_value_is_refused_naming_it(monkeypatch):
    monkeypatch.setitem(PRESETS, "quick", {**PRESETS["quick"], "batch_size": "sixteen"})
    with pytest.raises(SubnetlabError, match="batch_size"):
        preset_config("quick", 0.5)


def discovery(values):
    cs = {k: v for k, v in values.items() if k in {f.name for f in dataclasses.fields(ContinuousSparsification)}}
    return [ContinuousSparsification(**cs, l0_lambda=lam) for lam in values["lambdas"]]


def lottery(values):
    return LotteryPruneJobConfig.from_dict({"model": "m", "task": "nli-synthetic", "method": "importance", **values})


TABLES = {"discover": (DISCOVERY_PRESETS, discovery), "transfer": (TRANSFER_PRESETS, lambda v: TrainSettings(**v)),
          "lottery-prune": (LOTTERY_PRUNE_PRESETS, lottery)}


@pytest.mark.parametrize("command", sorted(TABLES))
def test_each_commands_paper_and_quick_presets_build_typed_settings(command):
    presets, build = TABLES[command]
    assert set(presets) == {"paper", "quick"}
    for name in presets:
        built = build(preset_values(presets, name, {}))
        assert built
    with pytest.raises(SubnetlabError, match="preset 'nosuch': expected one of paper, quick") as e:
        preset_values(presets, "nosuch", {})
    assert e.value.setting == "preset"


def test_given_values_win_over_the_preset_and_none_means_not_given():
    assert preset_values(TRANSFER_PRESETS, "quick", {"epochs": 3, "lr": None}) == {"epochs": 3, "lr": 1e-3,
                                                                                   "batch_size": 16, "patience": 5,
                                                                                   "min_delta": 0.01}


def test_paper_presets_keep_fixed_epochs_and_quick_stops_at_a_plateau():
    assert TrainSettings(**preset_values(TRANSFER_PRESETS, "paper", {})).plateau is None
    assert TrainSettings(**preset_values(TRANSFER_PRESETS, "quick", {})).plateau is not None
    assert all(cs.patience is None for cs in discovery(preset_values(DISCOVERY_PRESETS, "paper", {})))
    assert all(cs.patience == 10 and cs.epochs == 50 for cs in discovery(preset_values(DISCOVERY_PRESETS, "quick", {})))


def test_quick_is_smaller_than_paper_for_every_command():
    d = DISCOVERY_PRESETS
    assert d["quick"]["epochs"] * d["quick"]["samples"] * len(d["quick"]["lambdas"]) * 10 < (
        d["paper"]["epochs"] * d["paper"]["samples"] * len(d["paper"]["lambdas"]))
    assert TRANSFER_PRESETS["quick"]["epochs"] * 5 <= TRANSFER_PRESETS["paper"]["epochs"]
    paper, quick = lottery({}), lottery(LOTTERY_PRUNE_PRESETS["quick"])
    assert (paper.eval_limit, paper.max_length, paper.max_steps) == (None, 128, None)
    assert (quick.eval_limit, quick.max_length, quick.max_steps, quick.batch_size) == (300, 64, 10, 16)


@pytest.mark.parametrize("command, stated", [
    ("discover", "quick (your own small model on a CPU: 50 epochs of batches of 16 at lr 1e-2, 2,000 arithmetic rows"),
    ("transfer", "quick (your own small model on a CPU: 20 epochs of batches of 16 at lr 1e-3)"),
    ("lottery-prune", "quick (your own small model on a CPU: batches of 16 of 64 tokens, at most 300 development "
                      "examples and 10 pruning steps)"),
])
def test_each_commands_help_states_its_quick_preset(command, stated, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert stated in " ".join(capsys.readouterr().out.split())


# -- quick decides its gates -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    """A tiny BERT trained to tell which third of the vocabulary most of a sequence's tokens come from."""
    torch.set_num_threads(1)
    loaded = tiny_model("bert", seed=0, layers=2, heads=4, hidden=32)
    g = torch.Generator().manual_seed(0)
    n, t = 128, 8
    ids = torch.randint(3, VOCAB, (n, t), generator=g)
    bins = (ids - 3) * 3 // (VOCAB - 3)
    labels = torch.stack([(bins == c).sum(1) for c in range(3)], 1).argmax(1)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(n, t, dtype=torch.long)}
    model = loaded.model
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(40):
        idx = torch.randint(0, n, (32,), generator=g)
        loss = F.cross_entropy(model(input_ids=ids[idx], attention_mask=inputs["attention_mask"][idx]).logits, labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    for p in model.parameters():
        p.grad = None
    return loaded, PruningData.from_tensors(inputs), collect_means(loaded.model, loaded.adapter, [inputs])


def p_open_by_hand(log_alpha: float) -> float:
    """P(z > 0) of a hard-concrete gate (Louizos et al., eq. 12): 1 - sigmoid(beta * log(-l / r) - log_alpha)."""
    return 1.0 - 1.0 / (1.0 + math.exp(-(BETA * math.log(-LEFT / RIGHT) - log_alpha)))


def test_quick_decides_the_gates_of_a_tiny_model_on_target(trained):
    loaded, data, means = trained
    cfg = preset_config("quick", 0.5, seed=0)
    result = prune(loaded.model, loaded.adapter, data, cfg, ablation=means)
    probabilities = [p_open_by_hand(v) for v in result.gates.log_alpha.detach().tolist()]
    undecided = sum(0.05 < p < 0.95 for p in probabilities)
    assert len(probabilities) == 10 and result.selection.undecided == undecided
    assert undecided / len(probabilities) <= MAX_UNDECIDED_SHARE  # at most 1 of 10 gates left in the middle
    assert abs(1 - sum(probabilities) / len(probabilities) - 0.5) <= TARGET_TOLERANCE  # the gates reached 50%
    health = pruning_health(result.selection, cfg, 0.5, result.history)
    assert "undecided" not in health.problems and "off-target" not in health.problems
