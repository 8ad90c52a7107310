"""Issue 26's leakage, measured: the tutorial's Subtask Induction sequence on your own data.

    PYTHONPATH=src .venv/bin/python scripts/split_leakage.py OUT_DIR

A tiny GPT-2 (MiniLM's tokenizer) and a 500-row JSONL of unique three-word prompts go through ``finetune``,
``discover``, ``transfer --seeds 0-1`` (subnetwork, scratch) and ``evaluate``, in process. Every task a
command builds is recorded by wrapping ``Task.__init__`` (its training rows and each evaluation split), so
what is counted is what the commands used, whatever code chose it; a row's prompt identifies it. Prints,
per task built and split, how many rows were fine-tuning training rows and how many were training rows
of any earlier step.
"""
import json
import sys
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from subnetlab.cli import main
from subnetlab.models import load_model
from subnetlab.tasks import base

root = Path(sys.argv[1])
root.mkdir(parents=True, exist_ok=True)
W = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
tok = load_model("minilm").tokenizer
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=16)).save_pretrained(root / "lm")
tok.save_pretrained(root / "lm")
rows = [(f"{W[i // 100]} {W[i // 10 % 10]} {W[i % 10]}", W[(i // 100 + i // 10 + i) % 5]) for i in range(500)]
(root / "qa.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))

seen = {}  # step -> list of (train texts, {split: texts})
step = None
orig = base.Task.__init__
def record(self, name, kind, labels, train, eval_splits, **kw):
    orig(self, name, kind, labels, train, eval_splits, **kw)
    if name.startswith("file:"):
        seen.setdefault(step, []).append(({e.text_a for e in train}, {k: [e.text_a for e in v] for k, v in eval_splits.items()}))
base.Task.__init__ = record

TASK = ["--task", f"file:{root / 'qa.jsonl'}", "--text-column", "question", "--answer-column", "answer", "--device", "cpu"]
def cli(name, *args):
    global step
    step = name
    try:
        main([str(a) for a in args])
    except SystemExit as e:
        assert e.code == 0, (name, e.code)

cli("finetune", "finetune", "--model", root / "lm", *TASK, "--max-steps", "2", "--batch-size", "16", "--lr", "1e-3",
    "--out", root / "ft")
# --init 0.05: one epoch from the default -0.1 keeps no weight, and transfer refuses an empty subnetwork
cli("discover", "discover", "--model", root / "ft" / "model", *TASK, "--lambdas", "1e-7", "--epochs", "1",
    "--batch-size", "64", "--init", "0.05", "--out", root / "disc")
cli("transfer", "transfer", "--model", root / "ft" / "model", *TASK, "--subnetwork", root / "disc" / "subnetwork.safetensors",
    "--condition", "subnetwork,scratch", "--seeds", "0-1", "--epochs", "1", "--batch-size", "64", "--out", root / "tr")
cli("evaluate", "evaluate", "--model", root / "ft" / "model", *TASK, "--out", root / "ev")

trained = set()
finetuned = seen["finetune"][0][0]
for name in ("finetune", "discover", "transfer", "evaluate"):
    tasks = seen.get(name, [])
    for i, (train, splits) in enumerate(tasks):
        for split, texts in splits.items():
            print(f"{name} task {i}: split {split}: {len(texts)} rows, {sum(t in finetuned for t in texts)} fine-tuning "
                  f"training rows, {sum(t in trained for t in texts)} training rows of an earlier step")
    for train, _ in tasks:
        trained |= train
    print(f"{name}: {len({t for tr, _ in tasks for t in tr})} distinct training rows")
