"""Your own data: `file:PATH` through `datasets`, checked row by row against the file written here."""

from __future__ import annotations

import json

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.registry import get_task

ROWS = [("the cat sat", "a cat sat", "yes"), ("the dog ran", "a cat flew", "no"), ("birds sing", "birds sing", "yes"),
        ("rain falls", "sun shines", "no"), ("we eat", "we eat food", "maybe"), ("fish swim", "fish swim", "yes")]


def _csv(path, rows=ROWS, header="premise,hypothesis,label"):
    path.write_text(header + "\n" + "".join(f"{a},{b},{y}\n" for a, b, y in rows))
    return path


def test_a_csv_with_a_header_row_is_a_pair_classification_task(tmp_path):
    task = get_task(f"file:{_csv(tmp_path / 'd.csv')}", text_column="premise", text_pair_column="hypothesis",
                    eval_fraction=0.34, test_fraction=0.0, split_seed=1)
    assert task.kind == "classification" and task.labels == ["maybe", "no", "yes"]
    everything = task.train + task.eval_splits["eval"]
    assert len(task.eval_splits["eval"]) == 2 and len(task.train) == 4 and "test" not in task.eval_splits
    assert sorted((e.text_a, e.text_b, task.labels[e.label]) for e in everything) == sorted(ROWS)
    assert task.options["held_out"]["eval"] == 2 and task.options["held_out"]["test"] == 0
    again = get_task(f"file:{tmp_path / 'd.csv'}", text_column="premise", text_pair_column="hypothesis",
                     eval_fraction=0.34, test_fraction=0.0, split_seed=1)
    assert again.eval_splits["eval"] == task.eval_splits["eval"]  # the held-out rows are the file's


def test_jsonl_with_integer_labels_and_an_eval_file(tmp_path):
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"text": a, "label": i % 2}) + "\n" for i, (a, _, _) in enumerate(ROWS)))
    (tmp_path / "e.jsonl").write_text(json.dumps({"text": "new words", "label": 1}) + "\n")
    task = get_task(f"file:{tmp_path / 't.jsonl'}", eval_file=str(tmp_path / "e.jsonl"))
    assert task.labels == ["0", "1"] and len(task.train) == 5  # the test row still comes from the training file
    assert len(task.eval_splits["test"]) == 1 and task.manifest.eval_source["data"] == str(tmp_path / "e.jsonl")
    assert task.eval_splits["eval"][0].text_a == "new words" and task.eval_splits["eval"][0].label == 1
    assert task.train[0].text_b is None


@pytest.mark.parametrize("content, options, message", [
    ("premise,label\nthe cat,yes\n", {"text_column": "text"}, r"d\.csv: no text column 'text' \(columns: premise, label\)"),
    ("", {}, r"d\.csv: empty file"),
    ("text,label\na,yes\n,no\nc,no\n", {}, r"d\.csv:3: column 'text' holds no text"),
    ("text,label\na,yes\nb,yes\n", {}, r"single label 'yes'"),
])
def test_malformed_data_names_the_file_row_and_column(tmp_path, content, options, message):
    (tmp_path / "d.csv").write_text(content)
    with pytest.raises(SubnetlabError, match=message):
        get_task(f"file:{tmp_path / 'd.csv'}", **options)


def test_an_unknown_label_in_the_eval_file_names_its_row(tmp_path):
    _csv(tmp_path / "t.csv")
    (tmp_path / "e.csv").write_text("premise,hypothesis,label\na b,c d,yes\ne f,g h,perhaps\n")
    with pytest.raises(SubnetlabError, match=r"e\.csv:3: column 'label' holds an unknown label 'perhaps'"):
        get_task(f"file:{tmp_path / 't.csv'}", text_column="premise", eval_file=str(tmp_path / "e.csv"))


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(SubnetlabError, match="no such data file"):
        get_task(f"file:{tmp_path / 'nope.csv'}")
    (tmp_path / "d.xlsx").write_text("x")
    with pytest.raises(SubnetlabError, match="unknown data format '.xlsx'"):
        get_task(f"file:{tmp_path / 'd.xlsx'}")


def test_json_labels_of_mixed_types_are_refused(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"text": "a", "label": "yes"}\n{"text": "b", "label": 3}\n')
    with pytest.raises(SubnetlabError, match="cannot read the data|mixes label types"):
        get_task(f"file:{tmp_path / 'm.jsonl'}")


@pytest.mark.parametrize("name, content, message", [
    ("d.csv", "text,label\n", r"d\.csv: no rows"),
    ("d.csv", "text,label\na,yes\nb\nc,no\n", r"d\.csv:3: column 'label' is empty"),
    ("d.jsonl", '{"text": "a", "label": "yes"}\n{"text": "b", "label": 3}\n',
     r"d\.jsonl:2: column 'label' mixes label types: 3 \(int\) where row .*d\.jsonl:1 holds 'yes' \(str\)"),
    ("d.jsonl", '{"text": "a", "label": 0}\n{"text": 5, "label": 1}\n', r"d\.jsonl:2: column 'text' holds no text \(a int: 5\)"),
    ("d.jsonl", '{"text": "a", "label": 0.5}\n{"text": "b", "label": 1}\n', r"d\.jsonl:1: column 'label' holds a float"),
    ("d.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": -1}\n', r"d\.jsonl:2: column 'label' holds a negative label -1"),
])
def test_more_malformed_data_names_the_file_row_and_column(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(SubnetlabError, match=message):
        get_task(f"file:{tmp_path / name}")


def test_a_missing_column_names_its_setting(tmp_path):
    _csv(tmp_path / "t.csv")
    for options, setting in [({"text_column": "sentence"}, "text_column"), ({"text_column": "premise", "label_column": "y"}, "label_column"),
                             ({"text_column": "premise", "text_pair_column": "h"}, "text_pair_column"),
                             ({"text_column": "premise", "answer_column": "a"}, "answer_column")]:
        with pytest.raises(SubnetlabError, match=r"t\.csv: no .* column") as e:
            get_task(f"file:{tmp_path / 't.csv'}", **options)
        assert e.value.setting == setting


def _saved_splits(folder):
    import datasets

    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"sentence": [a for a, _, _ in ROWS], "label": [y for _, _, y in ROWS]}),
        "validation": datasets.Dataset.from_dict({"sentence": ["new one", "other one"], "label": ["no", "yes"]}),
    }).save_to_disk(str(folder))
    return folder


