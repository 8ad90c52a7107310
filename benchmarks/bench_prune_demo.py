"""A full demo-preset pruning run on a fine-tuned MiniLM, through `subnetlab prune`, on this CPU.

Reports the wall time, the final sparsity against the target (by components
and by parameters, and the gates' expected sparsity), and the pruned model's
in-domain and out-of-domain accuracy against the full model's.

    .venv/bin/python benchmarks/bench_prune_demo.py --model runs/ft-minilm/model --out /tmp/bench-demo \\
        [--sparsity 0.5] [--seed 0] [--task-option n_train=6000 ...] [--eval-data hans=../shared/data/hans/hans_subset_val.tsv]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from subnetlab.cli import main as cli
from subnetlab.io import read_json


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="a MiniLM fine-tuned on the task (subnetlab finetune)")
    parser.add_argument("--task", default="nli-synthetic")
    parser.add_argument("--task-option", action="append", default=[])
    parser.add_argument("--eval-data", action="append", default=[])
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], help="extra pruning overrides KEY=VALUE")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    argv = ["prune", "--model", args.model, "--task", args.task, "--preset", "demo", "--sparsity", str(args.sparsity),
            "--seeds", str(args.seed), "--out", str(args.out)]
    for opt in args.task_option:
        argv += ["--task-option", opt]
    for spec in args.eval_data:
        argv += ["--eval-data", spec]
    for pair in args.set:
        argv += ["--set", pair]
    started = time.perf_counter()
    try:
        cli(argv)
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    wall = time.perf_counter() - started
    run = args.out / f"sparsity-{args.sparsity:.2f}" / f"seed-{args.seed}"
    metrics = read_json(run / "metrics.json")
    full = read_json(args.out / "full-model" / "metrics.json")["eval"]
    config = read_json(run / "config.json")["prune"]
    print(f"demo preset: {config['total_steps']} steps ({config['warmup_steps']} warm-up), batch {config['batch_size']}, "
          f"max length {config['max_length']}, {config['train_limit']} training examples")
    print(f"wall time (whole command, incl. loading, means, full-model eval): {wall:.0f} s; "
          f"pruning loop {metrics['train_seconds']:.0f} s")
    print(f"target sparsity {args.sparsity:.2f}: subnetwork {metrics['sparsity']:.4f} by components, "
          f"{metrics['parameter_sparsity']:.4f} by parameters; gates' expected sparsity at the end "
          f"{metrics['final'].get('expected_sparsity', float('nan')):.4f}; threshold selection "
          f"{metrics['selections']['threshold']['sparsity']:.4f} at {metrics['selections']['threshold']['threshold']}")
    for split, score in metrics["eval"].items():
        print(f"{split:<16} full {full[split]['accuracy']:.3f}  pruned {score['accuracy']:.3f}  "
              f"(delta {score['accuracy'] - full[split]['accuracy']:+.3f}, n={score['n']})")


if __name__ == "__main__":
    main()
