"""Real shapes through every circuit command: time per job as a multiple of a plain forward+backward of the same
batch, peak memory, and the plan's prediction beside it.

Four shipped configs (``src/subnetlab/models/configs/``: GPT-2 small, Pythia-160m, Qwen-2.5-0.5B, Llama-3.2-1B), each
built with random weights at its real sizes and vocabulary (nothing downloaded), one child process per shape. In the
child, every job runs through the library's own entry points, the ones the commands call:

* ``eap``, ``eap-ig`` (``--ig-steps``, 5), ``eap-ig-activations`` (``--ig-activation-steps``, 1: it runs
  ``(1 + 2 layers) x steps`` passes), ``clean-corrupted``: ``methods.attribution.attribute_batch`` (logit difference
  at the last position); ``exact``: ``methods.attribution.exact.exact_batch`` on ``--exact-edges`` edges spread over
  the graph (one forward row per edge and pair);
* ``edge-pruning``: ``methods.edge_pruning.train.EdgePruner.step`` (``paper`` preset at sparsity 0.95, the masks
  undecided, log-alpha 0, as ``subnetlab plan`` plans a run's middle), ``head-pruning``:
  ``methods.head_pruning.train.Pruner.step`` (``paper`` preset, sparsity 0.5, mean ablation); set-up (the full
  model's outputs, masks, optimiser, means) inside the memory measured, not inside the time;
* ``circuit-eval`` (``analysis.circuit_evaluation.edge_evaluator`` + ``analysis.faithfulness.curve_from_scores``,
  the 10 default sizes) and ``circuit-eval-mib`` (``analysis.mib_faithfulness.mib_curves``, MIB's 10 percentages
  in both rankings, one embedding node) of the EAP scores on the batch's pairs, the evaluator's set-up included;
* ``view``: the scores' ``graph.json`` written (``models.circuit.Circuit.save``) and the page built from it
  (``view.runs.read_all``, ``view.page.page_data`` and ``render``, written), as ``subnetlab view`` does;
* ``mib``: a MIB submission folder (``models.mib_submission.write``, two tasks) checked by
  ``models.mib_submission.check`` (``subnetlab mib-check``).

Per job: **time** as a multiple of the plain forward+backward of the frozen model on the same batch (the backward
reaching the embeddings' output, no parameter gradients), timed alternately in the same process (CPU seconds of the
process on a CPU, with ``--threads`` threads; wall seconds after a synchronise on a GPU), medians over the rounds;
**peak memory** above the model (CPU: the peak resident set, ``VmHWM`` reset through ``/proc/self/clear_refs`` after
``malloc_trim``, minus the resident set just before the job's set-up; GPU: ``torch.cuda.max_memory_allocated`` minus
the memory allocated before it), the job's set-up and first run included; the **plan**'s peak for the same settings
(``subnetlab plan``'s ``plan_run``, in ``planned_peak``: its peak less its weights, as the measurement leaves the
model out) and measured / planned. The plan covers eap, eap-ig, edge-pruning and head-pruning.

    python benchmarks/real_shapes.py                          # the four shapes, every job, batch 2 x length 32
    python benchmarks/real_shapes.py --shapes gpt2-small --jobs eap,edge-pruning --batch 4 --length 64
    python benchmarks/real_shapes.py --dtype bfloat16 --device cuda --batch 32 --length 64   # on a GPU
    python benchmarks/real_shapes.py --shapes llama-3.1-8b --jobs eap,eap-ig,edge-pruning --dtype bfloat16 \
        --device cuda --batch 8 --length 256 --rounds 1                  # the 8B check of scripts/gpu-check.sh

Writes ``real_shapes.json`` and ``real_shapes.md`` to ``--out`` (default ``real_shapes_out``), rewritten after every
shape. ``tests/unit/test_real_shapes_smoke.py`` runs every job once at GPT-2 small's shape through ``run_jobs``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHAPES = ("gpt2-small", "pythia-160m", "qwen2.5-0.5b", "llama-3.2-1b")
LARGE_SHAPES = ("llama-3.1-8b",)  # by name only (a GPU's check: scripts/gpu-check.sh), never by default
JOBS = ("eap", "eap-ig", "eap-ig-activations", "clean-corrupted", "exact", "edge-pruning", "head-pruning",
        "circuit-eval", "circuit-eval-mib", "view", "mib")
PLANNED = {"eap": "eap", "eap-ig": "eap-ig", "edge-pruning": "edge-pruning", "head-pruning": "head-pruning"}
MIB_NAMES = {"gpt2-small": "gpt2", "qwen2.5-0.5b": "qwen2.5", "llama-3.2-1b": "llama3"}  # MIB's model names


# -- the plan's prediction: one function, so a reworked plan changes only this --------------------------------------

def plan_prediction(shape: str, job: str, batch: int, length: int, dtype: str, ig_steps: int) -> dict[str, Any] | None:
    """``subnetlab plan``'s peak for ``job`` at these sizes, less its weights (bytes), or None where it plans none."""
    if job not in PLANNED:
        return None
    from subnetlab.runs.plan import PlanSettings, plan_run, read_model_config

    config = read_model_config(shape)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer")
    settings = PlanSettings(PLANNED[job], batch=batch, length=length, dtype=dtype, ig_steps=ig_steps)
    plan = plan_run(config, settings, name=shape, layers_sampled=(2, 3, 4) if layers > 8 else None)
    return {"planned_peak": plan.peak_bytes - plan.weights_bytes, "planned_weights": plan.weights_bytes,
            "planned_flops": plan.flops_per_step}


