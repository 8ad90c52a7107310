"""Continuous-sparsification weight-mask step: subnetlab vs NeuroSurgeon's ``CircuitModel`` vs a plain step.

The model is the GPT-2 of Subtask Induction's arithmetic experiments
(``arithmetic_gpt2_config``: width 128, 4 heads, MLP 512, vocabulary 1,003 for
``max_number`` 1,000) at 4 and 12 layers; a batch is ``--batch`` random rows
``<a> <b> <sep> <c>`` (500 in the paper's discovery runs). Every step is one
optimiser step on the same loss, the causal-LM loss over the whole sequence
(what the released ``math/ablate.py`` trains on), with the L0 term for the mask
steps:

* ``subnetlab``: ``ContinuousSparsification.step`` exactly as ``fit`` runs it:
  a ``ContinuousMask`` per attention / MLP matrix (4 per layer, the matrices the
  released code masks: every GPT-2 ``Conv1D``) plugged in by parametrization,
  the frozen model in eval mode, AdamW on the mask scores;
* ``NeuroSurgeon``: ``CircuitModel`` over every ``Conv1D`` with
  ``continuous_sparsification`` (``mask_init_value`` -0.1, ``add_l0``), the
  forward with ``labels`` (its loss includes lambda * L0), AdamW on its mask
  parameters, as ``math/ablate.py`` steps it; skipped with a message when the
  package is not installed (``pip install 'subnetlab[bench]'``);
* ``plain``: the unmasked model, every weight trainable, AdamW on all of them.

Blocks of ``--block`` steps of each kind alternate, the first kind rotating
each round, so that machine noise hits all alike while each block runs as a
training loop does, one step of the same model after another; the table shows
the median over blocks of the milliseconds per step, and the ratios. (Single
steps alternating between three models measure a cold-cache step: there the
three are within a few percent of each other and the order decides.) Goal:
subnetlab <= NeuroSurgeon at both depths.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_weight_masks.py [--batch 500] [--steps 40] [--block 5] [--layers 4 12]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import statistics
import time

import torch
from torch import nn

from subnetlab.intervene import mask_weights
from subnetlab.methods.continuous_sparsification import ContinuousSparsification
from subnetlab.methods.finetune.model import arithmetic_gpt2_config
from subnetlab.models.adapters import get_adapter

MAX_NUMBER = 1000


def build(layers: int) -> nn.Module:
    from transformers import GPT2LMHeadModel

    config = arithmetic_gpt2_config(layers, vocab_size=MAX_NUMBER + 3, pad_id=MAX_NUMBER + 1)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval()


def batch(size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ab = torch.randint(0, MAX_NUMBER, (size, 2), generator=g)
    sep = torch.full((size, 1), MAX_NUMBER)
    c = (ab[:, :1] ** 2 + ab[:, :1] * ab[:, 1:]) % 7
    return torch.cat([ab, sep, c], dim=1)


def subnetlab_stepper(model: nn.Module, x: torch.Tensor, l0_lambda: float):
    adapter = get_adapter(model)
    strategy = ContinuousSparsification(l0_lambda=l0_lambda)
    masks = strategy.create_masks(adapter)
    for p in model.parameters():
        p.requires_grad_(False)
    handle = mask_weights(model, dict(masks)).apply()
    model.eval()
    for m in masks.values():
        m.train()
    opt = strategy.optimizer(masks)

    def loss_fn(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        return m(input_ids=b, labels=b).loss

    def step() -> None:
        strategy.step(model, masks, opt, loss_fn, x)

    return step, handle, sum(m.s.numel() for m in masks.values())


def neurosurgeon_stepper(model: nn.Module, x: torch.Tensor, l0_lambda: float):
    from NeuroSurgeon.Models.circuit_model import CircuitConfig, CircuitModel
    from transformers.pytorch_utils import Conv1D

    targets = [name for name, module in model.named_modules() if isinstance(module, Conv1D)]
    config = CircuitConfig(
        mask_method="continuous_sparsification",
        mask_hparams={"ablation": "none", "mask_unit": "weight", "mask_bias": False, "mask_init_value": -0.1},
        target_layers=targets, freeze_base=True, add_l0=True, l0_lambda=l0_lambda,
    )
    circuit = CircuitModel(config, model)
    circuit.train()
    params = [p for n, p in circuit.named_parameters() if "mask_params" in n]
    opt = torch.optim.AdamW(params, lr=1e-3)

    def step() -> None:
        out = circuit(input_ids=x, labels=x)
        out.loss.backward()
        opt.step()
        opt.zero_grad()

    return step, sum(p.numel() for p in params)


def optimizer_ms(model: nn.Module, steps: int, fused: bool) -> float:
    """Median ms of one AdamW step over mask scores shaped like ``model``'s masked matrices (random gradients),
    with ``make_optimizer``'s fused kernel or without it: the part of a mask step the kernel changes."""
    from subnetlab.optim import make_optimizer

    g = torch.Generator().manual_seed(0)
    scores = [nn.Parameter(torch.full(model.get_parameter(n).shape, -0.1)) for n in get_adapter(model).weight_matrices()]
    for p in scores:
        p.grad = torch.randn(p.shape, generator=g)
    opt = make_optimizer(scores, "adamw", lr=1e-3, weight_decay=0.01, fused=fused)
    opt.step()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def plain_stepper(model: nn.Module, x: torch.Tensor):
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        opt.step()
        opt.zero_grad()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--block", type=int, default=5,
                        help="steps of one kind timed back to back (a training loop's steps follow each other)")
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 12])
    parser.add_argument("--l0-lambda", type=float, default=1e-7)
    args = parser.parse_args()
    have_ns = importlib.util.find_spec("NeuroSurgeon") is not None
    if not have_ns:
        print("NeuroSurgeon is not installed: its column is skipped (pip install 'subnetlab[bench]')")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch {args.batch}, "
          f"{args.steps} timed steps of each kind in blocks of {args.block}, after {args.warmup} warm-up")
    rows = []
    for layers in args.layers:
        x = batch(args.batch, layers)
        base = build(layers)
        steppers = {"plain": plain_stepper(copy.deepcopy(base), x)}
        steppers["subnetlab"], _, n_sub = subnetlab_stepper(copy.deepcopy(base), x, args.l0_lambda)
        if have_ns:
            steppers["NeuroSurgeon"], n_ns = neurosurgeon_stepper(copy.deepcopy(base), x, args.l0_lambda)
            assert n_ns == n_sub, f"NeuroSurgeon masks {n_ns} values, subnetlab {n_sub}"
        for step in steppers.values():
            for _ in range(args.warmup):
                step()
        times: dict[str, list[float]] = {k: [] for k in steppers}
        names = list(steppers)
        for r in range(max(1, args.steps // args.block)):
            for name in names[r % len(names):] + names[:r % len(names)]:  # rotate who goes first
                started = time.perf_counter()
                for _ in range(args.block):
                    steppers[name]()
                times[name].append((time.perf_counter() - started) / args.block)
        med = {k: 1000 * statistics.median(v) for k, v in times.items()}
        med["adamw"], med["adamw fused"] = (optimizer_ms(base, args.steps, fused) for fused in (False, True))
        rows.append((layers, n_sub, med))
    header = f"{'layers':>6} {'masked':>10} {'plain ms':>9} {'subnetlab ms':>13} {'NeuroSurgeon ms':>16} " \
             f"{'subnetlab/plain':>16} {'subnetlab/NS':>13}"
    print(header)
    for layers, n, med in rows:
        ns = med.get("NeuroSurgeon")
        ns_cell = f"{ns:.1f}" if ns else "skipped"
        ratio_cell = f"{med['subnetlab'] / ns:.2f}" if ns else "-"
        print(f"{layers:>6} {n:>10,} {med['plain']:>9.1f} {med['subnetlab']:>13.1f} {ns_cell:>16} "
              f"{med['subnetlab'] / med['plain']:>16.2f} {ratio_cell:>13}")
    print("AdamW step over the mask scores alone (ms; subnetlab uses the fused kernel):")
    for layers, _, med in rows:
        print(f"{layers:>6} layers: unfused {med['adamw']:.1f}, fused {med['adamw fused']:.1f} "
              f"({med['adamw'] / med['adamw fused']:.1f}x)")

if __name__ == "__main__":
    main()
