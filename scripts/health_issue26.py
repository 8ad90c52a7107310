"""Issue 26's first two bullets, re-run as a new user would, on tiny models built from configs.

    PYTHONPATH=src .venv/bin/python scripts/health_issue26.py OUT_DIR

A tiny GPT-2, BERT and Llama (MiniLM's tokenizer), a CSV of "A plus B" sums with one-word answers and a CSV
of sentence pairs go through: ``discover`` with the tutorial's defaults (every lambda ends keeping 0.00%),
``transfer --condition subnetwork,scratch`` on its subnetwork, ``prune`` of BERT and of Llama for 40 steps
(top-k meets the target on gates that barely moved) and of Llama for 400 (its gates end undecided). Each
command runs as its own process (``python -m subnetlab.cli``); the script prints every command line, its exit
status, and the lines of its output that carry a result, a warning or an error. Run it on a checkout before
and after the health checks (``subnetlab.runs.health``) to compare.
"""
import json
import subprocess
import sys
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

from subnetlab.models import resolve

root = Path(sys.argv[1])
data = root / "data"
data.mkdir(parents=True, exist_ok=True)
WORDS = ["one", "two", "three", "four", "five"]
PAIRS = [("the cat ran", "a dog sat"), ("the sun set", "a sea rose"), ("the car hit", "a tree fell"),
         ("the owl saw", "a fish swam"), ("the rain fell", "a hill stood")]
tok = AutoTokenizer.from_pretrained(resolve("minilm"))
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=16, bos_token_id=0,
                           eos_token_id=0)).save_pretrained(data / "lm")
BertForSequenceClassification(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=64, num_labels=2)).save_pretrained(data / "bert")
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=4, intermediate_size=32, max_position_embeddings=64, bos_token_id=0,
                             eos_token_id=0, pad_token_id=0)).save_pretrained(data / "llama")  # 2 x 4 heads + 2 MLPs
for name in ("lm", "bert", "llama"):
    tok.save_pretrained(data / name)
(data / "sums.csv").write_text("question,reply\n" + "".join(
    f"{a} plus {b},{WORDS[(i + j) % 5]}\n" for i, a in enumerate(WORDS) for j, b in enumerate(WORDS)) * 2)
(data / "pairs.csv").write_text("first,second,verdict\n" + "".join(
    f"{a} {k},{b},{'yes' if (i + k) % 2 else 'no'}\n" for k in range(8) for i, (a, b) in enumerate(PAIRS)))

SUMS = ["--task", f"file:{data / 'sums.csv'}", "--text-column", "question", "--answer-column", "reply"]
PAIR = ["--task", f"file:{data / 'pairs.csv'}", "--text-column", "first", "--text-pair-column", "second",
        "--label-column", "verdict"]
SHORT = ["--sparsity", "0.5", "--seeds", "0", "--preset", "demo", "--set", "batch_size=8", "--set", "max_length=16",
         "--set", "means_examples=16", "--device", "cpu"]
STEPS_40 = ["--set", "total_steps=40", "--set", "warmup_steps=30"]
STEPS_400 = ["--set", "total_steps=400", "--set", "warmup_steps=300"]
COMMANDS = [
    ["discover", "--model", data / "lm", *SUMS, "--device", "cpu", "--out", root / "disc"],
    ["transfer", "--model", data / "lm", *SUMS, "--subnetwork", root / "disc" / "subnetwork.safetensors",
     "--condition", "subnetwork,scratch", "--epochs", "5", "--batch-size", "8", "--device", "cpu", "--out", root / "tr"],
    ["prune", "--model", data / "bert", *PAIR, *SHORT, *STEPS_40, "--out", root / "prune-bert"],
    ["prune", "--model", data / "llama", *SUMS, *SHORT, *STEPS_40, "--out", root / "prune-llama"],
    ["prune", "--model", data / "llama", *SUMS, *SHORT, *STEPS_400, "--out", root / "prune-llama-400"],
]
SHOWN = ("lambda ", "selected ", "condition", "subnetwork ", "scratch ", "sparsity ", "  health", "warning:", "error:")
for args in COMMANDS:
    args = [str(a) for a in args]
    print("$ subnetlab " + " ".join(args))
    done = subprocess.run([sys.executable, "-m", "subnetlab.cli", *args], capture_output=True, text=True)
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith(SHOWN):
            print("  " + line)
    print(f"  exit {done.returncode}")
for run in ("prune-bert", "prune-llama", "prune-llama-400"):
    metrics = json.loads((root / run / "sparsity-0.50" / "seed-0" / "metrics.json").read_text())
    history = json.loads((root / run / "sparsity-0.50" / "seed-0" / "history.json").read_text())
    sel = metrics["selections"]
    print(f"{run}: metrics.json sparsity {metrics['sparsity']}, expected_sparsity at the end "
          f"{history[-1]['expected_sparsity']:.3f}, undecided gates {sel.get('undecided_gates')} of {sel.get('gates')}, "
          f"health entry: {metrics.get('health', {}).get('problems', 'none')}")
