"""MIB's circuit-track datasets (``mib-*`` tasks): the pairs are MIB's own, bad copies are refused naming the row."""

from __future__ import annotations

import json
import re

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.tasks import get_task
from tests.unit.mib_helpers import (
    ROWS,
    arithmetic_rows,
    ioi_rows,
    mcqa_rows,
    mib_pair,
    mib_tokenizer,
    save_folder,
    save_jsonl,
)

TASKS = sorted(ROWS)


def _tokens(task, split: str, tok) -> list[tuple]:
    out = []
    for i in range(len(task.pairs(split))):
        b = task.pair_batch(tok, split, [i])
        out.append((b["input_ids"][0].tolist(), b["corrupted_input_ids"][0].tolist(), int(b["answer_id"][0]),
                    int(b["wrong_id"][0])))
    return out


@pytest.mark.parametrize("name", TASKS)
def test_pairs_are_those_mibs_dataloader_builds_from_a_folder_of_splits(name, tmp_path):
    tok = mib_tokenizer()
    train, validation = ROWS[name](8), ROWS[name](4, 8)
    folder = save_folder(tmp_path / "copy", {"train": train, "validation": validation, "test": ROWS[name](2, 12)})
    task = get_task(name, path=folder).bind(tok)
    assert task.options["eval_split"] == "validation"  # the split MIB evaluates on, by default
    assert _tokens(task, "train", tok) == [mib_pair(name, row, tok) for row in train]
    assert _tokens(task, "eval", tok) == [mib_pair(name, row, tok) for row in validation]
    assert [p.where for p in task.pairs("eval")] == [f"{folder}@validation:{i}" for i in range(1, 5)]
    assert task.metric_names[0] == "logit_diff"  # MIB's metric for these tasks


@pytest.mark.parametrize("name", TASKS)
def test_a_jsonl_copy_holds_out_rows_as_every_pairs_file(name, tmp_path):
    tok = mib_tokenizer()
    rows = ROWS[name](10)
    path = save_jsonl(tmp_path / "copy.jsonl", rows)
    task = get_task(name, path=path, eval_fraction=0.3, split_seed=1).bind(tok)
    seen = []
    for split in ("train", "eval"):
        lines = [int(p.where.rsplit(":", 1)[1]) for p in task.pairs(split)]
        assert _tokens(task, split, tok) == [mib_pair(name, rows[line - 1], tok) for line in lines]
        seen += lines
    assert len(task.pairs("eval")) == 3 and sorted(seen) == list(range(1, 11))
    same = get_task(name, path=path, eval_fraction=0.3, split_seed=1).bind(tok)
    assert [p.where for p in same.pairs("eval")] == [p.where for p in task.pairs("eval")]


def test_the_counterfactual_column_is_an_option(tmp_path):
    tok = mib_tokenizer()
    rows = ioi_rows(6)
    folder = save_folder(tmp_path / "ioi", {"": rows})
    task = get_task("mib-ioi", path=folder, counterfactual="abc_counterfactual", eval_fraction=0.5).bind(tok)
    lines = [int(p.where.rsplit(":", 1)[1]) for p in task.pairs("train")]
    assert _tokens(task, "train", tok) == [mib_pair("mib-ioi", rows[i - 1], tok, "abc_counterfactual") for i in lines]
    assert task.pairs("train")[0].corrupted == rows[lines[0] - 1]["abc_counterfactual"]["prompt"]
    with pytest.raises(SubnetlabError, match="no column 'random_names_counterfactual'.*its counterfactual columns: "
                                             "s2_io_flip_counterfactual, abc_counterfactual") as e:
        get_task("mib-ioi", path=folder, counterfactual="random_names_counterfactual")
    assert e.value.setting == "task_options"


def test_ioi_answers_on_a_byte_level_bpe_are_mibs_tokens(tmp_path):
    """GPT-2-style BPE: `` Mary`` after ``to`` is the token MIB takes from ``tokenizer(" Mary")``."""
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    rows = ioi_rows(8)
    task = get_task("mib-ioi", path=save_jsonl(tmp_path / "ioi.jsonl", rows), eval_file=save_jsonl(
        tmp_path / "held.jsonl", ioi_rows(4, 8))).bind(tok)
    assert _tokens(task, "train", tok) == [mib_pair("mib-ioi", row, tok) for row in rows]


