"""Search controls (methods.controls): the random-weights model, shuffled answers, the verdict; circuits'
stability over seeds (analysis.stability.mask_stability); the controls of `subnetlab circuit` end to end."""

from __future__ import annotations

import json
import statistics
from collections import Counter

import pytest
import torch

from subnetlab.analysis.stability import bootstrap_interval, mask_stability, score_over_circuits
from subnetlab.errors import SubnetlabError
from subnetlab.methods.controls import (
    apply_control,
    check_controls,
    control_init_seed,
    control_verdict,
    permutation,
    reinitialised,
    shuffle_labels,
)
from subnetlab.tasks.base import Example, Task
from subnetlab.tasks.registry import get_task
from tests.conftest import tiny_model


# ---------------------------------------------------------------- random weights
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_random_weights_is_the_same_config_initialised_afresh_by_its_seed(family):
    trained = tiny_model(family, seed=3)
    with torch.no_grad():  # as if trained: no initialiser gives these weights
        for p in trained.model.parameters():
            p.add_(0.01)
    control = reinitialised(trained, seed=5)
    assert type(control.model) is type(trained.model)
    assert control.model.config.to_dict() == trained.model.config.to_dict()
    mine, theirs = control.model.state_dict(), trained.model.state_dict()
    assert mine.keys() == theirs.keys()
    assert any(not torch.equal(mine[k], theirs[k]) for k in mine)
    independent = tiny_model(family, seed=control_init_seed(5)).model.state_dict()  # its initialiser, seeded alike
    assert all(torch.equal(mine[k], independent[k]) for k in mine)
    again = reinitialised(trained, seed=5).model.state_dict()
    assert all(torch.equal(mine[k], again[k]) for k in mine)
    assert control.adapter.model is control.model and not control.model.training


def test_an_untrained_model_built_from_the_run_seed_gets_a_control_that_differs():
    built = tiny_model("gpt2", seed=0)  # a scratch model from seed 0, searched with run seed 0
    mine, theirs = reinitialised(built, seed=0).model.state_dict(), built.model.state_dict()
    assert any(not torch.equal(mine[k], theirs[k]) for k in mine)
    assert control_init_seed(0) != 0 and control_init_seed(0) != control_init_seed(1)


def test_a_control_that_would_rebuild_the_model_itself_is_refused():
    built = tiny_model("gpt2", seed=control_init_seed(7))  # the one seed whose control equals the model
    with pytest.raises(SubnetlabError, match="model's own weights") as e:
        reinitialised(built, seed=7)
    assert e.value.setting == "control"


# --------------------------------------------------------------- shuffled labels
def test_shuffled_labels_are_a_seeded_permutation_within_each_split():
    def labels(task):
        return {s: [e.label for e in task.examples(s)] for s in task.split_names}

    def texts(task):
        return {s: [(e.text_a, e.text_b) for e in task.examples(s)] for s in task.split_names}

    real = get_task("nli-synthetic", n_train=40, n_eval=30, hans_per_subcase=1, seed=0)
    a = shuffle_labels(get_task("nli-synthetic", n_train=40, n_eval=30, hans_per_subcase=1, seed=0), seed=1)
    b = shuffle_labels(get_task("nli-synthetic", n_train=40, n_eval=30, hans_per_subcase=1, seed=0), seed=1)
    c = shuffle_labels(get_task("nli-synthetic", n_train=40, n_eval=30, hans_per_subcase=1, seed=0), seed=2)
    assert texts(a) == texts(real)  # the same inputs
    for split, want in labels(real).items():
        assert Counter(labels(a)[split]) == Counter(want)  # the same multiset
        order = permutation(len(want), 1 + real.split_names.index(split))
        assert labels(a)[split] == [want[j] for j in order]  # the documented permutation
    assert labels(a) == labels(b) and labels(a) != labels(c) and labels(a) != labels(real)


def test_one_label_cannot_be_shuffled():
    task = Task("one", "classification", ["yes", "no"], [Example(f"x{i}", None, 0) for i in range(5)],
                {"eval": [Example(f"y{i}", None, 0) for i in range(3)]})
    with pytest.raises(SubnetlabError, match="same answer") as e:
        shuffle_labels(task, seed=0)
    assert e.value.setting == "control"


