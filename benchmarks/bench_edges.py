"""Edge-pruning step vs the frozen model's plain forward+backward vs a node-level pruning step (GPT-2 small shape).

The model is a GPT-2 built from a config with random weights (default the
small shape: 12 layers x 12 heads, hidden 768, vocabulary 50,257; its graph has
32,936 edges), batch 32 x length 64 of random tokens; the corrupted prompt of
each pair is another random row of the same length. Three kinds of step:

* ``plain``: the frozen model (eval mode, no parameter gradients), forward and
  backward of the log-sum-exp of the logits at the prediction position, the
  backward reaching the token embeddings' output so it traverses every layer;
* ``edge``: ``EdgePruner.step`` exactly as ``prune_edges`` runs it (paper
  preset, corrupted-input ablation): the corrupted batch through the full model
  to capture every writer's output, one hard-concrete sample over 32,936 edges
  and 158 writer nodes, the edge intervention (``intervene.edges``), KL to the
  cached full-model distribution, the Lagrangian, one Adam step;
* ``node``: ``hard_concrete.Pruner.step`` (Heuristic Core's node-level
  pruning: 144 head + 12 MLP gates, mean ablation, accumulation 1, KL,
  Lagrangian, Adam).

Blocks of ``--block`` steps of each kind alternate, the first kind rotating
each round (as ``bench_weight_masks.py``); the table shows the median over
blocks of ms per step and the ratios. Goal: edge <= 3x plain.

Memory, per kind: on CUDA ``torch.cuda.max_memory_allocated`` during one step
minus what was allocated before it (model, cache, masks); on the CPU a fresh
child process per kind runs one step with glibc's mmap threshold at 64 KiB (so
freed tensors go back to the OS and RSS follows live memory) and reports the
peak RSS during the step (a thread samples it every 0.5 ms) minus the RSS
before it. Also printed: the
intervention's own activation memory computed analytically, which is what
grows with the graph: every writer's ``D_w`` ``[batch, pos, hidden]`` is kept
for the backward (writers x B x P x hidden x 4 bytes), and every reader block
materialises its readers' inputs (3 x heads per attention block + 1 per MLP,
each B x P x hidden x 4 bytes, a few copies per block: the subtraction, the
norm, its output).

Run here (a 2-core machine shared by ~7 sessions, load average 3-5, so
absolute times are noisy; the ratios are measured side by side):

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/bench_edges.py \\
        --layers 4 --heads 4 --hidden 256 --vocab 8192 --batch 8 --length 32 --steps 6 --block 2

FIGURES_SMALL

The default size (GPT-2 small, 32 x 64) needs tens of seconds per plain step
on one CPU thread; FIGURES_DEFAULT

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_edges.py [--layers 12 --heads 12 --hidden 768 --vocab 50257
        --batch 32 --length 64 --steps 6 --block 2 --warmup 1] [--no-memory]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

from subnetlab.intervene import collect_means
from subnetlab.methods.edge_pruning.config import preset_config
from subnetlab.methods.edge_pruning.data import paired_data, prediction_logits
from subnetlab.methods.edge_pruning.train import EdgePruner
from subnetlab.methods.hard_concrete.config import PruneConfig
from subnetlab.methods.hard_concrete.train import Pruner
from subnetlab.models.graph import Graph
from subnetlab.models.loading import build_model

KINDS = ("plain", "edge", "node")


def build(args: argparse.Namespace):
    from transformers import GPT2Config

    config = GPT2Config(vocab_size=args.vocab, n_positions=max(64, args.length), n_embd=args.hidden,
                        n_layer=args.layers, n_head=args.heads, bos_token_id=0, eos_token_id=0)
    loaded = build_model(config, head="causal-lm", seed=0)
    return loaded.model.to(args.device).eval(), loaded.adapter


def pairs(args: argparse.Namespace):
    """``2 x batch`` random clean prompts, random corrupted prompts of the same length, random answers."""
    g = torch.Generator().manual_seed(0)
    n = 2 * args.batch
    ids = torch.randint(0, args.vocab, (n, args.length), generator=g)
    corrupted = torch.randint(0, args.vocab, (n, args.length), generator=g)
    answers = torch.randint(0, args.vocab, (2, n), generator=g)
    return paired_data(ids, corrupted, answers[0], answers[1])


def steppers(args: argparse.Namespace, kinds: tuple[str, ...]):
    """``{kind: step()}`` over one model, and a closer. Every stepper leaves the model as it found it."""
    model, adapter = build(args)
    data = pairs(args)
    device = torch.device(args.device)
    out, closers = {}, []
    if "plain" in kinds:
        batch = {k: v.to(device) for k, v in data.batch_at(list(range(args.batch))).items()}
        emb = model.get_input_embeddings()
        for p in model.parameters():
            p.requires_grad_(False)

        def plain() -> None:
            handle = emb.register_forward_hook(lambda m, i, o: o.requires_grad_())
            try:
                outputs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
                prediction_logits(outputs, batch).logsumexp(-1).sum().backward()
            finally:
                handle.remove()

        out["plain"] = plain
    if "edge" in kinds:
        cfg = preset_config("paper", 0.95, seed=0, batch_size=args.batch, eval_batch_size=args.batch,
                            checkpoint_every=10**6)
        edge = EdgePruner(model, adapter, data, cfg).__enter__()
        closers.append(edge.__exit__)
        counter = iter(range(10**9))
        out["edge"] = lambda: edge.step(next(counter))
    if "node" in kinds:
        means = collect_means(model, adapter, [{k: v.to(device) for k, v in data.model_inputs(
            data.batch_at(list(range(args.batch)))).items()}])
        cfg = PruneConfig(sparsity=0.5, warmup_steps=10**6, total_steps=10**6, first_ramp_steps=None,
                          batch_size=args.batch, accumulation=1, eval_batch_size=args.batch)
        if "edge" in out:
            edge.ctl.enabled = False  # the node pruner's full-model cache runs through the full model
        node = Pruner(model, adapter, data, cfg, means).__enter__()
        closers.append(node.__exit__)
        counter_n = iter(range(10**9))
        out["node"] = lambda: node.step(next(counter_n))
    if "edge" in out and "node" in out:  # both installed their hooks: each step runs with only its own enabled
        edge_step, node_step = out["edge"], out["node"]

        def only(ctl_on, ctl_off, fn):
            def run() -> None:
                ctl_off.enabled, ctl_on.enabled = False, True
                fn()
            return run

        plain_step = out.get("plain")
        out["edge"] = only(edge.ctl, node.gates_ctl, edge_step)
        out["node"] = only(node.gates_ctl, edge.ctl, node_step)
        if plain_step is not None:
            def plain_only() -> None:
                edge.ctl.enabled = node.gates_ctl.enabled = False
                plain_step()
            out["plain"] = plain_only
    return out, lambda: [c() for c in reversed(closers)], adapter


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(args: argparse.Namespace) -> None:
    """One step of ``args.memory_of`` after setup; prints the step's peak RSS above the RSS before it."""
    steps, close, _ = steppers(args, (args.memory_of,))
    before = rss_bytes()
    peak, done = [before], threading.Event()

    def sample() -> None:  # torch ops release the GIL, so this thread reads RSS while the step runs
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.0005)

    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        steps[args.memory_of]()
    finally:
        done.set()
        watcher.join()
        close()
    print(f"MEMORY {peak[0] - before}")


