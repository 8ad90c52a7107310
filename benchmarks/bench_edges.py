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
  up to the final norm to capture every writer's output, one hard-concrete sample over 32,936 edges
  and 158 writer nodes, the edge intervention (``intervene.edges``), KL to the
  cached full-model distribution, the Lagrangian, one Adam step;
* ``node``: ``head_pruning.train.Pruner.step`` (Heuristic Core's node-level
  pruning: 144 head + 12 MLP gates, mean ablation, accumulation 1, KL,
  Lagrangian, Adam).

Blocks of ``--block`` steps of each kind alternate, the first kind rotating
each round (as ``bench_weight_masks.py``); the table shows the median over
blocks of ms per step, wall clock and CPU time (``time.process_time``; on a
shared machine the wall clock of a one-thread step can be several times its CPU
time, so the ratios are read from CPU time). ``--baseline EDGES_PY`` adds kind
``edge-base``: the same ``EdgePruner`` step with another copy of
``intervene/edges.py`` (the code before a change, e.g. ``git show
REV:src/subnetlab/intervene/edges.py > /tmp/base/edges.py``), side by side in
one run; each edge kind runs on its own copy of the model (same weights). The
copy is loaded as one file: a baseline whose intervention spans several modules
would import the current ones for the rest. ``--keep-readers`` runs kind
``edge`` with its reader inputs kept (``keep_reader_inputs``). ``--edge-sparsity S`` cuts a random fraction S of the edges first (a
later point of a run; default 0, the start: every edge kept). Goal (issue 37):
edge <= 2.0x plain at 4 x 32 and <= 2.5x at 32 x 64.

Memory, per kind: on CUDA ``torch.cuda.max_memory_allocated`` during one step
minus what was allocated before it (model, cache, masks); on the CPU a fresh
child process per kind runs one step with glibc's mmap threshold at 64 KiB (so
freed tensors go back to the OS and RSS follows live memory) and reports the
peak RSS during the step (a thread samples it every 0.5 ms) minus the RSS
before it. The intervention keeps every writer's ``D_w`` (writers x B x P x
hidden in the model's dtype) and, in the backward, their gradients (as much
again); a reader block's inputs exist only while the block runs and while its
backward recomputes them (36 readers of an attention block at a time), where
the code before kept every reader's input and its normed copy, (writers + 2 x
readers) x B x P x hidden.

What dominated (``torch.profiler`` on one edge step of the code before, GPT-2
small's graph at 4 x 32, one thread, 3.3 s under the profiler, grouped by
input shape): the reader sums, 36%: the forward's per-writer-group
``addmm_`` into a copy of the stream per reader ([36, 98304] x [12, 98304],
0.33 s), the backward's per-group products for the masks' gradients (0.35 s)
and for the writers' (0.35 s, the MLP readers' rank-1 ones 0.1 s of it) and
autograd summing each writer's gradient over the blocks that read it (0.13
s); the unembedding, 17%, a third of it in the corrupted run, which only needs
the writers; the model's own layers, 26% (of which the Q/K/V projection of the
stream that the hooks then replaced, 0.15 s, and its backward never ran); the
per-head Q/K/V products, 6.5%; the norm on every reader's copy, 4%; the
heads' deltas, 2%.

What changed in ``intervene/edges.py`` (tests/unit/test_edges.py,
test_edge_hooks.py and test_edges_lean.py pass; logits and mask gradients
equal a by-hand reference within 1e-5 on tiny GPT-2 and Llama):

* every writer writes its ``D_w`` into one buffer, so a block's reader inputs
  are one GEMM over its writers and their gradients one GEMM into one
  gradient buffer (an identity autograd node on each writer's output picks its
  rows up), where each writer group had its own product and autograd its own
  sum;
* writers that no reader of a block cuts (``m = 1``) are left out of its
  products (exact: they add zeros); at the start of a run, every edge kept,
  only the masks' gradient ``G @ D^T`` remains;
* the Q/K/V projections' forward is replaced rather than post-hooked, so the
  projection of the stream is not computed and thrown away;
* the corrupted run stops at the final norm (no unembedding);
* the Q/K/V readers' inputs and normed copies are recomputed in the backward
  rather than kept (memory, above): this costs a GEMM over the cut writers
  and a norm per attention block again (not timed apart).

Not tried: folding the norm into the per-head projections (a reader's
variance from per-writer terms needs writers x writers products per token,
more than the norm costs); a CUDA kernel fusing the reader sum and the norm.
(The baseline above, edge-base, ran on the same model as edge; the current
intervention replaces the Q/K/V projections' forward on the instance, so the
baseline now gets its own copy of the model.)

