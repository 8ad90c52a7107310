"""Memory of EAP, EAP-IG and one edge-pruning step at long contexts, measured and as the plan predicts it.

Each point runs in a fresh child process (random weights from a packaged config, float32, batch 1, one thread):
the model, the inputs and the method's set-up are built, a warm-up at 16 tokens loads whatever loads lazily, then
the peak resident memory is reset (``/proc/self/clear_refs``) and the step runs; the figure is the peak resident
set (``VmHWM``) less the resident set just before the step. Beside it, the plan's prediction: the same step under
fake tensors (``runs.plan``), the peak of the bytes alive during the step less those alive before it.

    OMP_NUM_THREADS=1 python benchmarks/bench_long_context.py --model gpt2-small --lengths 256,512,1024
    OMP_NUM_THREADS=1 python benchmarks/bench_long_context.py --model llama-3.2-1b --layers 2 --lengths 256,512

``--methods`` picks from eap, eap-ig (5 steps), edge-pruning (one step of the paper preset at batch 1, masks
undecided as in a run's middle: every writer in the products). ``--chunk`` gives the methods' long-context
setting (attribution's ``position_chunk``; edge pruning's ``checkpoint_blocks``): ``off`` (the path before it:
``position_chunk=0``, ``checkpoint_blocks=False``), ``auto`` (the default: chunks of 512 tokens above 512 tokens;
blocks recomputed above 2,048 tokens), ``on`` (edge pruning: recomputed at any length) or a number of tokens per
chunk (attribution); ``none`` passes no setting (the code before it: the same as ``off``). GPT-2's position table is widened to the longest length (it
holds 1,024 positions).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def build(model_name: str, layers: int | None, length: int, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    from subnetlab.models.adapters import get_adapter
    from subnetlab.runs.plan.fake import read_model_config
    from subnetlab.runs.plan.layers import with_layers

    config = read_model_config(model_name)
    if layers is not None:
        config = with_layers(config, layers)
    if getattr(config, "model_type", "") == "gpt2":
        config.n_positions = max(int(config.n_positions), length)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa").eval()
    return config, model, get_adapter(model)


def pair_batch(vocab: int, length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, length), generator=g)
    return {"input_ids": ids, "corrupted_input_ids": torch.randint(0, vocab, (1, length), generator=g),
            "attention_mask": torch.ones(1, length, dtype=torch.long), "answer_index": torch.tensor([length - 1]),
            "answer_id": torch.tensor([1]), "wrong_id": torch.tensor([2])}


def method_step(model, adapter, method: str, length: int, chunk: str):
    """``(set_up, step)`` of ``method`` at ``length`` tokens; ``set_up(n)`` readies a step at ``n`` tokens."""
    from subnetlab.tasks.circuits.metrics import logit_difference
    from subnetlab.tasks.circuits.pairs import clean_inputs, corrupted_inputs

    vocab = int(model.config.vocab_size)
    if method in ("eap", "eap-ig"):
        from subnetlab.methods.attribution.scores import attribute_batch
        from subnetlab.models.graph import Graph

        graph = Graph.from_adapter(adapter)
        state = {}

        def set_up(n: int) -> None:
            state["batch"] = pair_batch(vocab, n)

        def step() -> None:
            batch = state["batch"]
            attribute_batch(model, adapter, graph, clean_inputs(batch), corrupted_inputs(batch),
                            lambda logits, full: logit_difference(logits, batch), method=method, steps=5,
                            **long_context_kwargs(method, chunk))
        return set_up, step

    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.data import prediction_logits
    from subnetlab.methods.edge_pruning.train import EdgePruner
    from subnetlab.methods.l0.data import PruningData

    state = {}

    def set_up(n: int) -> None:
        if "trainer" in state:
            state["trainer"].__exit__(None, None, None)
            del state["trainer"]
            gc.collect()
        batch = pair_batch(vocab, n)
        data = PruningData(1, lambda idx: batch, prediction_logits, key={"bench": n})
        config = preset_config("paper", 0.95, batch_size=1, eval_batch_size=1, **long_context_kwargs(method, chunk))
        trainer = EdgePruner(model, adapter, data, config)
        with torch.no_grad():
            trainer.edges.log_alpha.zero_()  # undecided masks, as the plan runs them
        trainer.__enter__()
        state["trainer"] = trainer

    def step() -> None:
        state["trainer"].step(0)
    return set_up, step


def long_context_kwargs(method: str, chunk: str) -> dict:
    """The method's setting: attribution's ``position_chunk`` (off: 0), edge pruning's ``checkpoint_blocks``
    (off: False, a number: True); ``auto`` leaves it unset (the default); ``none`` passes nothing."""
    if chunk == "none":
        return {}
    if method in ("eap", "eap-ig"):
        return {"position_chunk": None if chunk == "auto" else 0 if chunk == "off" else int(chunk)}
    return {"checkpoint_blocks": None if chunk == "auto" else chunk != "off"}


def child(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    _, model, adapter = build(args.model, args.layers, args.length)
    set_up, step = method_step(model, adapter, args.method, args.length, args.chunk)
    set_up(16)
    step()  # warm-up: code and kernels that load on first use
    set_up(args.length)
    gc.collect()
    before = rss_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    cpu = time.process_time()
    step()
    cpu = time.process_time() - cpu
    peak = rss_kib("VmHWM")
    print(json.dumps({"measured_mib": round((peak - before) / 1024, 1), "cpu_s": round(cpu, 1),
                      "before_mib": round(before / 1024, 1)}))


def planned(args: argparse.Namespace) -> None:
    """The plan's figure for one point: the step's peak of live bytes less the bytes alive before it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from subnetlab.runs.plan.core import run_step
    from subnetlab.runs.plan.fake import fake_model, read_model_config
    from subnetlab.runs.plan.layers import with_layers
    from subnetlab.runs.plan.memory import LiveBytes
    from subnetlab.runs.plan.settings import PlanSettings

    config = read_model_config(args.model)
    if args.layers is not None:
        config = with_layers(config, args.layers)
    if getattr(config, "model_type", "") == "gpt2":
        config.n_positions = max(int(config.n_positions), args.length)
    settings = PlanSettings(args.method, batch=1, length=args.length, **long_context_kwargs(args.method, args.chunk))
    with FakeTensorMode(allow_non_fake_inputs=True), LiveBytes(fake=True) as live:
        model, adapter = fake_model(config, settings)
        step = run_step(model, adapter, settings, live)
        try:
            gc.collect()
            before = live.live
            live.reset_peak()
            step(0)
            peak = live.peak
        finally:
            step(-1)
    print(json.dumps({"planned_mib": round((peak - before) / 2 ** 20, 1)}))