def test_circuit_answers_move_across_pairs_with_their_wrong_answers():
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    real = get_task("circuit:ioi", n_train=12, n_eval=6).bind(tok)
    task = get_task("circuit:ioi", n_train=12, n_eval=6).bind(tok)
    apply_control("shuffled-labels", None, task, seed=4)
    for k, split in enumerate(task.split_names):
        n = len(real.pairs(split))
        order = permutation(n, 4 + k)
        before, after = real.pair_batch(tok, split, range(n)), task.pair_batch(tok, split, range(n))
        assert torch.equal(after["input_ids"], before["input_ids"])
        assert torch.equal(after["corrupted_input_ids"], before["corrupted_input_ids"])
        assert after["answer_id"].tolist() == [before["answer_id"][j] for j in order]
        assert after["wrong_id"].tolist() == [before["wrong_id"][j] for j in order]
        assert [e.label for e in task.examples(split)] == [real.examples(split)[j].label for j in order]


def test_controls_are_named_once_and_unknown_ones_refused():
    """In the order given; a control named twice or an empty name is refused (issue 53), not silently dropped."""
    assert check_controls(["shuffled-labels", "random-weights"]) == ("shuffled-labels", "random-weights")
    with pytest.raises(SubnetlabError, match="control shuffled-labels given twice: each once"):
        check_controls(["shuffled-labels", "random-weights", "shuffled-labels"])
    with pytest.raises(SubnetlabError, match="control '': an empty name"):
        check_controls([""])
    with pytest.raises(SubnetlabError, match="expected one of random-weights, shuffled-labels"):
        check_controls(["random"])


# ----------------------------------------------------------------------- verdict
def test_verdict_beats_every_control_only_beyond_the_seed_spread():
    real = [0.9, 0.8, 1.0]  # mean 0.9, sd 0.1
    far = {"random-weights": [0.1, 0.2, 0.0], "shuffled-labels": [0.3, 0.3, 0.3]}  # gaps 0.8, 0.6; margins 0.2, 0.1
    v = control_verdict(real, far)
    assert v["beats"] is True
    assert v["controls"]["random-weights"]["gap"] == pytest.approx(0.8)
    assert v["controls"]["random-weights"]["margin"] == pytest.approx(0.2)
    assert v["controls"]["shuffled-labels"]["margin"] == pytest.approx(0.1)
    near = {"random-weights": [0.1, 0.2, 0.0], "shuffled-labels": [0.75, 0.75, 0.75]}  # gap 0.15 > 0.1 + 0
    assert control_verdict(real, near)["beats"] is True
    within = {"random-weights": [0.1, 0.2, 0.0], "shuffled-labels": [0.85, 0.65, 0.75]}  # gap 0.15 < 0.1 + 0.1
    v = control_verdict(real, within)
    assert v["beats"] is False and "shuffled-labels" in v["reason"] and "random-weights" not in v["reason"]
    assert control_verdict([0.9], far)["beats"] is None  # one seed: no spread
    assert control_verdict(real, {"random-weights": []})["beats"] is None
    lower = control_verdict([0.1, 0.2], {"random-weights": [0.9, 1.0]}, higher_is_better=False)  # e.g. KL
    assert lower["beats"] is True and lower["controls"]["random-weights"]["gap"] == pytest.approx(0.8)
    assert v["real"]["sd"] == pytest.approx(statistics.stdev(real))