def test_arithmetic_reads_the_rows_of_its_operator(tmp_path):
    tok = mib_tokenizer()
    mixed = [row for pair in zip(arithmetic_rows("+", 6), arithmetic_rows("-", 6)) for row in pair]
    path = save_jsonl(tmp_path / "mixed.jsonl", mixed)
    held = save_jsonl(tmp_path / "held.jsonl", arithmetic_rows("-", 2, 6))
    task = get_task("mib-arithmetic-subtraction", path=path, eval_file=held).bind(tok)
    assert [p.where for p in task.pairs("train")] == [f"{path}:{line}" for line in (2, 4, 6, 8, 10, 12)]
    assert [p.answer for p in task.pairs("train")] == [str(r["label"]) for r in arithmetic_rows("-", 6)]
    with pytest.raises(SubnetlabError, match=re.escape(f"{held}: no rows with operator '+'")):
        get_task("mib-arithmetic-addition", path=held)


def test_rows_mibs_filter_drops_are_refused_or_dropped_as_mib_does(tmp_path):
    """MIB keeps an IOI row only when `` IO``, `` S`` and `` random_c`` are as many tokens: ``Frank`` is four."""
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    rows = ioi_rows(8)
    rows[2]["metadata"]["random_c"] = "Frank"
    path = save_jsonl(tmp_path / "ioi.jsonl", rows)
    held = save_jsonl(tmp_path / "held.jsonl", ioi_rows(3, 8))
    refused = f"{path}:3: the answers' token counts differ (' Tom' 1, ' James' 1, ' Frank' 4); MIB keeps a row only " \
              "when they are equal"
    with pytest.raises(SubnetlabError, match=re.escape(refused)):
        get_task("mib-ioi", path=path, eval_file=held).bind(tok)
    task = get_task("mib-ioi", path=path, eval_file=held, unfit="drop").bind(tok)
    kept = [p.where for p in task.pairs("train")]
    assert kept == [f"{path}:{line}" for line in (1, 2, 4, 5, 6, 7, 8)]
    assert _tokens(task, "train", tok) == [mib_pair("mib-ioi", rows[int(w.rsplit(':', 1)[1]) - 1], tok) for w in kept]


def _without(row: dict, *keys: str) -> dict:
    out = json.loads(json.dumps(row))
    target = out
    for key in keys[:-1]:
        target = target[key]
    del target[keys[-1]]
    return out


def _set(row: dict, value, *keys: str) -> dict:
    out = json.loads(json.dumps(row))
    target = out
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return out


BAD = [  # (task, rows of the copy (the second one bad), error fragment)
    ("mib-ioi", [_without(r, "metadata") for r in ioi_rows(3)], "no column 'metadata', which mib-bench/ioi rows have"),
    ("mib-ioi", [ioi_rows(2)[0], _without(ioi_rows(2)[1], "s2_io_flip_counterfactual", "prompt"), ioi_rows(3)[2]],
     ":2: column 's2_io_flip_counterfactual.prompt' is missing"),
    ("mib-mcqa", [mcqa_rows(2)[0], _set(mcqa_rows(2)[1], 7, "answerKey"), mcqa_rows(3)[2]],
     ":2: column 'answerKey' holds int 7, not an index into its 4 choices"),
    ("mib-mcqa", [_set(r, str(r["answerKey"]), "answerKey") for r in mcqa_rows(3)],
     ":1: column 'answerKey' holds str '0', not an index into its 4 choices"),
    ("mib-arithmetic-addition", [_set(r, 1.5, "label") for r in arithmetic_rows("+", 3)],
     ":1: column 'label' holds float 1.5, not a number"),
]


@pytest.mark.parametrize("name, rows, message", BAD)
def test_a_bad_copy_is_refused_naming_the_row_and_column(name, rows, message, tmp_path):
    path = save_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(SubnetlabError, match=re.escape(message)):
        get_task(name, path=path)


