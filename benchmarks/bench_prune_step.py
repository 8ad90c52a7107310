"""Mask-training step versus the frozen model's plain forward+backward on MiniLM (batch 32, length 64, CPU).

Mask step: ``Pruner.step`` exactly as ``prune`` runs it: a hard-concrete sample
for 72 heads + 6 MLPs, the gated forward with mean ablation, KL to the cached
full-model log-probabilities, the Lagrangian on the expected sparsity, the
backward to the gates, one Adam step on gates and lambdas. Plain: the same
frozen model ungated, with the backward reaching the embedding output so both
backward passes traverse every layer. Steps alternate so machine noise hits
both alike. Goal: ratio <= 1.10. Also shown: the ``teacher="online"`` step (an
extra gradient-free forward per step) and the one-off cost of the cache.

    .venv/bin/python benchmarks/bench_prune_step.py [--steps 10] [--model minilm]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from subnetlab.intervene import collect_means
from subnetlab.methods.head_pruning.config import PruneConfig
from subnetlab.methods.head_pruning.train import Pruner
from subnetlab.methods.l0.data import PruningData
from subnetlab.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--model", default="minilm")
    args = parser.parse_args()

    loaded = load_model(args.model, head="classification", num_labels=3)
    model, adapter = loaded.model, loaded.adapter
    g = torch.Generator().manual_seed(0)
    n = 2 * args.batch
    inputs = {"input_ids": torch.randint(1000, 20000, (n, args.length), generator=g),
              "attention_mask": torch.ones(n, args.length, dtype=torch.long)}
    data = PruningData.from_tensors(inputs)
    means = collect_means(model, adapter, [{k: v[: args.batch] for k, v in inputs.items()}])
    common = dict(sparsity=0.5, warmup_steps=1000, total_steps=1000, batch_size=args.batch, accumulation=1,
                  init_log_alpha=3.0, eval_batch_size=args.batch)

    def plain_step() -> None:
        handle = model.get_input_embeddings().register_forward_hook(lambda m, i, o: o.requires_grad_())
        try:
            model(**{k: v[: args.batch] for k, v in inputs.items()}).logits.logsumexp(-1).sum().backward()
        finally:
            handle.remove()

    started = time.perf_counter()
    cached = Pruner(model, adapter, data, PruneConfig(**common, teacher="cache"), means).__enter__()
    cache_seconds = time.perf_counter() - started
    online = Pruner(model, adapter, data, PruneConfig(**common, teacher="online"), means)
    times: dict[str, list[float]] = {"plain": [], "mask (cached teacher)": [], "mask (online teacher)": []}
    try:
        for step in range(args.steps + 2):
            for name in times:
                cached.ctl.enabled = name == "mask (cached teacher)"
                if name == "mask (online teacher)":
                    with online:
                        start = time.perf_counter()
                        online.step(step)
                        elapsed = time.perf_counter() - start
                else:
                    start = time.perf_counter()
                    cached.step(step) if name != "plain" else plain_step()
                    elapsed = time.perf_counter() - start
                if step >= 2:  # warm-up
                    times[name].append(elapsed)
    finally:
        cached.ctl.enabled = True
        cached.__exit__()
    plain = statistics.median(times["plain"])
    print(f"threads={torch.get_num_threads()} batch={args.batch} length={args.length} steps={args.steps} model={args.model}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<24} median {median * 1000:8.1f} ms   ratio to plain {median / plain:.3f}")
    print(f"one-off full-model cache over {n} examples: {cache_seconds:.2f} s "
          f"({cache_seconds / n * args.batch * 1000:.1f} ms per batch of {args.batch})")
    print("goal: mask (cached teacher) / plain <= 1.10")


if __name__ == "__main__":
    main()
