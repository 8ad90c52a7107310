"""Fine-tuning: run directory, checkpoints, bit-identical resume on CPU, reruns, bad input."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from subnetlab.errors import SubnetlabError
from subnetlab.methods.finetune.config import resolve_config
from subnetlab.models import load_model, resolve
from subnetlab.optim import lr_factor
from subnetlab.runs.finetune import finetune


def arith_config(**kw):
    base = dict(model="gpt2-arith:1", task="arith:a+b",
                task_options={"n_train": 120, "n_eval": 40, "n_test": 40, "max_number": 40},
                lr=1e-3, batch_size=16, max_steps=9, save_every=3, eval_every=2, max_length=8, seed=3)
    base.update(kw)
    return resolve_config(**base)


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path):
    cfg = arith_config()
    straight = finetune(cfg, tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        finetune(cfg, tmp_path / "b", _stop_after=5)  # killed after step 5; last checkpoint at 3
    assert not (tmp_path / "b" / "metrics.json").exists()
    assert [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()] == [0, 2, 4]
    resumed = finetune(cfg, tmp_path / "b")
    wa = load_file(tmp_path / "a" / "model" / "model.safetensors")
    wb = load_file(tmp_path / "b" / "model" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == (tmp_path / "b" / "metrics.jsonl").read_text()
    assert straight["final"] == resumed["final"]
    steps = [json.loads(line)["step"] for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 2, 4, 6, 8, 9]
    ckpts = sorted((tmp_path / "a" / "checkpoints").iterdir())
    assert [c.name for c in ckpts] == ["step-3", "step-6", "step-9"]
    assert [(c / "optimizer.safetensors").exists() for c in ckpts] == [False, False, True]
    assert (ckpts[0] / "model.safetensors").exists() and (ckpts[0] / "tokenizer.json").exists()
    early = load_file(ckpts[0] / "model.safetensors")
    assert any(not torch.equal(early[k], wa[k]) for k in wa)  # training really moved the weights


def test_run_directory_contract_and_reruns(tmp_path):
    cfg = arith_config(max_steps=2, save_every=5, eval_every=5, eval_at_start=False)
    metrics = finetune(cfg, tmp_path / "r")
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["finetune"]["lr"] == 1e-3 and config["task"]["op"] == "a+b"
    assert set(metrics["final"]) == {"eval", "test"} and metrics["steps"] == 2
    assert finetune(cfg, tmp_path / "r") == metrics  # finished: skipped
    with pytest.raises(SubnetlabError, match="different configuration \\(lr\\)"):
        finetune(arith_config(max_steps=2, save_every=5, eval_every=5, eval_at_start=False, lr=2e-3), tmp_path / "r")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    with pytest.raises(SubnetlabError, match="not empty"):
        finetune(cfg, tmp_path / "other")


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    """A tiny BERT classifier (2 labels) with MiniLM's tokenizer, saved as a model directory."""
    path = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_a_head_of_another_size_is_replaced_and_said_so(tiny_bert_dir, tmp_path, capsys):
    from subnetlab.progress import set_quiet

    cfg = resolve_config(model=str(tiny_bert_dir), task="nli-synthetic", task_options={"n_train": 32, "n_eval": 8, "hans_per_subcase": 1},
                         max_steps=1, batch_size=8, eval_limit=8)
    set_quiet(False)
    try:
        finetune(cfg, tmp_path / "x")
    finally:
        set_quiet(True)
    assert ("has a classification head with 2 outputs, but task nli-synthetic has 3 labels (entailment, neutral, "
            "contradiction): a new head of 3 outputs replaces it") in capsys.readouterr().err
    saved = json.loads((tmp_path / "x" / "model" / "config.json").read_text())
    assert len(saved["id2label"]) == 3
    old = load_model(str(tiny_bert_dir), head="classification").model  # the body is kept, only the head is new
    new = load_model(str(tmp_path / "x" / "model"), head="classification").model
    assert new.classifier.out_features == 3 and old.classifier.out_features == 2
    assert new.bert.embeddings.word_embeddings.weight.shape == old.bert.embeddings.word_embeddings.weight.shape


def test_classification_head_must_fit_the_task(tiny_bert_dir, tmp_path):
    ok = resolve_config(model=str(tiny_bert_dir), task="hans-synthetic", task_options={"n_per_subcase": 2, "eval_per_subcase": 1},
                        max_steps=2, batch_size=8, lr=1e-3, eval_limit=30)
    metrics = finetune(ok, tmp_path / "y")
    assert metrics["final"]["hans-synthetic"]["n"] == 30 and len(metrics["final"]["hans-synthetic"]["subcases"]) == 30
    saved = json.loads((tmp_path / "y" / "model" / "config.json").read_text())
    assert saved["id2label"] == {"0": "entailment", "1": "non-entailment"}


def test_presets_schedule_and_validation():
    hc = resolve_config("heuristic-core", task="mnli")
    assert (hc.model, hc.lr, hc.batch_size, hc.max_length, hc.epochs) == ("bert-base-cased", 2e-5, 32, 128, 5.0)
    assert resolve_config("heuristic-core", model="minilm", lr=1e-4).model == "minilm"
    assert [lr_factor(s, total=6, warmup=2, decay="linear") for s in range(7)] == [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0]
    assert lr_factor(5, total=6, decay="constant") == 1.0
    for kwargs, message in [({"lr": -1.0}, "lr -1.0"), ({"batch_size": 0}, "batch_size 0"),
                            ({"eval_data": ["hans"]}, "expected FORMAT=FILE"), ({"eval_data": ["foo=x.tsv"]}, "unknown format 'foo'")]:
        with pytest.raises(SubnetlabError, match=message):
            resolve_config(**kwargs)
    with pytest.raises(SubnetlabError, match="unknown preset 'fast'"):
        resolve_config("fast")
