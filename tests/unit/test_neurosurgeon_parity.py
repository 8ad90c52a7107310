"""subnetlab's continuous-sparsification masks against NeuroSurgeon 0.1.0 (the Subtask Induction authors' library).

Same mask logits, same temperature (beta), same input: the same soft masks in
training, the same hard masks in evaluation, the same L0 term, and the same
masked GPT-2 outputs. Runs only where NeuroSurgeon is installed
(``pip install 'subnetlab[bench]'``).
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("NeuroSurgeon")

from NeuroSurgeon.Models.circuit_model import CircuitConfig, CircuitModel  # noqa: E402
from transformers.pytorch_utils import Conv1D  # noqa: E402

from subnetlab.intervene import mask_weights  # noqa: E402
from subnetlab.methods.continuous_sparsification import ContinuousSparsification  # noqa: E402
from subnetlab.models import build_model  # noqa: E402
from tests.conftest import tiny_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _pair(beta: float, seed: int = 0):
    """A tiny GPT-2 masked both ways with the same random mask logits at temperature ``beta``."""
    loaded = build_model(tiny_config("gpt2"), head="causal-lm", seed=seed)
    ours, theirs = loaded.model.eval(), copy.deepcopy(loaded.model).eval()
    strategy = ContinuousSparsification(l0_lambda=1e-3)
    masks = strategy.create_masks(loaded.adapter)
    targets = [name for name, module in theirs.named_modules() if isinstance(module, Conv1D)]
    assert sorted(f"{t}.weight" for t in targets) == sorted(masks)  # the same matrices: every GPT-2 Conv1D
    circuit = CircuitModel(CircuitConfig(
        mask_method="continuous_sparsification",
        mask_hparams={"ablation": "none", "mask_unit": "weight", "mask_bias": False, "mask_init_value": -0.1},
        target_layers=targets, freeze_base=True, add_l0=True, l0_lambda=strategy.l0_lambda), theirs)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, mask in masks.items():
            mask.s.copy_(torch.randn(mask.s.shape, generator=g) * 0.3)
            mask.beta.fill_(beta)
            layer = circuit.wrapped_model.get_submodule(name.rsplit(".", 1)[0])
            layer.weight_mask_params.copy_(mask.s)  # GPT-2 Conv1D weights are [in, out] in both
    circuit.temperature = beta
    for p in ours.parameters():
        p.requires_grad_(False)
    return ours, masks, circuit, strategy


@pytest.mark.parametrize("beta", [1.0, 7.3, 100.0])
def test_same_logits_and_temperature_give_the_same_masks_and_l0(beta):
    ours, masks, circuit, strategy = _pair(beta)
    circuit.train()
    for name, mask in masks.items():
        layer = circuit.wrapped_model.get_submodule(name.rsplit(".", 1)[0])
        mask.train()
        assert torch.equal(mask(), layer._compute_mask("weight_mask_params"))  # soft: sigmoid(beta * s)
        mask.eval()
        layer.train(False)
        assert torch.equal(mask(), layer._compute_mask("weight_mask_params"))  # hard: 1[s > 0]
        layer.train(True)
    for mask in masks.values():
        mask.train()
    theirs_l0 = circuit._compute_l0_loss()
    assert float(strategy.penalty(masks).detach()) == pytest.approx(strategy.l0_lambda * float(theirs_l0.detach()), rel=1e-6)


@pytest.mark.parametrize("beta", [1.0, 100.0])
def test_same_masks_give_the_same_masked_outputs_and_loss(beta):
    ours, masks, circuit, strategy = _pair(beta, seed=3)
    x = torch.randint(3, 90, (5, 6), generator=torch.Generator().manual_seed(4))
    with mask_weights(ours, dict(masks)):
        for training in (True, False):  # soft masks, then hard
            for m in masks.values():
                m.train(training)
            circuit.train(training)
            out = ours(input_ids=x, labels=x)
            theirs = circuit(input_ids=x, labels=x)
            assert torch.allclose(out.logits, theirs.logits, atol=1e-5, rtol=1e-5)
            # their loss adds lambda * L0 while training; ours adds the same penalty in the step
            penalty = float(strategy.penalty(masks).detach()) if training else 0.0
            assert float(out.loss) + penalty == pytest.approx(float(theirs.loss), rel=1e-5)
