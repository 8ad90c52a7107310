"""Training several tiny transfer models at once: one batched step for K models (``torch.func``).

A tiny GPT-2 on a CPU spends most of a training step in per-call overhead, not
arithmetic. Here the K models' parameters are stacked along a new first axis
and one ``vmap``-ed ``functional_call`` computes every model's loss and
gradients in a single pass. Each model's weights are, per parameter::

    trainable:  W = T                                  (T is optimised)
    masked:     W = m * W_kept + (1 - m) * T           (the transfer construction)
    fixed:      W = F                                  (frozen, e.g. embeddings)

read off the ``TransferModel`` objects, so the stacked run trains exactly the
models ``build_transfer_model`` built (the loss, AdamW step, shuffling and
best-on-eval choice are those of ``train_model``; AdamW is elementwise, so a
stacked AdamW is K independent ones; ``TrainSettings.loss``, ``accuracy`` and
``ties`` as there). The best weights are written back.

Plateau stopping (``TrainSettings.patience``) is per run: a run that reaches its
plateau is frozen, its update masked out of every later step (its weights put
back after each optimiser step), while the others train on; the stack ends when
every run has stopped or the cap is reached. A stopped run's result is that of
the same run trained alone to its stopping epoch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn.utils import parametrize

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import MaskedWeight
from subnetlab.optim import make_optimizer
from subnetlab.progress import track
from subnetlab.transfer.build import TransferModel, fresh_copy
from subnetlab.transfer.data import LMSplit
from subnetlab.transfer.train import TrainResult, TrainSettings, correct, sequence_loss_on


def functional_parts(tm: TransferModel) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, tuple[Tensor, Tensor]]]:
    """``(trainable, fixed, masked)`` tensors of one model, keyed by the plain parameter name."""
    trainable: dict[str, Tensor] = {}
    fixed: dict[str, Tensor] = {}
    masked: dict[str, tuple[Tensor, Tensor]] = {}
    for module_name, module in tm.model.named_modules():
        if parametrize.is_parametrized(module):
            for attr, plist in module.parametrizations.items():
                name = f"{module_name}.{attr}" if module_name else attr
                p = plist[0]
                if len(plist) != 1 or not isinstance(p, MaskedWeight) or p.kept is None:
                    raise SubnetlabError(f"{name}: only the transfer parametrization m*W_kept + (1-m)*W_new can be stacked")
                masked[name] = (p.mask().detach(), p.kept.detach())
    for name, param in tm.model.named_parameters():
        plain = name
        if ".parametrizations." in name:
            prefix, _, rest = name.partition(".parametrizations.")
            plain = f"{prefix}.{rest.split('.')[0]}"
        (trainable if param.requires_grad else fixed)[plain] = param.detach()
    return trainable, fixed, masked


def _signature(parts: tuple) -> tuple:
    trainable, fixed, masked = parts
    return (tuple(sorted(trainable)), tuple(sorted(fixed)), tuple(sorted(masked)))


def train_stacked(
    models: Sequence[TransferModel],
    trains: Sequence[LMSplit],
    evals: Sequence[LMSplit],
    tests: Sequence[LMSplit | None],
    settings: TrainSettings,
    seeds: Sequence[int],
    *,
    keep_best: bool = True,
) -> list[TrainResult]:
    """Train ``models`` together (same architecture, same parameter roles, same training-set size);
    ``keep_best=False`` writes back each run's last weights (for a stopped run: those of its stopping epoch)."""
    k = len(models)
    if not (k == len(trains) == len(evals) == len(tests) == len(seeds)) or k == 0:
        raise SubnetlabError("train_stacked needs one training, evaluation and test split and one seed per model")
    if len({len(t) for t in trains}) != 1:
        raise SubnetlabError("stacked models must have training sets of one size (they step together)")
    parts = [functional_parts(tm) for tm in models]
    if len({_signature(p) for p in parts}) != 1:
        raise SubnetlabError("stacked models must share which parameters train, are masked and are fixed")
    base = fresh_copy(models[0].model, 0, attn_implementation="eager")  # structure only; vmap has no sdpa rule
    for p in base.parameters():
        p.requires_grad_(False)
    names_t, names_f, names_m = _signature(parts[0])
    T = {n: torch.stack([p[0][n] for p in parts]).clone() for n in names_t}  # [K, ...]
    Fx = {n: torch.stack([p[1][n] for p in parts]) for n in names_f}
    M = {n: torch.stack([p[2][n][0] for p in parts]) for n in names_m}
    Kp = {n: torch.stack([p[2][n][1] for p in parts]) for n in names_m}

    def weights(t, f, m, kp):
        w = {**f, **{n: v for n, v in t.items() if n not in m}}
        w.update({n: m[n] * kp[n] + (1 - m[n]) * t[n] for n in m})
        return w

    emb = _input_embedding_name(base)

    def logits_all(t, f, m, kp, x, keep=0):
        w = weights(t, f, m, kp)
        # embeddings looked up here: HF's input_ids path checks for padding with .item(), which vmap refuses
        return functional_call(base, w, (), {"inputs_embeds": F.embedding(x, w[emb]), "logits_to_keep": keep}).logits

    def logits_one(t, f, m, kp, x):
        return logits_all(t, f, m, kp, x, 1)[:, -1]

    def loss_one(t, f, m, kp, x, y):
        if settings.loss == "sequence":
            return sequence_loss_on(logits_all(t, f, m, kp, x), x, y)
        return F.cross_entropy(logits_one(t, f, m, kp, x), y)

    step = vmap(grad_and_value(loss_one), randomness="different")
    forward = vmap(logits_one)
    opt = make_optimizer(list(T.values()), "adamw", lr=settings.lr, weight_decay=settings.weight_decay)
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    best = [(-1.0, -1, float("nan"))] * k
    best_T = {n: v.clone() for n, v in T.items()}
    curves: list[list[dict[str, float]]] = [[] for _ in range(k)]
    last_acc = [float("nan")] * k
    trackers = [settings.plateau.tracker() for _ in range(k)] if settings.plateau is not None else None
    active = [True] * k  # runs still training (plateau stopping freezes the others)
    epochs_run, stopped_at = [0] * k, [None] * k
    started, cpu_started = time.perf_counter(), time.process_time()

    def accuracies(splits: Sequence[LMSplit]) -> list[float]:
        base.eval()
        hits = torch.zeros(k, dtype=torch.float64)
        n = len(splits[0])
        if any(len(s) != n for s in splits):
            return [_acc_one(base, weights, T, Fx, M, Kp, i, s, settings) for i, s in enumerate(splits)]
        with torch.no_grad():
            for start in range(0, n, settings.eval_batch_size):
                rows = slice(start, start + settings.eval_batch_size)
                x = torch.stack([s.input_ids[rows] for s in splits])
                logits = forward(T, Fx, M, Kp, x)  # [K, B, V]
                for i, s in enumerate(splits):
                    hits[i] += float(correct(logits[i], s, rows, settings.accuracy).sum())
        return (hits / n).tolist()

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seeds[0]))
        for epoch in track(range(settings.epochs), total=settings.epochs, description="transfer training"):
            base.train()
            orders = [t.batches(settings.batch_size, g) for t, g in zip(trains, gens)]
            totals = torch.zeros(k)
            frozen = [i for i in range(k) if not active[i]]
            for b in range(len(orders[0])):
                x = torch.stack([t.input_ids[o[b]] for t, o in zip(trains, orders)])  # [K, B, T]
                y = torch.stack([t.targets[o[b]] for t, o in zip(trains, orders)])  # [K, B]
                grads, losses = step(T, Fx, M, Kp, x, y)
                for n, v in T.items():
                    v.grad = grads[n].contiguous()  # torch's fused CPU AdamW misreads strided gradients
                kept = {n: v[frozen].clone() for n, v in T.items()} if frozen else None
                opt.step()
                opt.zero_grad(set_to_none=True)
                if kept is not None:  # a stopped run's update masked out: its weights as they were
                    with torch.no_grad():
                        for n, v in T.items():
                            v[frozen] = kept[n]
                totals += losses.detach()
            for i in range(k):
                if active[i]:
                    epochs_run[i] = epoch + 1
            if not settings.evaluates_at(epoch):
                continue
            accs = accuracies(evals)
            improved = [i for i in range(k) if active[i] and settings.improves(accs[i], best[i][0])]
            if improved:
                with_test = [i for i in improved if tests[i] is not None]
                test_accs = accuracies([tests[i] if tests[i] is not None else evals[i] for i in range(k)]) if with_test else [float("nan")] * k
                for i in improved:
                    best[i] = (accs[i], epoch, test_accs[i] if tests[i] is not None else float("nan"))
                    for n in names_t:
                        best_T[n][i] = T[n][i].detach()
            for i in range(k):
                if not active[i]:
                    continue
                last_acc[i] = accs[i]
                curves[i].append({"epoch": epoch, "loss": float(totals[i]) / len(orders[0]), "eval_accuracy": accs[i]})
                if trackers is not None and trackers[i].update(accs[i]):
                    active[i], stopped_at[i] = False, epoch
            if not any(active):
                break
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    _write_back(models, best_T if keep_best else T)
    return [TrainResult(best[i][1], best[i][0], best[i][2], last_acc[i], curves[i], seconds / k,
                        epochs_run[i] * len(trains[i]), cpu / k, settings.stopping(epochs_run[i], stopped_at[i]))
            for i in range(k)]