def run_child(argv: list[str], timeout: float) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt2-small", help="a packaged config (gpt2-small, llama-3.2-1b) or a path")
    parser.add_argument("--layers", type=int, default=None, help="fewer layers than the config's")
    parser.add_argument("--lengths", default="256,512,1024")
    parser.add_argument("--methods", default="eap,eap-ig,edge-pruning")
    parser.add_argument("--chunks", default="none,auto", help="comma-separated: none (before), off, auto, N")
    parser.add_argument("--no-plan", action="store_true")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--child", choices=("measure", "plan"), default=None)
    parser.add_argument("--method", default="eap")
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--chunk", default="none")
    args = parser.parse_args()
    if args.child == "measure":
        return child(args)
    if args.child == "plan":
        return planned(args)
    common = ["--model", args.model] + ([] if args.layers is None else ["--layers", str(args.layers)])
    print(f"{args.model}{'' if args.layers is None else f' ({args.layers} layers)'}, batch 1, float32, CPU")
    print(f"{'method':<13} {'setting':<8} {'length':>6} {'measured MiB':>12} {'planned MiB':>11} {'CPU s':>7}")
    for method in args.methods.split(","):
        for chunk in args.chunks.split(","):
            for length in [int(x) for x in args.lengths.split(",")]:
                point = common + ["--method", method, "--length", str(length), "--chunk", chunk]
                got = run_child(["--child", "measure", *point], args.timeout)
                plan = {} if args.no_plan else run_child(["--child", "plan", *point], args.timeout)
                if "error" in got:
                    print(f"{method:<13} {chunk:<8} {length:>6} error: {got['error']}", flush=True)
                    continue
                print(f"{method:<13} {chunk:<8} {length:>6} {got['measured_mib']:>12} "
                      f"{plan.get('planned_mib', plan.get('error', '-'))!s:>11} {got['cpu_s']:>7}", flush=True)


if __name__ == "__main__":
    main()
