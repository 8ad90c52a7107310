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
                    eval_fraction=0.34, seed=1)
    assert task.kind == "classification" and task.labels == ["maybe", "no", "yes"]
    everything = task.train + task.eval_splits["eval"]
    assert len(task.eval_splits["eval"]) == 2 and len(task.train) == 4
    assert sorted((e.text_a, e.text_b, task.labels[e.label]) for e in everything) == sorted(ROWS)
    assert task.options["eval_from_train"] == {"fraction": 0.34, "rows": 2}
    again = get_task(f"file:{tmp_path / 'd.csv'}", text_column="premise", text_pair_column="hypothesis",
                     eval_fraction=0.34, seed=1)
    assert again.eval_splits["eval"] == task.eval_splits["eval"]  # the held-out rows follow the seed


def test_jsonl_with_integer_labels_and_an_eval_file(tmp_path):
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"text": a, "label": i % 2}) + "\n" for i, (a, _, _) in enumerate(ROWS)))
    (tmp_path / "e.jsonl").write_text(json.dumps({"text": "new words", "label": 1}) + "\n")
    task = get_task(f"file:{tmp_path / 't.jsonl'}", eval_file=str(tmp_path / "e.jsonl"))
    assert task.labels == ["0", "1"] and len(task.train) == 6
    assert task.eval_splits["eval"][0].text_a == "new words" and task.eval_splits["eval"][0].label == 1
    assert task.train[0].text_b is None


@pytest.mark.parametrize("content, options, message", [
    ("premise,label\nthe cat,yes\n", {"text_column": "text"}, r"d\.csv: no text column 'text' \(columns: premise, label\)"),
    ("", {}, r"d\.csv: cannot read the data"),
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
