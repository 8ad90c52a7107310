"""Small copies of MIB's circuit-track datasets in their own columns (``mib-bench/*``), written here, and a word-level
tokenizer that reads them.

The columns are those MIB's ``HFEAPDataset`` reads (hannamw/MIB-circuit-track, ``MIB_circuit_track/dataset.py``),
with the other columns the hub datasets carry beside them (``template``, ``idx``, ``arc_id`` ...). ``mib_pair``
is MIB's ``__getitem__`` written again: the clean and corrupted prompt and the two answer tokens, each answer
tokenized on its own and its first token taken, as MIB does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

NAMES = ("Mary", "John", "Tom", "James", "Dan", "Sid", "Amy", "Lisa")
PLACES = ("store", "garden", "park")
COLORS = (("banana", "yellow"), ("sky", "blue"), ("grass", "green"), ("coal", "black"), ("snow", "white"),
          ("blood", "red"), ("cherry", "red"), ("leaf", "green"))
QUESTIONS = (("Which gas do plants take in", ("oxygen", "carbon dioxide", "helium", "neon"), 1),
             ("What melts ice fastest", ("salt", "sand", "wood", "paper"), 0),
             ("Which planet is largest", ("Mars", "Venus", "Jupiter", "Earth"), 2),
             ("What do bees make", ("silk", "milk", "wax", "honey"), 3),
             ("Which is a mammal", ("shark", "whale", "trout", "frog"), 1),
             ("What boils water", ("heat", "cold", "dark", "wind"), 0))


def _ioi_prompt(a: str, b: str, s: str, place: str) -> str:
    return f"When {a} and {b} went to the {place}, {s} gave a drink to"


def ioi_rows(n: int = 8, offset: int = 0) -> list[dict[str, Any]]:
    rows = []
    for k in range(n):
        i = k + offset
        io, s, c, d, e = (NAMES[(i + j) % len(NAMES)] for j in range(5))
        place = PLACES[i % len(PLACES)]
        abba = i % 2 == 0
        a, b = (io, s) if abba else (s, io)
        meta = {"indirect_object": io, "subject": s, "random_a": c, "random_b": d, "random_c": e, "place": place}

        def record(prompt: str, answer: int) -> dict[str, Any]:
            return {"prompt": prompt, "choices": [io, s], "answerKey": answer}

        rows.append({"template": "ABBA" if abba else "BABA", "prompt": _ioi_prompt(a, b, s, place),
                     "choices": [io, s], "answerKey": 0, "metadata": meta,
                     "s2_io_flip_counterfactual": record(_ioi_prompt(a, b, io, place), 1),
                     "abc_counterfactual": record(_ioi_prompt(c, d, e, place), 0)})
    return rows


def _options(labels: list[str], texts: list[str]) -> str:
    return "".join(f"\n{label}. {text}" for label, text in zip(labels, texts))


def mcqa_rows(n: int = 8, offset: int = 0) -> list[dict[str, Any]]:
    rows = []
    palette = sorted({c for _, c in COLORS})
    for k in range(n):
        i = k + offset
        obj, color = COLORS[i % len(COLORS)]
        others = [c for c in palette if c != color][i % 3: i % 3 + 3]
        key = i % 4
        texts = others[:key] + [color] + others[key:]
        question = f"The {obj} is {color}. What color is the {obj}?"

        def record(labels: list[str]) -> dict[str, Any]:
            return {"prompt": question + _options(labels, texts) + "\nAnswer:",
                    "choices": {"label": labels, "text": texts}, "answerKey": key}

        rows.append({"idx": i, "dataset": "copycolors", "dataset_specific_id": str(i), **record(list("ABCD")),
                     "symbol_counterfactual": record(list("WXYZ")),
                     "answerPosition_counterfactual": record(list("ABCD"))})
    return rows


def arc_rows(n: int = 6, offset: int = 0) -> list[dict[str, Any]]:
    rows = []
    for k in range(n):
        i = k + offset
        question, texts, key = QUESTIONS[i % len(QUESTIONS)]

        def record(labels: list[str]) -> dict[str, Any]:
            return {"prompt": f"Question: {question}?" + _options(labels, list(texts)) + "\nAnswer:",
                    "choices": {"label": labels, "text": list(texts)}, "answerKey": key}

        rows.append({"arc_id": f"ARC-{i}", "question": question, "idx": i, "label": "ABCD"[key], **record(list("ABCD")),
                     "symbol_counterfactual": record(list("PQRS"))})
    return rows


def arithmetic_rows(op: str = "+", n: int = 8, offset: int = 0) -> list[dict[str, Any]]:
    word = "plus" if op == "+" else "minus"
    rows = []
    for k in range(n):
        i = k + offset
        a, b, c, d = 11 + 7 * i, 3 + 2 * i, 40 + 3 * i, 5 + 2 * i

        def record(x: int, y: int) -> dict[str, Any]:
            return {"prompt": f"Q: How much is {x} {word} {y}? A:", "label": x + y if op == "+" else x - y,
                    "operand1": x, "operand2": y}

        rows.append({"idx": i, "template": "Q: How much is {x} {op} {y}? A:", "operator": op, "num_digit": 2,
                     **record(a, b), "random_counterfactual": record(c, d)})
    return rows


ROWS = {"mib-ioi": ioi_rows, "mib-mcqa": mcqa_rows, "mib-arc-easy": arc_rows, "mib-arc-challenge": arc_rows,
        "mib-arithmetic-addition": lambda n=8, offset=0: arithmetic_rows("+", n, offset),
        "mib-arithmetic-subtraction": lambda n=8, offset=0: arithmetic_rows("-", n, offset)}


def save_folder(path: Path, splits: dict[str, list[dict[str, Any]]]) -> str:
    """``DatasetDict(...).save_to_disk(path)`` (one ``Dataset`` when ``splits`` has the single key ``""``)."""
    import datasets

    if set(splits) == {""}:
        datasets.Dataset.from_list(splits[""]).save_to_disk(str(path))
    else:
        datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(path))
    return str(path)


def save_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def _words(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [w for v in value.values() for w in _words(v)]
    if isinstance(value, list):
        return [w for v in value for w in _words(v)]
    return re.findall(r"\w+|[^\w\s]+", str(value))


def mib_tokenizer():
    """A word-level tokenizer over every word of these rows (``Whitespace`` splits words from punctuation, so an
    answer ``A`` after ``Answer:`` and `` Mary`` after ``to`` are one token each)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for make in ROWS.values() for row in make(16) for w in _words(row)})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[PAD]")


def mib_pair(task: str, row: dict[str, Any], tokenizer: Any, counterfactual: str | None = None) -> tuple:
    """MIB's ``HFEAPDataset.__getitem__``: (clean ids, corrupted ids, answer id, wrong id)."""
    def first(text: str) -> int:
        return tokenizer(text, add_special_tokens=False).input_ids[0]

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False).input_ids

    if task == "mib-ioi":
        cf = row[counterfactual or "s2_io_flip_counterfactual"]
        return (ids(row["prompt"]), ids(cf["prompt"]), first(f" {row['metadata']['indirect_object']}"),
                first(f" {row['metadata']['subject']}"))
    if task.startswith("mib-arithmetic"):
        cf = row["random_counterfactual"]
        return ids(row["prompt"]), ids(cf["prompt"]), first(str(row["label"])), first(str(cf["label"]))
    cf = row[counterfactual or "symbol_counterfactual"]
    return (ids(row["prompt"]), ids(cf["prompt"]), first(row["choices"]["label"][row["answerKey"]]),
            first(str(cf["choices"]["label"][cf["answerKey"]])))
