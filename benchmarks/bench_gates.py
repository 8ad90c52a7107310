"""Gated versus plain forward+backward on MiniLM (batch 32, length 64, CPU).

Gated: gradients reach 72 head gates and 6 MLP gates (mean ablation), the model
frozen. Plain: the same frozen model, with the backward pass reaching the
embedding output, so both backward passes traverse every layer. Steps are
interleaved so machine noise hits both alike. Goal: ratio <= 1.10.

    .venv/bin/python benchmarks/bench_gates.py [--steps 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from subnetlab.intervene import apply_gates, collect_means
from subnetlab.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    args = parser.parse_args()

    loaded = load_model("minilm", head="classification", num_labels=3)
    model, adapter = loaded.model, loaded.adapter
    for p in model.parameters():
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(1000, 20000, (args.batch, args.length), generator=g),
        "attention_mask": torch.ones(args.batch, args.length, dtype=torch.long),
    }
    means = collect_means(model, adapter, [batch])
    head_logits = torch.zeros(adapter.num_layers, adapter.num_heads, requires_grad=True)
    mlp_logits = torch.zeros(adapter.num_layers, requires_grad=True)

    def plain_step() -> None:
        handle = model.get_input_embeddings().register_forward_hook(lambda m, i, o: o.requires_grad_())
        try:
            model(**batch).logits.logsumexp(-1).sum().backward()
        finally:
            handle.remove()

    def gated_step(gates) -> None:
        gates.set(torch.sigmoid(head_logits), torch.sigmoid(mlp_logits))
        model(**batch).logits.logsumexp(-1).sum().backward()
        head_logits.grad = mlp_logits.grad = None

    plain, gated = [], []
    with apply_gates(model, adapter, ablation=means) as gates:
        gates.enabled = True
        for step in range(args.steps + 2):
            for times, run in ((plain, None), (gated, gates)):
                gates.enabled = run is not None
                start = time.perf_counter()
                plain_step() if run is None else gated_step(run)
                if step >= 2:  # warm-up
                    times.append(time.perf_counter() - start)
    p, q = statistics.median(plain), statistics.median(gated)
    print(f"threads={torch.get_num_threads()} batch={args.batch} length={args.length} steps={args.steps}")
    print(f"plain forward+backward median: {p * 1000:.1f} ms")
    print(f"gated forward+backward median: {q * 1000:.1f} ms")
    print(f"ratio gated/plain: {q / p:.3f} (goal <= 1.10)")


if __name__ == "__main__":
    main()
