"""Shared fixtures: tiny models of every supported family, built from configs (no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, GPT2Config, LlamaConfig, RobertaConfig, ViTConfig

from subnetlab.models import LoadedModel, build_model
from subnetlab.progress import set_quiet


def threads_per_worker() -> int:
    """Two threads at most; under pytest-xdist the workers share the cores (`make test` runs two on two cores)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, (os.cpu_count() or 1) // workers))


torch.set_num_threads(threads_per_worker())
set_quiet(True)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
VOCAB = 97


def tiny_config(family: str, layers: int = 2, heads: int = 4, hidden: int = 32):
    # a large init range makes every component matter, so closing a gate visibly changes the output
    common = dict(num_hidden_layers=layers, num_attention_heads=heads, hidden_size=hidden,
                  intermediate_size=2 * hidden, initializer_range=0.3)
    if family == "bert":
        return BertConfig(vocab_size=VOCAB, max_position_embeddings=64, num_labels=3, **common)
    if family == "roberta":
        return RobertaConfig(vocab_size=VOCAB, max_position_embeddings=70, num_labels=3, pad_token_id=1, **common)
    if family == "gpt2":
        return GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=hidden, n_layer=layers, n_head=heads,
                          n_inner=2 * hidden, bos_token_id=0, eos_token_id=0, initializer_range=0.3)
    if family == "vit":
        return ViTConfig(image_size=16, patch_size=8, num_channels=3, num_labels=3, **common)
    if family == "llama":
        return LlamaConfig(vocab_size=VOCAB, num_key_value_heads=heads // 2, max_position_embeddings=64,
                           **common)
    raise ValueError(family)


HEAD_FOR = {"bert": "classification", "roberta": "classification", "gpt2": "causal-lm",
            "vit": "image-classification", "llama": "causal-lm"}
FAMILIES = list(HEAD_FOR)


def tiny_model(family: str, seed: int = 0, **kwargs) -> LoadedModel:
    return build_model(tiny_config(family, **kwargs), head=HEAD_FOR[family], seed=seed)


def tiny_inputs(family: str, batch: int = 3, length: int = 7, seed: int = 0, pad: int = 0) -> dict[str, torch.Tensor]:
    """Inputs for a tiny model; ``pad`` right-pads every row after the first with that many pad tokens."""
    g = torch.Generator().manual_seed(seed)
    if family == "vit":
        return {"pixel_values": torch.randn(batch, 3, 16, 16, generator=g)}
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    if pad:
        ids = torch.cat([ids, torch.ones(batch, pad, dtype=torch.long)], 1)
        mask = torch.cat([mask, torch.zeros(batch, pad, dtype=torch.long)], 1)
    return {"input_ids": ids, "attention_mask": mask}


def output_of(model, inputs) -> torch.Tensor:
    return model(**inputs).logits


@pytest.fixture
def one_thread():
    """Tiny models: one thread is several times faster than two on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=FAMILIES)
def family(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def minilm() -> LoadedModel:
    from subnetlab.models import load_model

    return load_model("minilm", head="classification", num_labels=3, new_weights=("classifier.*",))  # a fresh head, asked for
