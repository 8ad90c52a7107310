"""GLUE tasks: TSV readers for all nine formats (files written here), hub rows (datasets stubbed), GLUE metrics."""

from __future__ import annotations

import math

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.glue import GLUE, metrics
from subnetlab.tasks.glue.task import GlueRegressionTask, metric_value, task_metric
from subnetlab.tasks.registry import get_task
from subnetlab.tasks.spec import TaskSpec

scipy_stats = pytest.importorskip("scipy.stats")

FILES = {
    "cola": ("CoLA", "train.tsv", "gj04\t1\t\tThe cat sat .\ngj04\t0\t*\tCat the sat .\ngj04\t1\t\tA dog ran .\n"),
    "sst2": ("SST-2", "dev.tsv", "sentence\tlabel\ngreat film\t1\nawful film\t0\n"),
    "mrpc": ("MRPC", "dev.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA cat .\tThe cat .\n"
                                "0\t3\t4\tA dog .\tA bird flew .\n"),
    "stsb": ("STS-B", "dev.tsv", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                                 "0\tmain\tx\t2012\t1\tnone\tnone\tA man plays .\tA man plays music .\t4.25\n"
                                 "1\tmain\tx\t2012\t2\tnone\tnone\tA cat .\tA car .\t0.5\n"),
    "qqp": ("QQP", "dev.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\tHow ?\tHow so ?\t1\n"
                              "1\t3\t4\tWhy ?\n2\t5\t6\tWho ?\tWhat ?\t0\n"),
    "mnli": ("MNLI", "dev_matched.tsv", "index\tsentence1\tsentence2\tlabel1\tgold_label\n0\tA b .\tA .\tneutral\tneutral\n"
                                        "1\tC d .\tC .\t-\t-\n2\tE f .\tNot E .\tcontradiction\tcontradiction\n"),
    "qnli": ("QNLI", "dev.tsv", "index\tquestion\tsentence\tlabel\n0\tWho ?\tHe did .\tentailment\n"
                                "1\tWhen ?\tNo one .\tnot_entailment\n"),
    "rte": ("RTE", "dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA b .\tA .\tentailment\n1\tC .\tD .\tnot_entailment\n"),
    "wnli": ("WNLI", "dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA b .\tA .\t1\n1\tC .\tD .\t0\n"),
}


@pytest.mark.parametrize("name", list(GLUE))
def test_every_glue_format_reads_its_tsv(tmp_path, name):
    folder, fname, text = FILES[name]
    (tmp_path / folder).mkdir()
    path = tmp_path / folder / fname
    path.write_text(text)
    if fname == "train.tsv":  # CoLA: a dev file is needed for data_dir; test train= / eval= instead
        task = get_task(f"glue-{name}", train=str(path), eval=str(path))
    else:
        task = get_task(f"glue-{name}", data_dir=str(tmp_path))
    rows = task.examples("id")
    expected = {
        "cola": [("The cat sat .", None, 1), ("Cat the sat .", None, 0), ("A dog ran .", None, 1)],
        "sst2": [("great film", None, 1), ("awful film", None, 0)],
        "mrpc": [("A cat .", "The cat .", 1), ("A dog .", "A bird flew .", 0)],
        "stsb": [("A man plays .", "A man plays music .", 4.25), ("A cat .", "A car .", 0.5)],
        "qqp": [("How ?", "How so ?", 1), ("Who ?", "What ?", 0)],  # the short row is skipped, as GLUE's processor does
        "mnli": [("A b .", "A .", 1), ("E f .", "Not E .", 2)],  # '-' has no gold label
        "qnli": [("Who ?", "He did .", 0), ("When ?", "No one .", 1)],
        "rte": [("A b .", "A .", 0), ("C .", "D .", 1)],
        "wnli": [("A b .", "A .", 1), ("C .", "D .", 0)],
    }[name]
    assert [(e.text_a, e.text_b, e.label) for e in rows] == expected
    assert task_metric(task) == GLUE[name].metric
    if name == "qqp":
        assert task.options["skipped_rows"] == 1


