"""The papers' steps on a GPU, side by side with the frozen model's plain forward+backward, and their peak memory.

Three parts, each its own table (``--part``, default all), every model built from a config with random weights
(no download), every size an option:

* ``heads``: the Heuristic Core ``paper`` preset's pruning step (``head_pruning.train.Pruner.step``, config from
  ``preset_config("paper", sparsity)``: 32 x 4 accumulated micro-batches, length 128, 144 head + 12 MLP gates,
  mean ablation, KL, Lagrangian, AdamW) on a BERT-base shape (12 x 12, hidden 768), against the frozen model's
  plain forward+backward over the same 4 micro-batches (the backward reaching the embeddings' output, so both
  traverse every layer). Three precisions: float32; bfloat16 autocast with float32 weights (what subnetlab's
  ``--dtype bfloat16`` does: ``runtime.resolve_dtype`` + ``runtime.autocast``); bfloat16 weights
  (``model.to(torch.bfloat16)``, as a model loaded in bf16). Goal: step / plain <= 1.10. The projected run is the
  preset's ``total_steps`` x seconds per step (the one-off means and full-model cache left out); the paper reports
  about 90 minutes per run on an A5000 (Bhaskar et al., 2024): other hardware, so not a like-for-like comparison.
* ``edges``: at GPT-2 small's graph (12 x 12, hidden 768, vocabulary 50,257; 32,936 edges), batch 32 x length 64:
  the edge-pruning step (``edge_pruning.train.EdgePruner.step``, ``paper`` preset, corrupted-input ablation),
  EAP and EAP-IG (``methods.attribution.attribute_batch``, logit difference at the last position) against the
  plain forward+backward of the clean batch.
* ``memory``: peak memory (``torch.cuda.max_memory_allocated``, reset before each measurement; model and caches
  included) and seconds per step of head pruning and edge pruning on GPT-2 small (float32) and on a
  Llama-3.1-8B shape (bfloat16 weights: 32 layers, hidden 4096, 32 heads, 8 KV heads, intermediate 14336,
  vocabulary 128,256), at the largest batch of ``--batches`` (tried large to small, catching out-of-memory) that
  fits. subnetlab has no memory plan yet (issue 37), so no predicted peak is shown beside the measured one.
  On the CPU the peak is not measured (the column says so).

Timed steps of the kinds compared alternate in blocks, the first kind rotating each round, so machine noise hits
all alike (as ``bench_edges.py``); the tables show medians. Tables go to ``--out`` (default ``$OUT``, else
``bench_gpu_out``): ``bench_gpu.json`` (every row) and ``bench_gpu.md``, both rewritten after every row, so a
part cut off by a time limit keeps what it measured.

    python benchmarks/bench_gpu.py [--part heads|edges|memory|all] [--out DIR]     # CUDA when there is one
    OMP_NUM_THREADS=1 python benchmarks/bench_gpu.py --small                      # tiny shapes, a CPU check

``scripts/gpu-check.sh`` runs it on the lent GPU machine after the ``gpu``-marked tests. Not yet measured on a
GPU: no figures here are from one.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from subnetlab.intervene import collect_means
from subnetlab.methods.attribution import attribute_batch
from subnetlab.methods.edge_pruning.config import preset_config as edge_preset
from subnetlab.methods.edge_pruning.data import paired_data, prediction_logits
from subnetlab.methods.edge_pruning.train import EdgePruner
from subnetlab.methods.head_pruning.config import preset_config
from subnetlab.methods.head_pruning.train import Pruner
from subnetlab.methods.l0.data import PruningData
from subnetlab.models import get_adapter
from subnetlab.models.graph import Graph
from subnetlab.runtime import autocast, resolve_dtype

PARTS = ("heads", "edges", "memory")
PAPER_MINUTES_A5000 = 90
SMALL = dict(  # --small: shapes a CPU runs in seconds
    bert_layers=2, bert_heads=4, bert_hidden=64, bert_vocab=1000, bert_length=16, bert_batch=2, bert_accumulation=2,
    gpt2_layers=2, gpt2_heads=4, gpt2_hidden=64, gpt2_vocab=1000, gpt2_batch=4, gpt2_length=16,
    llama_layers=2, llama_hidden=64, llama_heads=4, llama_kv_heads=2, llama_intermediate=128, llama_vocab=1000,
    llama_length=16, batches="8,4", gpt2_batches="8,4", steps=3, warmup=1, memory_steps=2,
)


# -- results ----------------------------------------------------------------------------------------------------

class Results:
    """Rows per part, rewritten to ``bench_gpu.json`` and ``bench_gpu.md`` after every row."""

    def __init__(self, out: Path, header: dict[str, Any]) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "bench_gpu.json"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.data.setdefault("runs", []).append(header)
        self.data.setdefault("parts", {})

    def add(self, part: str, row: dict[str, Any]) -> None:
        self.data["parts"].setdefault(part, []).append(row)
        print(f"[{part}] " + ", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        self.write()

    def write(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1) + "\n")
        (self.out / "bench_gpu.md").write_text(markdown(self.data))


COLUMNS = {
    "heads": ["precision", "prune_ms", "plain_ms", "ratio", "goal", "total_steps", "projected_min", "note"],
    "edges": ["kind", "ms", "ratio_to_plain", "shape"],
    "memory": ["model", "method", "batch", "length", "peak_gib", "predicted_gib", "s_per_step", "tried", "note"],
}
TITLES = {
    "heads": "Heuristic Core paper-preset pruning step vs plain forward+backward (BERT-base shape); goal ratio <= 1.10",
    "edges": "Edge pruning, EAP and EAP-IG vs plain forward+backward (GPT-2 small's graph)",
    "memory": "Peak memory and seconds per step at the largest batch that fits",
}


def markdown(data: dict[str, Any]) -> str:
    lines = ["# bench_gpu", ""]
    for run in data["runs"]:
        lines.append("- " + ", ".join(f"{k}: {v}" for k, v in run.items()))
    for part, rows in data["parts"].items():
        cols = COLUMNS.get(part) or sorted({k for r in rows for k in r})
        lines += ["", f"## {part}: {TITLES.get(part, '')}", "", "| " + " | ".join(cols) + " |",
                  "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value).replace("|", "/")


# -- timing -----------------------------------------------------------------------------------------------------

def synchronizer(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def interleaved(kinds: dict[str, Callable[[], None]], steps: int, warmup: int, block: int,
                sync: Callable[[], None]) -> dict[str, float]:
    """Median seconds per step of each kind; blocks of ``block`` steps alternate, the first kind rotating."""
    for run in kinds.values():
        for _ in range(warmup):
            run()
    names = list(kinds)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(max(1, steps // block)):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync()
            started = time.perf_counter()
            for _ in range(block):
                kinds[name]()
            sync()
            times[name].append((time.perf_counter() - started) / block)
    return {k: statistics.median(v) for k, v in times.items()}


def plain_step(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]],
               output: Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]) -> None:
    """Forward+backward of the frozen model per micro-batch, the backward reaching the embeddings' output."""
    handle = model.get_input_embeddings().register_forward_hook(lambda m, i, o: o.requires_grad_())
    try:
        for batch in batches:
            output(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]), batch)\
                .float().logsumexp(-1).sum().backward()
    finally:
        handle.remove()


