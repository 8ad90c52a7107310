"""Figure 1's curve is scored on the report's rows: every checkpoint's ID and OOD accuracy equals the effective-size
sweep's full-model evaluation of it, and the last one the pruning sweep's full model (one source per model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from subnetlab.analysis.effective_size import id_ood_accuracy
from subnetlab.executor import run_jobs
from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.experiments.heuristic_core import data
from subnetlab.experiments.heuristic_core.study import ID_SPLITS, _curves
from subnetlab.methods.finetune.state import STATE_FILE
from subnetlab.methods.head_pruning.config import preset_config
from subnetlab.models import resolve
from subnetlab.runs.prune import prune_sweep
from subnetlab.tasks import NLI3


@pytest.fixture(autouse=True)
def one_thread(one_thread):
    yield


def _checkpoint(where: Path, seed: int, tok) -> None:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3, initializer_range=0.3,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    BertForSequenceClassification(config).eval().save_pretrained(where)
    tok.save_pretrained(where)
    (where / STATE_FILE).write_text(json.dumps({"step": int(where.name.split("-")[1])}), encoding="utf-8")


def test_curve_points_are_the_sweeps_full_model_numbers(tmp_path: Path) -> None:
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    ft = tmp_path / "finetune"
    for step, seed in ((10, 0), (20, 1)):
        _checkpoint(ft / "checkpoints" / f"step-{step}", seed, tok)
    options = {"n_train": 48, "n_eval": 24, "hans_per_subcase": 1}
    pool = data.synthetic_ood_examples(options, 6)
    subcases = sorted({ex.subcase for ex in pool})[:2]
    ood = data.write_hans_tsv(tmp_path / "ood.tsv", data.select(pool, subcases, 6))
    real = data.write_hans_tsv(tmp_path / "real.tsv", data.select(pool, subcases, 3))  # a second OOD file
    base = {"task": "nli-synthetic", "task_options": options, "eval_data": [f"ood:hans={ood}", f"real:hans={real}"],
            "splits": ["id", "ood", "real"]}
    settings = preset_config("demo", 0.5, eval_batch_size=5, max_length=24)  # batches cut across both files
    local = settings_for(get_reproduction("heuristic-core"), "demo", {"backend": "local", "jobs": "null"})
    curves = _curves({"name": "nli"}, local, base, {"settings": settings}, ft, subcases,
                     tmp_path / "curves")
    assert curves["step"] == [10, 20] and set(curves) == {"step", "id", "ood", "real"}
    assert json.loads((tmp_path / "curves" / "curves.json").read_text()) == curves
    # the effective-size sweep's full model at each checkpoint (its own config: ID and OOD only)
    slim = {**base, "eval_data": [f"ood:hans={ood}"], "splits": ["id", "ood"]}
    for i, step in enumerate(curves["step"]):
        model = str(ft / "checkpoints" / f"step-{step}")
        job = prune_sweep({**slim, "model": model}, tmp_path / "es" / f"step-{step}", targets=(), seeds=[0],
                          preset="demo", schedule="staircase", levels=[0.5],
                          overrides={"eval_batch_size": 5, "max_length": 24})[0]
        run_jobs([job], backend="local")
        scores = json.loads((job.out_dir / "metrics.json").read_text())["eval"]
        assert (curves["id"][i], curves["ood"][i]) == id_ood_accuracy(scores, ID_SPLITS, subcases)  # exactly
    # the pruning sweep's full model (Table 1's "Model" column) is the last checkpoint's point, real HANS included
    job = prune_sweep({**base, "model": str(ft / "checkpoints" / "step-20")}, tmp_path / "prune", targets=[0.5],
                      seeds=[0], preset="demo", overrides={"eval_batch_size": 5, "max_length": 24})[0]
    run_jobs([job], backend="local")
    scores = json.loads((job.out_dir / "metrics.json").read_text())["eval"]
    real_only = {"id": scores["id"], "real": scores["real"]}
    assert curves["real"][-1] == id_ood_accuracy(real_only, ID_SPLITS, subcases)[1]
    assert 0.0 <= min(curves["ood"]) and max(curves["ood"]) <= 1.0
