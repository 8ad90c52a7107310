"""Every method on every device this machine has: the CPU always, CUDA when there is one (marked ``gpu``).

On the CPU these are self-consistency checks that keep the tests themselves honest; on a CUDA machine
(`make gpu-check`) they compare the device's gated outputs with the CPU's and run a few steps of
hard-concrete pruning, continuous sparsification and transfer training with everything on the device.
"""

from __future__ import annotations

import copy

import pytest
import torch

from subnetlab.intervene import apply_gates, collect_means
from subnetlab.methods.continuous_sparsification import ContinuousSparsification
from subnetlab.methods.head_pruning.config import PruneConfig
from subnetlab.methods.head_pruning.train import prune
from subnetlab.methods.l0.data import PruningData
from subnetlab.models import get_adapter
from subnetlab.transfer import LMSplit, TrainSettings, accuracy, build_transfer_model, last_logits, train_model
from subnetlab.transfer.train import loss_on
from tests.conftest import VOCAB, tiny_inputs, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                     reason="no CUDA device on this machine")]),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_gated_outputs_on_the_device_equal_the_cpus(device, family):
    loaded = tiny_model(family, seed=0)
    inputs = tiny_inputs(family, batch=4, length=6, pad=2)
    means = collect_means(loaded.model, loaded.adapter, [inputs])
    heads = (torch.rand(loaded.adapter.num_layers, loaded.adapter.num_heads, generator=torch.Generator().manual_seed(0)) > 0.5).float()
    mlps = torch.tensor([1.0, 0.0])
    with torch.no_grad(), apply_gates(loaded.model, loaded.adapter, heads, mlps, ablation=means):
        on_cpu = loaded.model(**inputs).logits
    moved = copy.deepcopy(loaded.model).to(device)
    adapter = get_adapter(moved)
    with torch.no_grad(), apply_gates(moved, adapter, heads.to(device), mlps.to(device), ablation=means):
        on_device = moved(**{k: v.to(device) for k, v in inputs.items()}).logits
    assert on_device.device.type == device
    torch.testing.assert_close(on_device.cpu(), on_cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_twenty_pruning_steps_keep_everything_on_the_device(device):
    loaded = tiny_model("bert", seed=0)
    model = loaded.model.to(device)
    ids = torch.randint(3, VOCAB, (64, 8), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    adapter = get_adapter(model)
    means = collect_means(model, adapter, [{k: v.to(device) for k, v in inputs.items()}])
    cfg = PruneConfig(sparsity=0.5, seed=0, warmup_steps=10, total_steps=20, batch_size=16, accumulation=1,
                      init_log_alpha=3.0, lr=0.3, lambda_lr=0.2, checkpoint_every=10, eval_batch_size=64)
    result = prune(model, adapter, PruningData.from_tensors(inputs), cfg, ablation=means)
    assert len(result.history) > 0 and all(torch.isfinite(torch.tensor(h["kl"])) for h in result.history if "kl" in h)
    assert result.selections["topk"].heads.shape == (adapter.num_layers, adapter.num_heads)


@pytest.mark.parametrize("device", DEVICES)
def test_discovery_and_transfer_run_on_the_device(device):
    loaded = tiny_model("gpt2", seed=1)
    model, adapter = loaded.model.to(device), loaded.adapter
    g = torch.Generator().manual_seed(0)
    split = LMSplit(torch.randint(3, 90, (48, 3), generator=g), torch.randint(0, 7, (48,), generator=g), torch.arange(7))
    split = split.to(device)
    with torch.no_grad():
        split.targets = last_logits(model.eval(), split.input_ids)[:, :7].argmax(-1)
    cs = ContinuousSparsification(epochs=4, lr=0.05, batch_size=12, l0_lambda=1e-3, beta_final=20.0, keep="last")
    found = cs.fit(model, adapter,
                   batches=lambda e: [(split.input_ids[r], split.targets[r]) for r in split.batches(12, g)],
                   loss_fn=lambda m, b: loss_on(last_logits(m, b[0]), b[1]), evaluate=lambda m: accuracy(m, split))
    assert len(found.history) == 4 and 0.0 < found.kept_fraction <= 1.0
    tm = build_transfer_model(model, "scratch", seed=0)
    result = train_model(tm.model.to(device), split, split, split, TrainSettings(epochs=2, lr=5e-3, batch_size=12), seed=0)
    assert 0.0 <= result.test_accuracy <= 1.0 and result.sequences == 2 * 48


TASK_OPTIONS = {"n_train": 32, "n_eval": 16, "hans_per_subcase": 1}


def task_word_tokenizer(task_name: str, options: dict):
    """A BERT-style word-level tokenizer over the words of the task's examples: no MiniLM package needed, so
    the test runs on a GPU machine that has only torch and transformers."""
    from subnetlab.tasks import get_task
    from tests.unit.lottery_helpers import word_tokenizer

    task = get_task(task_name, **options)
    words = sorted({w for ex in [*task.train, *(e for split in task.eval_splits.values() for e in split)]
                    for text in (ex.text_a, ex.text_b or "") for w in text.split()})
    return word_tokenizer(words)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A tiny BERT classifier saved with a word-level tokenizer: what `subnetlab prune` loads."""
    from subnetlab.models import build_model
    from tests.conftest import tiny_config

    tok = task_word_tokenizer("nli-synthetic", TASK_OPTIONS)
    config = tiny_config("bert", layers=2, heads=4, hidden=32)
    config.vocab_size = len(tok)
    loaded = build_model(config, head="classification", seed=0)
    where = tmp_path_factory.mktemp("ckpt") / "model"
    loaded.model.save_pretrained(where)
    tok.save_pretrained(where)
    return where


@pytest.mark.parametrize("device", DEVICES)
def test_a_prune_job_runs_on_the_device_it_names(device, tiny_checkpoint, tmp_path):
    """`prune --device` reaches the job: the job on ``device`` keeps the same subnetwork as on the CPU (the gate
    noise comes from a CPU generator) and scores it alike; the device is recorded but is not the run's identity."""
    from subnetlab.methods.head_pruning.config import preset_config
    from subnetlab.runs.prune import prune_job
    from subnetlab.runs.prune_setup import PruneJobConfig

    prune = preset_config("demo", 0.5, seed=0, warmup_steps=8, total_steps=12, train_limit=32, means_examples=32,
                          eval_limit=16, batch_size=8, checkpoint_every=4).to_dict()
    base = {"model": str(tiny_checkpoint), "task": "nli-synthetic",
            "task_options": TASK_OPTIONS, "splits": ["id"], "prune": prune}
    cpu = prune_job({**base, "device": "cpu"}, tmp_path / "cpu")
    there = prune_job({**base, "device": device}, tmp_path / device)
    assert PruneJobConfig.from_dict({**base, "device": device}).device == device
    assert there["selections"]["topk"]["kept"] == cpu["selections"]["topk"]["kept"]
    assert abs(there["eval"]["id"]["accuracy"] - cpu["eval"]["id"]["accuracy"]) <= 1 / 16