def test_short_row_is_an_error_outside_qqp(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\tA .\n")
    with pytest.raises(SubnetlabError, match=r"dev.tsv:2"):
        get_task("glue-rte", eval=str(path))


def test_bad_metric_and_missing_data_refused(tmp_path):
    with pytest.raises(SubnetlabError, match="metric"):
        get_task("glue-cola", eval="x.tsv", metric="corr")
    with pytest.raises(SubnetlabError, match="data_dir"):
        get_task("glue-rte")
    assert "glue-stsb" in TaskSpec("glue-stsb", {"eval": "hub:nyu-mll/glue:stsb@validation"}).name


def test_hub_rows_through_datasets(monkeypatch):
    import datasets

    seen = {}

    def fake_load(name, config, split):
        seen.update(name=name, config=config, split=split)
        return [{"sentence1": "A .", "sentence2": "B .", "label": 1}, {"sentence1": "C .", "sentence2": "D .", "label": -1}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    task = get_task("glue-rte", eval="hub:nyu-mll/glue:rte@validation")
    assert seen == {"name": "nyu-mll/glue", "config": "rte", "split": "validation"}
    assert [(e.text_a, e.label) for e in task.examples("id")] == [("A .", 1)]  # the unlabelled row is skipped


def test_metrics_against_scipy_and_closed_forms():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(2, (60,), generator=g).tolist()
    p = torch.randint(2, (60,), generator=g).tolist()
    tp = sum(a == b == 1 for a, b in zip(p, y))
    fp = sum(a == 1 and b == 0 for a, b in zip(p, y))
    fn = sum(a == 0 and b == 1 for a, b in zip(p, y))
    tn = 60 - tp - fp - fn
    mcc = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert metrics.matthews_corrcoef(p, y) == pytest.approx(mcc)
    assert metrics.f1_binary(p, y) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert metrics.matthews_corrcoef([1, 1, 1], [0, 1, 1]) == 0.0  # a constant prediction
    x = torch.randn(40, generator=g).tolist()
    z = [round(v + 0.5 * w, 1) for v, w in zip(x, torch.randn(40, generator=g).tolist())]  # rounded: ties
    assert metrics.pearson(x, z) == pytest.approx(scipy_stats.pearsonr(x, z)[0])
    assert metrics.spearman(x, z) == pytest.approx(scipy_stats.spearmanr(x, z)[0])


def test_task_scores_name_their_metric(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text(FILES["cola"][2])
    task = get_task("glue-cola", eval=str(path))
    score = task.score([1, 1, 0], "id")  # gold 1 0 1: tp 1, fp 1, fn 1, tn 0
    assert score["accuracy"] == pytest.approx(1 / 3)
    assert score["mcc"] == pytest.approx((0 - 1) / math.sqrt(2 * 2 * 1 * 1))
    assert metric_value(task, score) == score["mcc"] == score["metric"]


def test_stsb_is_a_regression(tmp_path):
    from tests.unit.lottery_helpers import word_tokenizer

    path = tmp_path / "dev.tsv"
    path.write_text(FILES["stsb"][2].replace("A man plays music .", "the cat sat .").replace("A man plays .", "a dog ran .")
                    .replace("A cat .", "the dog .").replace("A car .", "a bird ."))
    task = get_task("glue-stsb", train=str(path), eval=str(path))
    assert isinstance(task, GlueRegressionTask) and task.labels == ["similarity"]
    batch = task.batch_at(word_tokenizer(), "id", [0, 1])
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [4.25, 0.5]
    logits = torch.tensor([[4.0], [1.0]])
    assert task.loss(logits, batch).item() == pytest.approx(((4.0 - 4.25) ** 2 + 0.5 ** 2) / 2)
    preds = task.predictions(logits, "id")
    score = task.score(preds, "id")
    assert score["pearson"] == pytest.approx(1.0) and score["metric"] == score["corr"]
