"""A model spread by accelerate's device map (layers on the CPU and offloaded to disk) computes what the whole one does.

Tiny GPT-2 and Llama models are saved with ``save_pretrained`` and loaded twice: whole, and split by a map that
keeps some layers on ``cpu`` and offloads the others to ``disk`` (their weights stay on PyTorch's meta device and
are read only while their module runs). The split model's outputs, gated outputs and a pruning step's loss and
gradients must equal the whole model's. The checks of the map itself need no accelerate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import GPT2LMHeadModel, LlamaForCausalLM

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import apply_gates, collect_means
from subnetlab.models import load_model
from subnetlab.models.device_map import DeviceMap, accelerate_available, offloaded, parse_max_memory
from subnetlab.runtime import model_device
from tests.conftest import VOCAB, tiny_config

needs_accelerate = pytest.mark.skipif(not accelerate_available(), reason="accelerate is not installed")

# a split map per family: embeddings and one layer offloaded to disk, the rest on the CPU (GPT-2's lm_head is
# tied to its token embedding, so both go to disk)
SPLITS = {
    "gpt2": {"transformer.wte": "disk", "transformer.wpe": "disk", "transformer.h.0": "cpu", "transformer.h.1": "disk",
             "transformer.h.2": "cpu", "transformer.ln_f": "cpu", "lm_head": "disk"},
    "llama": {"model.embed_tokens": "cpu", "model.layers.0": "disk", "model.layers.1": "cpu", "model.layers.2": "disk",
              "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "disk"},
}
CLASSES = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM}


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("device-map")
    paths = {}
    for family, cls in CLASSES.items():
        torch.manual_seed(0)
        cls(tiny_config(family, layers=3)).save_pretrained(root / family)
        paths[family] = str(root / family)
    return paths


@pytest.fixture(params=list(SPLITS))
def family(request) -> str:
    return request.param


def _inputs(batch: int = 3, length: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(3, VOCAB, (batch, length), generator=g),
            "attention_mask": torch.ones(batch, length, dtype=torch.long)}


def _pair(saved, family, layers=None, **options):
    whole = load_model(saved[family], head="causal-lm")
    split = load_model(saved[family], head="causal-lm", device_map=layers or SPLITS[family], **options)
    return whole, split


# -- loading --------------------------------------------------------------------------------------
@needs_accelerate
def test_split_model_equals_the_whole_model(saved, family) -> None:
    whole, split = _pair(saved, family)
    assert split.model.hf_device_map == SPLITS[family]
    on_disk = [key for key, place in SPLITS[family].items() if place == "disk"]
    assert {n.partition(".weight")[0] for n in offloaded(split.model) if n.startswith(on_disk[1])}  # really offloaded
    assert not any(n.startswith(key + ".") for n in offloaded(split.model) for key, place in SPLITS[family].items()
                   if place == "cpu")
    assert model_device(split.model) == torch.device("cpu")  # the main device, though the first weight is on meta
    x = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(split.model(**x).logits, whole.model(**x).logits, rtol=0, atol=0)


@needs_accelerate
def test_auto_map_within_max_memory_offloads_and_still_equals(saved, tmp_path) -> None:
    """``auto`` with a CPU budget too small for the model sends the rest to disk (offload folder given)."""
    whole, split = _pair(saved, "llama", layers="auto", max_memory={"cpu": 30_000},
                         offload_folder=tmp_path / "offload")
    assert "disk" in set(split.model.hf_device_map.values())
    x = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(split.model(**x).logits, whole.model(**x).logits, rtol=0, atol=0)


@needs_accelerate
def test_map_from_a_json_file(saved, tmp_path) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps(SPLITS["gpt2"]))
    whole, split = _pair(saved, "gpt2", layers=str(path))
    assert split.model.hf_device_map == SPLITS["gpt2"]


# -- gates, ablation and masks on the split model -------------------------------------------------------
@needs_accelerate
def test_head_and_mlp_gates_on_the_split_model(saved, family) -> None:
    """Gates of 1 are the model; fractional and closed gates, with mean ablation, give the whole model's result."""
    whole, split = _pair(saved, family)
    a = whole.adapter
    x = _inputs()
    g = torch.Generator().manual_seed(2)
    heads, mlps = torch.rand(a.num_layers, a.num_heads, generator=g), torch.rand(a.num_layers, generator=g)
    heads[1, 0] = heads[0, 2] = mlps[2] = 0.0  # closed gates
    with torch.no_grad():
        plain = split.model(**x).logits
        with apply_gates(split.model, split.adapter, torch.ones_like(heads), torch.ones_like(mlps)):
            torch.testing.assert_close(split.model(**x).logits, plain, rtol=0, atol=0)
        means_whole = collect_means(whole.model, whole.adapter, [x])
        means_split = collect_means(split.model, split.adapter, [x])
        for mine, theirs in zip(means_split.heads + means_split.mlps, means_whole.heads + means_whole.mlps):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
        for ablation in (None, means_whole):
            with apply_gates(whole.model, whole.adapter, heads, mlps, ablation=ablation):
                expected = whole.model(**x).logits
            with apply_gates(split.model, split.adapter, heads, mlps, ablation=ablation):
                got = split.model(**x).logits
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            assert (got - plain).abs().max() > 1e-3  # the gates change the output


