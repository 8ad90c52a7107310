"""The Python tour (issue 30): ``sl.prune``, ``sl.discover`` and ``sl.transfer_subnetwork`` do what their commands do in one
call each, and a subnetwork loaded on the same checkpoint with the other head is refused naming the head."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

import subnetlab as sl
from subnetlab.cli import main
from subnetlab.models import resolve
from subnetlab.tasks import NLI3

SMALL = dict(batch_size=8, train_limit=24, means_examples=16, eval_batch_size=16, max_length=24, warmup_steps=2,
             total_steps=4, checkpoint_every=2)
NLI = {"n_train": 24, "n_eval": 8, "hans_per_subcase": 1}
ARITH = {"n_train": 40, "n_eval": 10, "n_test": 10}


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3, initializer_range=0.3,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    where = tmp_path_factory.mktemp("api") / "classifier"
    BertForSequenceClassification(config).eval().save_pretrained(where)
    tok.save_pretrained(where)
    return where


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    where = tmp_path_factory.mktemp("api") / "lm"
    GPT2LMHeadModel(GPT2Config(vocab_size=23, n_embd=16, n_layer=1, n_head=2, n_positions=8)).save_pretrained(where)
    return where


def _tensors(path: Path) -> dict[str, bytes]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k).numpy().tobytes() for k in f.keys()}


def test_prune_is_the_command_in_one_call(classifier, tmp_path, one_thread):
    result = sl.prune(str(classifier), "nli-synthetic", tmp_path / "api", sparsity=0.5, seeds=[0], preset="demo",
                      task_options=NLI, **SMALL)
    with pytest.raises(SystemExit) as done:
        main(["prune", "--model", str(classifier), "--task", "nli-synthetic",
              *[a for k, v in NLI.items() for a in ("--task-option", f"{k}={v}")], "--sparsity", "0.5", "--seeds", "0",
              "--preset", "demo", *[a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")],
              "--out", str(tmp_path / "cli")])
    assert done.value.code in (0, None)
    [path] = result["subnetworks"]
    assert path == tmp_path / "api" / "sparsity-0.50" / "seed-0" / "subnetwork.safetensors"
    assert _tensors(path) == _tensors(tmp_path / "cli" / "sparsity-0.50" / "seed-0" / "subnetwork.safetensors")
    assert len(result["runs"]) == 2 and result["runs"]["full-model"]["eval"]
    assert "0.50" in str(result["summary"]) and sl.Subnetwork.load(path).kind == "structured"
    assert result.subnetworks == [path] and result.summary is result["summary"]
    [loaded] = result.load_subnetworks()
    assert loaded.kind == "structured" and loaded.kept_names() == sl.Subnetwork.load(path).kept_names()


def test_prune_in_bfloat16_loads_prunes_and_evaluates_the_model_in_it(classifier, tmp_path, one_thread):
    """``dtype="bfloat16"`` (``prune --dtype``): every job's weights were bfloat16 while it ran, the full model's
    accuracy is the bfloat16 model's, evaluated here by hand; float32 runs leave the setting out of config.json."""
    import json

    from subnetlab.methods.evaluate import evaluate
    from subnetlab.tasks import get_task

    result = sl.prune(str(classifier), "nli-synthetic", tmp_path / "bf16", sparsity=0.5, seeds=[0], preset="demo",
                      task_options=NLI, dtype="bfloat16", **SMALL)
    run = result.runs["sparsity-0.50/seed-0"]
    assert run["weights_dtype"] == "bfloat16" and result.runs["full-model"]["weights_dtype"] == "bfloat16"
    config = json.loads((tmp_path / "bf16" / "sparsity-0.50" / "seed-0" / "config.json").read_text())
    assert config["prune"]["dtype"] == "bfloat16"
    model = sl.load_model(str(classifier), head="classification", dtype=torch.bfloat16)
    task = get_task("nli-synthetic", **NLI)
    by_hand = evaluate(model.model, model.tokenizer, task, ["id"], batch_size=SMALL["eval_batch_size"],
                       max_length=SMALL["max_length"], limit=None)
    assert result.runs["full-model"]["eval"]["id"] == by_hand["id"]
    plain = sl.prune(str(classifier), "nli-synthetic", tmp_path / "f32", sparsity=0.5, seeds=[0], preset="demo",
                     task_options=NLI, **{**SMALL, "total_steps": 2})
    assert plain.runs["sparsity-0.50/seed-0"]["weights_dtype"] == "float32"
    assert "dtype" not in json.loads((tmp_path / "f32" / "sparsity-0.50" / "seed-0" / "config.json").read_text())["prune"]


def test_discover_then_transfer_in_one_call_each(lm, tmp_path, one_thread):
    found = sl.discover(str(lm), "arith:ab", tmp_path / "discover", lambdas=[1e-7, 1e-8], task_options=ARITH,
                        epochs=1, lr=0.01, batch_size=20, include=["attention"], keep="last",
                        init=0.05)  # one epoch from the default -0.1 keeps nothing, and transfer refuses an empty mask
    assert [m["l0_lambda"] for m in found["sweep"]] == [1e-7, 1e-8] and found["l0_lambda"] in (1e-7, 1e-8)
    assert found.l0_lambda == found.chosen["l0_lambda"] and found.subnetwork == Path(found["subnetwork"])
    assert found.sweep is found["sweep"] and found.out == tmp_path / "discover"
    model = sl.load_model(str(lm), head="causal-lm")
    sub = sl.Subnetwork.load(found["subnetwork"], model.adapter)  # found on this model: it fits
    assert sub.kind == "weights"
    moved = sl.transfer_subnetwork(str(lm), "arith:ab", tmp_path / "transfer", subnetwork=found["subnetwork"],
                                   conditions=["subnetwork", "scratch"], sizes=[0], seeds=[0], task_options=ARITH,
                                   epochs=1, batch_size=20)
    assert sorted(r["condition"] for r in moved["runs"]) == ["scratch", "subnetwork"] and moved.runs is moved["runs"]
    assert set(moved["summary"]) == {"scratch", "subnetwork"}
    assert all(0.0 <= r["test_accuracy"] <= 1.0 for r in moved["runs"])


def test_a_subnetwork_of_the_other_head_is_refused_naming_the_head(lm, tmp_path):
    with_head, bare = sl.load_model(str(lm), head="causal-lm"), sl.load_model(str(lm))
    structured = sl.Subnetwork.from_names(with_head.adapter, ["L0.H1"])
    weights = sl.Subnetwork(kind="weights", weights={n: torch.ones_like(with_head.adapter.parameter(n))
                                                     for n in with_head.adapter.weight_matrices()[:2]},
                            architecture="gpt2", fingerprint=with_head.adapter.fingerprint(
                                with_head.adapter.weight_matrices()[:2]))
    for sub in (structured, weights):
        sub.save(tmp_path / "s.safetensors")
        with pytest.raises(sl.SubnetlabError, match="with its task head.*head='causal-lm'"):
            sl.Subnetwork.load(tmp_path / "s.safetensors", bare.adapter)
        sl.Subnetwork.load(tmp_path / "s.safetensors", with_head.adapter)  # the same file fits the model it came from
    found_bare = sl.Subnetwork.from_names(bare.adapter, ["L0.H1"])
    with pytest.raises(sl.SubnetlabError, match="without a task head.*head='base'"):
        found_bare.check(with_head.adapter)
