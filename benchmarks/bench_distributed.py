"""Time per step at 1 and 2 CPU ranks (``subnetlab.distributed``, gloo): Edge Pruning's mask training step and an
EAP pass, the global batch fixed, each rank one torch thread.

The parent starts ``torchrun --standalone --nproc-per-node R`` of this script for each R of ``--ranks``; each
worker builds the same GPT-2-shaped model (``--layers``, ``--hidden``, ``--heads``; random weights) and random
prompt pairs, times ``--steps`` mask-training steps after ``--warmup`` untimed ones (``EdgePruner.step``: each
rank its slice of the batch, the gradients all-reduced) and one EAP pass over ``--pairs`` pairs (each rank its
batches, the sums all-reduced), and rank 0 writes its figures. The parent prints them side by side, with the
ratio to one rank and how far the 2-rank masks are from the 1-rank ones.

    .venv/bin/python benchmarks/bench_distributed.py                          # 1 and 2 ranks, the defaults
    .venv/bin/python benchmarks/bench_distributed.py --ranks 1,2,4 --layers 6 --hidden 256 --batch 32

On a machine with fewer free cores than ranks the ranks share cores and the ratio says so, not the method.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(args: argparse.Namespace):
    import torch
    from transformers import GPT2Config

    from subnetlab.methods.edge_pruning.data import paired_data
    from subnetlab.models import build_model

    config = GPT2Config(vocab_size=512, n_positions=128, n_embd=args.hidden, n_layer=args.layers, n_head=args.heads,
                        n_inner=4 * args.hidden)
    loaded = build_model(config, head="causal-lm", seed=0)
    model = loaded.model.eval()
    g = torch.Generator().manual_seed(0)
    n = max(args.pairs, args.batch * 4)
    ids = torch.randint(3, 512, (n, args.length), generator=g)
    corrupted = ids.clone()
    corrupted[:, : args.length // 2] = torch.randint(3, 512, (n, args.length // 2), generator=g)
    with torch.no_grad():
        answer = model(input_ids=ids).logits[:, -1].argmax(-1)
        wrong = model(input_ids=corrupted).logits[:, -1].argmax(-1)
    return loaded, paired_data(ids, corrupted, answer, wrong)


def worker(args: argparse.Namespace) -> None:
    import torch

    from subnetlab.distributed import world
    from subnetlab.io import save_tensors
    from subnetlab.methods.attribution import attribute
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.train import EdgePruner
    from subnetlab.models.graph import Graph

    torch.set_num_threads(1)
    here = world()
    loaded, data = build(args)
    cfg = preset_config("quick", 0.9, seed=0, batch_size=args.batch, total_steps=args.warmup + args.steps,
                        warmup_steps=args.warmup + args.steps)
    pruner = EdgePruner(loaded.model, loaded.adapter, data, cfg)
    with pruner:
        for step in range(args.warmup):
            pruner.step(step)
        here.all_reduce_sum(torch.zeros(1))  # start the clock together
        start = time.perf_counter()
        for step in range(args.warmup, args.warmup + args.steps):
            pruner.step(step)
        train_seconds = time.perf_counter() - start

    graph = Graph.from_adapter(loaded.adapter)
    rows = torch.arange(args.batch)

    def batches():
        for begin in range(0, args.pairs, args.batch):
            b = data.batch_at(list(range(begin, min(begin + args.batch, args.pairs))))
            yield {**b, "answer_index": b["answer_index"]}

    def metric(logits, batch, full):
        last = logits[torch.arange(logits.shape[0]), batch["answer_index"]]
        r = rows[: last.shape[0]]
        return last[r, batch["answer_id"]] - last[r, batch["wrong_id"]]

    here.all_reduce_sum(torch.zeros(1))
    start = time.perf_counter()
    scores = attribute(loaded.model, loaded.adapter, graph, batches(), metric, method="eap")
    eap_seconds = time.perf_counter() - start
    if here.is_writer:
        Path(args.out).write_text(json.dumps({
            "ranks": here.size, "edges": graph.num_edges, "step_seconds": train_seconds / args.steps,
            "eap_seconds": eap_seconds, "pairs": scores.pairs}))
        save_tensors(Path(args.out).with_suffix(".safetensors"),
                     {"log_alpha": pruner.edges.log_alpha.detach().cpu(), "eap": scores.edges})


def parent(args: argparse.Namespace) -> None:
    from subnetlab.io import load_tensors

    ranks = [int(r) for r in args.ranks.split(",")]
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in ranks:
            out = Path(tmp) / f"ranks-{r}.json"
            env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(r),
                       __file__, "--worker", "--out", str(out), *sys.argv[1:]]
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{r} ranks failed:\n{done.stderr[-3000:]}")
            figures[r] = {**json.loads(out.read_text()), **load_tensors(out.with_suffix(".safetensors"))}
    first = figures[ranks[0]]
    print(f"GPT-2 shape: {args.layers} layers x {args.heads} heads, hidden {args.hidden}, {first['edges']} edges; "
          f"mask training: global batch {args.batch} pairs of {args.length} tokens, {args.steps} timed steps; "
          f"EAP: {args.pairs} pairs in batches of {args.batch}; one torch thread per rank")
    print(f"{'ranks':>5} {'s/step':>9} {'ratio':>6} {'EAP s':>8} {'ratio':>6} {'max |dlog_alpha|':>17} "
          f"{'max |dEAP|':>11}")
    for r in ranks:
        f = figures[r]
        print(f"{r:>5} {f['step_seconds']:>9.4f} {first['step_seconds'] / f['step_seconds']:>6.2f} "
              f"{f['eap_seconds']:>8.3f} {first['eap_seconds'] / f['eap_seconds']:>6.2f} "
              f"{float((f['log_alpha'] - first['log_alpha']).abs().max()):>17.2e} "
              f"{float((f['eap'] - first['eap']).abs().max()):>11.2e}")
    print(f"(ratio: the first row's time over the row's, above 1 = faster; {os.cpu_count()} CPU cores here)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--pairs", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    worker(args) if args.worker else parent(args)


if __name__ == "__main__":
    main()