@needs_accelerate
def test_a_pruning_step_has_the_whole_models_loss_and_gradients(saved, family) -> None:
    """One hard-concrete step (head_pruning.Pruner): the same KL, penalty, log-alpha gradients and updated gates."""
    from subnetlab.methods.head_pruning.config import PruneConfig
    from subnetlab.methods.head_pruning.train import Pruner
    from subnetlab.methods.l0.data import PruningData

    whole, split = _pair(saved, family)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, VOCAB, (8, 6), generator=g)
    data = PruningData.from_tensors({"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                    task_logits=lambda out, batch: out.logits[:, -1])
    config = PruneConfig(sparsity=0.5, seed=0, warmup_steps=2, total_steps=4, batch_size=4, accumulation=2,
                         init_log_alpha=1.0, lr=0.3, lambda_lr=0.2, eval_batch_size=8, max_grad_norm=None)
    means = collect_means(whole.model, whole.adapter, [data.batch_at(range(8))])
    results = []
    for loaded in (whole, split):
        with Pruner(loaded.model, loaded.adapter, data, config, ablation=means) as p:
            assert p.gates.log_alpha.device == torch.device("cpu")  # trained on the map's main device
            losses = [p.step(0), p.step(1)]
            grad = p.gates.log_alpha.grad.clone()
            results.append((losses, grad, p.gates.log_alpha.detach().clone()))
    (losses_w, grad_w, alpha_w), (losses_s, grad_s, alpha_s) = results
    assert losses_s == losses_w and losses_w[1][0] > 0
    torch.testing.assert_close(grad_s, grad_w, rtol=0, atol=0)
    assert grad_w.abs().sum() > 0
    torch.testing.assert_close(alpha_s, alpha_w, rtol=0, atol=0)


@needs_accelerate
def test_edge_masks_on_a_map_without_offload_and_refused_with_it(saved) -> None:
    """Edges read weights in their hooks: a map of devices gives the whole model's result; offloading is refused."""
    from subnetlab.intervene.edges import apply_edges
    from subnetlab.models.graph import Graph

    on_cpu = {key: "cpu" for key in SPLITS["llama"]}
    whole, split = _pair(saved, "llama", layers=on_cpu)
    graph = Graph.from_adapter(whole.adapter)
    mask = (torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(4)) > 0.4).float()
    x = _inputs()
    with torch.no_grad():
        with apply_edges(whole.model, whole.adapter, graph, mask):
            expected = whole.model(**x).logits
        with apply_edges(split.model, split.adapter, graph, mask):
            torch.testing.assert_close(split.model(**x).logits, expected, rtol=0, atol=0)
    offloading = load_model(saved["llama"], head="causal-lm", device_map=SPLITS["llama"])
    with pytest.raises(SubnetlabError, match="offloads weights"):
        with apply_edges(offloading.model, offloading.adapter, graph, mask):
            pass


@needs_accelerate
def test_weight_masks_on_a_layer_in_memory_and_refused_on_an_offloaded_one(saved) -> None:
    from subnetlab.intervene.weight_masks import mask_weights

    whole, split = _pair(saved, "llama")
    name = "model.layers.1.mlp.down_proj.weight"  # layer 1 is on the CPU, layer 0 on disk
    mask = (torch.rand(whole.model.get_parameter(name).shape, generator=torch.Generator().manual_seed(5)) > 0.5).float()
    x = _inputs()
    with torch.no_grad():
        with mask_weights(whole.model, {name: mask}):
            expected = whole.model(**x).logits
        with mask_weights(split.model, {name: mask}):
            torch.testing.assert_close(split.model(**x).logits, expected, rtol=0, atol=0)
    with pytest.raises(SubnetlabError, match="offloaded by the model's device map"):
        with mask_weights(split.model, {name.replace("layers.1", "layers.0"): mask}):
            pass


# -- checking the map (no accelerate needed) ----------------------------------------------------------------
@pytest.mark.parametrize(("layers", "message"), [
    ({"transformer.h.9": "cpu"}, "no module 'transformer.h.9'"),
    ({"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.h": "cpu", "lm_head": "cpu"},
     "no device for the parameter 'transformer.ln_f.weight'"),
    ({"transformer": "cpu", "lm_head": "disk"}, "one tied weight"),
])
def test_map_names_checked_against_the_model(saved, layers, message) -> None:
    with pytest.raises(SubnetlabError, match=message) as info:
        load_model(saved["gpt2"], head="causal-lm", device_map=layers)
    assert info.value.setting == "device_map"


@pytest.mark.parametrize(("layers", "max_memory", "message"), [
    ({"transformer": "tpu"}, None, "'tpu': expected"),
    ({"transformer": "meta"}, None, "not a device"),
    ("everywhere", None, "expected auto, balanced"),
    ("{not json", None, "not valid JSON"),
    ({}, None, "non-empty mapping"),
    ("auto", "cpu=lots", "'lots' is not a size"),
    ("auto", "cpu", "expected DEVICE=SIZE"),
    ({"": "cpu"}, {"cpu": "1GiB"}, "max_memory shapes a device map strategy"),
])
def test_bad_maps_refused(layers, max_memory, message) -> None:
    with pytest.raises(SubnetlabError, match=message):
        DeviceMap.parse(layers, max_memory)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_cuda_device_on_a_machine_without_one_is_refused() -> None:
    with pytest.raises(SubnetlabError, match="no CUDA device here"):
        DeviceMap.parse({"model.layers.0": "cuda:0"})
    with pytest.raises(SubnetlabError, match="no CUDA device here"):
        parse_max_memory("0=10GiB")


def test_map_round_trips_and_reads_accelerates_forms(tmp_path) -> None:
    assert parse_max_memory({"cpu": 1000, "disk": "1TiB"}) == {"cpu": 1000, "disk": 2**40}
    assert parse_max_memory("cpu=1.5GB, disk=2048") == {"cpu": 1_500_000_000, "disk": 2048}
    parsed = DeviceMap.parse('{"a": "CPU", "b": "disk"}', offload_folder=tmp_path)
    assert parsed.layers == {"a": "cpu", "b": "disk"} and parsed.offload_folder == str(tmp_path)
    assert DeviceMap.from_dict(parsed.to_dict()) == parsed
    auto = DeviceMap.parse("auto", {"cpu": "2GiB"})
    assert DeviceMap.from_dict(json.loads(json.dumps(auto.to_dict()))) == auto


def test_missing_accelerate_is_one_clear_error(saved, monkeypatch) -> None:
    import subnetlab.models.device_map as device_map

    monkeypatch.setattr(device_map.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SubnetlabError, match=r"needs the accelerate package: pip install 'accelerate>="):
        load_model(saved["gpt2"], head="causal-lm", device_map="auto")


# -- the command ----------------------------------------------------------------------------------------
@needs_accelerate
def test_prune_command_with_a_split_map_runs_as_the_whole_model(tmp_path, capsys) -> None:
    """``subnetlab prune --device-map FILE`` (a BERT layer and the classifier on disk): the same training history,
    gates and scores as the run without a map; the map is recorded in each run's config.json."""
    from safetensors.torch import load_file
    from transformers import BertConfig, BertForSequenceClassification

    from subnetlab.cli import main
    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    torch.manual_seed(0)
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=3,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    BertForSequenceClassification(config).save_pretrained(tmp_path / "bert")
    word_tokenizer().save_pretrained(tmp_path / "bert")
    layers = {"bert.embeddings": "cpu", "bert.encoder.layer.0": "disk", "bert.encoder.layer.1": "cpu",
              "bert.pooler": "cpu", "classifier": "disk"}
    (tmp_path / "map.json").write_text(json.dumps(layers))
    command = ["prune", "--model", str(tmp_path / "bert"), "--task", "nli-synthetic", "--task-option", "n_train=20",
               "--task-option", "n_eval=10", "--task-option", "hans_per_subcase=1", "--sparsity", "0.5", "--seeds", "0",
               "--preset", "quick", "--set", "total_steps=6", "--set", "warmup_steps=3"]
    runs = {}
    for name, extra in (("whole", []), ("split", ["--device-map", str(tmp_path / "map.json")])):
        with pytest.raises(SystemExit) as done:
            main([*command, *extra, "--out", str(tmp_path / name)])
        assert done.value.code == 0, capsys.readouterr().err
        runs[name] = tmp_path / name / "sparsity-0.50" / "seed-0"
    recorded = json.loads((runs["split"] / "config.json").read_text())["device_map"]
    assert recorded == {"layers": layers}
    read = {name: (json.loads((run / "history.json").read_text()), json.loads((run / "metrics.json").read_text())["eval"],
                   load_file(run / "checkpoint.safetensors")) for name, run in runs.items()}
    (history_w, eval_w, state_w), (history_s, eval_s, state_s) = read["whole"], read["split"]
    assert history_s == history_w and len(history_w) > 0
    assert eval_s == eval_w
    assert state_s.keys() == state_w.keys()
    for key in state_w:
        torch.testing.assert_close(state_s[key], state_w[key], rtol=0, atol=0)


@needs_accelerate
def test_circuit_command_places_layers_by_the_map_and_refuses_offloading(tmp_path, capsys) -> None:
    """``subnetlab circuit --device-map``: with every module on a device, the run is the run without a map; a map
    that offloads a layer to disk is one error line before anything is written (edges read weights in hooks)."""
    from transformers import GPT2Config

    from subnetlab.cli import main
    from subnetlab.models import build_model
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    build_model(config, head="causal-lm", seed=0).model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    placed = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.h.0": "cpu", "transformer.h.1": "cpu",
              "transformer.ln_f": "cpu", "lm_head": "cpu"}
    command = ["circuit", "--model", str(tmp_path / "model"), "--task", "circuit:ioi", "--task-option", "n_train=8",
               "--task-option", "n_eval=4", "--sparsity", "0.9", "--seeds", "0", "--preset", "demo", "--set",
               "total_steps=4", "--set", "warmup_steps=2", "--set", "batch_size=4"]
    for name, extra in (("whole", []), ("placed", ["--device-map", json.dumps(placed)])):
        with pytest.raises(SystemExit) as done:
            main([*command, *extra, "--out", str(tmp_path / name)])
        assert done.value.code == 0, capsys.readouterr().err
    run = Path("sparsity-0.900") / "seed-0"
    assert (json.loads((tmp_path / "placed" / run / "config.json").read_text())["device_map"] == {"layers": placed})
    metrics = {name: json.loads((tmp_path / name / run / "metrics.json").read_text()) for name in ("whole", "placed")}
    assert metrics["placed"]["kept"] == metrics["whole"]["kept"]
    assert metrics["placed"]["faithfulness"] == metrics["whole"]["faithfulness"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main([*command, "--device-map", json.dumps({**placed, "transformer.h.1": "disk"}),
              "--out", str(tmp_path / "offloaded")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --device-map: edge interventions cannot run on a model whose device map "
                               "offloads weights"), lines[0]
    assert not (tmp_path / "offloaded").exists()


def test_model_device_is_the_maps_main_device() -> None:
    """accelerate's rule: the first accelerator the map names (``0`` is ``cuda:0``), else the CPU; never meta."""
    model = torch.nn.Linear(2, 2, device="meta")
    for mapped, expected in (({"a": "disk", "b": "cpu"}, "cpu"), ({"a": "cpu", "b": 1, "c": 0}, "cuda:1"),
                             ({"a": "disk", "b": "cuda:2"}, "cuda:2")):
        model.hf_device_map = mapped
        assert model_device(model) == torch.device(expected)
