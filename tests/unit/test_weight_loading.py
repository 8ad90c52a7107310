"""Issue 53: a model whose weights do not fit its config is refused (transformers' own loading report), a fresh
task head only where the code path creating it says so; a name that is no directory is refused without hub
retries; a resumed fine-tuning run saves the tokenizer an uninterrupted one saves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.models import load_model
from subnetlab.models.loading import check_loading_report, task_head_weights


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    root = tmp_path_factory.mktemp("weights")
    torch.manual_seed(0)
    tok = gpt2_style_tokenizer()
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2)).save_pretrained(
        root / "lm")
    tok.save_pretrained(root / "lm")
    shutil.copytree(root / "lm", root / "lm3")
    config = json.loads((root / "lm3" / "config.json").read_text())
    (root / "lm3" / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    BertModel(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(root / "encoder")  # pretrained, no task head
    return {"root": root, "lm": root / "lm", "lm3": root / "lm3", "encoder": root / "encoder"}


def test_a_config_claiming_more_layers_than_the_weights_is_refused_naming_the_keys(dirs):
    with pytest.raises(SubnetlabError, match=r"12 weight\(s\) of the model are not in the checkpoint and would be "
                                             r"randomly initialised \(transformer\.h\.2\.attn\.c_attn\.bias, "):
        load_model(str(dirs["lm3"]), head="causal-lm")


def test_sl_circuit_refuses_the_half_random_model_and_writes_nothing(dirs, tmp_path):
    import subnetlab as sl

    with pytest.raises(SubnetlabError, match=r"lm3: the weights do not match .* \(transformer\.h\.2\."):
        sl.circuit(str(dirs["lm3"]), "circuit:ioi", tmp_path / "out", sparsity=0.9,
                   task_options={"n_train": 4, "n_eval": 2})
    assert not (tmp_path / "out").exists()


def test_tied_weights_are_not_reported_missing(dirs):
    loaded = load_model(str(dirs["lm"]), head="causal-lm")  # lm_head is wte, saved once
    assert loaded.model.lm_head.weight is loaded.model.transformer.wte.weight
    assert loaded.new_weights == ()
    saved = GPT2LMHeadModel.from_pretrained(str(dirs["lm"]))
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), loaded.model.state_dict().values()))


def test_a_fresh_task_head_loads_only_when_named(dirs):
    encoder = str(dirs["encoder"])
    with pytest.raises(SubnetlabError, match=r"2 weight\(s\) .* \(classifier\.bias, classifier\.weight\)"):
        load_model(encoder, head="classification", num_labels=3)
    assert task_head_weights(encoder, "classification", 3) == ("classifier.*",)
    assert task_head_weights(str(dirs["lm"]), "classification", 3) == ("score.*",)
    loaded = load_model(encoder, head="classification", num_labels=3, new_weights=("classifier.*",))
    assert loaded.new_weights == ("classifier.bias", "classifier.weight")
    reference = BertModel.from_pretrained(encoder)  # the body is the checkpoint's, exactly
    assert all(torch.equal(reference.state_dict()[k], v) for k, v in loaded.model.bert.state_dict().items()
               if k in reference.state_dict())
    with pytest.raises(SubnetlabError, match="not in the checkpoint"):  # a pattern for the head frees nothing else
        load_model(str(dirs["lm3"]), head="causal-lm", new_weights=("score.*",))


def test_the_report_check_by_hand():
    model = torch.nn.Module()
    model.body, model.base_model_prefix = torch.nn.Linear(1, 1), "net"
    ok = {"missing_keys": set(), "unexpected_keys": {"head.weight"}, "mismatched_keys": set(), "error_msgs": []}
    assert check_loading_report(model, ok, "m") == ()  # another model's head, in a module this one lacks: left out
    for report, fragment in (({"unexpected_keys": {"body.extra"}}, r"1 weight\(s\) of the checkpoint have no place"),
                             ({"unexpected_keys": {"net.body.extra"}}, "no place in the model"),
                             ({"mismatched_keys": {("body.weight", (2, 1), (1, 1))}}, r"another shape .*body\.weight"),
                             ({"missing_keys": {f"body.w{i}" for i in range(5)}}, r"body\.w0, body\.w1, body\.w2 and 2 more")):
        with pytest.raises(SubnetlabError, match=fragment):
            check_loading_report(model, report, "m")
    assert check_loading_report(model, {"mismatched_keys": {("body.weight", (2, 1), (1, 1))}}, "m",
                                ("body.*",)) == ("body.weight",)


def test_finetune_records_the_fresh_head(dirs, tmp_path, capsys):
    from subnetlab.methods.finetune.config import resolve_config
    from subnetlab.progress import set_quiet
    from subnetlab.runs.finetune import finetune
    from tests.unit.lottery_helpers import word_tokenizer

    model = tmp_path / "encoder"
    shutil.copytree(dirs["encoder"], model)
    word_tokenizer().save_pretrained(model)
    cfg = resolve_config(model=str(model), task="nli-synthetic", max_steps=1, batch_size=4, save_every=1, eval_every=1,
                         task_options={"n_train": 8, "n_eval": 4, "hans_per_subcase": 1}, lr=1e-3)
    set_quiet(False)
    try:
        finetune(cfg, tmp_path / "run")
    finally:
        set_quiet(True)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["new_weights"] == ["classifier.bias",
                                                                                         "classifier.weight"]
    assert "new task head (freshly initialised): classifier.bias, classifier.weight" in capsys.readouterr().err


def _cli_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert done.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _no_hub_downloads(monkeypatch) -> None:
    def reached(*args, **kwargs):
        raise AssertionError("transformers asked the hub for the config")

    monkeypatch.setattr("subnetlab.models.loading.AutoConfig.from_pretrained", reached)


def test_a_mistyped_local_path_offline_is_refused_at_once(monkeypatch, tmp_path, capsys):
    import huggingface_hub

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "file_exists", lambda *a, **k: pytest.fail("asked the hub while offline"))
    _no_hub_downloads(monkeypatch)
    line = _cli_error(["inspect", "--model", "my-gtp2"], capsys)
    assert "no directory my-gtp2, and no hub model of that name in the local cache" in line, line


def test_a_mistyped_local_path_online_costs_one_hub_request(monkeypatch, tmp_path, capsys):
    import huggingface_hub

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    asked = []

    def unreachable(repo, filename, **kwargs):
        asked.append((repo, filename))
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "file_exists", unreachable)
    _no_hub_downloads(monkeypatch)
    line = _cli_error(["inspect", "--model", "my-gtp2"], capsys)
    assert "no directory my-gtp2, and the hub could not be asked for it (ConnectionError" in line, line
    assert asked == [("my-gtp2", "config.json")]
    monkeypatch.setattr(huggingface_hub, "file_exists", lambda *a, **k: False)
    assert "no model of that name on the hub" in _cli_error(["inspect", "--model", "my-gtp2"], capsys)


def test_a_resumed_finetune_saves_the_tokenizer_an_uninterrupted_one_saves(tmp_path):
    from transformers import AutoTokenizer, BertForSequenceClassification

    from subnetlab.methods.finetune.config import resolve_config
    from subnetlab.models import resolve
    from subnetlab.runs.finetune import finetune

    tok = AutoTokenizer.from_pretrained(resolve("minilm"))  # its tokenizer.json truncates and pads at 128
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=32, num_labels=3)).save_pretrained(
        tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    cfg = resolve_config(model=str(tmp_path / "m"), task="nli-synthetic", max_steps=4, save_every=2, eval_every=3,
                         batch_size=8, max_length=32, lr=1e-3,
                         task_options={"n_train": 24, "n_eval": 6, "hans_per_subcase": 1})
    finetune(cfg, tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        finetune(cfg, tmp_path / "b", _stop_after=3)
    finetune(cfg, tmp_path / "b")
    source = json.loads((tmp_path / "m" / "tokenizer.json").read_text())
    for run in ("a", "b"):
        saved = json.loads((tmp_path / run / "model" / "tokenizer.json").read_text())
        assert (saved["truncation"], saved["padding"]) == (source["truncation"], source["padding"]), run
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "a" / "model" / name).read_bytes() == (tmp_path / "b" / "model" / name).read_bytes()


def test_finetune_new_weights_is_the_explicit_opt_in_for_other_missing_weights(tmp_path, capsys):
    """An encoder saved without its pooler: refused, naming the pooler, unless --new-weights names it."""
    from tests.unit.lottery_helpers import word_tokenizer

    model = tmp_path / "no-pooler"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32), add_pooling_layer=False).save_pretrained(model)
    word_tokenizer().save_pretrained(model)
    capsys.readouterr()  # the save's progress bar
    argv = ["finetune", "--model", str(model), "--task", "nli-synthetic", "--task-option", "n_train=8",
            "--task-option", "n_eval=4", "--task-option", "hans_per_subcase=1", "--max-steps", "1",
            "--batch-size", "4", "--device", "cpu"]
    line = _cli_error([*argv, "--out", str(tmp_path / "refused")], capsys)
    assert "2 weight(s) of the model are not in the checkpoint" in line and "bert.pooler.dense.bias" in line, line
    assert "classifier" not in line  # the new head is allowed: only the pooler is named
    assert not (tmp_path / "refused").exists()
    with pytest.raises(SystemExit) as done:
        main([*argv, "--new-weights", "bert.pooler.*", "--out", str(tmp_path / "run")])
    assert done.value.code in (0, None)
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert record["new_weights"] == ["bert.pooler.dense.bias", "bert.pooler.dense.weight", "classifier.bias",
                                     "classifier.weight"]
    assert record["finetune"]["new_weights"] == ["bert.pooler.*"]
