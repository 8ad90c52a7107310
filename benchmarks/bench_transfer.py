"""Transfer training throughput: one model at a time versus K models stacked with torch.func.

The paper's arithmetic GPT-2 (4 heads, width 128, MLP 512, vocabulary 1003) at
the demo's depth, a subnetwork-condition model (masked matrices frozen through
``m*W_kept + (1-m)*W_new``), one thread per process (two processes share this
2-core machine best). Single and stacked steps alternate in rounds so machine
noise hits both alike. Prints sequences/second and their ratio.

    .venv/bin/python benchmarks/bench_transfer.py [--layers 2] [--batch 64] [--stack 4,8] [--threads 1,2] [--rounds 3]

``--demo-grid DIR`` instead times ``subnetlab reproduce subtask-induction
--preset demo --out DIR`` end to end (wall time of every stage, from its metrics).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from subnetlab.methods.finetune.model import arithmetic_gpt2_config
from subnetlab.models import build_model
from subnetlab.subnetwork import Subnetwork
from subnetlab.transfer import LMSplit, TrainSettings, build_transfer_model, train_model
from subnetlab.transfer.stacked import train_stacked


def _split(n: int, vocab: int, seed: int) -> LMSplit:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab - 3, (n, 3), generator=g)
    x[:, 2] = vocab - 3  # <sep>
    return LMSplit(x, torch.randint(0, 7, (n,), generator=g), torch.arange(7))


def _models(trained, sub, k: int):
    return [build_transfer_model(trained, "subnetwork", seed=i, subnetwork=sub) for i in range(k)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rows", type=int, default=1024, help="training rows per model (one epoch per round)")
    parser.add_argument("--stack", default="4,8", help="stack sizes to compare ('' for none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1", help="thread counts to compare for the single model, e.g. 1,2")
    parser.add_argument("--demo-grid", type=Path, default=None)
    args = parser.parse_args()
    if args.demo_grid is not None:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "subnetlab.cli", "reproduce", "subtask-induction", "--preset", "demo",
                        "--out", str(args.demo_grid)], check=True)
        print(f"demo preset wall time: {time.perf_counter() - started:.0f} s (a rerun skips finished work)")
        return
    thread_counts = [int(t) for t in args.threads.split(",")]
    torch.set_num_threads(thread_counts[0])
    loaded = build_model(arithmetic_gpt2_config(args.layers, vocab_size=1003, pad_id=1001), head="causal-lm", seed=0)
    trained, adapter = loaded.model, loaded.adapter
    g = torch.Generator().manual_seed(0)
    sub = Subnetwork.from_weight_masks(
        adapter, {n: (torch.rand(adapter.parameter(n).shape, generator=g) < 0.05) for n in adapter.weight_matrices()})
    vocab = trained.config.vocab_size
    train, ev = _split(args.rows, vocab, 1), _split(256, vocab, 2)
    settings = TrainSettings(epochs=1, batch_size=args.batch, eval_batch_size=256)
    stacks = [int(s) for s in args.stack.split(",") if s.strip()]
    rates: dict[str, list[float]] = {"single": [], **{f"single, {t} threads": [] for t in thread_counts[1:]},
                                     **{f"stacked x{k}": [] for k in stacks}}
    for _ in range(args.rounds):
        for t_count in thread_counts:
            torch.set_num_threads(t_count)
            (m,) = _models(trained, sub, 1)
            t = time.perf_counter()
            train_model(m.model, train, ev, None, settings, seed=0, keep_best=False)
            key = "single" if t_count == thread_counts[0] else f"single, {t_count} threads"
            rates[key].append(args.rows / (time.perf_counter() - t))
        torch.set_num_threads(thread_counts[0])
        for k in stacks:
            ms = _models(trained, sub, k)
            t = time.perf_counter()
            train_stacked(ms, [train] * k, [ev] * k, [None] * k, settings, list(range(k)))
            rates[f"stacked x{k}"].append(k * args.rows / (time.perf_counter() - t))
    print(f"machine load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    single = statistics.median(rates["single"])
    print(f"GPT-2 {args.layers} layers, width 128, batch {args.batch}, {thread_counts[0]} thread(s) unless stated; "
          f"training sequences/second incl. one evaluation of 256 rows per epoch (median of {args.rounds}):")
    for name, values in rates.items():
        med = statistics.median(values)
        print(f"  {name:>12}: {med:8.0f} seq/s   ratio to single {med / single:5.2f}")


if __name__ == "__main__":
    main()
