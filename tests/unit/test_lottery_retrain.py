"""Re-fine-tuning keeps the pruned parts exactly off (structured gates and weight masks)."""

from __future__ import annotations

import torch

from subnetlab.methods.finetune.config import FinetuneConfig
from subnetlab.methods.lottery.retrain import PinnedSubnetwork, train_masked
from subnetlab.subnetwork import Subnetwork
from tests.conftest import tiny_model
from tests.unit.lottery_helpers import one_thread, tiny_nli_task, word_tokenizer  # noqa: F401  (one_thread: autouse)

CFG = FinetuneConfig(lr=1e-3, batch_size=8, max_steps=6, grad_clip=1.0, weight_decay=0.01, eval_batch_size=16, seed=0)


def _slices_snapshot(adapter, slices):
    return [adapter.parameter(sl.name).detach().narrow(sl.dim, sl.start, sl.stop - sl.start).clone() for sl in slices]


def test_structured_retrain_never_uses_pruned_heads_or_mlps():
    m = tiny_model("bert")
    a = m.adapter
    sub = Subnetwork.from_names(a, ["L0.H0", "L0.H2", "L1.H1", "L1.H3", "L1.MLP"], method="importance")
    pruned_head, pruned_mlp = (0, 1), 0
    kept_before = _slices_snapshot(a, a.head_params(0, 0))
    seen = []

    def watch(module, args):  # registered after the pin's gates: sees what the output projection gets
        x = args[0].view(*args[0].shape[:-1], a.num_heads, a.head_dim)
        seen.append(float(x[..., pruned_head[1], :].detach().abs().max()))

    with PinnedSubnetwork(m.model, a, sub):
        handle = a.head_output_module(pruned_head[0]).register_forward_pre_hook(watch)
        try:
            result = train_masked(m.model, a, word_tokenizer(), tiny_nli_task(), sub, CFG)
        finally:
            handle.remove()
    assert len(seen) >= CFG.max_steps and max(seen) == 0.0  # zero at every training and evaluation forward
    # the kept head did train; with zero gradient and no weight decay AdamW leaves the pruned
    # components' parameters bit-identical (decay would shrink them, harmlessly, while gated)
    assert not all(torch.equal(b, c) for b, c in zip(kept_before, _slices_snapshot(a, a.head_params(0, 0))))
    assert result["steps"] == 6 and "id" in result["final"]

    cfg_no_decay = FinetuneConfig(**{**CFG.__dict__, "weight_decay": 0.0})
    m2 = tiny_model("bert")
    before_head = _slices_snapshot(m2.adapter, m2.adapter.head_params(*pruned_head))
    before_mlp = _slices_snapshot(m2.adapter, m2.adapter.mlp_params(pruned_mlp))
    train_masked(m2.model, m2.adapter, word_tokenizer(), tiny_nli_task(), sub, cfg_no_decay)
    after_head = _slices_snapshot(m2.adapter, m2.adapter.head_params(*pruned_head))
    after_mlp = _slices_snapshot(m2.adapter, m2.adapter.mlp_params(pruned_mlp))
    for sl, b, c in zip(m2.adapter.head_params(*pruned_head), before_head, after_head):
        assert torch.equal(b, c), sl.name
    for sl, b, c in zip(m2.adapter.mlp_params(pruned_mlp), before_mlp, after_mlp):
        assert torch.equal(b, c), sl.name


def test_weight_retrain_keeps_pruned_weights_exactly_zero_at_every_step():
    m = tiny_model("bert")
    a = m.adapter
    g = torch.Generator().manual_seed(0)
    masks = {n: (torch.rand(a.parameter(n).shape, generator=g) > 0.6).float() for n in a.weight_matrices()}
    sub = Subnetwork.from_weight_masks(a, masks, method="magnitude")
    initial = {n: a.parameter(n).detach().clone() for n in masks}
    worst = []

    def check(step: int) -> None:
        worst.append(max(float((a.parameter(n).detach() * (1 - masks[n])).abs().max()) for n in masks))

    train_masked(m.model, a, word_tokenizer(), tiny_nli_task(), sub, CFG, on_step=check)
    assert len(worst) == CFG.max_steps and max(worst) == 0.0
    changed = sum(int(((a.parameter(n).detach() != initial[n]) & (masks[n] > 0)).sum()) for n in masks)
    assert changed > 0.5 * sum(int(v.sum()) for v in masks.values())  # the kept weights did train