# --------------------------------------------------------------------- stability
def test_mask_stability_by_hand():
    names = ["e0", "e1", "e2", "e3"]
    masks = [torch.tensor([1, 1, 0, 0]), torch.tensor([1, 0, 1, 0]), torch.tensor([1, 1, 0, 0])]
    s = mask_stability(masks, names, [0.5, 0.7, 0.6], seed=0, resamples=500)
    assert s["pairwise_jaccard"][0][1] == pytest.approx(1 / 3) and s["pairwise_jaccard"][0][2] == 1.0
    assert s["mean_jaccard"] == pytest.approx((1 / 3 + 1 + 1 / 3) / 3) and s["min_jaccard"] == pytest.approx(1 / 3)
    assert s["frequency"] == pytest.approx({"e0": 1.0, "e1": 2 / 3, "e2": 1 / 3})
    assert s["kept_in_every"] == 1 and s["kept_in_any"] == 3 and s["kept"] == [2, 2, 2]
    assert "bootstrap_95" not in s["score"]  # three values: no interval, their n and range
    assert s["score"]["n"] == 3 and s["score"]["range"] == [0.5, 0.7] and s["score"]["mean"] == pytest.approx(0.6)
    assert "fewer than 5 values give no interval" in score_over_circuits(s["score"])
    s = mask_stability(masks * 2, names, [0.5, 0.7, 0.6, 0.55, 0.65, 0.6], seed=0, resamples=500)
    low, high = s["score"]["bootstrap_95"]
    assert 0.5 <= low <= 0.6 <= high <= 0.7
    assert bootstrap_interval([0.5, 0.7, 0.6, 0.55, 0.65, 0.6], 0, resamples=500) == (low, high)  # seeded: again
    assert "95% bootstrap over 6 seeds" in score_over_circuits(s["score"])
    assert bootstrap_interval([0.4, 0.4], 3) == (pytest.approx(0.4), pytest.approx(0.4))


# ----------------------------------------------------------------- end to end
def test_circuit_controls_run_beside_the_search_and_are_measured_as_it_is(tmp_path, capsys, one_thread):
    """Each control is a full run directory; its circuit, re-measured here on an independently re-initialised
    model (the control's own seed), gives the logit difference its metrics report; DIR/metrics.json compares."""
    from transformers import GPT2Config

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.cli import main
    from subnetlab.models import build_model, get_adapter
    from subnetlab.subnetwork import Subnetwork
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    build_model(config, head="causal-lm", seed=11).model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as e:
        main(["circuit", "--model", str(tmp_path / "model"), "--task", "circuit:ioi", "--task-option", "n_train=8",
              "--task-option", "n_eval=6", "--sparsity", "0.9", "--seeds", "0,1", "--preset", "demo", "--set",
              "total_steps=4", "--set", "warmup_steps=2", "--set", "batch_size=4", "--set", "checkpoint_every=4",
              "--control", "random-weights,shuffled-labels", "--out", str(out)])
    printed = capsys.readouterr().out
    assert e.value.code == 0
    run = out / "controls" / "random-weights" / "sparsity-0.900" / "seed-1"
    metrics = json.loads((run / "metrics.json").read_text())
    assert json.loads((run / "config.json").read_text())["control"] == "random-weights"
    assert metrics["control"] == "random-weights" and "health" in metrics

    model = build_model(GPT2Config.from_pretrained(tmp_path / "model"), head="causal-lm",
                        seed=control_init_seed(1)).model
    task = get_task("circuit:ioi", n_train=8, n_eval=6).bind(tok)
    sub = Subnetwork.load(run / "subnetwork.safetensors")
    evaluate = edge_evaluator(model, get_adapter(model), sub.graph(), task, tok, "eval")
    assert evaluate(sub.edges.bool())["logit_diff"] == pytest.approx(metrics["eval"]["logit_diff"], abs=1e-4)

    summary = json.loads((out / "metrics.json").read_text())["targets"]["0.900"]
    real = [json.loads((out / "sparsity-0.900" / f"seed-{s}" / "metrics.json").read_text()) for s in (0, 1)]
    assert summary["real"]["score"] == [m["eval"]["logit_diff"] for m in real]
    assert summary["random-weights"]["score"][1] == metrics["eval"]["logit_diff"]
    assert set(summary["verdict"]["controls"]) == {"random-weights", "shuffled-labels"}
    assert summary["stability"]["seeds"] == [0, 1] and len(summary["stability"]["pairwise_jaccard"]) == 2
    assert "beats both controls beyond the seed spread" in printed and "mean pairwise Jaccard" in printed

    from subnetlab.executor.results import results_table

    table = results_table(out)
    sweep = table[table["run_dir"] == "."]
    assert set(sweep["command"]) == {"circuit"}
    jaccard = sweep[sweep["metric_path"] == "targets.0.900.stability.mean_jaccard"]["value"].tolist()
    assert jaccard == [pytest.approx(summary["stability"]["mean_jaccard"])]
    controls = table[table["run_dir"].str.startswith("controls/")]
    assert set(controls["run_dir"]) == {f"controls/{c}/sparsity-0.900/seed-{s}" for c in ("random-weights",
                                        "shuffled-labels") for s in (0, 1)}


