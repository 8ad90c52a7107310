"""Circuit tasks: prompt pairs for any tokenizer, their checks, batches and metrics."""

from __future__ import annotations

import json
import re

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.tasks import get_task, parse_operation
from subnetlab.tasks.circuits import circuit_metrics, corrupted_inputs
from subnetlab.tasks.circuits.ioi import NAMES
from subnetlab.tasks.circuits.pairs import CircuitPair, token_ids
from tests.unit.circuit_helpers import gpt2_style_tokenizer, llama_style_tokenizer

TOKENIZERS = {"gpt2": gpt2_style_tokenizer, "llama": llama_style_tokenizer}


@pytest.fixture(params=list(TOKENIZERS))
def tok(request):
    return TOKENIZERS[request.param]()


def _check_pair(tok, pair, batch_row):
    """The checks, recomputed by hand: equal lengths, and each answer adds exactly one token in context."""
    clean, corrupted = token_ids(tok, pair.clean), token_ids(tok, pair.corrupted)
    assert len(clean) == len(corrupted)
    for text, key in ((pair.answer, "answer_id"), (pair.wrong, "wrong_id")):
        full = token_ids(tok, pair.clean + text)
        assert full[:-1] == clean and full[-1] == int(batch_row[key])


@pytest.mark.parametrize("corruption", ["abc", "s2-io"])
def test_ioi_pairs_fit_the_tokenizer_and_follow_the_templates(tok, corruption):
    task = get_task("circuit:ioi", n_train=12, n_eval=6, seed=3, corruption=corruption).bind(tok)
    base = len(tok.tokenize("x and"))
    single = [n for n in NAMES if len(tok.tokenize(f"x and {n}")) == base + 1]  # one token for the name
    assert 5 <= len(single) < len(NAMES)  # the tiny tokenizer splits some names: those are never used
    for split in ("train", "eval"):
        pairs = task.pairs(split)
        batch = task.pair_batch(tok, split, list(range(len(pairs))))
        for b, pair in enumerate(pairs):
            _check_pair(tok, pair, {k: v[b] for k, v in batch.items()})
            io, s = pair.answer.strip(), pair.wrong.strip()
            names = re.findall(r"[A-Z][a-z]+", pair.clean)
            assert io in single and s in single and io != s
            assert names.count(s) == 2 and names.count(io) == 1  # S is repeated, IO is the answer
            assert (names.index(io) < names.index(s)) == (pair.group == "ABBA")
            if corruption == "abc":  # three other names; the rest of the prompt unchanged
                other = re.findall(r"[A-Z][a-z]+", pair.corrupted)
                assert io not in other and s not in other and len(set(other[-3:])) == 3
            else:  # S2 -> IO
                head, _, tail = pair.clean.rpartition(f" {s} ")
                assert pair.corrupted == f"{head} {io} {tail}"
    assert not {p.clean for p in task.pairs("train")} & {p.clean for p in task.pairs("eval")}


def test_generated_pairs_depend_on_the_seed_only():
    tok = gpt2_style_tokenizer()
    first = get_task("circuit:ioi", n_train=8, n_eval=4, seed=1).bind(tok).pairs("train")
    again = get_task("circuit:ioi", n_train=8, n_eval=4, seed=1).bind(tok).pairs("train")
    other = get_task("circuit:ioi", n_train=8, n_eval=4, seed=2).bind(tok).pairs("train")
    assert first == again and first != other


def test_greater_than_pairs_answer_above_and_wrong_below_the_start_year():
    tok = gpt2_style_tokenizer()
    task = get_task("circuit:greater-than", n_train=10, n_eval=10, seed=0).bind(tok)
    pairs = task.pairs("eval")
    batch = task.pair_batch(tok, "eval", list(range(len(pairs))))
    for b, pair in enumerate(pairs):
        _check_pair(tok, pair, {k: v[b] for k, v in batch.items()})
        start = re.search(r"year (\d\d)(\d\d) to", pair.clean)
        assert start and int(pair.answer) == int(start.group(2)) + 1 and int(pair.wrong) == int(start.group(2)) - 1
        assert pair.corrupted == pair.clean.replace(f"{start.group(1)}{start.group(2)} to", f"{start.group(1)}01 to")


def test_greater_than_refuses_a_tokenizer_that_does_not_split_years_in_halves():
    with pytest.raises(SubnetlabError, match=r"only 0 of \d+ year pairs"):
        get_task("circuit:greater-than", n_train=4, n_eval=4).bind(llama_style_tokenizer())