def test_a_copy_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    latin1 = json.dumps(ioi_rows(2)[1]).encode().replace(b" went ", b" caf\xe9 ")
    path.write_bytes(json.dumps(ioi_rows(1)[0]).encode() + b"\n" + latin1 + b"\n")
    with pytest.raises(SubnetlabError, match=re.escape(f"{path}:2: not UTF-8 text")):
        get_task("mib-ioi", path=str(path))


def test_without_a_path_the_task_says_what_it_reads():
    with pytest.raises(SubnetlabError, match="task mib-arc-easy reads a local copy of mib-bench/arc_easy: give its "
                                             "folder or JSON lines file as task option path") as e:
        get_task("mib-arc-easy")
    assert e.value.setting == "task_options"


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A tiny GPT-2 built from a config over the word-level tokenizer of the MIB rows."""
    from transformers import GPT2Config

    from subnetlab.models import build_model

    root = tmp_path_factory.mktemp("mib-lm")
    tok = mib_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    build_model(config, head="causal-lm", seed=0).model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    return str(root / "model")


@pytest.mark.parametrize("name, options", [("mib-ioi", ["--task-option", "counterfactual=abc_counterfactual"]),
                                           ("mib-mcqa", [])])
def test_circuit_and_circuit_eval_on_a_mib_copy_equal_the_same_pairs_as_a_pairs_file(name, options, tiny_lm, tmp_path,
                                                                                     capsys, one_thread):
    """``--task mib-*`` end to end (EAP scores, then the faithfulness curve): the same numbers as the same pairs
    written as a pairs file (``file:`` with clean / corrupted / answer / wrong columns)."""
    from subnetlab.io import load_tensors
    from tests.unit.test_circuit_eval_cli import _run

    train, validation = ROWS[name](6), ROWS[name](4, 6)
    folder = save_folder(tmp_path / "copy", {"train": train, "validation": validation})
    task = get_task(name, path=folder, **dict(o.split("=") for o in options[1::2])).bind(mib_tokenizer())
    for split, file in (("train", "pairs.jsonl"), ("eval", "held.jsonl")):
        save_jsonl(tmp_path / file, [{"clean": p.clean, "corrupted": p.corrupted, "answer": p.answer, "wrong": p.wrong}
                                     for p in task.pairs(split)])
    tasks = {"mib": ["--task", name, "--task-option", f"path={folder}", *options],
             "file": ["--task", f"file:{tmp_path / 'pairs.jsonl'}", "--corrupted-column", "corrupted",
                      "--eval-file", str(tmp_path / "held.jsonl")]}
    curves, scores = {}, {}
    for kind, args in tasks.items():
        _run(["circuit", "--model", tiny_lm, *args, "--method", "eap", "--out", str(tmp_path / f"{kind}-eap"),
              "--device", "cpu"], capsys)
        scores[kind] = load_tensors(tmp_path / f"{kind}-eap" / "scores.safetensors")["edges"]
        _run(["circuit-eval", "--model", tiny_lm, *args, "--scores", str(tmp_path / "mib-eap" / "scores.safetensors"),
              "--sizes", "10,50,100", "--out", str(tmp_path / f"{kind}-eval"), "--device", "cpu"], capsys)
        curves[kind] = json.loads((tmp_path / f"{kind}-eval" / "faithfulness.json").read_text())
    assert scores["mib"].abs().sum() > 0 and scores["mib"].tolist() == scores["file"].tolist()
    assert curves["mib"]["faithfulness"] == curves["file"]["faithfulness"]
    assert curves["mib"]["cpr"] == curves["file"]["cpr"] and curves["mib"]["faithfulness"]["logit_diff"][-1] == \
        pytest.approx(1.0, abs=1e-5)
    recorded = (tmp_path / "mib-eap" / "config.json").read_text()  # the copy and the counterfactual, to rerun it
    assert folder in recorded and all(o.split("=")[1] in recorded for o in options[1::2])
