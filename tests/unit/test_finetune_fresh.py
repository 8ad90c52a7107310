"""`finetune` warns when a never-trained model meets a fine-tuning learning rate, and says how far it is.

Independent facts: a model built from a config has every layer norm at scale 1 and
shift 0 (transformers' initialisation); one optimiser step moves them.
"""

from __future__ import annotations

import pytest
import torch

from subnetlab import progress
from subnetlab.methods.finetune.config import resolve_config
from subnetlab.methods.finetune.fresh import FINE_TUNING_LR, fresh_model_warning, looks_untrained
from subnetlab.runs.finetune import finetune
from tests.conftest import output_of, tiny_inputs, tiny_model


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "vit"])
def test_a_model_built_from_a_config_looks_untrained_until_one_step_moves_it(family, one_thread):
    m = tiny_model(family, layers=1)
    assert looks_untrained(m.model)
    optimizer = torch.optim.AdamW(m.model.parameters(), lr=1e-5)
    output_of(m.model, tiny_inputs(family, batch=2, length=5)).square().mean().backward()
    optimizer.step()
    assert not looks_untrained(m.model)  # even a 1e-5 step moves every norm off 1 and 0


def test_the_warning_needs_both_an_untrained_model_and_a_fine_tuning_rate(one_thread):
    m = tiny_model("bert", layers=1)
    assert "freshly initialised" in fresh_model_warning(m.model, 2e-5, "my-model")
    assert fresh_model_warning(m.model, FINE_TUNING_LR * 10, "my-model") is None
    with torch.no_grad():
        m.model.base_model.embeddings.LayerNorm.weight.mul_(1.1)  # as any training leaves it
    assert fresh_model_warning(m.model, 2e-5, "my-model") is None


def _config(lr: float):
    return resolve_config(model="gpt2-arith:1", task="arith:a+b", lr=lr, batch_size=16, max_steps=4, save_every=4,
                          eval_every=2, max_length=8, seed=3,
                          task_options={"n_train": 64, "n_eval": 16, "n_test": 16, "max_number": 20})


def test_finetune_prints_one_warning_line_and_a_line_per_evaluation(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "_quiet", False)
    finetune(_config(2e-5), tmp_path / "slow")  # gpt2-arith is built from a config: never trained
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("warning:")]
    assert len(warnings) == 1 and "lr 2e-05 is a fine-tuning rate" in warnings[0]
    steps = [line.split(":")[0] for line in err if line.startswith("[subnetlab] step ")]
    assert steps == ["[subnetlab] step 0/4", "[subnetlab] step 2/4", "[subnetlab] step 4/4"]
    finetune(_config(1e-3), tmp_path / "fast")
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