def test_arithmetic_pairs_reuse_the_arithmetic_task_held_out_rows():
    task = get_task("circuit:arith:a^2+ab", n_train=400, n_eval=20, n_test=10, max_number=30, modulus=7, seed=4)
    tok = task.tokenizer
    task.bind(tok)
    arith = get_task("arith:a^2+ab", n_train=400, n_eval=20, n_test=10, max_number=30, modulus=7, seed=4)
    assert [p.clean for p in task.pairs("train")] == [e.text_a for e in arith.eval_splits["eval"]]
    assert [p.clean for p in task.pairs("eval")] == [e.text_a for e in arith.eval_splits["test"]]
    op = parse_operation("a^2+ab")
    for pair in task.pairs("train") + task.pairs("eval"):
        (a, b), (a2, b2) = ([int(t) for t in s.split()[:2]] for s in (pair.clean, pair.corrupted))
        assert (a2 == a) == (pair.group == "corrupted b") and (b2 == b) == (pair.group == "corrupted a")
        assert int(pair.answer) == int(op(torch.tensor(a), torch.tensor(b), 7))
        assert int(pair.wrong) == int(op(torch.tensor(a2), torch.tensor(b2), 7)) != int(pair.answer)


def test_a_product_no_operand_can_change_is_left_out_not_refused():
    """``ab`` mod 7 with both operands multiples of 7 is 0 whatever either becomes (only 0 mod 7 numbers come out of
    a change of one): such prompts have no pair; every other prompt keeps its pair, in order."""
    options = dict(n_train=50, n_eval=300, n_test=300, max_number=50, modulus=7, seed=1)
    task = get_task("circuit:arith:ab", **options)
    task.bind(task.tokenizer)
    arith = get_task("arith:ab", **options)
    for split, source in (("train", "eval"), ("eval", "test")):
        prompts = [e.text_a for e in arith.eval_splits[source]]
        stuck = [p for p in prompts if all(int(t) % 7 == 0 for t in p.split()[:2])]
        assert stuck, "the draw holds a prompt with both operands 0 mod 7 (1 in 49 of them)"
        assert [p.clean for p in task.pairs(split)] == [p for p in prompts if p not in stuck]


def test_circuit_metrics_against_hand_computation():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    full = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1))
    batch = {"answer_index": torch.tensor([2, 1]), "answer_id": torch.tensor([4, 0]), "wrong_id": torch.tensor([1, 3])}
    m = circuit_metrics(logits, batch, full)
    rows = [logits[0, 2], logits[1, 1]]
    assert torch.allclose(m["logit_diff"], torch.stack([rows[0][4] - rows[0][1], rows[1][0] - rows[1][3]]))
    assert torch.allclose(m["answer_prob"], torch.stack([rows[0].softmax(-1)[4], rows[1].softmax(-1)[0]]))
    p = [full[0, 2].softmax(-1), full[1, 1].softmax(-1)]
    q = [r.softmax(-1) for r in rows]
    kl = torch.stack([(pi * (pi.log() - qi.log())).sum() for pi, qi in zip(p, q)])
    assert torch.allclose(m["kl"], kl, atol=1e-6)
    assert torch.allclose(circuit_metrics(full, batch, full)["kl"], torch.zeros(2), atol=1e-6)


def test_a_circuit_task_is_an_lm_task_for_node_level_methods(one_thread):
    from transformers import GPT2Config

    from subnetlab.models import build_model

    tok = gpt2_style_tokenizer()
    task = get_task("circuit:ioi", n_train=6, n_eval=4).bind(tok)
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2, n_inner=32)
    model = build_model(config, head="causal-lm", seed=0).model.eval()
    lm = next(task.batches(tok, "eval", 4))
    pairs = task.pair_batch(tok, "eval", [0, 1, 2, 3])
    assert torch.equal(lm["input_ids"], pairs["input_ids"]) and torch.equal(lm["target_ids"], pairs["answer_id"])
    with torch.no_grad():
        clean = model(**task.model_inputs(lm)).logits
        corrupted = model(**corrupted_inputs(pairs)).logits
    m = circuit_metrics(clean, pairs, clean)
    assert torch.allclose(task.task_logits(clean, lm).gather(1, lm["labels"][:, None])[:, 0],
                          clean[torch.arange(4), pairs["answer_index"], pairs["answer_id"]])
    assert torch.equal(m["kl"], torch.zeros(4)) or torch.allclose(m["kl"], torch.zeros(4), atol=1e-6)
    assert not torch.allclose(circuit_metrics(corrupted, pairs, clean)["kl"], torch.zeros(4))