def test_prune_controls_run_beside_the_search_and_stay_out_of_its_summary(tmp_path, capsys, one_thread):
    from transformers import BertConfig, BertForSequenceClassification

    from subnetlab.cli import main
    from subnetlab.run_directory import resolve_run_path
    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    torch.manual_seed(0)
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=3,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    BertForSequenceClassification(config).save_pretrained(tmp_path / "bert")
    word_tokenizer().save_pretrained(tmp_path / "bert")
    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as e:
        main(["prune", "--model", str(tmp_path / "bert"), "--task", "nli-synthetic", "--task-option", "n_train=24",
              "--task-option", "n_eval=12", "--task-option", "hans_per_subcase=1", "--sparsity", "0.5", "--seeds",
              "0,1", "--preset", "demo", "--set", "first_ramp_steps=2", "--set", "ramp_steps=2", "--set",
              "hold_steps=2", "--set", "batch_size=8", "--set", "means_examples=16",
              "--control", "shuffled-labels", "--control", "random-weights", "--out", str(out)])
    printed = capsys.readouterr().out
    assert e.value.code == 0
    for control in ("shuffled-labels", "random-weights"):
        run = out / "controls" / control / "sparsity-0.50" / "seed-1"
        config = json.loads((run / "config.json").read_text())
        assert config["control"] == control and json.loads((run / "metrics.json").read_text())["control"] == control
        assert resolve_run_path(config["cache_dir"], run) == str((out / "controls" / control / "cache").resolve())
    summary = json.loads((out / "summary.json").read_text())
    assert summary  # the real runs' Table 5 summary, controls left out
    compared = json.loads((out / "metrics.json").read_text())["targets"]["0.500"]
    real = [json.loads((out / "sparsity-0.50" / f"seed-{s}" / "metrics.json").read_text()) for s in (0, 1)]
    split = compared["real"]["split"][0]
    assert compared["real"]["score"] == [m["eval"][split]["accuracy"] for m in real]
    assert set(compared) >= {"real", "random-weights", "shuffled-labels", "verdict"}
    assert "beats both controls beyond the seed spread" in printed


def test_the_api_runs_the_controls_as_the_command_does(tmp_path, one_thread):
    """``sl.circuit(controls=...)`` builds the same sweep as ``circuit --control`` and writes the same comparison."""
    from transformers import GPT2Config

    import subnetlab as sl
    from subnetlab.cli import main
    from subnetlab.models import build_model
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32)
    build_model(config, head="causal-lm", seed=11).model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    settings = {"total_steps": 4, "warmup_steps": 2, "batch_size": 4, "checkpoint_every": 4}
    r = sl.circuit(str(tmp_path / "model"), "circuit:ioi", tmp_path / "api", task_options={"n_train": 8, "n_eval": 6},
                   sparsity=0.9, preset="demo", controls=["random-weights"], **settings)
    with pytest.raises(SystemExit) as done:
        main(["circuit", "--model", str(tmp_path / "model"), "--task", "circuit:ioi", "--task-option", "n_train=8",
              "--task-option", "n_eval=6", "--sparsity", "0.9", "--preset", "demo",
              *[a for k, v in settings.items() for a in ("--set", f"{k}={v}")], "--control", "random-weights",
              "--out", str(tmp_path / "cli")])
    assert done.value.code in (0, None)
    cli = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    assert r["controls"] == cli["targets"] and set(r["controls"]["0.900"]) >= {"real", "random-weights"}
    assert list(r["summary"]) == ["sparsity-0.900/seed-0"]