# -- memory ---------------------------------------------------------------------------------------------------------

def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


class PeakMemory:
    """Peak bytes above the level at ``start``: the resident set on a CPU, the CUDA allocator's on a GPU."""

    def __init__(self, device: Any) -> None:
        self.cuda = device.type == "cuda"
        self.base = 0
        self.resettable = True

    def start(self) -> None:
        import torch

        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed memory back to the system: the base is what is in use
        except OSError:
            pass
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current resident set
        except OSError:
            self.resettable = False
        self.base = _status_kib("VmRSS") * 1024

    def peak(self) -> int | None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.base
        return _status_kib("VmHWM") * 1024 - self.base if self.resettable else None


# -- the model and the data -------------------------------------------------------------------------------------------

def build_model(shape: str, dtype: str = "float32", device: str = "cpu", layers: int | None = None) -> Any:
    """The shipped config ``shape`` as a causal LM with random weights (seed 0), frozen, in eval mode; ``layers``
    keeps the first layers only (a quick check at the real width and vocabulary)."""
    import torch

    from subnetlab.models.adapters import attention_for
    from subnetlab.models.loading import HEADS
    from subnetlab.runs.plan import read_model_config

    config = read_model_config(shape)
    if layers is not None:
        for key in ("num_hidden_layers", "n_layer"):
            if hasattr(config, key):
                setattr(config, key, layers)
    torch.manual_seed(0)
    with torch.device(device):
        model = HEADS["causal-lm"].from_config(config, dtype=getattr(torch, dtype),
                                               attn_implementation=attention_for(config.model_type, "sdpa"))
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def random_pairs(n: int, length: int, vocab: int, seed: int = 0) -> Any:
    """``n`` random clean prompts of the real vocabulary, random corrupted ones, random answers: pruning data."""
    import torch

    from subnetlab.methods.edge_pruning.data import paired_data

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, length), generator=g)
    corrupted = torch.randint(0, vocab, (n, length), generator=g)
    answers = torch.randint(0, vocab, (2, n), generator=g)
    return paired_data(ids, corrupted, answers[0], answers[1])


class PairBatches:
    """The circuit-task side the evaluators read (``pair_batches``, ``metrics``) over fixed pair batches."""

    def __init__(self, batches: list[dict[str, Any]]) -> None:
        self.batches = batches

    def pair_batches(self, tokenizer: Any, split: str, batch_size: int, limit: int | None = None) -> Any:
        return iter(self.batches)

    def metrics(self, logits: Any, batch: dict[str, Any], full_logits: Any) -> dict[str, Any]:
        from subnetlab.tasks.circuits.metrics import circuit_metrics

        return circuit_metrics(logits, batch, full_logits)