def cpu_memory(args: argparse.Namespace, kind: str) -> float | None:
    argv = [sys.executable, os.path.abspath(__file__), "--memory-of", kind] + [
        f"--{k}={getattr(args, k)}" for k in ("layers", "heads", "hidden", "vocab", "batch", "length", "device")]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return float([ln for ln in done.stdout.splitlines() if ln.startswith("MEMORY")][-1].split()[1])


def cuda_memory(step) -> float:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return float(torch.cuda.max_memory_allocated() - base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6, help="timed steps of each kind")
    parser.add_argument("--block", type=int, default=2, help="steps of one kind timed back to back")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-kind memory measurement")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the table, profile one edge step and print its N most expensive ops")
    parser.add_argument("--memory-of", choices=KINDS, help=argparse.SUPPRESS)  # the CPU memory child
    args = parser.parse_args()
    if args.memory_of:
        memory_child(args)
        return
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    steps, close, adapter = steppers(args, KINDS)
    graph = Graph.from_adapter(adapter)
    print(f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} thread(s); GPT-2 {args.layers} layers x "
          f"{args.heads} heads, hidden {args.hidden}, vocab {args.vocab}; batch {args.batch} x length {args.length}; "
          f"{graph.num_edges:,} edges, {len(graph.writers)} writers, {len(graph.readers)} readers; "
          f"{args.steps} timed steps of each kind in blocks of {args.block} after {args.warmup} warm-up")
    try:
        for step in steps.values():
            for _ in range(args.warmup):
                step()
        sync()
        times: dict[str, list[float]] = {k: [] for k in KINDS}
        for r in range(max(1, args.steps // args.block)):
            for name in KINDS[r % 3:] + KINDS[:r % 3]:  # rotate who goes first
                sync()
                started = time.perf_counter()
                for _ in range(args.block):
                    steps[name]()
                sync()
                times[name].append((time.perf_counter() - started) / args.block)
        print("per-block ms:", {k: [round(1000 * t, 1) for t in v] for k, v in times.items()})
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=activities) as prof:
                steps["edge"]()
                sync()
            key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
            print(prof.key_averages().table(sort_by=key, row_limit=args.profile))
        memory: dict[str, float | None] = {}
        if not args.no_memory:
            for name in KINDS:
                memory[name] = cuda_memory(steps[name]) if cuda else None
    finally:
        close()
    if not args.no_memory and not cuda:
        for name in KINDS:
            memory[name] = cpu_memory(args, name)
    med = {k: 1000 * statistics.median(v) for k, v in times.items()}
    how = "CUDA max_memory_allocated above the pre-step allocation" if cuda else "peak RSS (sampled every 0.5 ms) above the pre-step RSS, one fresh process per kind"
    print(f"{'kind':<6} {'ms/step':>9} {'/plain':>7} {'/node':>7} {'step memory MiB':>16}")
    for name in KINDS:
        mem = memory.get(name)
        cell = f"{mem / 2**20:.0f}" if mem is not None else "-"
        print(f"{name:<6} {med[name]:>9.1f} {med[name] / med['plain']:>7.2f} {med[name] / med['node']:>7.2f} {cell:>16}")
    print(f"memory: {how}" if memory else "memory: not measured")
    unit = args.batch * args.length * args.hidden * 4
    writers = len(graph.writers)
    block_readers = 3 * args.heads + 1
    print(f"analytic, the intervention's activations: one writer's D_w = B x P x hidden x 4 bytes = {unit / 2**20:.2f} MiB; "
          f"kept for the backward: {writers} writers = {writers * unit / 2**20:.0f} MiB; one attention block's reader "
          f"inputs: {3 * args.heads} readers = {3 * args.heads * unit / 2**20:.0f} MiB each copy, "
          f"{args.layers} blocks; per edge {unit * (writers + 2 * args.layers * block_readers) / graph.num_edges / 2**10:.1f} KiB "
          f"at this batch x length (writers + 2 copies per reader, over {graph.num_edges:,} edges)")
    print("goal: edge / plain <= 3")


if __name__ == "__main__":
    main()
