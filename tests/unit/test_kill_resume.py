"""Kill and resume: a command SIGKILLed at a chosen write (``SUBNETLAB_TEST_KILL_AFTER_WRITE``), then rerun,
ends with the results of an uninterrupted run: every tensor bit-identical, every JSON result equal except timing
fields and the ``resumed_from`` record. The killed run is a real subprocess; the others run in this process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from subnetlab.cli import main
from tests.kill_helpers import assert_same_results, run_killed

NLI = ["--task", "nli-synthetic", "--task-option", "n_train=24", "--task-option", "n_eval=8",
       "--task-option", "hans_per_subcase=1"]


@pytest.fixture(autouse=True)
def one_thread(one_thread):
    yield


def run_here(args: list[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code in (0, None)


def kill_and_resume(args: list[str], tmp_path: Path, kill_after: str, *, unfinished: str = "metrics.json") -> int:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    run_here([*args, "--out", str(whole)])
    run_killed([*args, "--out", str(resumed)], str(resumed) + "/" + kill_after)
    assert not (resumed / unfinished).exists()  # really stopped before the end
    run_here([*args, "--out", str(resumed)])
    return assert_same_results(whole, resumed)


# --- transfer: one job per (condition, size, seed); killed as the third job starts -------------------------------


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory) -> dict[str, Path]:
    from transformers import GPT2LMHeadModel

    from subnetlab.methods.finetune.model import arithmetic_gpt2_config
    from subnetlab.models import get_adapter
    from subnetlab.subnetwork import Subnetwork

    root = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(arithmetic_gpt2_config(2, 23, 21))
    model.save_pretrained(root / "model")
    adapter = get_adapter(model)
    g = torch.Generator().manual_seed(0)
    masks = {n: torch.rand(adapter.parameter(n).shape, generator=g) < 0.3 for n in adapter.weight_matrices()}
    Subnetwork.from_weight_masks(adapter, masks, method="continuous-sparsification").save(root / "sub.safetensors")
    return {"model": root / "model", "sub": root / "sub.safetensors"}


def test_transfer_killed_as_a_run_starts_resumes_to_the_same_results(gpt2_files, tmp_path: Path) -> None:
    args = ["transfer", "--model", str(gpt2_files["model"]), "--subnetwork", str(gpt2_files["sub"]),
            "--task", "arith:a^2+ab", "--condition", "subnetwork,scratch", "--disambiguation", "0,10",
            "--seeds", "0", "--task-option", "n_eval=10", "--task-option", "n_test=10", "--epochs", "2",
            "--device", "cpu"]
    assert kill_and_resume(args, tmp_path, "*/config.json#3") >= 9


# --- lottery-prune: one job; killed after the subnetwork, before its controls ------------------------------------


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    where = tmp_path_factory.mktemp("bert") / "model"
    torch.manual_seed(0)
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=3, initializer_range=0.3,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    BertForSequenceClassification(config).save_pretrained(where)
    word_tokenizer().save_pretrained(where)
    return where


@pytest.mark.parametrize("method, kill_after, replayed", [
    ("importance", "subnetwork.safetensors", None), ("magnitude", "subnetwork.safetensors", None),
    ("importance", "evaluations.json#3", 3), ("magnitude", "evaluations.json#2", 2)])
def test_lottery_prune_killed_mid_run_resumes_to_the_same_results(method, kill_after, replayed, bert_dir: Path,
                                                                  tmp_path: Path) -> None:
    """Killed after the subnetwork (before its controls), or inside the pruning loop right after an evaluation (the
    full model's, then each step's): the rerun replays the recorded evaluations (``resumed_from``) and ends with
    the uninterrupted run's files."""
    args = ["lottery-prune", "--model", str(bert_dir), *NLI, "--method", method, "--batch-size", "8",
            "--max-length", "32", "--threshold", "0.5", "--fraction", "0.25", "--max-steps", "3", "--device", "cpu"]
    assert kill_and_resume(args, tmp_path, kill_after) >= 5
    whole = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    resumed = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert whole["resumed_from"] == 0 and resumed["resumed_from"] == (replayed or 1 + len(whole["steps"]))
    assert len(whole["steps"]) >= 2  # the kill inside the loop fell between two pruning steps


