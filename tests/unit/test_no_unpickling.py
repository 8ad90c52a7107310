"""Nothing is unpickled: every weight load in the package asks for safetensors, every ``torch.load`` for weights only.

Reads the source with ``ast``: a ``X.from_pretrained(...)`` call whose receiver is a model class (not a config,
tokenizer or processor, nor subnetlab's own ``from_pretrained``) must pass ``use_safetensors=True``; a
``torch.load(...)`` must pass ``weights_only=True``; ``pickle`` is never imported. And the circuits study refuses
a saved model directory that holds only a pickle, before anything reads it.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from subnetlab.errors import SubnetlabError

NOT_WEIGHTS = ("Config", "Tokenizer", "Processor", "FeatureExtractor", "SamSegmenter")


def _package() -> Path:
    spec = importlib.util.find_spec("subnetlab")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _keyword_true(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def offending_calls(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
                if any(n and n.split(".")[0] in ("pickle", "cPickle", "dill") for n in names):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: imports pickle")
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            receiver = ast.unparse(node.func.value)
            if node.func.attr == "from_pretrained" and not any(word in receiver for word in NOT_WEIGHTS):
                if not _keyword_true(node, "use_safetensors"):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {receiver}.from_pretrained without "
                                 "use_safetensors=True")
            if node.func.attr == "load" and receiver == "torch" and not _keyword_true(node, "weights_only"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: torch.load without weights_only=True")
    return found


def test_every_weight_load_refuses_pickles():
    assert offending_calls(_package()) == []


def test_the_checker_finds_each_form(tmp_path):
    (tmp_path / "bad.py").write_text(
        "import pickle\nimport torch\nfrom transformers import AutoModel, AutoConfig\n"
        "AutoModel.from_pretrained('x')\nAutoConfig.from_pretrained('x')\ntorch.load('f')\n"
        "AutoModel.from_pretrained('x', use_safetensors=True)\ntorch.load('f', weights_only=True)\n")
    assert offending_calls(tmp_path) == ["bad.py:1: imports pickle",
                                         "bad.py:4: AutoModel.from_pretrained without use_safetensors=True",
                                         "bad.py:6: torch.load without weights_only=True"]


def test_a_saved_study_model_that_is_only_a_pickle_is_refused(tmp_path):
    from subnetlab.experiments.circuits.training import load_trained_model

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    (model_dir / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(SubnetlabError, match="pytorch_model.bin, a pickle, which subnetlab never loads"):
        load_trained_model(model_dir)