# ------------------------------------------------ discover and lottery-prune (selected runs)
ARITH = {"n_train": 40, "n_eval": 10, "n_test": 10}
DISCOVER = ["--lambdas", "1e-7,1e-8", "--epochs", "1", "--lr", "0.01", "--batch-size", "20", "--include", "attention",
            "--keep", "last", "--init", "0.05", "--seed", "2"]  # from init 0.05 one epoch keeps some weights


def _arith_lm(where):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=23, n_embd=16, n_layer=1, n_head=2, n_positions=8)).save_pretrained(where)
    return where


def test_discover_controls_sweep_and_choose_as_the_real_run_does(tmp_path, capsys, one_thread):
    """Each control's lambda sweep is a full run directory per lambda; the control's chosen mask, re-measured
    here on an independently re-initialised model, gives the test accuracy compared in DIR/controls/metrics.json;
    the shuffled control's full model scores the real model on answers shuffled here."""
    from transformers import GPT2Config

    from subnetlab.cli import main
    from subnetlab.intervene import mask_weights
    from subnetlab.methods.continuous_sparsification import LambdaChoice
    from subnetlab.models import build_model
    from subnetlab.runs.transfer import load_lm, select_best
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.transfer.data import lm_split
    from subnetlab.transfer.train import accuracy

    lm, out = _arith_lm(tmp_path / "lm"), tmp_path / "d"
    with pytest.raises(SystemExit) as e:
        main(["discover", "--model", str(lm), "--task", "arith:ab",
              *[a for k, v in ARITH.items() for a in ("--task-option", f"{k}={v}")], *DISCOVER,
              "--control", "random-weights,shuffled-labels", "--out", str(out)])
    printed = capsys.readouterr().out
    assert e.value.code in (0, None)
    runs = {}
    for control in ("random-weights", "shuffled-labels"):
        for lam in ("1e-07", "1e-08"):
            run = out / "controls" / control / f"lambda_{lam}"
            assert json.loads((run / "config.json").read_text())["control"] == control
            metrics = json.loads((run / "metrics.json").read_text())
            assert metrics["control"] == control and "health" in metrics
            assert (run / "subnetwork.safetensors").is_file()
            runs.setdefault(control, []).append(metrics)
    chosen = {c: select_best(m, LambdaChoice()) for c, m in runs.items()}  # the command's default rule

    real, task = load_lm(str(lm), "arith:ab", {"seed": 2, **ARITH})
    test = lm_split(task, "test")
    fresh = build_model(GPT2Config.from_pretrained(lm), head="causal-lm", seed=control_init_seed(2)).model.eval()
    sub = Subnetwork.load(chosen["random-weights"]["subnetwork"])
    with mask_weights(fresh, dict(sub.weights)):
        assert accuracy(fresh, test) == pytest.approx(chosen["random-weights"]["test_accuracy"])
    shuffled = shuffle_labels(load_lm(str(lm), "arith:ab", {"seed": 2, **ARITH})[1], seed=2)
    assert accuracy(real.model, lm_split(shuffled, "test")) == pytest.approx(
        chosen["shuffled-labels"]["full_model_test_accuracy"])

    compared = json.loads((out / "controls" / "metrics.json").read_text())
    assert compared["command"] == "discover" and compared["controls"] == ["random-weights", "shuffled-labels"]
    entry = compared["targets"]["selected"]
    summary = json.loads((out / "metrics.json").read_text())  # the real run's result, controls left out
    assert [row["l0_lambda"] for row in summary["sweep"]] == [1e-7, 1e-8]
    assert entry["real"]["score"] == [summary["test_accuracy"]]
    assert entry["real"]["kept_percent"] == [summary["kept_percent"]]
    for control, m in chosen.items():
        assert entry[control]["score"] == [m["test_accuracy"]] and entry[control]["kept_percent"] == [m["kept_percent"]]
        assert entry[control]["density"] == [pytest.approx(m["kept_percent"] / 100)]
    assert entry["verdict"]["beats"] is None  # one seed: no spread to judge by, and it says so
    assert "controls at the selected lambda" in printed and "undecided (1 real seed(s)" in printed

    found = __import__("subnetlab").discover(str(lm), "arith:ab", tmp_path / "api", lambdas=[1e-7, 1e-8], seed=2,
                                             task_options=ARITH, epochs=1, lr=0.01, batch_size=20,
                                             include=["attention"], keep="last", init=0.05,
                                             controls=["random-weights", "shuffled-labels"])
    assert found["controls"] == compared["targets"]  # sl.discover(controls=) is the command's sweep
    assert found["test_accuracy"] == summary["test_accuracy"] and len(found["sweep"]) == 2