def freeze(model: torch.nn.Module) -> torch.nn.Module:
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# -- models and data ---------------------------------------------------------------------------------------------

def build(config: Any, head: str, device: torch.device, dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    """A model with random weights made directly on ``device`` in ``dtype`` (an 8B model is never in CPU memory)."""
    from subnetlab.models.loading import HEADS

    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            model = HEADS[head].from_config(config, attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(previous)
    return freeze(model.to(device=device, dtype=dtype))


def bert_config(a: argparse.Namespace):
    from transformers import BertConfig

    return BertConfig(vocab_size=a.bert_vocab, hidden_size=a.bert_hidden, num_hidden_layers=a.bert_layers,
                      num_attention_heads=a.bert_heads, intermediate_size=4 * a.bert_hidden,
                      max_position_embeddings=max(512, a.bert_length), num_labels=3)


def gpt2_config(a: argparse.Namespace):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=a.gpt2_vocab, n_positions=max(1024, a.gpt2_length), n_embd=a.gpt2_hidden,
                      n_layer=a.gpt2_layers, n_head=a.gpt2_heads, bos_token_id=0, eos_token_id=0)


def llama_config(a: argparse.Namespace):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=a.llama_vocab, hidden_size=a.llama_hidden, num_hidden_layers=a.llama_layers,
                       num_attention_heads=a.llama_heads, num_key_value_heads=a.llama_kv_heads,
                       intermediate_size=a.llama_intermediate, max_position_embeddings=max(2048, a.llama_length),
                       rope_theta=500000.0, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def pairs(n: int, length: int, vocab: int, seed: int = 0) -> PruningData:
    """``n`` random clean prompts, random corrupted prompts of the same length, random answers."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, length), generator=g)
    corrupted = torch.randint(0, vocab, (n, length), generator=g)
    answers = torch.randint(0, vocab, (2, n), generator=g)
    return paired_data(ids, corrupted, answers[0], answers[1])


def on(device: torch.device, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


# -- part (a): the paper preset's pruning step on BERT-base -------------------------------------------------------

def part_heads(a: argparse.Namespace, device: torch.device, results: Results) -> None:
    micro, acc, length = a.bert_batch, a.bert_accumulation, a.bert_length
    cfg = preset_config("paper", a.sparsity, seed=0, batch_size=micro, accumulation=acc, max_length=length,
                        eval_batch_size=micro, checkpoint_every=10**6)
    g = torch.Generator().manual_seed(0)
    n = 2 * micro * acc
    inputs = {"input_ids": torch.randint(1000 % a.bert_vocab, a.bert_vocab, (n, length), generator=g),
              "attention_mask": torch.ones(n, length, dtype=torch.long)}
    data = PruningData.from_tensors(inputs)
    micro_batches = [on(device, {k: v[i * micro:(i + 1) * micro] for k, v in inputs.items()}) for i in range(acc)]
    bf16 = resolve_dtype("bfloat16", device)
    variants = [("float32", torch.float32, None), ("bfloat16 autocast (float32 weights)", torch.float32, bf16),
                ("bfloat16 weights", bf16, None)]
    for name, weights, forward in variants:
        model = build(bert_config(a), "classification", device, weights)
        adapter = get_adapter(model)
        def precision(forward: torch.dtype | None = forward) -> Any:
            return autocast(device, forward) if forward is not None else nullcontext()

        with precision():
            means = collect_means(model, adapter, micro_batches[:1])
        pruner = Pruner(model, adapter, data, cfg, means)
        counter = iter(range(10**9))

        def prune() -> None:
            pruner.ctl.enabled = True
            with precision():
                pruner.step(next(counter))

        def plain() -> None:
            pruner.ctl.enabled = False
            with precision():
                plain_step(model, micro_batches, lambda out, b: out.logits)

        with precision():
            pruner.__enter__()
        try:
            t = interleaved({"plain": plain, "prune": prune}, a.steps, a.warmup, a.block, synchronizer(device))
        finally:
            pruner.__exit__()
        ratio = t["prune"] / t["plain"]
        results.add("heads", {
            "precision": name, "prune_ms": 1000 * t["prune"], "plain_ms": 1000 * t["plain"], "ratio": ratio,
            "goal": "met" if ratio <= 1.10 else "missed", "total_steps": cfg.total_steps,
            "projected_min": cfg.total_steps * t["prune"] / 60,
            "note": f"{a.bert_layers}x{a.bert_heads} h{a.bert_hidden}, {micro}x{acc} x len {length}; paper: "
                    f"~{PAPER_MINUTES_A5000} min per run on an A5000 (other hardware)"})
        pruner = model = adapter = means = None  # free them; the closures above hold them (a del leaves them unbound)
        free()


# -- part (b): edge pruning and attribution on GPT-2 small ---------------------------------------------------------

def part_edges(a: argparse.Namespace, device: torch.device, results: Results) -> None:
    model = build(gpt2_config(a), "causal-lm", device, torch.float32)
    adapter = get_adapter(model)
    b, length = a.gpt2_batch, a.gpt2_length
    data = pairs(2 * b, length, a.gpt2_vocab)
    batch = on(device, data.batch_at(list(range(b))))
    clean = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    corrupted = {"input_ids": batch["corrupted_input_ids"], "attention_mask": batch["attention_mask"]}
    graph = Graph.from_adapter(adapter)
    cfg = edge_preset("paper", 0.95, seed=0, batch_size=b, eval_batch_size=b, checkpoint_every=10**6)
    edge = EdgePruner(model, adapter, data, cfg)
    rows = torch.arange(b, device=device)

    def metric(logits: torch.Tensor, _full: torch.Tensor) -> torch.Tensor:  # logit difference at the last position
        last = logits[:, -1].float()
        return last[rows, batch["answer_id"]] - last[rows, batch["wrong_id"]]

    counter = iter(range(10**9))

    def with_edges(enabled: bool, fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            edge.ctl.enabled = enabled
            fn()
        return run

    kinds = {
        "plain": with_edges(False, lambda: plain_step(model, [batch], prediction_logits)),
        "edge pruning step": with_edges(True, lambda: edge.step(next(counter))),
        "EAP": with_edges(False, lambda: attribute_batch(model, adapter, graph, clean, corrupted, metric,
                                                         method="eap")),
        f"EAP-IG k={a.ig_steps}": with_edges(False, lambda: attribute_batch(
            model, adapter, graph, clean, corrupted, metric, method="eap-ig", steps=a.ig_steps)),
    }
    edge.__enter__()
    try:
        t = interleaved(kinds, a.steps, a.warmup, a.block, synchronizer(device))
    finally:
        edge.__exit__()
    shape = (f"{a.gpt2_layers}x{a.gpt2_heads} h{a.gpt2_hidden} v{a.gpt2_vocab}, {graph.num_edges} edges, "
             f"batch {b} x len {length}")
    for name, seconds in t.items():
        results.add("edges", {"kind": name, "ms": 1000 * seconds, "ratio_to_plain": seconds / t["plain"],
                              "shape": shape})
    edge = model = adapter = None  # free them, as in part_heads
    free()


# -- part (c): peak memory at the largest batch that fits -----------------------------------------------------------

def measure_fit(model: torch.nn.Module, method: str, batch: int, length: int, vocab: int, steps: int,
                device: torch.device) -> tuple[float | None, float]:
    """(peak GiB or None on the CPU, seconds per step) of ``method`` at ``batch``; raises OutOfMemoryError."""
    adapter = get_adapter(model)
    data = pairs(batch, length, vocab)
    cuda = device.type == "cuda"
    sync = synchronizer(device)
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
    if method == "heads":
        means = collect_means(model, adapter, [on(device, data.model_inputs(data.batch_at(list(range(batch)))))])
        cfg = preset_config("paper", 0.5, seed=0, batch_size=batch, accumulation=1, eval_batch_size=batch,
                            checkpoint_every=10**6)
        trainer: Any = Pruner(model, adapter, data, cfg, means)
    else:
        cfg = edge_preset("paper", 0.95, seed=0, batch_size=batch, eval_batch_size=batch, checkpoint_every=10**6)
        trainer = EdgePruner(model, adapter, data, cfg)
    with trainer:
        trainer.step(0)  # the first step allocates the optimiser's state: its peak is the run's
        sync()
        started = time.perf_counter()
        for i in range(steps):
            trainer.step(1 + i)
        sync()
        seconds = (time.perf_counter() - started) / max(1, steps)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    return peak, seconds


def part_memory(a: argparse.Namespace, device: torch.device, results: Results) -> None:
    shapes = [("llama-3.1-8b shape" if not a.small else "llama (tiny)", llama_config(a), torch.bfloat16,
               a.llama_length, a.llama_vocab, a.batches),  # first: the figure the memory plan is judged on
              ("gpt2", gpt2_config(a), torch.float32, a.gpt2_length, a.gpt2_vocab, a.gpt2_batches)]
    for name, config, dtype, length, vocab, batches in shapes:
        model = build(config, "causal-lm", device, dtype)
        weights_gib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
        for method in ("heads", "edges"):
            tried: list[str] = []
            row: dict[str, Any] | None = None
            for batch in [int(x) for x in batches.split(",")]:
                try:
                    peak, seconds = measure_fit(model, method, batch, length, vocab, a.memory_steps, device)
                except torch.cuda.OutOfMemoryError:
                    peak = seconds = None  # freed below, once the traceback no longer holds the step's tensors
                free()
                if seconds is None:
                    tried.append(f"{batch}:oom")
                    continue
                tried.append(f"{batch}:fits")
                row = {"model": f"{name} ({str(dtype).removeprefix('torch.')})", "method": method, "batch": batch,
                       "length": length, "peak_gib": peak, "predicted_gib": None, "s_per_step": seconds,
                       "note": f"weights {weights_gib:.2f} GiB; " + (
                           "no memory plan in subnetlab (issue 37): measured only" if peak is not None
                           else "CPU: peak not measured")}
                break
            if row is None:
                row = {"model": name, "method": method, "batch": None, "length": length, "note": "no batch fits"}
            row["tried"] = " ".join(tried)
            results.add("memory", row)
            free()
        del model
        free()


# -- main ----------------------------------------------------------------------------------------------------------

def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=(*PARTS, "all"), default="all")
    p.add_argument("--out", default=os.environ.get("OUT") or "bench_gpu_out")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny shapes (a CPU check of the script); sizes given win")
    p.add_argument("--steps", type=int, default=6, help="timed steps of each kind")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--block", type=int, default=2, help="steps of one kind timed back to back")
    p.add_argument("--sparsity", type=float, default=0.5, help="the head-pruning target (sets the preset's steps)")
    p.add_argument("--bert-layers", type=int, default=12)
    p.add_argument("--bert-heads", type=int, default=12)
    p.add_argument("--bert-hidden", type=int, default=768)
    p.add_argument("--bert-vocab", type=int, default=30522)
    p.add_argument("--bert-length", type=int, default=128)
    p.add_argument("--bert-batch", type=int, default=32, help="micro-batch (the paper preset: 32)")
    p.add_argument("--bert-accumulation", type=int, default=4, help="micro-batches per step (the paper preset: 4)")
    p.add_argument("--gpt2-layers", type=int, default=12)
    p.add_argument("--gpt2-heads", type=int, default=12)
    p.add_argument("--gpt2-hidden", type=int, default=768)
    p.add_argument("--gpt2-vocab", type=int, default=50257)
    p.add_argument("--gpt2-batch", type=int, default=32)
    p.add_argument("--gpt2-length", type=int, default=64)
    p.add_argument("--gpt2-batches", default="256,128,64,32,16", help="memory part: batches tried, large to small")
    p.add_argument("--ig-steps", type=int, default=5)
    p.add_argument("--llama-layers", type=int, default=32)
    p.add_argument("--llama-hidden", type=int, default=4096)
    p.add_argument("--llama-heads", type=int, default=32)
    p.add_argument("--llama-kv-heads", type=int, default=8)
    p.add_argument("--llama-intermediate", type=int, default=14336)
    p.add_argument("--llama-vocab", type=int, default=128256)
    p.add_argument("--llama-length", type=int, default=128)
    p.add_argument("--batches", default="32,16,8,4,2,1", help="memory part, Llama: batches tried, large to small")
    p.add_argument("--memory-steps", type=int, default=3, help="memory part: timed steps after the first")
    args = p.parse_args(argv)
    if args.small:  # defaults become the tiny ones; an option given on the command line still wins
        words = argv if argv is not None else sys.argv[1:]
        given = {a.dest for a in p._actions for s in a.option_strings
                 if any(w == s or w.startswith(s + "=") for w in words)}
        for key, value in SMALL.items():
            if key not in given:
                setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> None:
    a = arguments(argv)
    device = torch.device(a.device)
    header = {"torch": torch.__version__, "device": str(device),
              "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
              "threads": torch.get_num_threads(), "small": a.small, "part": a.part,
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    results = Results(Path(a.out), header)
    print("bench_gpu: " + ", ".join(f"{k}={v}" for k, v in header.items()), flush=True)
    parts = {"heads": part_heads, "edges": part_edges, "memory": part_memory}
    for name in (PARTS if a.part == "all" else (a.part,)):
        started = time.perf_counter()
        parts[name](a, device, results)
        print(f"[{name}] done in {time.perf_counter() - started:.1f} s", flush=True)
    print(f"tables: {results.path} and {results.out / 'bench_gpu.md'}")


if __name__ == "__main__":
    main()
