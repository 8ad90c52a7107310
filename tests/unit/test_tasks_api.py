"""The Task API: batches, caching, task logits, predictions (HANS merge) and scores."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer

from subnetlab.errors import SubnetlabError
from subnetlab.models import resolve
from subnetlab.tasks import NLI2, NLI3, Example, Task, add_file_split, get_task, task_names
from tests.conftest import SHARED_DATA


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(resolve("minilm"))


def small_nli() -> Task:
    ex = [
        Example("A man sleeps .", "A man sleeps .", 0),
        Example("A long premise with many words in it .", "Short .", 1),
        Example("Dogs bark .", "Cats meow loudly .", 2),
    ]
    hans = [
        Example("The a saw the b .", "The b saw the a .", 1, subcase="ln_subject/object_swap", heuristic="lexical_overlap"),
        Example("The a slept .", "The a slept .", 0, subcase="ce_adverb", heuristic="constituent"),
        Example("The b slept .", "The b slept .", 0, subcase="ce_adverb", heuristic="constituent"),
        Example("Maybe c .", "C .", 1, subcase="cn_adverb", heuristic="constituent"),
    ]
    return Task("toy", "classification", NLI3, ex, {"id": ex, "hans": hans}, split_labels={"hans": NLI2})


def test_batches_match_the_tokenizer_and_pad_right(tok):
    task = small_nli()
    batch = next(task.batches(tok, "train", 3, max_length=16))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    for i, ex in enumerate(task.train):
        ref = tok(ex.text_a, ex.text_b, truncation=True, max_length=16)
        n = len(ref["input_ids"])
        assert batch["input_ids"][i, :n].tolist() == ref["input_ids"]
        assert batch["token_type_ids"][i, :n].tolist() == ref["token_type_ids"]
        assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (batch["input_ids"].shape[1] - n)
        assert (batch["input_ids"][i, n:] == tok.pad_token_id).all()
    assert batch["labels"].tolist() == [0, 1, 2]
    assert max(len(r) for r in task.encoded(tok, "train", 8).input_ids) == 8  # truncation
    assert set(Task.model_inputs(batch)) == {"input_ids", "attention_mask", "token_type_ids"}


def test_tokenization_is_cached_per_tokenizer_and_length(tok):
    task = small_nli()
    first = task.encoded(tok, "id", 32)
    assert task.encoded(tok, "id", 32) is first
    assert task.encoded(tok, "id", 16) is not first
    arith = get_task("arith:ab", n_train=1000, n_eval=3, n_test=3)
    assert arith.encoded(arith.tokenizer, "eval", 32) is not arith.encoded(tok, "eval", 32)


def test_shuffle_limit_and_generator(tok):
    task = get_task("nli-synthetic", n_train=50, n_eval=10, hans_per_subcase=1)
    order = lambda seed: torch.cat([b["labels"] for b in task.batches(tok, "train", 7, shuffle=True, generator=torch.Generator().manual_seed(seed))])  # noqa: E731
    assert torch.equal(order(0), order(0)) and not torch.equal(order(0), order(1))
    assert sorted(order(0).tolist()) == sorted(ex.label for ex in task.train)
    limited = list(task.batches(tok, "id", 4, limit=6))
    assert [len(b["labels"]) for b in limited] == [4, 2] and task.num_batches("id", 4, limit=6) == 2


def test_predictions_merge_neutral_and_contradiction_on_hans():
    task = small_nli()
    logits = torch.tensor([[0.1, 2.0, 0.0], [3.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.5, 0.4]])  # [B, 3]
    assert task.predictions(logits, "hans").tolist() == [1, 0, 1, 1]
    assert task.predictions(logits, "id").tolist() == [1, 0, 2, 1]
    with pytest.raises(SubnetlabError, match="2 labels but the logits have 4 columns"):
        task.predictions(torch.zeros(2, 4), "hans")


def test_scores_per_subcase_heuristic_and_label():
    task = small_nli()
    score = task.score(torch.tensor([1, 0, 1, 0]), "hans")
    assert score["accuracy"] == 0.5 and score["n"] == 4
    assert score["subcases"] == {"ln_subject/object_swap": 1.0, "ce_adverb": 0.5, "cn_adverb": 0.0}
    assert score["heuristics"] == {"lexical_overlap": 1.0, "constituent": 1 / 3}
    assert score["labels"] == {"non-entailment": 0.5, "entailment": 0.5}
    assert score["heuristic_labels"]["constituent/entailment"] == 0.5
    assert task.score([1, 0], "hans", limit=2)["accuracy"] == 1.0
    with pytest.raises(SubnetlabError, match="3 predictions for 4 examples"):
        task.score([0, 0, 0], "hans")


def test_task_logits_and_loss_for_both_kinds():
    task = small_nli()
    batch = {"labels": torch.tensor([0, 2])}
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    out = SimpleNamespace(logits=logits)
    assert torch.equal(task.task_logits(out, batch), logits)
    assert torch.isclose(task.loss(out, batch), torch.nn.functional.cross_entropy(logits, batch["labels"]))
    arith = get_task("arith:a+b", n_train=1000, n_eval=4, n_test=4)
    b = next(arith.batches(arith.tokenizer, "eval", 4))
    full = torch.randn(4, 3, len(arith.tokenizer))  # [B, T, V]
    tl = arith.task_logits(SimpleNamespace(logits=full), b)
    assert torch.equal(tl, full[:, 2, :7])  # answers are the tokens 0..6 at the last prompt position
    ref = torch.nn.functional.cross_entropy(full[:, 2], b["labels"])
    assert torch.isclose(arith.loss(SimpleNamespace(logits=full), b), ref)


def test_model_labels_and_registry_errors():
    task = small_nli()
    assert task.model_labels(3) == NLI3
    with pytest.raises(SubnetlabError, match="task toy has 3 labels .* but the model's head has 2 outputs"):
        task.model_labels(2)
    hans_file = SHARED_DATA / "hans" / "hans_subset_val.tsv"
    if hans_file.exists():
        hans = get_task("hans", eval=hans_file)
        assert hans.model_labels(3) == NLI3 and hans.model_labels(2) == NLI2
        add_file_split(task, "real-hans", "hans", hans_file)
        assert len(task.eval_splits["real-hans"]) == 7500
    with pytest.raises(SubnetlabError, match=r"unknown task 'mnlii' \(known: nli-synthetic, .*arith:<op>, file:<path>, hub:<name>"):
        get_task("mnlii")
    with pytest.raises(SubnetlabError, match="unknown option"):
        get_task("nli-synthetic", n_trian=5)
    with pytest.raises(SubnetlabError, match="task mnli reads its examples from data files and was given none"):
        get_task("mnli")
    with pytest.raises(SubnetlabError, match="unknown split 'dev'"):
        task.examples("dev")
    assert "paws-qqp" in task_names()