Before/after, side by side in one run, GPT-2 small's graph (12 x 12, hidden
768, vocabulary 50,257, 32,936 edges, 158 writers, 445 readers), batch 4 x
length 32, torch 2.13 CPU, one thread, on a 2-core machine shared by ~7
sessions (load average ~2-3 for these two runs, run at the same time), medians
of 6 steps per kind:

    git show 121c99b:src/subnetlab/intervene/edges.py > /tmp/edgelean/base/edges.py
    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/bench_edges.py --batch 4 --length 32 \
        --steps 6 --block 1 [--edge-sparsity 0.5 --no-memory] --baseline /tmp/edgelean/base/edges.py

    S = 0 (every edge kept: a run's start)                 S = 0.5 (random half cut: the densest products)
    kind       ms/step  /plain  CPU ms  /plain  step MiB   kind       ms/step  /plain  CPU ms  /plain
    plain       2941.7    1.00   978.7    1.00       177   plain       2749.5    1.00   949.1    1.00
    edge        5237.1    1.78  1737.8    1.78       299   edge        6793.9    2.47  2282.3    2.40
    node        2766.7    0.94   969.4    0.99       169   node        2956.4    1.08   976.8    1.03
    edge-base   7940.8    2.70  2695.9    2.75       449   edge-base   8069.9    2.94  2718.5    2.86

So the goal at 4 x 32 (<= 2.0) is met at a run's start (1.78x; an earlier run
under load average 9-15 gave 1.90x and 1.76x) and missed at 2.40x where half
the edges are cut at random (every writer is then cut by some reader of every
block: no product shrinks). A learned circuit cuts whole writers (node masks),
which shrinks the products again; a random mask is the worst case.

The edge step's memory above the plain step's: 122 MiB, from 272 MiB (-55%):
158 writers' ``D_w`` (59 MiB) and their gradients (59 MiB), where the code
before also kept every Q/K/V reader's input and normed copy.

32 x 64 at GPT-2 small's width did not fit this session on the shared machine
(an edge step of the code before took 57 s unloaded); measured at the same
12 x 12 graph (32,936 edges) and vocabulary with hidden 384 (head size 32),
batch 32 x length 64, CPU-time medians of 2 steps after one warm-up:

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/bench_edges.py --hidden 384 --batch 32 \
        --length 64 --steps 2 --block 1 --no-memory --baseline /tmp/edgelean/base/edges.py

    kind       CPU ms  /plain
    plain      5651.4    1.00
    edge      12029.0    2.13
    node       5755.0    1.02
    edge-base 22014.3    3.90

(<= 2.5 met at this width, every edge kept; the reader sums grow with hidden
and the model's layers with its square, so at width 768 the intervention's
share is smaller. This run, under load average 9-15, predates bounding the
cut-writer subset to an eighth of a block's writers; with every edge kept the
subsets are a few writers either way.) Not measured on a GPU (none lent to
this session).

Half the edges cut (S = 0.5), profiled: ``torch.profiler`` with input shapes
on one edge step of the code of a38d1ef (the code above), GPT-2 small's graph
at 4 x 32, ``--edge-sparsity 0.5``, one thread, unloaded (2.17 s CPU under the
profiler; plain fwd+bwd 0.85-0.95 s). Every writer is cut by some reader of
every block, so every product runs over all of a block's writers W (15 to 145
for the attention blocks, 36 readers each; N = 4 x 32 x 768 = 98,304):

* the model itself, about 1.0 s: the clean forward+backward (the plain step's
  work) and the corrupted forward up to the final norm (about 0.22 s);
* the attention blocks' four products, about 0.52 s: the reader sums
  ``[36, W] x [W, N]`` in the forward and again in the backward's recompute
  (0.13 s each), the masks' gradient ``G @ D^T`` (0.12 s), the writers'
  ``(m - 1)^T @ G`` into the gradient buffer (0.14 s). They run at about 50
  GFLOP/s against about 90 for the model's own GEMMs (36 rows, W up to 145
  deep: skinny);
* the readers' LayerNorm on ``[36, 4, 32, 768]``: 0.17 s (forward and its
  recompute 74 ms, backward 92 ms);
* the per-head Q/K/V projections (``bmm`` over 36 heads): 0.18 s, where the
  model's fused projection costs about 0.12 s forward+backward;
* the single-reader blocks (12 MLP inputs, the logits): about 0.12 s, mostly
  memory passes over every writer row: GEMVs, a rank-1 update of the
  gradient buffer per block, the logits' first ``[158, 1] x [1, N]`` product
  into a fresh 59 MiB buffer (24 ms);
