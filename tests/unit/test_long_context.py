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
from subnetlab.intervene.checkpoint import recomputing
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
    from subnetlab.methods.attribution.hooks import node_hooks  # the hook the methods record with

    with torch.no_grad():
        for run, inputs in (("clean", clean), ("corrupted", corrupted)):
            with node_hooks(m.adapter, lambda key, out, run=run: seen[run].__setitem__(key, out)):
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


# -- edge pruning: blocks recomputed in the backward (intervene.checkpoint) ------------------------------------
def _edge_step(family: str, checkpoint: bool | None, dtype=torch.float64):
    """One edge-pruning step's loss and the gradients of every log-alpha, masks undecided (every writer cut)."""
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.train import EdgePruner
    from subnetlab.methods.l0.objective import kl_full_to_pruned
    from tests.conftest import tiny_model
    from tests.unit.test_edge_pruning import _pairs

    m = tiny_model(family, layers=2)
    m.model.to(dtype).eval()
    data = _pairs(m, n=4, length=6)
    config = preset_config("demo", 0.8, seed=1, batch_size=4, eval_batch_size=4, checkpoint_blocks=checkpoint)
    trainer = EdgePruner(m.model, m.adapter, data, config)
    with torch.no_grad():
        trainer.edges.log_alpha.normal_(0, 1, generator=torch.Generator().manual_seed(0))
    calls = []  # per block forward inside the step: whether it is the backward's recomputation
    with trainer:
        batch = data.batch_at(list(range(4)))
        trainer.prepare(batch, data.model_inputs(batch))
        log_p_full = trainer.teacher.log_probs(list(range(4)), batch)
        norms = [b.get_submodule(m.adapter.spec.attn_norm) for b in m.adapter.layers()]
        handles = [n.register_forward_pre_hook(lambda mod, args: calls.append(recomputing())) for n in norms]
        loss = kl_full_to_pruned(log_p_full, data.task_logits(m.model(**data.model_inputs(batch)), batch))
        loss.backward()
        for h in handles:
            h.remove()
    assert count_hooks(m.model) == 0
    grads = [trainer.edges.log_alpha.grad.clone(), trainer.nodes.log_alpha.grad.clone()]
    return float(loss.detach()), grads, calls


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_edge_pruning_step_with_blocks_recomputed_equals_the_plain_step(family, one_thread):
    loss, grads, forwards = _edge_step(family, False)
    loss_c, grads_c, forwards_c = _edge_step(family, True)
    assert forwards == [False, False] and forwards_c == [False, False, True, True]  # recomputed in the backward
    assert abs(loss - loss_c) <= 1e-12 * abs(loss) and loss > 0
    for g, gc in zip(grads, grads_c):
        assert float(g.abs().max()) > 0
        torch.testing.assert_close(gc, g, rtol=0, atol=1e-12 * float(g.abs().max()))


def test_edge_pruning_with_blocks_recomputed_trains_and_resumes_to_the_plain_run(tmp_path, one_thread):
    """30 steps with ``checkpoint_blocks``, killed at step 17 and resumed, end where the plain run ends."""
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.train import prune_edges
    from tests.conftest import tiny_model
    from tests.unit.test_edge_pruning import _pairs

    m = tiny_model("gpt2", layers=2)
    data = _pairs(m, n=16)
    settings = dict(seed=2, batch_size=8, warmup_steps=20, total_steps=30, checkpoint_every=10)
    plain = prune_edges(m.model, m.adapter, data, preset_config("demo", 0.8, checkpoint_blocks=False, **settings))
    cfg = preset_config("demo", 0.8, checkpoint_blocks=True, **settings)

    class Killed(Exception):
        pass

    def kill(step):
        if step == 17:
            raise Killed

    with pytest.raises(Killed):
        prune_edges(m.model, m.adapter, data, cfg, run_dir=tmp_path, on_step=kill)
    assert count_hooks(m.model) == 0 and all("forward" not in b.__dict__ for b in m.adapter.layers())
    resumed = prune_edges(m.model, m.adapter, data, cfg, run_dir=tmp_path)
    assert resumed.resumed_from == 10
    torch.testing.assert_close(resumed.log_alpha_edges, plain.log_alpha_edges, rtol=0, atol=1e-5)
    assert torch.equal(resumed.selection.edges, plain.selection.edges)
    assert "checkpoint_blocks" not in preset_config("demo", 0.8).to_dict()  # old runs' configs still match
    assert preset_config("demo", 0.8, checkpoint_blocks=True).to_dict()["checkpoint_blocks"] is True


def test_edge_pruning_checkpoints_long_forwards_by_default():
    from subnetlab.methods.edge_pruning.config import EdgePruneConfig
    from subnetlab.methods.edge_pruning.train import AUTO_CHECKPOINT_TOKENS, checkpoints

    auto, off = EdgePruneConfig(), EdgePruneConfig(checkpoint_blocks=False)
    long, short = torch.empty(2, AUTO_CHECKPOINT_TOKENS // 2 + 1, 1), torch.empty(2, AUTO_CHECKPOINT_TOKENS // 2, 1)
    assert checkpoints(auto, long) and not checkpoints(auto, short) and not checkpoints(off, long)
    assert checkpoints(EdgePruneConfig(checkpoint_blocks=True), short)


# -- the plan runs the step with the setting under fake tensors ----------------------------------------------
LONG = [("gpt2", "eap", dict(position_chunk=32)), ("llama", "eap-ig", dict(position_chunk=32)),
        ("gpt2", "edge-pruning", dict(checkpoint_blocks=True)), ("llama", "edge-pruning", dict(checkpoint_blocks=True))]


@pytest.mark.parametrize("family, method, setting", LONG, ids=[f"{f}-{m}" for f, m, _ in LONG])
def test_the_plan_predicts_the_long_context_step(family, method, setting) -> None:
    """The predicted peak of the chunked / checkpointed step is the allocator's measured one (within 15%, as
    ``test_plan``'s other steps); chunked attribution's is below the unchunked one's."""
    from subnetlab.runs.plan import PlanSettings, plan_run
    from tests.unit.test_plan import CONFIGS, real_peak

    torch.set_num_threads(1)
    settings = PlanSettings(method, batch=4, length=64, ig_steps=2, preset="demo" if method == "edge-pruning"
                            else "paper", **setting)
    predicted = plan_run(CONFIGS[family], settings, family).peak_bytes
    measured = real_peak(CONFIGS[family], settings)
    assert abs(predicted - measured) <= 0.15 * measured, (predicted, measured)
    if method != "edge-pruning":
        whole = plan_run(CONFIGS[family], PlanSettings(method, batch=4, length=64, ig_steps=2, position_chunk=0),
                         family).peak_bytes
        assert predicted < 0.8 * whole