# --- effective-size: staircases with training checkpoints; killed after the second checkpoint written -------------


@pytest.fixture(scope="module")
def finetune_run(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from subnetlab.models import resolve
    from subnetlab.tasks import NLI3

    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    run = tmp_path_factory.mktemp("ft")
    for step, seed in ((10, 0), (20, 1)):
        torch.manual_seed(seed)
        config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64, num_labels=3, initializer_range=0.3,
                            id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
        where = run / "checkpoints" / f"step-{step}"
        BertForSequenceClassification(config).eval().save_pretrained(where)
        tok.save_pretrained(where)
        (where / "trainer_state.json").write_text("{}")
    return run


SMALL = dict(batch_size=8, train_limit=32, means_examples=16, eval_batch_size=16, max_length=24, ramp_steps=3,
             hold_steps=2, first_ramp_steps=4, checkpoint_every=3, init_log_alpha=1.0, lr=0.3)


@pytest.mark.parametrize("search", [[], ["--early-stop", "--warm-start"]], ids=["every-level", "search"])
def test_effective_size_killed_mid_training_resumes_to_the_same_results(search, finetune_run: Path,
                                                                         tmp_path: Path) -> None:
    args = ["effective-size", "--checkpoints", str(finetune_run), *NLI, "--seeds", "2", "--preset", "demo",
            "--levels", "0.1:0.3:0.1", "--on", "id,ood", "--subcases", "all", *search,
            *[x for k, v in SMALL.items() for x in ("--set", f"{k}={v}")]]
    assert kill_and_resume(args, tmp_path, "*/checkpoint.json#2") >= 10
    if not search:  # the killed staircase went on from its checkpoint, not from step 0
        resumed = [json.loads(p.read_text()).get("resumed_from") for p in (tmp_path / "resumed").rglob("seed-*/metrics.json")]
        assert sum(1 for r in resumed if r) == 1, resumed


# --- reproduce subtask-induction --preset demo, at a tiny size: killed after discovery, before its metrics ---------

# cs_lr 0.2: one step opens part of the masks (from -0.1); at 1e-3 every mask stays closed and transfer refuses the
# empty subnetwork (subnetlab.runs.health)
TINY_STUDY = {"base_train": 64, "max_number": 20, "base_epochs": 1, "cs_samples": 64, "cs_epochs": 1, "cs_lr": 0.2,
              "lambdas": "[1e-6]",
              "sizes": "[10]", "seeds": "[0]", "conditions": "[subnetwork,scratch]", "transfer_epochs": 2,
              "transfer_min_steps": 0, "transfer_evals": 2, "n_eval": 20, "n_test": 20, "secondary_conditions": "[]",
              "backend": "local", "jobs": 1}


def test_reproduce_subtask_induction_demo_killed_after_discovery_resumes_to_the_same_results(tmp_path: Path) -> None:
    args = ["reproduce", "subtask-induction", "--preset", "demo",
            *[x for k, v in TINY_STUDY.items() for x in ("--set", f"{k}={v}")]]
    assert kill_and_resume(args, tmp_path, "*/discover/*/subnetwork.safetensors") >= 12


def test_evaluation_journal_replays_what_it_recorded_then_measures(tmp_path: Path) -> None:
    from subnetlab.runs.lottery import EvaluationJournal

    calls: list[int] = []

    def measure() -> float:
        calls.append(1)
        return 0.1 * len(calls)

    first = EvaluationJournal(tmp_path / "evaluations.json", measure)
    assert [first(), first()] == [0.1, 0.2] and first.replayed == 0
    again = EvaluationJournal(tmp_path / "evaluations.json", measure)  # a rerun: the same calls in the same order
    assert [again(), again()] == [0.1, 0.2] and again.replayed == 2 and len(calls) == 2  # nothing measured twice
    assert again() == 0.1 * 3 and len(calls) == 3
    assert json.loads((tmp_path / "evaluations.json").read_text()) == {"values": [0.1, 0.2, 0.1 * 3]}