* a copy of the stream per reader before each reader sum (20 ms) and the
  stream's gradient sum (16 ms).

So the intervention costs about as much as the model's work, and three of the
four products are the method's own arithmetic (reader inputs, masks' and
writers' gradients: 3 x 36 x sum(W) x N x 2 = 18.6 GFLOP, 0.37 s at 50
GFLOP/s): with the corrupted run that is about 0.6 s above plain, 1.7x, before
norms and projections. The recompute is the memory-lean design's price.

What changed (``intervene/edges.py``; fp32 logits and mask gradients equal the
code before exactly (difference 0.0) on a 4-layer GPT-2 at S = 0, 0.5 and 0.95,
with and without ``keep_reader_inputs``):

* ``keep_reader_inputs`` (``EdgeMasks``/``apply_edges``; ``--keep-readers``
  here): each attention block's reader inputs and the norm's graph on them are
  kept for the backward instead of recomputed: one reader sum and one norm
  less per block, for 2 x 36 x B x P x hidden more memory per layer (338 MiB
  over GPT-2 small's 12 layers at 4 x 32, measured 297 MiB: the step's peak
  613 MiB against 316 for the lean code; 5.1 GiB at 32 x 64). Off by default
  (issue 37's memory goal); not a setting of ``prune_edges`` yet;
* a reader sum writes ``resid + (m - 1) @ D`` with the stream as ``addmm``'s
  broadcast bias into an empty buffer rather than copying the stream per
  reader first (2.8 against 7.8 ms for ``[36, 3] x [3, N]``, 3.7 against 4.2
  for W = 14, the same for deep blocks): not measurable over a step.

Tried and taken out: the single-reader blocks' writer gradients waiting for the
next attention block's product (one ``[W, 38] x [38, N]`` GEMM instead of a
rank-1 pass over W rows per block; the rows the next block does not read added
at once, a writer's tap adding what still waited). Over a step at 4 x 32 it was
within the noise (-8% to +8% against the code before in nine comparisons),
and the one full-width run below had it 10-18% slower than the code before
(likely its ``torch.cat`` of a block's reader gradients, a copy of 38 x N
floats per block; not profiled): not worth its 60 lines.

Before/after, side by side in one run (``edge-base``: ``intervene/edges.py``
of a38d1ef; each edge kind on its own copy of the model), GPT-2 small's graph,
torch 2.13 CPU, one thread, the 2-core machine shared with a demo run (load
average about 1), CPU-time medians of 6 steps:

    git show a38d1ef:src/subnetlab/intervene/edges.py > /tmp/edge4_base_edges.py
    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/bench_edges.py --batch 4 --length 32 \
        --steps 6 --block 1 --no-memory [--edge-sparsity 0.5 [--keep-readers]] --baseline /tmp/edge4_base_edges.py

    S = 0                        S = 0.5                      S = 0.5, --keep-readers
    kind       CPU ms  /plain    kind       CPU ms  /plain    kind       CPU ms  /plain
    plain       940.4    1.00    plain       952.3    1.00    plain       846.7    1.00
    edge       1800.5    1.91    edge       2350.2    2.47    edge       1848.3    2.18
    node        936.0    1.00    node       1027.6    1.08    node        876.1    1.03
    edge-base  1816.1    1.93    edge-base  2527.9    2.65    edge-base  2038.6    2.41

Run to run, the same code's ratio moves by about 10% on this machine (edge-base
at S = 0.5 gave 2.40, 2.50, 2.51 and 2.65 in four runs today; at S = 0, 1.84 to
1.93): the default path is as fast as before (the same arithmetic), and kept
reader inputs save about 10% at S = 0.5 (2.12 and 2.18 against 2.32 and 2.41
for the code before in two runs). Goal at 4 x 32 (<= 2.0): met at S = 0
(1.9x), not at S = 0.5 (2.4-2.5x lean, 2.1-2.2x with kept inputs).

