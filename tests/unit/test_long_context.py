"""Long contexts: attribution scored in chunks of tokens equals the whole batch at once.

``position_chunk`` sums every block's scores chunk by chunk over the batch's tokens, with ``D`` recomputed per
chunk from the node outputs (``reader_gradients.WriterDifferenceChunks``). The reference is the unchunked path of
the same function (``position_chunk=0``), itself checked against the expanded readers
(``test_attribution_paths``). In float64 (GPT-2 and GPT-NeoX's LayerNorms compute in the model's dtype) the two
agree to 1e-12 relative to the largest score, far inside the 1e-6 the chunking must meet: only the order of the
sums over tokens differs. Llama's RMSNorm computes in float32 whatever the model's dtype, so its tolerance is
float32's: a few ulps of the largest score (2e-6 of it)."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import count_hooks
from subnetlab.methods.attribution import attribute_batch
from subnetlab.methods.attribution.reader_gradients import WriterDifferenceChunks, chunks, writer_differences
from subnetlab.methods.attribution.scores import AUTO_CHUNK, chunk_of
from tests.unit.test_attribution_paths import GRADIENT_METHODS, _setup


@pytest.mark.parametrize("method", GRADIENT_METHODS)
@pytest.mark.parametrize("family", ["gpt2", "neox-parallel", "neox-sequential"])
def test_chunked_scores_equal_unchunked_in_float64(family, method, one_thread):
    m, graph, clean, corrupted, metric = _setup(family, torch.float64)  # batch 2 x 5: 10 tokens
    whole = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=2,
                            position_chunk=0)
    scale = float(whole.abs().max())
    assert scale > 0.1
    for chunk in (1, 3, 7):  # one token; chunks crossing the rows' boundary; a short last chunk
        chunked = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=2,
                                  position_chunk=chunk)
        assert count_hooks(m.model) == 0
        torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("method", ["eap", "eap-ig"])
def test_chunked_scores_equal_unchunked_on_llama_in_float32(method, one_thread):
    m, graph, clean, corrupted, metric = _setup("llama")
    whole = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=3,
                            position_chunk=0)
    chunked = attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, method=method, steps=3,
                              position_chunk=4)
    scale = float(whole.abs().max())
    torch.testing.assert_close(chunked, whole, rtol=0, atol=2e-6 * scale)


def test_chunks_of_the_writer_differences_are_its_rows(one_thread):
    """``WriterDifferenceChunks.rows`` at every block's writer count and chunk equals ``writer_differences``."""
    m, graph, clean, corrupted, _ = _setup("gpt2", torch.float64)
    seen = {"clean": {}, "corrupted": {}}
    from subnetlab.methods.attribution.scores import _node_hooks  # noqa: the test reads the module's own hook

    with torch.no_grad():
        for run, inputs in (("clean", clean), ("corrupted", corrupted)):
            with _node_hooks(m.adapter, lambda key, out, run=run: seen[run].__setitem__(key, out)):
                m.model(**inputs)
        whole = writer_differences(m.adapter, graph, seen["corrupted"], seen["clean"], torch.float64)
        pieces = WriterDifferenceChunks(m.adapter, graph, seen["corrupted"], seen["clean"], torch.float64)
    tokens, hidden = pieces.tokens, m.adapter.hidden_size
    grid = whole.view(whole.shape[0], tokens, hidden)
    for writers in sorted({b.writers for b in graph.reader_blocks}):
        for start, stop in chunks(tokens, 4):
            expected = grid[:writers, start:stop].reshape(writers, -1)
            with torch.no_grad():
                got = pieces.rows(writers, start, stop)
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-14)


def test_the_default_chunks_only_batches_longer_than_the_auto_chunk():
    assert chunk_of(None, AUTO_CHUNK) is None and chunk_of(None, AUTO_CHUNK + 1) == AUTO_CHUNK
    assert chunk_of(0, 10 ** 6) is None and chunk_of(64, 64) is None and chunk_of(64, 65) == 64


@pytest.mark.parametrize("bad", [-1, 2.5, "auto"])
def test_a_bad_position_chunk_is_refused_naming_the_setting(bad, one_thread):
    m, graph, clean, corrupted, metric = _setup("gpt2")
    with pytest.raises(SubnetlabError) as e:
        attribute_batch(m.model, m.adapter, graph, clean, corrupted, metric, position_chunk=bad)
    assert e.value.setting == "position_chunk"
