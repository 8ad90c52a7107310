"""A MiniLM fine-tuning step with torch's fused Adam(W) kernel against its per-tensor loop (``optim.make_optimizer``).

The model is the builtin MiniLM-L6 with a 3-way classification head, one thread, batch ``--batch`` x ``--length``
random tokens (the NLI demos' rows are about 17 tokens); a step is forward, backward and one AdamW step over all
22.7M parameters, as ``methods.finetune`` runs it (weight decay off biases and norms). Each kind trains its own copy
of the model; blocks of ``--block`` steps alternate, the first kind rotating each round, and the table shows the
median CPU milliseconds per step (``time.process_time``). The two kernels give the same update on the same
gradients (``tests/unit/test_runtime.py``); the largest weight difference after the run is printed, and grows
beyond one step's rounding because Adam scales a near-zero gradient's rounding noise up to a full step.

Measured (one thread, this 2-core CPU, defaults): fused 499.5 ms, per-tensor 592.2 ms (x0.84).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_optimizer.py [--batch 32] [--length 17] [--steps 12] [--block 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from subnetlab.models import load_model
from subnetlab.optim import make_optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=17)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--block", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = load_model("minilm", head="classification", num_labels=3).model
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (args.batch, args.length), generator=g)
    labels = torch.randint(0, 3, (args.batch,), generator=g)
    kinds = {}
    for name, fused in (("fused", True), ("per-tensor", False)):
        model = copy.deepcopy(base).train()
        kinds[name] = (model, make_optimizer(model, "adamw", lr=1e-5, weight_decay=0.01, no_decay_1d=True,
                                             fused=fused))

    def step(name: str) -> None:
        model, opt = kinds[name]
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()

    for name in kinds:  # warm-up
        step(name)
    times: dict[str, list[float]] = {name: [] for name in kinds}
    order = list(kinds)
    for round_ in range(max(1, args.steps // args.block)):
        for name in order[round_ % 2:] + order[:round_ % 2]:
            start = time.process_time()
            for _ in range(args.block):
                step(name)
            times[name].append(1000 * (time.process_time() - start) / args.block)
    plain = statistics.median(times["per-tensor"])
    print(f"MiniLM fine-tuning step, batch {args.batch} x {args.length}, one thread (CPU ms, median of blocks)")
    for name, ms in times.items():
        print(f"  {name:10s} {statistics.median(ms):8.1f} ms  x{statistics.median(ms) / plain:.2f}")
    diff = max(float((a - b).detach().abs().max()) for a, b in zip(kinds["fused"][0].parameters(),
                                                                   kinds["per-tensor"][0].parameters()))
    print(f"  largest weight difference between the two after the same steps: {diff:.2e}")


if __name__ == "__main__":
    main()