# ---------------------------------------------------------------- your own pairs
GOOD = [("When Mary and John went to the store, John gave a drink to", "When Amy and Lisa went to the store, Kate gave a drink to", " Mary", " John"),
        ("When Tom and Anna went to the park, Anna gave a book to", "When Paul and Emma went to the park, Alex gave a book to", " Tom", " Anna"),
        ("The war lasted from the year 1732 to the year 17", "The war lasted from the year 1701 to the year 17", "33", "31")]


def _csv(path, rows):
    lines = ["clean,corrupted,answer,wrong"] + [",".join(f'"{x}"' for x in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _task(path, **options):
    return get_task(f"file:{path}", corrupted_column="corrupted", **options)


def test_your_own_pairs_from_csv_and_jsonl(tmp_path):
    tok = gpt2_style_tokenizer()
    csv = _csv(tmp_path / "pairs.csv", GOOD)
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text("".join(json.dumps(dict(zip(("c", "x", "a", "w"), row))) + "\n" for row in GOOD))
    task = _task(csv, eval_file=csv).bind(tok)
    assert [(p.clean, p.corrupted, p.answer, p.wrong) for p in task.pairs("eval")] == GOOD
    assert [p.where for p in task.pairs("eval")] == [f"{csv}:{i}" for i in (2, 3, 4)]
    other = get_task(f"file:{jsonl}", text_column="c", corrupted_column="x", answer_column="a",
                     wrong_answer_column="w", eval_file=str(jsonl)).bind(tok)
    assert other.pairs("eval") == [CircuitPair(*row, where=f"{jsonl}:{i + 1}") for i, row in enumerate(GOOD)]
    held = _task(csv, eval_fraction=0.34, split_seed=0).bind(tok)
    assert len(held.pairs("train")) == 2 and len(held.pairs("eval")) == 1


@pytest.mark.parametrize("row, message", [
    (("When Mary and John went to the store, John gave a drink to", "When Amy went to the store, Kate gave a drink to", " Mary", " John"),
     "the clean prompt is 15 tokens and the corrupted prompt 13"),
    (("When Mary and John went to the store, John gave a drink to", "When Amy and Lisa went to the store, Kate gave a drink to", " Frank", " John"),
     "answer ' Frank' is 4 tokens after the prompt, not 1"),
    (("When Mary and John went to the store, John gave a drink to", "When Amy and Lisa went to the store, Kate gave a drink to", " Mary", "John"),
     "a word after a space starts with one"),
    (("When Mary and John went to the store, John gave a drink to", "When Amy and Lisa went to the store, Kate gave a drink to", " Mary", " Mary"),
     "are the same token"),
])
def test_each_check_names_the_file_and_line_of_the_pair(tmp_path, row, message):
    path = _csv(tmp_path / "bad.csv", [GOOD[0], row])
    with pytest.raises(SubnetlabError, match=re.escape(f"{path}:3: ") + ".*" + re.escape(message)) as e:
        _task(path, eval_file=path).bind(gpt2_style_tokenizer())
    assert e.value.setting == "task"


def test_a_missing_pair_column_names_its_setting(tmp_path):
    path = _csv(tmp_path / "pairs.csv", GOOD)
    with pytest.raises(SubnetlabError, match="no wrong answer column 'wrong_answer'") as e:
        _task(path, wrong_answer_column="wrong_answer")
    assert e.value.setting == "wrong_answer_column"


def test_greater_than_probability_difference_against_hand_computation():
    tok = gpt2_style_tokenizer()
    task = get_task("circuit:greater-than", n_train=4, n_eval=3, seed=1).bind(tok)
    assert task.metric_names == ("logit_diff", "answer_prob", "kl", "prob_diff") and len(task.years) == 100
    batch = task.pair_batch(tok, "eval", [0, 1, 2])
    logits = torch.randn(3, batch["input_ids"].shape[1], len(tok), generator=torch.Generator().manual_seed(0))
    got = task.metrics(logits, batch, logits)["prob_diff"]
    for b, pair in enumerate(task.pairs("eval")):
        start = int(re.search(r"year \d\d(\d\d) to", pair.clean).group(1))
        p = logits[b, batch["answer_index"][b]].softmax(-1)
        ids = {yy: token_ids(tok, pair.clean + f"{yy:02d}")[-1] for yy in range(100)}
        hand = sum(p[ids[yy]] for yy in range(start + 1, 100)) - sum(p[ids[yy]] for yy in range(0, start + 1))
        assert float(got[b]) == pytest.approx(float(hand), abs=1e-6)