Full width, batch 32 x length 64 (hidden 768, vocabulary 50,257), 2 timed
steps after one warm-up, one run per S (about 9 minutes each). The ``edge``
row is commit 56b3327 (the waiting writer gradients, since taken out, ran on
the model shared with plain and node), ``edge-base`` the code before on its own
copy; the current default path is the code before's arithmetic, so its row is
the current figure (bar the reader sum's buffer, same results bit for bit):

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/bench_edges.py --batch 32 --length 64 \
        --steps 2 --block 1 --no-memory [--edge-sparsity 0.5] --baseline /tmp/edge4_base_edges.py

    S = 0                                        S = 0.5
    kind       CPU ms  /plain  per step          kind       CPU ms  /plain  per step
    plain     12856.6    1.00  13210, 12503      plain     12882.3    1.00  12641, 13123
    edge      36171.7    2.81  36414, 35929      edge      43592.3    3.38  43478, 43707
    node      15866.4    1.23  15492, 16240      node      13119.8    1.02  12914, 13326
    edge-base 30774.4    2.39  34106, 27443      edge-base 39521.6    3.07  41376, 37667

At 32 x 64 the goal (<= 2.5) is met at a run's start (2.39x, from two steps
34.1 and 27.4 s apart) and missed at S = 0.5 (3.07x): the ratio grows with the
batch (2.4x at 4 x 32, 3.1x here), likely because the intervention's buffers
(158 writers x 6 MiB, their gradients, 216 MiB per reader-block copy) fit no
cache, so its skinny products run at memory speed while the model's GEMMs do
not (not profiled at this size). Kept reader inputs were not measured at this size (5.1 GiB).

Not tried: a reader norm folded into the per-head projections (the forward
could skip the normed copy, but ``var_mean`` over ``[36, 4, 32, 768]`` took 20
ms against 5.5 for the whole LayerNorm here, and the backward's term
``xhat * mean(g * xhat)`` needs each reader's input again); the MLP readers'
sums as extra rows of the attention block's GEMM (their masks' gradients would
then come from another autograd node); computing only the prediction
position's logits (a third of the model's forward here, in the plain step
too).

Usage:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_edges.py [--layers 12 --heads 12 --hidden 768 --vocab 50257
        --batch 32 --length 64 --steps 6 --block 2 --warmup 1] [--edge-sparsity S] [--baseline EDGES_PY]
        [--keep-readers] [--no-memory] [--profile N]
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
from subnetlab.methods.head_pruning.config import PruneConfig
from subnetlab.methods.head_pruning.train import Pruner
from subnetlab.models.graph import Graph
from subnetlab.models.loading import build_model

KINDS = ("plain", "edge", "node", "edge-base")


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