@dataclass
class Context:
    shape: str
    model: Any
    adapter: Any
    graph: Any  # the model's graph, as ``subnetlab circuit`` scores it
    mib_graph: Any  # one embedding node and a key/value reader per query head, as MIB's files and evaluation have it
    data: Any  # PruningData of max(batch, 64) pairs: the trainers' (their full-model outputs and evaluation batch)
    batch: dict[str, Any]  # the first ``batch`` pairs, on the device
    device: Any
    args: Any
    work: Path
    scores: Any = None  # EAP's, for the jobs that read scores
    active: Any = None  # the installed trainer's controller: off while the plain step runs

    @property
    def clean(self) -> dict[str, Any]:
        return {"input_ids": self.batch["input_ids"], "attention_mask": self.batch["attention_mask"]}

    @property
    def corrupted(self) -> dict[str, Any]:
        return {"input_ids": self.batch["corrupted_input_ids"], "attention_mask": self.batch["attention_mask"]}

    def metric(self, logits: Any, _full: Any) -> Any:
        from subnetlab.tasks.circuits.metrics import logit_difference

        return logit_difference(logits, self.batch)

    def edge_scores(self, graph: Any = None) -> Any:
        """EAP's scores where eap ran on ``graph`` (default the model's), else seeded random ones of its shape."""
        import torch

        graph = graph or self.graph
        if graph is self.graph and self.scores is not None:
            return self.scores
        return torch.randn(graph.num_edges, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def context(shape: str, args: Any) -> Context:
    import torch

    from subnetlab.models import get_adapter
    from subnetlab.models.graph import Graph

    device = torch.device(args.device)
    model = build_model(shape, args.dtype, args.device, layers=args.layers)
    adapter = get_adapter(model)
    vocab = model.get_output_embeddings().weight.shape[0]
    data = random_pairs(max(args.batch, 64), args.length, vocab)
    batch = {k: v.to(device) for k, v in data.batch_at(list(range(args.batch))).items()}
    work = Path(tempfile.mkdtemp(prefix=f"real-shapes-{shape}-"))
    return Context(shape, model, adapter, Graph.from_adapter(adapter), Graph.from_adapter(adapter, 1, ungrouped_kv=True), data, batch,
                   device, args, work)


# -- the jobs: set up, return (run once, tear down) -------------------------------------------------------------------

Run = Callable[[], Any]


def plain_step(ctx: Context) -> None:
    """Forward+backward of the frozen model on the batch, the backward reaching the embeddings' output."""
    model = ctx.model
    handle = model.get_input_embeddings().register_forward_hook(lambda m, i, o: o.requires_grad_())
    try:
        logits = model(**ctx.clean).logits
        logits[:, -1].float().logsumexp(-1).sum().backward()
    finally:
        handle.remove()


def attribution(method: str, steps: int = 1) -> Callable[[Context], tuple[Run, Run]]:
    def setup(ctx: Context) -> tuple[Run, Run]:
        from subnetlab.methods.attribution import attribute_batch

        def run() -> Any:
            scores = attribute_batch(ctx.model, ctx.adapter, ctx.graph, ctx.clean, ctx.corrupted, ctx.metric,
                                     method=method, steps=steps)  # type: ignore[arg-type]
            if method == "eap":
                ctx.scores = scores.detach().double().cpu() / ctx.args.batch
            return scores

        return run, lambda: None
    return setup


def exact(ctx: Context) -> tuple[Run, Run]:
    from subnetlab.methods.attribution.exact import exact_batch

    n = ctx.graph.num_edges
    chosen = sorted({int(i * n // ctx.args.exact_edges) for i in range(ctx.args.exact_edges)})
    return (lambda: exact_batch(ctx.model, ctx.adapter, ctx.graph, ctx.clean, ctx.corrupted, ctx.metric,
                                edges=chosen)), lambda: None


def trainer_job(trainer: Any, ctx: Context) -> tuple[Run, Run]:
    trainer.__enter__()
    ctx.active = trainer.ctl
    counter = iter(range(10**9))

    def teardown() -> None:
        ctx.active = None
        trainer.__exit__(None, None, None)

    return (lambda: trainer.step(next(counter))), teardown


def edge_pruning(ctx: Context) -> tuple[Run, Run]:
    import torch

    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.train import EdgePruner

    config = preset_config("paper", 0.95, seed=0, batch_size=ctx.args.batch, accumulation=1,
                           dtype=ctx.args.dtype, checkpoint_every=10**6)
    trainer = EdgePruner(ctx.model, ctx.adapter, ctx.data, config)
    with torch.no_grad():  # undecided masks, as the plan plans a run's middle
        trainer.edges.log_alpha.zero_()
    return trainer_job(trainer, ctx)


def head_pruning(ctx: Context) -> tuple[Run, Run]:
    from subnetlab.intervene.activations import collect_means
    from subnetlab.methods.head_pruning.config import preset_config
    from subnetlab.methods.head_pruning.train import Pruner

    config = preset_config("paper", 0.5, seed=0, max_length=ctx.args.length, batch_size=ctx.args.batch,
                           accumulation=1, checkpoint_every=10**6)
    means = None
    if config.ablation == "mean":
        means = collect_means(ctx.model, ctx.adapter, (ctx.data.model_inputs(ctx.batch),))
    return trainer_job(Pruner(ctx.model, ctx.adapter, ctx.data, config, ablation=means), ctx)


def circuit_eval(mib: bool) -> Callable[[Context], tuple[Run, Run]]:
    def setup(ctx: Context) -> tuple[Run, Run]:
        from subnetlab.analysis.circuit_evaluation import edge_evaluator

        graph = ctx.mib_graph if mib else ctx.graph
        scores = ctx.edge_scores(graph)

        def run() -> Any:
            evaluate = edge_evaluator(ctx.model, ctx.adapter, graph, PairBatches([ctx.batch]), None, "eval",
                                      batch_size=ctx.args.batch)  # type: ignore[arg-type]
            if mib:
                from subnetlab.analysis.mib_faithfulness import mib_curves

                return mib_curves(graph, scores, evaluate, metric="logit_diff")
            from subnetlab.analysis.faithfulness import curve_from_scores

            return curve_from_scores(scores, evaluate, metric="logit_diff", empty=evaluate.corrupted_run).to_dict()

        return run, lambda: None
    return setup


def view(ctx: Context) -> tuple[Run, Run]:
    from subnetlab.io import write_text
    from subnetlab.models.circuit import Circuit
    from subnetlab.view.page import page_data, render
    from subnetlab.view.runs import read_all

    scores = ctx.edge_scores()
    graph_file, page = ctx.work / "view" / "graph.json", ctx.work / "view" / "page.html"
    graph_file.parent.mkdir(parents=True, exist_ok=True)

    def run() -> Any:
        Circuit(ctx.graph, scores, score_sign="absolute").save(graph_file)
        groups = read_all([graph_file])
        write_text(page, render(page_data(groups, ctx.shape)))
        return page.stat().st_size

    return run, lambda: None


def mib(ctx: Context) -> tuple[Run, Run]:
    import shutil

    from subnetlab.models import mib_submission
    from subnetlab.models.circuit import Circuit

    scores = ctx.edge_scores(ctx.mib_graph)
    root = ctx.work / "mib"
    name = MIB_NAMES.get(ctx.shape, ctx.shape)
    d_model = ctx.model.get_input_embeddings().weight.shape[1]

    def run() -> Any:
        shutil.rmtree(root, ignore_errors=True)
        circuit = Circuit(ctx.mib_graph, scores, score_sign="absolute")
        for task in ("ioi", "mcqa"):
            mib_submission.write(root, task, name, circuit, d_model)
        return mib_submission.check(root, mib_names=False)  # mib-check --any-names: one model's folders

    return run, lambda: None


def job_table(args: Any) -> dict[str, Callable[[Context], tuple[Run, Run]]]:
    return {"eap": attribution("eap"), "eap-ig": attribution("eap-ig", args.ig_steps),
            "eap-ig-activations": attribution("eap-ig-activations", args.ig_activation_steps),
            "clean-corrupted": attribution("clean-corrupted"), "exact": exact, "edge-pruning": edge_pruning,
            "head-pruning": head_pruning, "circuit-eval": circuit_eval(False), "circuit-eval-mib": circuit_eval(True),
            "view": view, "mib": mib}


def job_label(job: str, args: Any) -> str:
    return {"eap-ig": f"eap-ig ({args.ig_steps} steps)",
            "eap-ig-activations": f"eap-ig-activations ({args.ig_activation_steps} step{'s' * (args.ig_activation_steps > 1)})",
            "exact": f"exact ({args.exact_edges} edges)", "circuit-eval": "circuit-eval (10 sizes)",
            "circuit-eval-mib": "circuit-eval --mib (10 sizes x 2)", "mib": "MIB folder + mib-check"}.get(job, job)


# -- timing -------------------------------------------------------------------------------------------------------------

@dataclass
class Clock:
    device: Any
    samples: dict[str, list[float]] = field(default_factory=dict)

    def time(self, fn: Run) -> float:
        import torch

        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter() if cuda else time.process_time()
        fn()
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() if cuda else time.process_time()) - started


def measure_job(ctx: Context, name: str, setup: Callable[[Context], tuple[Run, Run]], clock: Clock,
                plain_seconds: list[float]) -> dict[str, Any]:
    """Memory of set-up + first run, then rounds alternating the plain step and the job (``--rounds``, fewer for a
    job that takes longer than ``--job-seconds``; one slower than that is timed by its first run, between two plain
    steps)."""
    memory = PeakMemory(ctx.device)
    memory.start()
    run, teardown = setup(ctx)
    plain = plain_guarded(ctx)
    try:
        first = clock.time(run)
        peak = memory.peak()
        rounds = min(ctx.args.rounds, int(ctx.args.job_seconds // max(first, 1e-9)))
        times, plains = ([], []) if rounds else ([first], [clock.time(plain), clock.time(plain)])
        for r in range(rounds):
            pair = [("plain", plain), ("job", run)]
            for kind, fn in (pair if r % 2 == 0 else pair[::-1]):
                (plains if kind == "plain" else times).append(clock.time(fn))
        plain_seconds.extend(plains)
    finally:
        teardown()
    return {"job": name, "seconds": statistics.median(times), "plain_seconds": statistics.median(plains),
            "ratio": statistics.median(times) / statistics.median(plains), "first_seconds": first, "rounds": rounds,
            "peak_bytes": peak}


def plain_guarded(ctx: Context) -> Run:
    def run() -> None:
        ctl = ctx.active
        if ctl is not None:
            ctl.enabled = False
        try:
            plain_step(ctx)
        finally:
            if ctl is not None:
                ctl.enabled = True
    return run


def run_jobs(shape: str, args: Any, jobs: list[str] | None = None) -> dict[str, Any]:
    """Every job of ``jobs`` at ``shape`` in this process: rows of time ratios and peaks (module doc)."""
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    ctx = context(shape, args)
    build_seconds = time.perf_counter() - started
    clock = Clock(ctx.device)
    table = job_table(args)
    memory = PeakMemory(ctx.device)
    memory.start()
    plain_first = clock.time(lambda: plain_step(ctx))
    plain_peak = memory.peak()
    rows = [{"job": "plain forward+backward", "seconds": plain_first, "ratio": 1.0, "peak_bytes": plain_peak}]
    plain_seconds: list[float] = []
    for name in jobs or list(JOBS):
        try:
            row = measure_job(ctx, name, table[name], clock, plain_seconds)
        except Exception as e:  # a method that fails at a real shape: recorded, the others still run
            row = {"job": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
            ctx.active = None
        row["label"] = job_label(name, args)
        rows.append(row)
        print(f"  {shape} {row['label']}: " + (f"x{row['ratio']:.2f}, peak {_gb(row['peak_bytes'])}" if "ratio" in row
                                                else row["error"]), flush=True)
    if plain_seconds:
        rows[0]["seconds"] = statistics.median(plain_seconds)
    weights = sum(p.numel() * p.element_size() for p in ctx.model.parameters())
    return {"shape": shape, "rows": rows, "weights_bytes": weights, "edges": ctx.graph.num_edges,
            "layers": ctx.graph.num_layers, "build_seconds": build_seconds, "threads": torch.get_num_threads(),
            "device": str(ctx.device)}


def _gb(value: Any) -> str:
    return "-" if value is None else f"{value / 1e9:.2f} GB"


# -- the parent: one child per shape, the plan, the table ---------------------------------------------------------------

def markdown(result: dict[str, Any]) -> str:
    a = result["settings"]
    lines = [f"batch {a['batch']} x length {a['length']}, {a['dtype']}, {a['device']}, {a['threads']} thread(s); "
             "time: x the plain forward+backward of the same batch (median of alternating rounds); peak: above the "
             "model (set-up and first run); plan: `subnetlab plan`'s peak less its weights", "",
             "| model | job | time (x plain) | peak memory | plan | measured / plan |", "|---|---|---|---|---|---|"]
    for shape in result["shapes"]:
        head = (f"{shape['shape']} ({shape['layers']} layers, {shape['edges']:,} edges, weights "
                f"{_gb(shape['weights_bytes'])})")
        for row in shape["rows"]:
            if "error" in row:
                lines.append(f"| {head} | {row['label']} | failed: {row['error']} | | | |")
                continue
            plan = row.get("planned_peak")
            ratio = "" if not plan or row.get("peak_bytes") is None else f"{row['peak_bytes'] / plan:.2f}"
            time_cell = (f"{row['seconds']:.2f} s" if row["job"] == "plain forward+backward"
                         else f"{row['ratio']:.2f}")
            lines.append(f"| {head} | {row.get('label', row['job'])} | {time_cell} | {_gb(row.get('peak_bytes'))} | "
                         f"{'' if plan is None else _gb(plan)} | {ratio} |")
            head = ""
    return "\n".join(lines) + "\n"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=",".join(SHAPES),
                   help=f"comma-separated, of {', '.join(SHAPES + LARGE_SHAPES)}")
    p.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated, of {', '.join(JOBS)}")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch threads in each child")
    p.add_argument("--ig-steps", type=int, default=5)
    p.add_argument("--ig-activation-steps", type=int, default=1)
    p.add_argument("--exact-edges", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per job (plain and job alternating)")
    p.add_argument("--job-seconds", type=float, default=20.0, help="fewer rounds for a job slower than this")
    p.add_argument("--layers", type=int, default=None, help="keep the first N layers (a quick check of the script)")
    p.add_argument("--no-plan", action="store_true", help="leave out the plan's prediction")
    p.add_argument("--out", default="real_shapes_out")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # run one shape here, write its JSON
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    jobs = [j for j in args.jobs.split(",") if j]
    unknown = [j for j in jobs if j not in JOBS] + [s for s in args.shapes.split(",") if s not in SHAPES + LARGE_SHAPES]
    if unknown:
        raise SystemExit(f"unknown job or shape: {', '.join(unknown)}")
    if args.child:
        shape, out = args.child.split("=", 1)
        Path(out).write_text(json.dumps(run_jobs(shape, args, jobs)))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items() if k != "child"}, "shapes": [],
                              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    for shape in args.shapes.split(","):
        started = time.perf_counter()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]),
                       "--child", f"{shape}={f.name}"]
            done = subprocess.run(command, env=env)
            if done.returncode != 0:
                result["shapes"].append({"shape": shape, "rows": [{"job": "all", "label": "all",
                                                                   "error": f"child exit {done.returncode}"}],
                                         "layers": 0, "edges": 0, "weights_bytes": 0})
                continue
            measured = json.loads(Path(f.name).read_text())
        measured["child_seconds"] = time.perf_counter() - started
        if not args.no_plan:
            for row in measured["rows"]:
                if row["job"] in PLANNED and "error" not in row:
                    t = time.perf_counter()
                    row.update(plan_prediction(shape, row["job"], args.batch, args.length, args.dtype,
                                               args.ig_steps) or {})
                    row["plan_seconds"] = time.perf_counter() - t
        result["shapes"].append(measured)
        (out / "real_shapes.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "real_shapes.md").write_text(markdown(result))
        print(f"{shape}: done in {time.perf_counter() - started:.0f} s", flush=True)
    print(markdown(result))
    print(f"tables: {out / 'real_shapes.json'} and {out / 'real_shapes.md'}")


if __name__ == "__main__":
    main()
