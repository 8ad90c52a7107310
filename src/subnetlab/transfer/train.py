"""Training one model on a next-token task held as tensors; keep the epoch best on the evaluation set.

The paper (section 4.2) trains each transferred model for a fixed number of
epochs, keeps the model with the best evaluation accuracy and reports its test
accuracy. The same loop trains the base model. Three choices the paper's text
leaves open are settings (``TrainSettings``), each with the released code's
choice (``math/transfer.py``) beside subnetlab's earlier one:

* ``loss``: ``"last-token"`` (cross-entropy of the answer after the prompt) or
  ``"sequence"`` (the causal-LM loss over the whole sequence ``<a> <b> <sep> <c>``,
  i.e. predicting ``b``, ``<sep>`` and ``c``: the released code passes
  ``labels=input_ids`` and trains on ``outputs.loss``);
* ``accuracy``: ``"answers"`` (argmax over the task's answer tokens, the
  convention of ``subnetlab.tasks``) or ``"vocabulary"`` (argmax over the whole
  vocabulary, as the released code scores ``predictions[:, -2, :]``);
* ``ties``: which of several epochs at the best evaluation accuracy is kept,
  ``"earliest"`` or ``"latest"`` (the released code saves its best model
  whenever ``eval_acc >= best_acc``).

How a run ends is a setting too: ``epochs`` fixed (``patience`` none, the paper's
and the released code's 100 epochs), or plateau stopping (``patience`` P): the run
stops at the evaluation P evaluations after its last improvement of the
evaluation accuracy by more than ``min_delta``, with ``epochs`` as its cap
(``optim.Plateau``). The evaluation split never trained the model (a generated
task draws it from the pairs outside training; your own data's split is checked
by ``runs.splits.check_held_out``). The result records the rule and the reason
(``TrainResult.stopping``: ``"plateau at epoch k"`` or ``"cap reached"``), which the
health verdict of a transfer run reads.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.optim import Plateau, make_optimizer, stopping_record
from subnetlab.progress import track
from subnetlab.transfer.data import LMSplit

LOSSES = ("last-token", "sequence")  # TrainSettings.loss
ACCURACIES = ("answers", "vocabulary")  # TrainSettings.accuracy
TIES = ("earliest", "latest")  # TrainSettings.ties

# ``subnetlab transfer``'s presets of ``TrainSettings`` (``errors.preset_values``: the preset, then what the user
# gave). ``paper``: section 4.2 and the released code (100 epochs, AdamW 2e-4; batch 64 is not stated), the authors'
# fixed epochs (no plateau stopping). ``quick``: your own small model on a CPU: batches of 16 at lr 1e-3, the rate a
# tiny model trained from a fresh start needs (the tutorial's fine-tuning uses it too), stopping at a plateau of the
# evaluation accuracy (5 evaluations without a gain of more than 1 point) with the former fixed 20 epochs as the cap.
TRANSFER_PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(epochs=100, lr=2e-4, batch_size=64),
    "quick": dict(epochs=20, lr=1e-3, batch_size=16, patience=5, min_delta=0.01),
}


def check_choice(value: str, choices: tuple[str, ...], setting: str) -> str:
    """``value`` if it is one of ``choices``; else a ``SubnetlabError`` naming ``setting``."""
    if value not in choices:
        raise SubnetlabError(f"{setting} {value!r}: choose from {', '.join(choices)}", setting=setting)
    return value


@dataclass(frozen=True)
class TrainSettings:
    """Optimiser and schedule of a training run (AdamW, constant learning rate), its loss, its accuracy,
    and which epoch at the best evaluation accuracy is kept (see the module docstring)."""

    epochs: int = 100
    lr: float = 2e-4
    batch_size: int = 64
    weight_decay: float = 0.01
    eval_every: int = 1
    eval_batch_size: int = 1000
    loss: str = "last-token"
    accuracy: str = "answers"
    ties: str = "earliest"
    patience: int | None = None  # None: train all ``epochs``; else plateau stopping (evaluations), ``epochs`` the cap
    min_delta: float = 0.0  # plateau stopping: the evaluation-accuracy gain that counts as an improvement

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.eval_every < 1 or self.lr <= 0:
            raise SubnetlabError(f"invalid training settings: {self}")
        check_choice(self.loss, LOSSES, "loss")
        check_choice(self.accuracy, ACCURACIES, "accuracy")
        check_choice(self.ties, TIES, "ties")
        self.plateau  # checks patience and min_delta

    @property
    def plateau(self) -> Plateau | None:
        """The plateau rule on the evaluation accuracy, or None for fixed epochs."""
        return None if self.patience is None else Plateau(self.patience, self.min_delta, "max")

    def evaluates_at(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (0-based) ends with an evaluation: every ``eval_every``-th and the cap's last."""
        return (epoch + 1) % self.eval_every == 0 or epoch == self.epochs - 1

    def stopping(self, epochs_run: int, stopped_epoch: int | None) -> dict[str, Any]:
        """The run's ``stopping`` record (``optim.stopping_record``)."""
        return stopping_record(self.plateau, self.epochs, epochs_run, "eval_accuracy", stopped_epoch)

    def improves(self, acc: float, best: float) -> bool:
        """Whether an epoch at evaluation accuracy ``acc`` replaces the best so far (``best``; -1 before any)."""
        return acc >= best if self.ties == "latest" else acc > best

    def config(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainResult:
    """Best-on-evaluation epoch, its evaluation and test accuracy, and the curve that led there."""

    best_epoch: int
    eval_accuracy: float
    test_accuracy: float
    final_eval_accuracy: float
    curve: list[dict[str, float]] = field(default_factory=list)  # per evaluated epoch: loss, eval acc
    seconds: float = 0.0  # wall clock
    sequences: int = 0  # training sequences processed (epochs x rows)
    cpu_seconds: float = 0.0  # this process's CPU time: what an idle machine would take per core
    stopping: dict[str, Any] = field(default_factory=dict)  # how the run ended (``TrainSettings.stopping``)

    def metrics(self) -> dict[str, Any]:
        return asdict(self)


def last_logits(model: nn.Module, input_ids: Tensor) -> Tensor:
    """``[B, V]`` next-token logits after the last prompt position (all prompts equal length)."""
    try:
        out = model(input_ids=input_ids, logits_to_keep=1)
    except TypeError:  # models without logits_to_keep compute every position
        out = model(input_ids=input_ids)
    logits = out.logits if hasattr(out, "logits") else out[0]
    if logits.dim() != 3:
        raise SubnetlabError(f"transfer training needs a causal-LM head; the model returned logits of shape {tuple(logits.shape)}")
    return logits[:, -1]


def loss_on(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits, targets)


def all_logits(model: nn.Module, input_ids: Tensor) -> Tensor:
    """``[B, T, V]`` next-token logits at every prompt position."""
    out = model(input_ids=input_ids)
    logits = out.logits if hasattr(out, "logits") else out[0]
    if logits.dim() != 3:
        raise SubnetlabError(f"transfer training needs a causal-LM head; the model returned logits of shape {tuple(logits.shape)}")
    return logits


def sequence_loss_on(logits: Tensor, input_ids: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy of every next token of ``prompt + target`` given ``[B, T, V]`` prompt logits:
    position ``t`` predicts ``input_ids[:, t+1]``, the last position the target."""
    following = torch.cat([input_ids[:, 1:], targets.unsqueeze(1)], dim=1)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), following.reshape(-1))


def task_loss(model: nn.Module, input_ids: Tensor, targets: Tensor, loss: str = "last-token") -> Tensor:
    """The training loss ``loss`` (``"last-token"`` or ``"sequence"``) of ``model`` on prompts and targets."""
    if loss == "sequence":
        return sequence_loss_on(all_logits(model, input_ids), input_ids, targets)
    check_choice(loss, LOSSES, "loss")
    return loss_on(last_logits(model, input_ids), targets)


def correct(logits: Tensor, split: LMSplit, rows: Tensor | slice, over: str = "answers") -> Tensor:
    """``[B]`` 1 where the argmax over the answer tokens (``over="answers"``) or over the whole vocabulary
    (``"vocabulary"``) is the gold answer."""
    if over == "vocabulary":
        return (logits.argmax(-1) == split.targets[rows]).float()
    check_choice(over, ACCURACIES, "accuracy")
    pred = logits[:, split.answers].argmax(-1)
    gold = (split.targets[rows].unsqueeze(1) == split.answers.unsqueeze(0)).float().argmax(1)
    return (pred == gold).float()


@torch.no_grad()
def accuracy(model: nn.Module, split: LMSplit, batch_size: int = 1000, over: str = "answers") -> float:
    """Accuracy of ``model`` (in eval mode) on the whole split (``over``: see ``correct``)."""
    was = model.training
    model.eval()
    hits = 0.0
    for start in range(0, len(split), batch_size):
        rows = slice(start, start + batch_size)
        hits += float(correct(last_logits(model, split.input_ids[rows]), split, rows, over).sum())
    model.train(was)
    return hits / len(split)


def transfer_optimizer(model: nn.Module, settings: TrainSettings) -> torch.optim.Optimizer:
    """AdamW over the parameters of ``model`` that require grad (``TrainSettings``' rate and decay)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise SubnetlabError("the model has no trainable parameters")
    return make_optimizer(params, "adamw", lr=settings.lr, weight_decay=settings.weight_decay)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, input_ids: Tensor, targets: Tensor,
               loss: str = "last-token") -> Tensor:
    """One optimiser step of ``train_model`` on one batch: the task loss ``loss``, backward, the optimiser."""
    value = task_loss(model, input_ids, targets, loss)
    opt.zero_grad(set_to_none=True)
    value.backward()
    opt.step()
    return value


def snapshot(model: nn.Module) -> dict[str, Tensor]:
    """A copy of ``model``'s state: the best-on-evaluation weights ``train_model`` keeps while it trains on."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_model(
    model: nn.Module,
    train: LMSplit,
    eval_split: LMSplit,
    test: LMSplit | None,
    settings: TrainSettings,
    seed: int,
    *,
    keep_best: bool = True,
) -> TrainResult:
    """Train every parameter of ``model`` that requires grad; restore the best-on-eval weights.

    Shuffling draws from a generator seeded with ``seed``; dropout from the global
    generator, forked and seeded with ``seed`` so the caller's state is untouched.
    With ``settings.patience`` the run stops at a plateau of the evaluation accuracy
    (``keep_best=False``: the weights of the epoch it stopped at are kept).
    """
    opt = transfer_optimizer(model, settings)
    tracker = settings.plateau.tracker() if settings.plateau is not None else None
    epochs_run, stopped_epoch = 0, None
    g = torch.Generator().manual_seed(int(seed))
    best_acc, best_epoch, best_test, best_state = -1.0, -1, float("nan"), None
    curve: list[dict[str, float]] = []
    started, cpu_started = time.perf_counter(), time.process_time()
    acc = float("nan")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        for epoch in track(range(settings.epochs), total=settings.epochs, description="transfer training"):
            model.train()
            total, steps = 0.0, 0
            for rows in train.batches(settings.batch_size, g):
                loss = train_step(model, opt, train.input_ids[rows], train.targets[rows], settings.loss)
                total, steps = total + float(loss.detach()), steps + 1
            epochs_run = epoch + 1
            if not settings.evaluates_at(epoch):
                continue
            acc = accuracy(model, eval_split, settings.eval_batch_size, settings.accuracy)
            curve.append({"epoch": epoch, "loss": total / steps, "eval_accuracy": acc})
            if settings.improves(acc, best_acc):
                best_acc, best_epoch = acc, epoch
                best_test = (accuracy(model, test, settings.eval_batch_size, settings.accuracy) if test is not None
                             else float("nan"))
                if keep_best:
                    best_state = snapshot(model)
            if tracker is not None and tracker.update(acc):
                stopped_epoch = epoch
                break
    if keep_best and best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return TrainResult(best_epoch, best_acc, best_test, acc, curve, time.perf_counter() - started,
                       epochs_run * len(train), time.process_time() - cpu_started,
                       settings.stopping(epochs_run, stopped_epoch))


__all__ = ["ACCURACIES", "LOSSES", "TIES", "TrainResult", "TrainSettings", "accuracy", "all_logits", "check_choice",
           "correct", "last_logits", "loss_on", "sequence_loss_on", "snapshot", "task_loss", "train_model",
           "train_step", "transfer_optimizer"]