def test_lottery_prune_controls_prune_alike_and_are_compared(tmp_path, capsys, one_thread):
    """Each control is the same importance pruning in a full run directory of its own; its full model is measured
    again here: the model re-initialised from its config, or the real model on answers shuffled here."""
    from transformers import BertConfig, BertForSequenceClassification

    from subnetlab.cli import main
    from subnetlab.methods.evaluate import evaluate
    from subnetlab.models import build_model, load_model
    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    torch.manual_seed(7)  # not the control's seed (0): the re-initialised model is another model
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=3, initializer_range=1.0,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    BertForSequenceClassification(config).save_pretrained(tmp_path / "bert")
    tok = word_tokenizer()
    tok.save_pretrained(tmp_path / "bert")
    out = tmp_path / "lottery"
    options = {"n_train": 24, "n_eval": 24, "hans_per_subcase": 1}
    with pytest.raises(SystemExit) as e:
        main(["lottery-prune", "--model", str(tmp_path / "bert"), "--task", "nli-synthetic",
              *[a for k, v in options.items() for a in ("--task-option", f"{k}={v}")], "--method", "importance",
              "--preset", "quick", "--max-steps", "3", "--threshold", "0.5", "--device", "cpu",
              "--control", "shuffled-labels", "--control", "random-weights", "--out", str(out)])
    printed = capsys.readouterr().out
    assert e.value.code in (0, None)
    real = json.loads((out / "metrics.json").read_text())
    runs = {}
    for control in ("shuffled-labels", "random-weights"):
        run = out / "controls" / control
        assert json.loads((run / "config.json").read_text())["control"] == control
        runs[control] = json.loads((run / "metrics.json").read_text())
        assert runs[control]["control"] == control and "health" in runs[control]
        assert {"subnetwork.safetensors", "random.safetensors", "bad.safetensors",
                "importance.safetensors"} <= {p.name for p in run.iterdir()}

    from subnetlab.tasks.spec import TaskSpec

    tok = load_model(str(tmp_path / "bert"), head="classification").tokenizer  # as saved and read back
    task = TaskSpec("nli-synthetic", options).build()
    fresh = build_model(BertConfig.from_pretrained(tmp_path / "bert"), head="classification",
                        seed=control_init_seed(0)).model.eval()
    split = real["split"]
    again = evaluate(fresh, tok, task, [split], batch_size=32, max_length=64, limit=300)[split]["accuracy"]
    assert runs["random-weights"]["full_metric"] == pytest.approx(again)
    trained = BertForSequenceClassification.from_pretrained(tmp_path / "bert").eval()
    shuffled = shuffle_labels(TaskSpec("nli-synthetic", options).build(), seed=0)
    again = evaluate(trained, tok, shuffled, [split], batch_size=32, max_length=64, limit=300)[split]["accuracy"]
    assert runs["shuffled-labels"]["full_metric"] == pytest.approx(again)

    compared = json.loads((out / "controls" / "metrics.json").read_text())
    entry = compared["targets"]["importance"]
    assert compared["command"] == "lottery-prune" and entry["score"] == "accuracy"
    assert entry["real"]["score"] == [real["metric"]] and entry["real"]["density"] == [pytest.approx(1 - real["sparsity"])]
    for control, m in runs.items():
        assert entry[control]["score"] == [m["metric"]] and entry[control]["full_metric"] == [m["full_metric"]]
    assert "controls at importance pruning" in printed
    assert all(m["full_metric"] != real["full_metric"] for m in runs.values())  # each control scores otherwise