def test_a_folder_with_splits_trains_on_train_and_holds_out_eval_split(tmp_path):
    folder = _saved_splits(tmp_path / "ds")
    task = get_task(f"file:{folder}", text_column="sentence", eval_split="validation", test_fraction=0)
    assert task.labels == ["maybe", "no", "yes"] and len(task.train) == len(ROWS)
    assert [(e.text_a, task.labels[e.label]) for e in task.eval_splits["eval"]] == [("new one", "no"), ("other one", "yes")]
    assert task.options["eval_fraction"] is None and task.manifest.eval == ()  # nothing held out of train for eval
    with pytest.raises(SubnetlabError, match=r"ds: no split 'test' \(splits: train, validation\)") as e:
        get_task(f"file:{folder}", text_column="sentence", eval_split="test")
    assert e.value.setting == "eval_split"
    _csv(tmp_path / "t.csv")
    with pytest.raises(SubnetlabError, match="a single table has no split 'validation'"):
        get_task(f"file:{tmp_path / 't.csv'}", text_column="premise", eval_split="validation")
    with pytest.raises(SubnetlabError, match="give one source of held-out rows"):
        get_task(f"file:{folder}", text_column="sentence", eval_split="validation", eval_file=str(tmp_path / "t.csv"))


def test_hub_datasets_load_through_datasets_and_fail_cleanly_offline(tmp_path, monkeypatch):
    import datasets

    calls = []

    def offline(name, config=None, **kwargs):
        calls.append((name, config))
        raise ConnectionError("Couldn't reach 'someone/pairs' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(SubnetlabError, match=r"hub:someone/pairs:small: cannot load the hub dataset someone/pairs:small "
                                             r"\(ConnectionError: Couldn't reach") as e:
        get_task("hub:someone/pairs:small", text_column="sentence")
    assert calls == [("someone/pairs", "small")] and e.value.setting == "task"
    saved = datasets.load_from_disk(str(_saved_splits(tmp_path / "ds")))
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config=None, **kw: saved)
    task = get_task("hub:someone/pairs", text_column="sentence", eval_split="validation")
    assert task.name == "hub:someone/pairs" and len(task.eval_splits["eval"]) == 2 and task.options["path"] == "hub:someone/pairs"
    with pytest.raises(SubnetlabError, match="expected hub:NAME or hub:NAME:CONFIG"):
        get_task("hub:someone/pairs@train")


def test_a_hub_class_label_column_keeps_its_names(tmp_path, monkeypatch):
    import datasets

    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    data = datasets.DatasetDict({"train": datasets.Dataset.from_dict(
        {"text": ["bad film", "good film", "fine film"], "label": [0, 1, 1]}, features=features)})
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config=None, **kw: data)
    task = get_task("hub:imdb-like", eval_fraction=0.34)
    assert task.labels == ["neg", "pos"]
    assert sorted((e.text_a, task.labels[e.label]) for e in task.train + task.eval_splits["eval"] + task.eval_splits["test"]) == [
        ("bad film", "neg"), ("fine film", "pos"), ("good film", "pos")]


def test_an_answer_column_makes_a_next_token_task(tmp_path):
    from transformers import AutoTokenizer

    from subnetlab.models import resolve

    rows = [("two plus two is", "four"), ("one plus one is", "two"), ("two plus one is", "three"), ("one plus two is", "three"),
            ("three plus one is", "four"), ("zero plus two is", "two")]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    (tmp_path / "held.jsonl").write_text(json.dumps({"question": "one plus three is", "answer": "four"}) + "\n")
    task = get_task(f"file:{tmp_path / 'qa.jsonl'}", text_column="question", answer_column="answer",
                    eval_file=str(tmp_path / "held.jsonl"), test_fraction=0)
    assert task.kind == "lm" and task.labels == ["four", "three", "two"]
    assert [(e.text_a, task.labels[e.label]) for e in task.train] == rows
    assert task.options["label_column"] is None and task.options["answer_column"] == "answer"
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))  # a WordPiece vocabulary: each answer is one token
    batch = task.batch_at(tok, "eval", [0])
    prompt = tok("one plus three is", add_special_tokens=False)["input_ids"]
    assert batch["input_ids"][0].tolist() == prompt and batch["answer_index"].tolist() == [len(prompt) - 1]
    assert batch["target_ids"].tolist() == tok.encode(" four", add_special_tokens=False)
    (tmp_path / "held.jsonl").write_text(json.dumps({"question": "one plus four is", "answer": "five"}) + "\n")
    with pytest.raises(SubnetlabError, match=r"held\.jsonl:1: column 'answer' holds an answer 'five' the training rows never give"):
        get_task(f"file:{tmp_path / 'qa.jsonl'}", text_column="question", answer_column="answer",
                 eval_file=str(tmp_path / "held.jsonl"))
