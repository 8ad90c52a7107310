"""The lottery prune job: stop on the task's own metric (MCC for CoLA), global controls, random bad fill."""

from __future__ import annotations

import math

import pytest
import torch

from subnetlab.runs.lottery import prune_config, prune_job
from subnetlab.subnetwork import Subnetwork
from tests.unit.lottery_helpers import one_thread  # noqa: F401  (autouse fixture)

SENTENCES = ["the cat sat .", "a dog ran .", "the bird slept .", "the big cat never sat .", "a small dog not ran .",
             "the dog sat .", "a bird ran .", "the small bird never slept .", "the cat ran .", "a big dog slept .",
             "the bird sat .", "a cat never ran ."]


def _setup(tmp_path, seed: int = 1):
    from subnetlab.models import build_model
    from tests.conftest import tiny_config
    from tests.unit.lottery_helpers import word_tokenizer

    config = tiny_config("bert")
    config.num_labels = 2
    m = build_model(config, head="classification", seed=seed)
    m.model.save_pretrained(tmp_path / "model")
    tok = word_tokenizer()
    tok.save_pretrained(tmp_path / "model")
    labels = [int(i % 3 == 0) for i in range(len(SENTENCES))]
    (tmp_path / "dev.tsv").write_text("".join(f"src\t{y}\t\t{s}\n" for s, y in zip(SENTENCES, labels)))
    return m, tok, labels


def _mcc(pred: list[int], gold: list[int]) -> float:
    tp = sum(p == g == 1 for p, g in zip(pred, gold))
    tn = sum(p == g == 0 for p, g in zip(pred, gold))
    fp = sum(p == 1 and g == 0 for p, g in zip(pred, gold))
    fn = sum(p == 0 and g == 1 for p, g in zip(pred, gold))
    den = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if den == 0 else (tp * tn - fp * fn) / den


def test_prune_job_stops_on_the_tasks_metric(tmp_path):
    m, tok, gold = _setup(tmp_path)
    with torch.no_grad():  # independent: one sentence at a time, no padding, argmax of the logits
        pred = [int(m.model(**tok(s, return_tensors="pt")).logits.argmax(-1)) for s in SENTENCES]
    assert len(set(pred)) == 2  # a model that predicts both classes, so MCC is not degenerate
    common = dict(model=str(tmp_path / "model"), task="glue-cola", task_options={"eval": str(tmp_path / "dev.tsv")},
                  method="importance", batch_size=4, device="cpu", max_steps=1)
    by_task = prune_job(prune_config(**common, stop_metric="task", criterion="sensitivity-per-batch",
                                     bad_fill="random", importance_batch_size=3), tmp_path / "task")
    by_acc = prune_job(prune_config(**common), tmp_path / "acc")
    assert by_task["metric_name"] == "mcc" and by_acc["metric_name"] == "accuracy"
    assert by_task["full_metric"] == pytest.approx(_mcc(pred, gold))
    assert by_acc["full_metric"] == pytest.approx(sum(p == g for p, g in zip(pred, gold)) / len(gold))
    bad = Subnetwork.load(tmp_path / "task" / "bad.safetensors")
    assert bad.extra["bad_fill_rule"] == "random"


def test_magnitude_job_global_controls(tmp_path):
    _setup(tmp_path)
    config = prune_config(model=str(tmp_path / "model"), task="glue-cola", task_options={"eval": str(tmp_path / "dev.tsv")},
                          method="magnitude", device="cpu", max_steps=2, threshold=0.01, control_scope="global")
    metrics = prune_job(config, tmp_path / "mag")
    good = Subnetwork.load(tmp_path / "mag" / "subnetwork.safetensors")
    rnd = Subnetwork.load(tmp_path / "mag" / "random.safetensors")
    assert rnd.extra["control_scope"] == "global" and rnd.count() == good.count() == metrics["kept"]
    assert set(metrics["controls_metric"]) == {"random", "bad"}
    health = metrics["health"]  # subnetlab.runs.health on the subnetwork's size (no gates, no target)
    assert (health["kept"], health["maskable"]) == (good.count(), sum(m.numel() for m in good.weights.values()))
    assert ("degenerate" in health["problems"]) == (good.count() in (0, health["maskable"]))


def test_new_prune_settings_are_checked():
    from subnetlab.errors import SubnetlabError

    for key, value in (("stop_metric", "f1"), ("control_scope", "layer"), ("bad_fill", "best"), ("importance_batch_size", 0)):
        with pytest.raises(SubnetlabError) as refused:
            prune_config(model="m", task="t", method="importance", **{key: value})
        assert refused.value.setting == key


def test_stsb_regression_prunes_on_the_correlation(tmp_path):
    scipy_stats = pytest.importorskip("scipy.stats")
    from subnetlab.models import build_model
    from tests.conftest import tiny_config
    from tests.unit.lottery_helpers import word_tokenizer

    config = tiny_config("bert")
    config.num_labels = 1
    m = build_model(config, head="classification", seed=2)
    m.model.save_pretrained(tmp_path / "model")
    tok = word_tokenizer()
    tok.save_pretrained(tmp_path / "model")
    pairs = list(zip(SENTENCES[:6], SENTENCES[6:]))
    gold = [0.5, 4.0, 2.25, 3.0, 1.0, 5.0]
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    (tmp_path / "dev.tsv").write_text(header + "".join(f"{i}\tg\tf\t2012\t{i}\tn\tn\t{a}\t{b}\t{y}\n"
                                                       for i, ((a, b), y) in enumerate(zip(pairs, gold))))
    with torch.no_grad():
        pred = [float(m.model(**tok(a, b, return_tensors="pt")).logits[0, 0]) for a, b in pairs]
    expected = (scipy_stats.pearsonr(pred, gold)[0] + scipy_stats.spearmanr(pred, gold)[0]) / 2
    metrics = prune_job(prune_config(model=str(tmp_path / "model"), task="glue-stsb",
                                     task_options={"eval": str(tmp_path / "dev.tsv")}, method="importance",
                                     batch_size=3, device="cpu", max_steps=1, stop_metric="task",
                                     criterion="sensitivity-per-batch"), tmp_path / "stsb")
    assert metrics["metric_name"] == "corr"
    assert metrics["full_metric"] == pytest.approx(expected, rel=1e-4)
