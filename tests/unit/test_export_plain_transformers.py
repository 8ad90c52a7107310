"""An exported directory never loads wrong in plain transformers: every family, every kind of removal.

Before, a directory with one MLP removed and every head kept loaded through
``AutoModelForCausalLM.from_pretrained`` with that MLP filled with fresh random
weights. Now plain transformers refuses every exported directory (``export/save.py``
says why), whichever ``from_pretrained`` is called: an Auto class with the model's
head, ``AutoModel``, the family's own class with its head, and its base class.
Independent computation for what subnetlab loads: the gated source model
(``apply_gates`` with the same masks and ablation values).
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from subnetlab.export import export_subnetwork
from subnetlab.intervene import apply_gates, collect_means
from subnetlab.models import load_model
from subnetlab.subnetwork import Subnetwork
from tests.conftest import HEAD_FOR, output_of, tiny_inputs, tiny_model

TOL = 1e-5  # float32
AUTO_FOR = {"classification": transformers.AutoModelForSequenceClassification,
            "causal-lm": transformers.AutoModelForCausalLM,
            "image-classification": transformers.AutoModelForImageClassification}
BASE_CLASS = {"bert": transformers.BertModel, "roberta": transformers.RobertaModel, "gpt2": transformers.GPT2Model,
              "llama": transformers.LlamaModel, "vit": transformers.ViTModel}


def _masks(adapter, removed: str) -> Subnetwork:
    """``heads``: two heads of layer 0 and every head of layer 1; ``mlps``: layer 1's MLP; ``both``;
    ``none``: every gate open (the export is the source model, and still refused)."""
    heads = torch.ones(adapter.num_layers, adapter.num_heads)
    mlps = torch.ones(adapter.num_layers)
    if removed in ("heads", "both"):
        heads[0, [0, 2]] = 0
        heads[1, :] = 0
    if removed in ("mlps", "both"):
        mlps[1] = 0
    return Subnetwork.structured(adapter, heads, mlps, ablation="mean")


def _inputs(family: str, seed: int = 0) -> dict[str, torch.Tensor]:
    return tiny_inputs(family, batch=2, length=6, seed=seed, pad=0 if family == "vit" else 2)


def _plain_loaders(family: str, model_class: type) -> dict[str, object]:
    return {"Auto class with the head": AUTO_FOR[HEAD_FOR[family]].from_pretrained,
            "AutoModel": transformers.AutoModel.from_pretrained,
            f"{model_class.__name__}": model_class.from_pretrained,
            f"{BASE_CLASS[family].__name__}": BASE_CLASS[family].from_pretrained}


@pytest.mark.parametrize("removed", ["none", "heads", "mlps", "both"])
@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_plain_transformers_refuses_and_subnetlab_loads_what_the_gated_model_computes(
        family, removed, ablation, tmp_path, one_thread):
    m = tiny_model(family, layers=2)
    values = collect_means(m.model, m.adapter, [_inputs(family, seed=1)]) if ablation == "mean" else None
    sub = _masks(m.adapter, removed)
    out = tmp_path / "small"
    export_subnetwork(m, sub, out, values)
    small = load_model(str(out), head=HEAD_FOR[family]).model
    x = _inputs(family)
    with torch.no_grad():
        with apply_gates(m.model, m.adapter, *sub.gates(), ablation=values):
            gated = output_of(m.model, x)
        assert (output_of(small, x) - gated).abs().max() <= TOL
    for name, from_pretrained in _plain_loaders(family, type(m.model)).items():
        with pytest.raises((ValueError, OSError)) as refused:
            from_pretrained(str(out))
        message = str(refused.value)
        # the Auto classes name the model type only subnetlab knows; the family's classes find no weights file
        assert "subnetlab_export" in message or "no file named model.safetensors" in message, (name, message)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "subnetlab_export" and config["subnetlab_model_type"] == m.model.config.model_type
    assert f'head="{HEAD_FOR[family]}"' in (out / "README.md").read_text()


def test_a_directory_of_the_first_format_still_loads_through_subnetlab(tmp_path, one_thread):
    """Format 1 kept the source's config.json and model.safetensors; subnetlab reads it as before."""
    m = tiny_model("gpt2", layers=2)
    sub = _masks(m.adapter, "both")
    out = tmp_path / "small"
    export_subnetwork(m, sub, out, None)
    config = json.loads((out / "config.json").read_text())
    config["model_type"] = config.pop("subnetlab_model_type")
    (out / "config.json").write_text(json.dumps(config))
    (out / "subnetlab_model.safetensors").rename(out / "model.safetensors")
    record = json.loads((out / "subnetlab_pruning.json").read_text())
    (out / "subnetlab_pruning.json").write_text(json.dumps({**record, "format": "subnetlab.export/1"}))
    x = _inputs("gpt2")
    with torch.no_grad():
        with apply_gates(m.model, m.adapter, *sub.gates()):
            gated = output_of(m.model, x)
        assert (output_of(load_model(str(out), head="causal-lm").model, x) - gated).abs().max() <= TOL
