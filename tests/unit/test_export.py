"""`subnetlab export`: the small model computes what the gated model computes, on tiny models of every family.

Independent computations: the gated model (``apply_gates`` with the same masks and
ablation values) for outputs; the adapter's own per-head / per-MLP parameter counts
for sizes; the original model for an export with every gate open.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from subnetlab.errors import SubnetlabError
from subnetlab.export import PRUNING_FILE, export_subnetwork, parameter_count, read_plan, slice_subnetwork
from subnetlab.export.slicing import Constant, NoHeads, SharedKeyValue
from subnetlab.intervene import ComponentValues, apply_gates, capture_activations, collect_means
from subnetlab.models import load_model
from subnetlab.subnetwork import Subnetwork
from tests.conftest import HEAD_FOR, output_of, tiny_inputs, tiny_model

TOL = 1e-5


def _inputs(family: str, seed: int = 0) -> dict[str, torch.Tensor]:
    return tiny_inputs(family, batch=3, length=6, seed=seed, pad=0 if family == "vit" else 3)


def _means(m, family: str) -> ComponentValues:
    return collect_means(m.model, m.adapter, [_inputs(family, seed=1)])


def _subnetwork(adapter) -> Subnetwork:
    """Layer 0: heads 0-2 closed (Llama: key/value head 0 loses both its query heads, head 1 one of two);
    layer 1: every head and the MLP closed; layer 2: head 3 closed."""
    heads = torch.ones(adapter.num_layers, adapter.num_heads)
    mlps = torch.ones(adapter.num_layers)
    heads[0, [0, 1, 2]] = 0
    heads[1, :] = 0
    heads[2, 3] = 0
    mlps[1] = 0
    return Subnetwork.structured(adapter, heads, mlps, ablation="mean")


def _gated(m, sub: Subnetwork, values, x) -> torch.Tensor:
    with torch.no_grad(), apply_gates(m.model, m.adapter, *sub.gates(), ablation=values):
        return output_of(m.model, x)


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_export_computes_what_the_gated_model_computes(family, ablation, tmp_path, one_thread):
    m = tiny_model(family, layers=3)
    values = _means(m, family) if ablation == "mean" else None
    sub = _subnetwork(m.adapter)
    export_subnetwork(m, sub, tmp_path / "small", values)
    small = load_model(str(tmp_path / "small"), head=HEAD_FOR[family])
    in_memory = slice_subnetwork(m.model, m.adapter, sub, values).model
    for seed in (0, 2):
        x = _inputs(family, seed)
        gated = _gated(m, sub, values, x)
        with torch.no_grad():
            assert (output_of(small.model, x) - gated).abs().max() <= TOL
            assert (output_of(in_memory, x) - gated).abs().max() <= TOL
            assert (output_of(m.model, x) - gated).abs().max() > 1e-3  # the subnetwork really changes the output
    assert type(small.model) is type(m.model)
    layers = small.adapter.layers()
    assert isinstance(layers[1].get_submodule(m.adapter.spec.mlp_output), Constant)
    assert isinstance(layers[1].get_submodule(m.adapter.spec.query.rsplit(".", 1)[0]), NoHeads)


def test_every_gate_open_exports_the_original_bit_for_bit(family, tmp_path, one_thread):
    m = tiny_model(family, layers=2)
    a = m.adapter
    sub = Subnetwork.structured(a, torch.ones(a.num_layers, a.num_heads), torch.ones(a.num_layers))
    export_subnetwork(m, sub, tmp_path / "same", _means(m, family))
    small = load_model(str(tmp_path / "same"), head=HEAD_FOR[family])
    original, exported = m.model.state_dict(), small.model.state_dict()
    assert original.keys() == exported.keys()
    assert all(torch.equal(original[k], exported[k]) for k in original)
    x = _inputs(family)
    with torch.no_grad():
        assert torch.equal(output_of(small.model, x), output_of(m.model, x))


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_parameters_fall_by_the_removed_components_plus_added_biases(family, ablation, one_thread):
    m = tiny_model(family, layers=3)
    a = m.adapter
    values = _means(m, family) if ablation == "mean" else None
    sub = _subnetwork(a)
    sliced = slice_subnetwork(m.model, a, sub, values)
    per_head, per_mlp = a.params_per_head(), a.params_per_mlp()
    removed = float((per_head * (1 - sub.heads)).sum() + (per_mlp * (1 - sub.mlps)).sum())
    hidden, d = a.hidden_size, a.head_dim
    added = 0
    if values is not None:
        added += hidden * int((sub.mlps == 0).sum())  # each removed MLP leaves its mean
        if family == "llama":  # bias-free output projections gain one in every layer with a closed head
            added += hidden * int(((sub.heads == 0).sum(1) > 0).sum())
    kept_shared = 0.0
    if family == "llama":  # layer 0 keeps key/value head 1 for head 3; closed head 2's share of it stays
        group = a.num_heads // a.num_kv_heads
        kept_shared += 2 * d * hidden / group  # its halves of k_proj and v_proj rows (no biases)
        kept_shared += 2 * d * hidden / group  # layer 2: head 3 closed, key/value head 1 kept for head 2
    expected = parameter_count(m.model) - removed + kept_shared + added
    assert parameter_count(sliced.model) == pytest.approx(expected, abs=0)
    assert sliced.parameters["after"] == parameter_count(sliced.model)
    assert "unaccounted" not in sliced.parameters


def test_llama_closing_whole_key_value_groups_removes_exactly_the_adapters_counts(one_thread):
    m = tiny_model("llama", layers=2)
    a = m.adapter
    heads = torch.ones(a.num_layers, a.num_heads)
    heads[0, [0, 1]] = 0  # both query heads of key/value head 0
    sub = Subnetwork.structured(a, heads, torch.ones(a.num_layers))
    sliced = slice_subnetwork(m.model, a, sub, None)
    removed = float(a.params_per_head()[0, :2].sum())
    assert parameter_count(sliced.model) == parameter_count(m.model) - removed
    attn = sliced.model.base_model.layers[0].self_attn
    assert attn.k_proj.weight.shape[0] == a.head_dim and attn.num_key_value_groups == 2


def test_grouped_query_attention_keeps_shared_heads_and_serves_uneven_groups(one_thread):
    m = tiny_model("llama", layers=3)
    sliced = slice_subnetwork(m.model, m.adapter, _subnetwork(m.adapter), None)
    layer0 = sliced.model.base_model.layers[0].self_attn  # kept: head 3 only (key/value head 1)
    layer2 = sliced.model.base_model.layers[2].self_attn  # kept: heads 0, 1 (kv 0) and 2 (kv 1): uneven
    d = m.adapter.head_dim
    assert type(layer0.k_proj) is nn.Linear and layer0.k_proj.weight.shape[0] == d and layer0.num_key_value_groups == 1
    assert isinstance(layer2.k_proj, SharedKeyValue) and layer2.k_proj.weight.shape[0] == 2 * d
    assert layer2.k_proj.expand.tolist() == [0, 0, 1] and layer2.num_key_value_groups == 1
    assert any("key/value head 1 kept" in note for note in sliced.notes)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_generation_matches_when_layer_0_has_no_head_left(family, tmp_path, one_thread):
    m = tiny_model(family, layers=2)
    a = m.adapter
    heads = torch.ones(a.num_layers, a.num_heads)
    heads[0, :] = 0  # transformers reads the cache length from layer 0
    heads[1, 1] = 0
    values = _means(m, family)
    sub = Subnetwork.structured(a, heads, torch.ones(a.num_layers))
    export_subnetwork(m, sub, tmp_path / "small", values)
    small = load_model(str(tmp_path / "small"), head="causal-lm")
    x = tiny_inputs(family, batch=2, length=5)
    with torch.no_grad():
        with apply_gates(m.model, a, *sub.gates(), ablation=values):
            gated = m.model.generate(**x, max_new_tokens=5, do_sample=False, pad_token_id=0)
        exported = small.model.generate(**x, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(gated, exported)


def test_directory_records_the_plan_and_loads_as_base_model_too(tmp_path, one_thread):
    m = tiny_model("bert", layers=3)
    sub = _subnetwork(m.adapter)
    result = export_subnetwork(m, sub, tmp_path / "small", _means(m, "bert"), source="tiny-bert")
    assert {p.name for p in (tmp_path / "small").iterdir()} == {"config.json", "subnetlab_model.safetensors", "README.md", PRUNING_FILE}
    assert [p.name for p in tmp_path.iterdir()] == ["small"]  # no temporary directory left behind
    plan = read_plan(tmp_path / "small")
    assert [len(layer.heads) for layer in plan.layers] == [1, 0, 3] and [l.mlp for l in plan.layers] == [True, False, True]
    assert plan == result.plan
    base = load_model(str(tmp_path / "small"))
    assert type(base.model).__name__ == "BertModel"
    x = _inputs("bert")
    with torch.no_grad():
        small = load_model(str(tmp_path / "small"), head="classification").model
        assert torch.equal(base.model(**x).last_hidden_state, small.base_model(**x).last_hidden_state)


# -- bad input ------------------------------------------------------------------------------------
def test_bad_input_is_refused_naming_the_setting(tmp_path, one_thread):
    m = tiny_model("bert", layers=3)
    other = tiny_model("bert", layers=3, heads=2)
    sub = _subnetwork(m.adapter)
    x = _inputs("bert")
    cases = {
        "subnetwork": lambda: slice_subnetwork(m.model, m.adapter, _subnetwork_of(other), None),
        "ablation": lambda: slice_subnetwork(m.model, m.adapter, sub, collect_means(m.model, m.adapter, [x], per_position=True)),
    }
    for setting, call in cases.items():
        with pytest.raises(SubnetlabError) as e:
            call()
        assert e.value.setting == setting
    with pytest.raises(SubnetlabError, match="per-position means cannot be folded"):
        cases["ablation"]()
    with pytest.raises(SubnetlabError, match="resampled activations cannot be folded"):
        slice_subnetwork(m.model, m.adapter, sub, capture_activations(m.model, m.adapter, x))
    half = Subnetwork("structured", "bert", m.adapter.fingerprint(), heads=torch.full((3, 4), 0.5), mlps=torch.ones(3))
    with pytest.raises(SubnetlabError, match="other than 0 and 1"):
        slice_subnetwork(m.model, m.adapter, half, None)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(SubnetlabError, match="not an empty directory") as e:
        export_subnetwork(m, sub, tmp_path / "full", None)
    assert e.value.setting == "out" and (tmp_path / "full" / "x").read_text() == "keep me"


def _subnetwork_of(loaded) -> Subnetwork:
    a = loaded.adapter
    return Subnetwork.structured(a, torch.ones(a.num_layers, a.num_heads), torch.ones(a.num_layers))


def test_resnet_has_nothing_to_export(one_thread):
    from subnetlab.models.vision import build_vision_model, resnet_config

    m = build_vision_model(resnet_config(3, hidden_sizes=(8, 16), depths=(1, 1), embedding_size=8), seed=0)
    sub = Subnetwork("structured", "resnet", "", heads=torch.ones(1, 1), mlps=torch.ones(1))
    with pytest.raises(SubnetlabError, match="no heads or MLPs") as e:
        slice_subnetwork(m.model, m.adapter, sub, None)
    assert e.value.setting == "model"


# -- the command ----------------------------------------------------------------------------------
def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from subnetlab.cli import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    captured = capsys.readouterr()
    return e.value.code, captured.out, captured.err


@pytest.fixture
def files(tmp_path):
    m = tiny_model("bert", layers=3)
    m.model.save_pretrained(tmp_path / "model")
    sub = _subnetwork(m.adapter)
    sub.save(tmp_path / "sub.safetensors")
    _means(m, "bert").save(tmp_path / "means.safetensors")
    collect_means(m.model, m.adapter, [_inputs("bert")], per_position=True).save(tmp_path / "per-position.safetensors")
    other = tiny_model("gpt2", layers=3)
    _subnetwork(other.adapter).save(tmp_path / "gpt2-sub.safetensors")
    return tmp_path


def test_command_exports_and_inspect_shows_heads_per_layer(files, capsys, one_thread):
    code, out, err = _cli(capsys, "export", "--model", str(files / "model"), "--subnetwork",
                          str(files / "sub.safetensors"), "--ablation", str(files / "means.safetensors"),
                          "--out", str(files / "small"))
    assert code == 0, err
    assert "heads per layer: 1 0 3 (of 4)" in out and "MLPs kept: 2 of 3" in out
    code, out, err = _cli(capsys, "inspect", "--model", str(files / "small"))
    assert code == 0, err
    count = parameter_count(load_model(str(files / "small"), head="classification").model)
    assert f"parameters: {count:,}" in out and "1 / 4" in out and "0 / 4" in out and "3 / 4" in out


@pytest.mark.parametrize("args, fragment", [
    (["--subnetwork", "gpt2-sub.safetensors", "--ablation", "means.safetensors"], "--subnetwork: "),
    (["--subnetwork", "sub.safetensors", "--ablation", "per-position.safetensors"], "per-position means cannot be folded"),
    (["--subnetwork", "sub.safetensors", "--ablation", "missing.safetensors"], "--ablation: "),
    (["--subnetwork", "sub.safetensors"], "found with mean ablation"),
])
def test_command_bad_input_is_one_error_line_exit_2_nothing_written(files, capsys, args, fragment, one_thread):
    args = [str(files / a) if a.endswith(".safetensors") else a for a in args]
    code, _, err = _cli(capsys, "export", "--model", str(files / "model"), *args, "--out", str(files / "small"))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert "Traceback" not in err
    assert not (files / "small").exists() and not list(files.glob(".small*"))


def test_command_refuses_a_missing_ablation_file_in_a_fresh_process(files):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "subnetlab.cli", "export", "--model", str(files / "model"), "--subnetwork",
         str(files / "sub.safetensors"), "--ablation", str(files / "nope.safetensors"), "--out", str(files / "small")],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: --ablation: {files / 'nope.safetensors'}: no such file "
                                                  "(a file of mean activations, or zero)"]
    assert not (files / "small").exists()


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_onnx_file_computes_what_the_small_model_computes(family, tmp_path, one_thread):
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    m = tiny_model(family, layers=3)
    values = _means(m, family)
    sub = _subnetwork(m.adapter)
    result = export_subnetwork(m, sub, tmp_path / "small", values, onnx=True)
    assert result.onnx == tmp_path / "small" / "model.onnx" and result.onnx.is_file()
    session = ort.InferenceSession(str(result.onnx), providers=["CPUExecutionProvider"])
    for batch, length, pad in ((4, 9, 2), (1, 3, 0)):  # other shapes than the exporter saw
        x = tiny_inputs(family, batch=batch, length=length, seed=5, pad=pad)
        got = torch.from_numpy(session.run(None, {k: v.numpy() for k, v in x.items()})[0])
        assert (got - _gated(m, sub, values, x)).abs().max() <= 1e-4


@pytest.mark.integration
def test_minilm_export_computes_what_the_gated_model_computes(minilm, tmp_path):
    texts = ["The doctor saw the lawyer .", "A cat sat on the mat while the dog slept in the sun .", "Yes ."]
    batch = dict(minilm.tokenizer(texts, padding=True, return_tensors="pt"))
    values = collect_means(minilm.model, minilm.adapter, [batch])
    a = minilm.adapter
    heads = torch.ones(a.num_layers * a.num_heads)
    heads[torch.randperm(heads.numel(), generator=torch.Generator().manual_seed(0))[: heads.numel() // 2]] = 0
    heads = heads.view(a.num_layers, a.num_heads)
    heads[2] = 0  # and one layer with no head left
    mlps = torch.ones(a.num_layers)
    mlps[4] = 0
    sub = Subnetwork.structured(a, heads, mlps)
    export_subnetwork(minilm, sub, tmp_path / "small", values)
    small = load_model(str(tmp_path / "small"), head="classification")
    assert small.tokenizer is not None
    with torch.no_grad():
        gated = _gated(minilm, sub, values, batch)
        assert (small.model(**batch).logits - gated).abs().max() <= TOL
        hidden = small.model.base_model(**batch).last_hidden_state
        with apply_gates(minilm.model, minilm.adapter, *sub.gates(), ablation=values):
            gap = hidden - minilm.model.base_model(**batch).last_hidden_state
    # padding positions: the gate's own rounding (a + 1 * (x - a) is not exactly x) grows there to ~1e-4
    assert gap[batch["attention_mask"].bool()].abs().max() <= TOL


def test_slicing_inside_active_gates_drops_only_subnetlabs_hooks(one_thread):
    m = tiny_model("bert", layers=3)
    sub = _subnetwork(m.adapter)
    x = _inputs("bert")
    with torch.no_grad():
        m.model(**x, output_hidden_states=True)  # transformers may install its own recording hooks
        outside = slice_subnetwork(m.model, m.adapter, sub, None).model
        with apply_gates(m.model, m.adapter, *sub.gates()):
            inside = slice_subnetwork(m.model, m.adapter, sub, None).model
        assert torch.equal(output_of(inside, x), output_of(outside, x))
        assert len(inside(**x, output_hidden_states=True).hidden_states) == 4
