"""Continuous sparsification (Savarese et al., 2020) for weight-level subnetwork discovery.

Subtask Induction (Zhang, Lepori, Pavlick 2024, appendix A) finds the weights
that compute a subtask by training one real number ``s`` per weight while the
model's own weights stay frozen::

    training:   mask = sigmoid(beta * s)            (soft, differentiable)
    evaluation: mask = 1[s > 0]                      (hard, = beta -> infinity)
    loss        = task loss + lambda * sum(sigmoid(beta * s))
    s           initialised to -0.1
    beta        = 1 at the start, multiplied by beta_final ** (1 / epochs) after
                  every epoch, capped at beta_final (100)

The strategy is a small frozen dataclass of explicit hyperparameters; masks are
``nn.Module`` objects created eagerly (their state dict never depends on
history) and plugged into the model through ``subnetlab.intervene.mask_weights``.
The data side is three callables, so any task (arithmetic, images) can drive it.

How a run ends: ``epochs`` fixed (``patience`` none: Algorithm 1 and the paper's
50), or plateau stopping (``patience`` P, ``epochs`` the cap that beta's schedule
still spans): the run stops at the epoch P epochs after the held-out objective
(the task loss on evaluation rows under this epoch's soft masks, plus the same
L0 term: the training objective on rows that never trained the masks) last
fell by more than ``min_delta`` (``optim.Plateau``; without a held-out loss, the
evaluation accuracy). ``DiscoveryResult.stopping`` records the rule and
``"plateau at epoch k"`` or ``"cap reached"``; ``runs.health`` reads it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError, check_field_types
from subnetlab.intervene import mask_weights
from subnetlab.methods.decided import count_undecided
from subnetlab.models.adapters import Adapter
from subnetlab.optim import Plateau, make_optimizer, stopping_record
from subnetlab.progress import stage, track

T = TypeVar("T")

PAPER_LAMBDAS = (1e-7, 5e-7, 1e-8)  # appendix B.1
KEEP = ("best", "best-latest", "last")  # which epoch's hard mask a discovery run keeps (ContinuousSparsification)
SELECTION_RULES = ("sparsest", "best-accuracy", "lambda")  # which run of a lambda sweep wins (LambdaChoice)

# ``subnetlab discover``'s presets (``errors.preset_values``: the preset, then what the user gave). ``paper``:
# appendix A and B.1 (batch 500 and 50,000 subtask rows are not in the paper's text; they come with the issue's
# preset). ``quick``: your own small model on a CPU (docs/your-own-model.md): the paper's 50 epochs over batches of 16
# (an arithmetic subtask of 2,000 rows), one lambda, and lr 1e-2: a mask logit starts at -0.1 and a small data set
# gives a few steps per epoch, too few at 1e-3 for any logit to cross 0 (on docs/your-own-model.md's 2-layer Llama, 20 epochs at
# 1e-3 kept nothing; 50 at 1e-2 kept 20.6% of the weights at full accuracy, healthy, in 25 s). ``paper`` keeps the
# authors' fixed epochs; ``quick`` stops at a plateau of the held-out objective (10 epochs without a fall of more than
# 0.001) with those 50 epochs as the cap.
DISCOVERY_PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(epochs=50, lr=1e-3, batch_size=500, samples=50_000, lambdas=PAPER_LAMBDAS),
    "quick": dict(epochs=50, lr=1e-2, batch_size=16, samples=2_000, lambdas=(1e-7,), patience=10, min_delta=0.001),
}


def beta_at(epoch: int, epochs: int, beta_final: float = 100.0, beta_start: float = 1.0) -> float:
    """``beta`` in force during ``epoch`` (0-based): ``beta_start * beta_final**(epoch/epochs)``, capped.

    Algorithm 1 multiplies beta by ``beta_final ** (1/epochs)`` at the end of each
    epoch, so epoch 0 trains at ``beta_start`` and the last at
    ``beta_final ** ((epochs-1)/epochs)``.
    """
    if epochs < 1:
        raise SubnetlabError(f"epochs {epochs} must be at least 1")
    return min(beta_start * beta_final ** (epoch / epochs), beta_final)


class ContinuousMask(nn.Module):
    """One weight matrix's mask: parameter ``s`` and buffer ``beta``; ``forward()`` returns the mask.

    In training mode the soft mask ``sigmoid(beta * s)``; in eval mode the hard
    mask ``1[s > 0]``. Shape equals the masked weight's shape.
    """

    def __init__(self, shape: Sequence[int], init: float = -0.1, beta: float = 1.0,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.s = nn.Parameter(torch.full(tuple(shape), float(init), device=device))
        self.register_buffer("beta", torch.tensor(float(beta), device=device))
        self.last_soft: Tensor | None = None  # the soft mask of the latest training forward (``l0(reuse=True)``)

    def soft(self) -> Tensor:
        return torch.sigmoid(self.beta * self.s)

    def hard(self) -> Tensor:
        return (self.s > 0).to(self.s.dtype)

    def forward(self) -> Tensor:
        if not self.training:
            return self.hard()
        self.last_soft = self.soft()
        return self.last_soft

    def l0(self, reuse: bool = False) -> Tensor:
        """The relaxed L0 norm ``sum(sigmoid(beta * s))`` (differentiable).

        ``reuse``: sum the soft mask the forward pass just computed (same values, same graph) instead of
        computing it again; the training step does, after its forward, saving one sigmoid and its backward
        per masked matrix (NeuroSurgeon computes the mask twice).
        """
        if reuse and self.last_soft is not None:
            return self.last_soft.sum()
        return self.soft().sum()


@dataclass
class EpochRecord:
    epoch: int
    beta: float
    loss: float
    penalty: float
    eval_accuracy: float
    kept_fraction: float
    undecided: int = 0  # mask entries whose soft value at this epoch's beta is undecided (``methods.decided``)
    masked: int = 0  # mask entries in all
    held_out_objective: float | None = None  # plateau stopping's monitor: held-out task loss (soft masks) + penalty


@dataclass
class DiscoveryResult:
    """Binary masks by parameter name, with how they were found and how well they do."""

    masks: dict[str, Tensor]  # 0/1 uint8, the weight's shape
    l0_lambda: float
    eval_accuracy: float
    epoch: int  # the epoch whose hard mask was kept
    history: list[EpochRecord] = field(default_factory=list)
    stopping: dict[str, Any] = field(default_factory=dict)  # how the run ended (``optim.stopping_record``)

    @property
    def kept_fraction(self) -> float:
        total = sum(m.numel() for m in self.masks.values())
        return sum(int(m.sum()) for m in self.masks.values()) / max(total, 1)


@dataclass(frozen=True)
class ContinuousSparsification:
    """Hyperparameters of one discovery run; defaults are the paper's (appendix A, B.1).

    ``batch_size`` 500 and the 50,000 subtask samples are not stated in the paper's
    text (they come with the issue's preset); ``keep`` picks the hard mask of the
    last epoch (``"last"``, Algorithm 1), of the epoch best on the evaluation set
    with ties going to the sparser mask (``"best"``), or of the latest epoch at
    least as accurate as every earlier one (``"best-latest"``: the released
    ``math/ablate.py`` saves ``best_circuit_model.pt`` whenever
    ``eval_acc >= best_acc``, and transfers that file).
    """

    l0_lambda: float = 1e-7
    beta_final: float = 100.0
    beta_start: float = 1.0
    init: float = -0.1
    epochs: int = 50
    lr: float = 1e-3
    batch_size: int = 500
    include: tuple[str, ...] = ("attention", "mlp")
    keep: str = "best"
    patience: int | None = None  # None: all ``epochs``; else plateau stopping (epochs), ``epochs`` the cap
    min_delta: float = 0.0  # plateau stopping: the fall of the held-out objective that counts as an improvement

    def __post_init__(self) -> None:
        check_field_types(self, "continuous-sparsification setting")  # lr="abc" named, before any comparison
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or self.l0_lambda < 0:
            raise SubnetlabError(f"invalid continuous-sparsification settings: {self}")
        if self.beta_final < self.beta_start or self.beta_start <= 0:
            raise SubnetlabError(f"beta_final {self.beta_final} must be >= beta_start {self.beta_start} > 0")
        if self.keep not in KEEP:
            raise SubnetlabError(f"keep {self.keep!r}: expected one of {', '.join(KEEP)}", setting="keep")
        if not set(self.include) <= {"attention", "mlp"} or not self.include:
            raise SubnetlabError(f"include={self.include!r}: choose from 'attention', 'mlp'")
        self.plateau(True)  # checks patience and min_delta

    def plateau(self, held_out_loss: bool) -> Plateau | None:
        """The plateau rule (on the held-out objective, or on the evaluation accuracy without a held-out loss)."""
        if self.patience is None:
            return None
        return Plateau(self.patience, self.min_delta, "min" if held_out_loss else "max")

    def config(self) -> dict[str, Any]:
        return {**asdict(self), "include": list(self.include)}

    # -- pieces ---------------------------------------------------------------------
    def targets(self, adapter: Adapter) -> list[str]:
        """Names of the weight matrices to mask (attention and/or MLP; never embeddings, norms, head)."""
        return adapter.weight_matrices(tuple(self.include))

    def create_masks(self, adapter: Adapter, names: Sequence[str] | None = None) -> dict[str, ContinuousMask]:
        """One ``ContinuousMask`` per target, every ``s`` set to ``init`` (created now, never lazily)."""
        names = list(names) if names is not None else self.targets(adapter)
        return {n: ContinuousMask(adapter.parameter(n).shape, self.init, self.beta_start, adapter.parameter(n).device)
                for n in names}

    def beta(self, epoch: int) -> float:
        return beta_at(epoch, self.epochs, self.beta_final, self.beta_start)

    def penalty(self, masks: dict[str, ContinuousMask], reuse: bool = False) -> Tensor:
        """``lambda * sum over masks of sum(sigmoid(beta * s))`` (``reuse``: from this step's forward)."""
        return self.l0_lambda * sum(m.l0(reuse) for m in masks.values())

    def optimizer(self, masks: dict[str, ContinuousMask]) -> torch.optim.Optimizer:
        """AdamW over the mask scores (weight decay 0.01 is torch's AdamW default, which they have always had),
        torch's fused kernel where it applies (one mask score per weight: millions of them)."""
        return make_optimizer([m.s for m in masks.values()], "adamw", lr=self.lr, weight_decay=0.01, fused=True)

    def step(self, model: nn.Module, masks: dict[str, ContinuousMask], opt: torch.optim.Optimizer,
             loss_fn: Callable[[nn.Module, Any], Tensor], batch: Any) -> tuple[Tensor, Tensor]:
        """One training step (``model`` already masked by ``masks``): task loss plus the L0 term, backward,
        optimiser step. Returns the detached task loss and penalty."""
        for m in masks.values():  # a mask the forward does not reach recomputes its soft mask below
            m.last_soft = None
        task_loss = loss_fn(model, batch)
        pen = self.penalty(masks, reuse=True)
        opt.zero_grad(set_to_none=True)
        (task_loss + pen).backward()
        opt.step()
        for m in masks.values():
            m.last_soft = None  # its graph is spent; nothing may reuse it
        return task_loss.detach(), pen.detach()

    # -- the loop ---------------------------------------------------------------------
    def fit(
        self,
        model: nn.Module,
        adapter: Adapter,
        batches: Callable[[int], Iterable[Any]],
        loss_fn: Callable[[nn.Module, Any], Tensor],
        evaluate: Callable[[nn.Module], float],
        *,
        names: Sequence[str] | None = None,
        log: Callable[[EpochRecord], None] | None = None,
        seed: int | None = None,
        held_out_loss: Callable[[nn.Module], Tensor | float] | None = None,
    ) -> DiscoveryResult:
        """Train masks over ``model``'s frozen weights; return the kept binary masks.

        ``batches(epoch)`` yields the epoch's batches (the caller shuffles with its
        own seeded generator), ``loss_fn(model, batch)`` is the subtask loss and
        ``evaluate(model)`` the evaluation accuracy (called with hard masks).

        The frozen model runs in eval mode throughout (dropout off; only the masks
        train), as NeuroSurgeon's ``CircuitModel`` keeps it: with dropout on, the
        mask would also have to cover the dropout noise, which keeps it dense, and
        the same input with the same mask would give a different loss each time.
        ``seed`` seeds (a fork of) the global generator for anything else the
        caller's callables draw from it; the caller's state is kept.
        ``held_out_loss(model)``: the task loss on evaluation rows (called with this epoch's soft masks, no
        gradient), the monitor of plateau stopping (module doc).
        """
        if seed is None:
            return self._fit(model, adapter, batches, loss_fn, evaluate, names, log, held_out_loss)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            return self._fit(model, adapter, batches, loss_fn, evaluate, names, log, held_out_loss)

    def _fit(
        self,
        model: nn.Module,
        adapter: Adapter,
        batches: Callable[[int], Iterable[Any]],
        loss_fn: Callable[[nn.Module, Any], Tensor],
        evaluate: Callable[[nn.Module], float],
        names: Sequence[str] | None,
        log: Callable[[EpochRecord], None] | None,
        held_out_loss: Callable[[nn.Module], Tensor | float] | None = None,
    ) -> DiscoveryResult:
        masks = self.create_masks(adapter, names)
        rule = self.plateau(held_out_loss is not None)
        tracker = rule.tracker() if rule is not None else None
        stopped_epoch = None
        frozen = {n: p.requires_grad for n, p in model.named_parameters()}
        was_training = model.training
        for p in model.parameters():
            p.requires_grad_(False)
        history: list[EpochRecord] = []
        best: tuple[float, float, int, dict[str, Tensor]] | None = None
        opt = self.optimizer(masks)
        try:
            with mask_weights(model, dict(masks)):
                for epoch in track(range(self.epochs), total=self.epochs,
                                   description=f"discovery lambda={self.l0_lambda:g}"):
                    beta = self.beta(epoch)
                    model.eval()  # the frozen model: dropout off (NeuroSurgeon's CircuitModel)
                    for m in masks.values():  # after model.eval(): the masks are submodules, and train
                        m.beta.fill_(beta)
                        m.train()
                    total, pen_total, steps = 0.0, 0.0, 0
                    for batch in batches(epoch):
                        task_loss, pen = self.step(model, masks, opt, loss_fn, batch)
                        total, pen_total, steps = total + float(task_loss), pen_total + float(pen), steps + 1
                    if steps == 0:
                        raise SubnetlabError("discovery got no training batches")
                    held = None
                    if held_out_loss is not None and tracker is not None:
                        with torch.no_grad():  # the masks still in training mode: this epoch's soft masks
                            held = float(held_out_loss(model)) + float(self.penalty(masks))
                    model.eval()
                    for m in masks.values():
                        m.eval()
                    with torch.no_grad():
                        acc = float(evaluate(model))
                    hard = {n: m.hard().to(torch.uint8).cpu() for n, m in masks.items()}
                    masked = sum(h.numel() for h in hard.values())
                    kept = sum(int(h.sum()) for h in hard.values()) / masked
                    undecided = sum(count_undecided(m.soft()) for m in masks.values())  # the masks' beta: this epoch's
                    record = EpochRecord(epoch, beta, total / steps, pen_total / steps, acc, kept, undecided, masked,
                                         held)
                    history.append(record)
                    if log is not None:
                        log(record)
                    if self.keep == "best-latest":
                        better = best is None or acc >= best[0]
                    else:
                        better = best is None or (acc, -kept) > (best[0], -best[1]) or self.keep == "last"
                    if better:
                        best = (acc, kept, epoch, {n: h.clone() for n, h in hard.items()})
                    if tracker is not None and tracker.update(acc if held is None else held):
                        stopped_epoch = epoch
                        break
        finally:
            for n, p in model.named_parameters():
                p.requires_grad_(frozen.get(n, True))
            model.train(was_training)
        assert best is not None
        monitor = "held_out_objective" if held_out_loss is not None else "eval_accuracy"
        return DiscoveryResult(best[3], self.l0_lambda, best[0], best[2], history,
                               stopping_record(rule, self.epochs, len(history), monitor, stopped_epoch))


@dataclass(frozen=True)
class LambdaChoice:
    """Which run of a lambda sweep gives the subnetwork (``rule`` one of ``SELECTION_RULES``).

    * ``"sparsest"``: the sparsest subnetwork whose evaluation accuracy is within
      ``tolerance`` of the sweep's best (ties: the more accurate, then the earlier
      run). Appendix A gives the principle ("for subnetworks with similar
      performance, we wish to find ones that are more sparse"), and section 4.3
      says every subnetwork it transferred is perfect or near-perfect on the
      subtask; ``tolerance`` is what "near" means here (our choice: the paper
      states no number).
    * ``"best-accuracy"``: the most accurate, ties to the sparser. The vision
      study's rule ("we always transfer the subnetwork with highest accuracy",
      appendix C.1); with a weak L0 term it picks the densest mask, since
      density buys a little accuracy.
    * ``"lambda"``: the run with ``l0_lambda``. The released arithmetic code
      (``math/checkpoints/*layers_val/transfer_1e-7_*/configs.yaml``) transfers the
      lambda = 1e-7 subnetwork at every depth; no code there compares the sweep.
    """

    rule: str = "sparsest"
    tolerance: float = 0.01
    l0_lambda: float | None = None

    def __post_init__(self) -> None:
        if self.rule not in SELECTION_RULES:
            raise SubnetlabError(f"selection {self.rule!r}: choose from {', '.join(SELECTION_RULES)}",
                                 setting="selection")
        if not 0.0 <= self.tolerance <= 1.0:
            raise SubnetlabError(f"selection_tolerance {self.tolerance!r}: expected an accuracy difference in [0, 1]",
                                 setting="selection_tolerance")
        if self.rule == "lambda" and self.l0_lambda is None:
            raise SubnetlabError("selection_lambda: the rule 'lambda' needs the lambda whose subnetwork is kept",
                                 setting="selection_lambda")

    def choose(self, runs: Sequence[T], accuracy: Callable[[T], float], kept: Callable[[T], float],
               l0_lambda: Callable[[T], float]) -> T:
        """The winning run of ``runs``, read through the three accessors (works on results or metrics dicts)."""
        runs = list(runs)
        if not runs:
            raise SubnetlabError("no discovery results to choose from")
        if self.rule == "best-accuracy":
            return max(runs, key=lambda r: (accuracy(r), -kept(r)))
        if self.rule == "lambda":
            for r in runs:
                if math.isclose(float(l0_lambda(r)), float(self.l0_lambda), rel_tol=1e-9, abs_tol=0.0):
                    return r
            have = ", ".join(f"{float(l0_lambda(r)):g}" for r in runs)
            raise SubnetlabError(f"selection_lambda {self.l0_lambda:g} is not among the lambdas run ({have})",
                                 setting="selection_lambda")
        top = max(accuracy(r) for r in runs)
        keeping = [r for r in runs if accuracy(r) >= top - self.tolerance - 1e-12]
        return min(keeping, key=lambda r: (kept(r), -accuracy(r)))

    def describe(self) -> str:
        """One line for reports."""
        if self.rule == "sparsest":
            return (f"the sparsest subnetwork within {100 * self.tolerance:g} percentage point(s) of the sweep's best "
                    "evaluation accuracy")
        if self.rule == "lambda":
            return f"the subnetwork of lambda {self.l0_lambda:g} (as the released code)"
        return "the subnetwork best on evaluation (ties: the sparser)"


def sweep(
    strategy: ContinuousSparsification,
    lambdas: Sequence[float],
    run: Callable[[ContinuousSparsification], DiscoveryResult],
    selection: LambdaChoice | None = None,
) -> tuple[DiscoveryResult, list[DiscoveryResult]]:
    """Run ``run`` once per ``lambda``; ``selection`` picks the winner (default: the best by evaluation
    accuracy, ties to the sparser, the vision study's rule)."""
    if not lambdas:
        raise SubnetlabError("the lambda sweep needs at least one value")
    results = []
    for lam in lambdas:
        stage(f"continuous sparsification: lambda={lam:g}")
        results.append(run(replace(strategy, l0_lambda=float(lam))))
    selection = selection or LambdaChoice("best-accuracy")
    best = selection.choose(results, lambda r: r.eval_accuracy, lambda r: r.kept_fraction, lambda r: r.l0_lambda)
    return best, results


def kept_percentages(masks: dict[str, Tensor], adapter: Adapter) -> dict[str, Any]:
    """Table 3: percentage of the masked parameters kept, overall, per layer and per matrix."""
    layer_of = {name: layer for layer in range(adapter.num_layers) for name in layer_matrices(adapter, layer)}
    kept_by: dict[int, int] = {}
    total_by: dict[int, int] = {}
    per_matrix = {}
    for name, mask in masks.items():
        if name not in layer_of:
            raise SubnetlabError(f"mask for {name!r} is not an attention or MLP weight of this model")
        layer, kept, total = layer_of[name], int(mask.sum()), mask.numel()
        per_matrix[name] = 100.0 * kept / total
        kept_by[layer] = kept_by.get(layer, 0) + kept
        total_by[layer] = total_by.get(layer, 0) + total
    kept_all, total_all = sum(kept_by.values()), sum(total_by.values())
    return {
        "overall": 100.0 * kept_all / max(total_all, 1),
        "per_layer": {str(l): 100.0 * kept_by[l] / total_by[l] for l in sorted(total_by)},
        "per_matrix": per_matrix, "kept": kept_all, "total": total_all,
    }


def layer_matrices(adapter: Adapter, layer: int) -> list[str]:
    """Attention and MLP weight names of one layer (``weight_matrices`` lists them layer by layer)."""
    names = adapter.weight_matrices(("attention", "mlp"))
    per = len(names) // max(adapter.num_layers, 1)
    return names[layer * per : (layer + 1) * per]


__all__ = [
    "KEEP", "PAPER_LAMBDAS", "SELECTION_RULES", "ContinuousMask", "ContinuousSparsification", "DiscoveryResult",
    "EpochRecord", "LambdaChoice", "beta_at", "kept_percentages", "layer_matrices", "sweep",
]
