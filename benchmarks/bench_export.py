"""Inference time of the full, gated and exported MiniLM (batch 32, length 128, 2 threads, CPU).

Gated: the full model with mean-ablation gates on the removed heads (hooks; same
size and work as the full model). Exported: ``slice_subnetwork`` of the same
subnetwork, the heads physically gone and their means folded into biases.
Levels: 50% and 70% of the 72 heads removed (a seeded random choice, MLPs
kept), and optionally a subnetwork file (say one the heuristic-core demo found:
``runs/.../prune/sparsity-0.70/seed-0/subnetwork.safetensors``). Forward passes
of all variants are interleaved so machine noise hits them alike; medians are
reported. Goal: exported at 50% >= 1.25x faster than the full model, and faster
than the gated model at every level.

    .venv/bin/python benchmarks/bench_export.py [--steps 10] [--subnetwork FILE]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from subnetlab.export import parameter_count, slice_subnetwork
from subnetlab.intervene import apply_gates, collect_means
from subnetlab.models import load_model
from subnetlab.subnetwork import Subnetwork


def random_subnetwork(adapter, removed: float, seed: int) -> Subnetwork:
    """``removed`` of all heads closed, chosen at random; every MLP kept."""
    total = adapter.num_layers * adapter.num_heads
    closed = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[: round(removed * total)]
    heads = torch.ones(total)
    heads[closed] = 0
    return Subnetwork.structured(adapter, heads.view(adapter.num_layers, adapter.num_heads), method="random")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--subnetwork", default=None, help="a MiniLM subnetwork file to time as well")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = load_model("minilm", head="classification", num_labels=3)  # the demo fine-tunes this shape
    model, adapter = loaded.model, loaded.adapter
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(1000, 20000, (args.batch, args.length), generator=g),
        "attention_mask": torch.ones(args.batch, args.length, dtype=torch.long),
    }
    means = collect_means(model, adapter, [batch])
    levels = {"50% heads": random_subnetwork(adapter, 0.5, seed=0), "70% heads": random_subnetwork(adapter, 0.7, seed=0)}
    if args.subnetwork:
        levels["from file"] = Subnetwork.load(args.subnetwork, adapter)

    gates = apply_gates(model, adapter, ablation=means)
    exported = {name: slice_subnetwork(model, adapter, sub, means) for name, sub in levels.items()}

    def gated(sub: Subnetwork):
        def run() -> None:
            gates.set(*sub.gates())
            gates.enabled = True
            try:
                model(**batch)
            finally:
                gates.enabled = False
        return run

    variants = {"full": lambda: model(**batch)}
    for name, sub in levels.items():
        variants[f"gated {name}"] = gated(sub)
        variants[f"exported {name}"] = (lambda m: lambda: m(**batch))(exported[name].model)
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.inference_mode(), gates:
        gates.enabled = False
        for step in range(args.steps + 2):
            for name, run in variants.items():
                start = time.perf_counter()
                run()
                if step >= 2:  # warm-up
                    times[name].append(time.perf_counter() - start)

    full = statistics.median(times["full"])
    print(f"MiniLM inference, threads={torch.get_num_threads()} batch={args.batch} length={args.length} "
          f"steps={args.steps} (medians)")
    print(f"{'variant':<34} {'params':>11} {'ms':>8} {'speed-up vs full':>17}")
    print(f"{'full':<34} {parameter_count(model):>11,} {full * 1000:>8.1f} {1.0:>16.2f}x")
    for name, sub in levels.items():
        t_gated, t_exp = statistics.median(times[f"gated {name}"]), statistics.median(times[f"exported {name}"])
        heads = int(sub.heads.sum())
        print(f"{'gated ' + name:<34} {parameter_count(model):>11,} {t_gated * 1000:>8.1f} {full / t_gated:>16.2f}x")
        print(f"{'exported ' + name + f' ({heads} kept)':<34} {exported[name].parameters['after']:>11,} "
              f"{t_exp * 1000:>8.1f} {full / t_exp:>16.2f}x  (vs gated {t_gated / t_exp:.2f}x)")
    t50 = statistics.median(times["exported 50% heads"])
    print(f"goal: exported 50% >= 1.25x full: {full / t50:.2f}x; exported faster than gated at every level: "
          f"{all(statistics.median(times[f'exported {n}']) < statistics.median(times[f'gated {n}']) for n in levels)}")


if __name__ == "__main__":
    main()