def _acc_one(base: nn.Module, weights, T, Fx, M, Kp, i: int, split: LMSplit, settings: TrainSettings) -> float:
    """Accuracy of model ``i`` alone (splits of different sizes)."""
    pick = lambda d: {n: v[i] for n, v in d.items()}  # noqa: E731
    hits = 0.0
    w = weights(pick(T), pick(Fx), pick(M), pick(Kp))
    emb = _input_embedding_name(base)
    with torch.no_grad():
        for start in range(0, len(split), settings.eval_batch_size):
            rows = slice(start, start + settings.eval_batch_size)
            embeds = F.embedding(split.input_ids[rows], w[emb])
            out = functional_call(base, w, (), {"inputs_embeds": embeds, "logits_to_keep": 1})
            hits += float(correct(out.logits[:, -1], split, rows, settings.accuracy).sum())
    return hits / len(split)


def _input_embedding_name(model: nn.Module) -> str:
    emb = model.get_input_embeddings()
    for name, module in model.named_modules():
        if module is emb:
            return f"{name}.weight"
    raise SubnetlabError(f"{type(model).__name__} has no input embedding module")


def _write_back(models: Sequence[TransferModel], best_T: dict[str, Tensor]) -> None:
    """Copy each model's best trainable weights into its module (parametrized ones into ``original``)."""
    with torch.no_grad():
        for i, tm in enumerate(models):
            for name, value in best_T.items():
                module_name, _, attr = name.rpartition(".")
                module = tm.model.get_submodule(module_name)
                if parametrize.is_parametrized(module, attr):
                    module.parametrizations[attr].original.copy_(value[i])
                else:
                    getattr(module, attr).copy_(value[i])
            tm.model.eval()


__all__ = ["functional_parts", "train_stacked"]
