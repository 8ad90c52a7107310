"""evaluate(): agreement with a hand loop, label-order matching, HANS merging, gated models, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.methods.evaluate import evaluate, label_permutation, subnetwork_context
from subnetlab.models import get_adapter, resolve
from subnetlab.subnetwork import Subnetwork
from subnetlab.tasks import NLI2, NLI3, Example, Task
from tests.conftest import SHARED_DATA


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(resolve("minilm"))


def tiny_bert(tok, num_labels: int = 3, seed: int = 0) -> BertForSequenceClassification:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, num_labels=num_labels, initializer_range=0.5)
    return BertForSequenceClassification(config).eval()


def toy_task() -> Task:
    words = ["the cat sat", "a dog ran far away", "birds sing", "the man saw the woman", "rain", "it is cold today"]
    ex = [Example(a, b, i % 3) for i, (a, b) in enumerate(zip(words, reversed(words)))]
    hans = [Example(a, b, i % 2, subcase=f"sub{i % 3}", heuristic="h") for i, (a, b) in enumerate(zip(words, words[1:]))]
    return Task("toy", "classification", NLI3, ex, {"id": ex, "hans": hans}, split_labels={"hans": NLI2})


def hand_predictions(model, tok, examples, merge: bool) -> list[int]:
    preds = []
    with torch.no_grad():
        for ex in examples:
            logits = model(**tok(ex.text_a, ex.text_b, return_tensors="pt")).logits[0]
            p = int(logits.argmax())
            preds.append(int(p != 0) if merge else p)
    return preds


def test_matches_a_hand_loop_per_example(tok):
    model, task = tiny_bert(tok), toy_task()
    model.train()
    scores = evaluate(model, tok, task, batch_size=4)  # padded batches vs one example at a time
    assert model.training  # mode restored
    for split, merge in (("id", False), ("hans", True)):
        preds = hand_predictions(model.eval(), tok, task.eval_splits[split], merge)
        gold = [ex.label for ex in task.eval_splits[split]]
        assert scores[split]["accuracy"] == pytest.approx(sum(p == g for p, g in zip(preds, gold)) / len(gold))
    sub = {f"sub{k}": [] for k in range(3)}
    preds = hand_predictions(model, tok, task.eval_splits["hans"], True)
    for ex, p in zip(task.eval_splits["hans"], preds):
        sub[ex.subcase].append(p == ex.label)
    assert scores["hans"]["subcases"] == {k: pytest.approx(sum(v) / len(v)) for k, v in sub.items()}


def test_label_names_reorder_columns(tok):
    task = toy_task()
    model = tiny_bert(tok)
    plain = evaluate(model, tok, task, splits=["id"])["id"]
    model.config.id2label = {0: "contradiction", 1: "entailment", 2: "neutral"}  # a hub MNLI order
    assert label_permutation(model, task) == [1, 2, 0]
    shuffled = evaluate(model, tok, task, splits=["id"])["id"]
    perm = torch.tensor([1, 2, 0])
    preds = torch.tensor(hand_predictions(model, tok, task.eval_splits["id"], False))
    remapped = perm.argsort()[preds]  # column c of the model is task label perm^-1[c]
    assert shuffled["accuracy"] == pytest.approx(float((remapped == torch.tensor([e.label for e in task.eval_splits["id"]])).float().mean()))
    assert plain["n"] == shuffled["n"]
    with pytest.raises(SubnetlabError, match="head has 2 outputs"):
        evaluate(tiny_bert(tok, num_labels=2), tok, task)


def test_gated_evaluation_uses_the_subnetwork(tok):
    model, task = tiny_bert(tok), toy_task()
    adapter = get_adapter(model)
    full = evaluate(model, tok, task)
    keep_all = Subnetwork.structured(adapter, torch.ones(2, 4), torch.ones(2), ablation="zero")
    with subnetwork_context(model, adapter, keep_all):
        assert evaluate(model, tok, task) == full
    logits = lambda: model(**tok([e.text_a for e in task.train], padding=True, return_tensors="pt")).logits  # noqa: E731
    with torch.no_grad():
        before = logits()
        none = Subnetwork.structured(adapter, torch.zeros(2, 4), torch.zeros(2), ablation="zero")
        with subnetwork_context(model, adapter, none):
            closed = logits()
        assert torch.equal(logits(), before)  # hooks removed
    assert not torch.allclose(before, closed)
    with pytest.raises(SubnetlabError, match="mean ablation needs mean activations"):
        subnetwork_context(model, adapter, Subnetwork.structured(adapter, torch.ones(2, 4), ablation="mean"))


def test_cli_evaluate_on_real_hans_and_bad_input(tok, tmp_path, capsys):
    hans = SHARED_DATA / "hans" / "hans_subset_val.tsv"
    if not hans.exists():
        pytest.skip("../shared/data is absent")
    model_dir = tmp_path / "model"
    m = tiny_bert(tok)
    m.config.id2label = dict(enumerate(NLI3))
    m.config.label2id = {k: i for i, k in enumerate(NLI3)}
    m.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--model", str(model_dir), "--task", "hans", "--data", str(hans), "--limit", "60", "--out", str(tmp_path / "ev")])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "ln_subject/object_swap" in out and "ce_adverb" in out
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["hans"]["n"] == 60 and len(metrics["hans"]["subcases"]) == 30
    # the same model as a subnetwork with every head of layer 1 mean-ablated
    heads = torch.ones(2, 4)
    heads[1] = 0
    Subnetwork.structured(get_adapter(m), heads, ablation="mean").save(tmp_path / "sub.safetensors")
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--model", str(model_dir), "--task", "hans", "--data", str(hans), "--limit", "60",
              "--subnetwork", str(tmp_path / "sub.safetensors"), "--means-examples", "30", "--out", str(tmp_path / "ev-sub")])
    assert done.value.code == 0
    gated = json.loads((tmp_path / "ev-sub" / "metrics.json").read_text())
    config = json.loads((tmp_path / "ev-sub" / "config.json").read_text())
    assert config["means_from"] == {"split": "hans", "examples": 30} and config["subnetwork_sparsity"] == pytest.approx(0.4)
    assert gated["hans"]["n"] == 60
    capsys.readouterr()
    for args, fragment in [
        (["--task", "hans", "--data", str(tmp_path / "missing.tsv")], "missing.tsv: no such file"),
        (["--task", "hanz", "--data", str(hans)], "unknown task 'hanz'"),
        (["--task", "paws-qqp", "--data", str(hans)], "hans_subset_val.tsv:1: header lacks column(s) label"),
    ]:
        with pytest.raises(SystemExit) as failed:
            main(["evaluate", "--model", str(model_dir), "--out", str(tmp_path / "bad"), *args])
        assert failed.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
    two = tiny_bert(tok, num_labels=2)
    two.save_pretrained(tmp_path / "two")
    tok.save_pretrained(tmp_path / "two")
    with pytest.raises(SystemExit) as failed:
        main(["evaluate", "--model", str(tmp_path / "two"), "--task", "mnli", "--data", str(SHARED_DATA / "mnli" / "dev_matched_1k.tsv"), "--out", str(tmp_path / "bad")])
    assert failed.value.code == 2 and "has a classification head with 2 outputs, but task" in capsys.readouterr().err