def baseline_pruner(path: str):
    """An ``EdgePruner`` whose intervention is another copy of ``intervene/edges.py`` (the code before a change)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_edges", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)

    class BaselinePruner(EdgePruner):
        def install(self):
            self.ablation_values()
            return module.apply_edges(self.model, self.adapter, self.graph, values=self.values,
                                      source=self.masks).__enter__()

    return BaselinePruner


def steppers(args: argparse.Namespace, kinds: tuple[str, ...]):
    """``{kind: step()}`` over one model, and a closer. Every stepper leaves the model as it found it, and runs
    with only its own intervention enabled."""
    model, adapter = build(args)
    data = pairs(args)
    device = torch.device(args.device)
    out, closers, controls = {}, [], {}
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
    for kind, make in (("edge", EdgePruner), ("edge-base", baseline_pruner(args.baseline) if args.baseline else None)):
        if kind not in kinds or make is None:
            continue
        cfg = preset_config("paper", 0.95, seed=0, batch_size=args.batch, eval_batch_size=args.batch,
                            checkpoint_every=10**6)
        for ctl in controls.values():
            ctl.enabled = False  # each pruner's full-model cache runs through the full model
        # each edge kind gets its own copy of the model (same seed, same weights): both interventions replace the
        # Q/K/V projections' forward on the instance, which one model allows once; alike for both, so that where
        # a model lies in memory does not tell them apart
        own_model, own_adapter = build(args)
        edge = make(own_model, own_adapter, data, cfg).__enter__()
        closers.append(edge.__exit__)
        if args.edge_sparsity:  # a later point of the run: this fraction of the edges (random, seed 0) cut
            order = torch.randperm(edge.graph.num_edges, generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                edge.edges.log_alpha[order[:round(args.edge_sparsity * edge.graph.num_edges)]] = -10.0
        if kind == "edge" and args.keep_readers:
            edge.ctl.keep_reader_inputs = True
        controls[kind] = edge.ctl
        counter = iter(range(10**9))
        out[kind] = lambda edge=edge, counter=counter: edge.step(next(counter))
    if "node" in kinds:
        means = collect_means(model, adapter, [{k: v.to(device) for k, v in data.model_inputs(
            data.batch_at(list(range(args.batch)))).items()}])
        cfg = PruneConfig(sparsity=0.5, warmup_steps=10**6, total_steps=10**6, first_ramp_steps=None,
                          batch_size=args.batch, accumulation=1, eval_batch_size=args.batch)
        for ctl in controls.values():
            ctl.enabled = False
        node = Pruner(model, adapter, data, cfg, means).__enter__()
        closers.append(node.__exit__)
        controls["node"] = node.ctl
        counter_n = iter(range(10**9))
        out["node"] = lambda: node.step(next(counter_n))

    def only(kind, fn):
        def run() -> None:
            for name, ctl in controls.items():
                ctl.enabled = name == kind
            fn()
        return run

    out = {kind: only(kind, fn) for kind, fn in out.items()}
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
    passed = ("layers", "heads", "hidden", "vocab", "batch", "length", "device", "edge_sparsity")
    argv = [sys.executable, os.path.abspath(__file__), "--memory-of", kind] + [
        f"--{k.replace('_', '-')}={getattr(args, k)}" for k in passed] + (
        [f"--baseline={args.baseline}"] if args.baseline else []) + (["--keep-readers"] if args.keep_readers else [])
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
    parser.add_argument("--edge-sparsity", type=float, default=0.0,
                        help="time the edge steps with this fraction of the edges cut (default 0: at the start of a "
                             "run, every edge kept)")
    parser.add_argument("--baseline", metavar="EDGES_PY",
                        help="also time kind edge-base: the edge step with this copy of intervene/edges.py")
    parser.add_argument("--keep-readers", action="store_true",
                        help="kind edge keeps each attention block's reader inputs for the backward (EdgeMasks' "
                             "keep_reader_inputs) instead of recomputing them")
    parser.add_argument("--memory-of", choices=KINDS, help=argparse.SUPPRESS)  # the CPU memory child
    args = parser.parse_args()
    if args.memory_of:
        memory_child(args)
        return
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    kinds = KINDS if args.baseline else KINDS[:3]
    steps, close, adapter = steppers(args, kinds)
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
        times: dict[str, list[float]] = {k: [] for k in kinds}
        cpu_times: dict[str, list[float]] = {k: [] for k in kinds}
        for r in range(max(1, args.steps // args.block)):
            for name in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:  # rotate who goes first
                sync()
                started, started_cpu = time.perf_counter(), time.process_time()
                for _ in range(args.block):
                    steps[name]()
                sync()
                times[name].append((time.perf_counter() - started) / args.block)
                cpu_times[name].append((time.process_time() - started_cpu) / args.block)
        print("per-block ms:", {k: [round(1000 * t, 1) for t in v] for k, v in times.items()})
        print("per-block CPU ms:", {k: [round(1000 * t, 1) for t in v] for k, v in cpu_times.items()})
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
            for name in kinds:
                memory[name] = cuda_memory(steps[name]) if cuda else None
    finally:
        close()
    if not args.no_memory and not cuda:
        for name in kinds:
            memory[name] = cpu_memory(args, name)
    med = {k: 1000 * statistics.median(v) for k, v in times.items()}
    cpu = {k: 1000 * statistics.median(v) for k, v in cpu_times.items()}
    how = "CUDA max_memory_allocated above the pre-step allocation" if cuda else "peak RSS (sampled every 0.5 ms) above the pre-step RSS, one fresh process per kind"
    print(f"{'kind':<9} {'ms/step':>9} {'/plain':>7} {'/node':>7} {'CPU ms':>9} {'/plain':>7} {'/node':>7} "
          f"{'step memory MiB':>16}")
    for name in kinds:
        mem = memory.get(name)
        cell = f"{mem / 2**20:.0f}" if mem is not None else "-"
        print(f"{name:<9} {med[name]:>9.1f} {med[name] / med['plain']:>7.2f} {med[name] / med['node']:>7.2f} "
              f"{cpu[name]:>9.1f} {cpu[name] / cpu['plain']:>7.2f} {cpu[name] / cpu['node']:>7.2f} {cell:>16}")
    print(f"memory: {how}" if memory else "memory: not measured")
    unit = args.batch * args.length * args.hidden * 4
    writers = len(graph.writers)
    print(f"analytic, the intervention's activations: one writer's D_w = B x P x hidden x 4 bytes = {unit / 2**20:.2f} MiB; "
          f"kept for the backward: {writers} writers = {writers * unit / 2**20:.0f} MiB, and their gradients in the "
          f"backward as much again; one attention block's reader inputs, computed when the block runs and again in "
          f"its backward, not kept: {3 * args.heads} readers = {3 * args.heads * unit / 2**20:.0f} MiB a copy")
    print("goal: edge / plain <= 2.0 at batch 4 x 32, <= 2.5 at 32 x 64")


if __name__ == "__main__":
    main()
