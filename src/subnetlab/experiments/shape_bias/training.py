"""Training an image classifier on an ``ImageSet``, with evaluation curves (Figure 5's data).

One loop serves every training run of the shape-bias study: the base model,
from scratch, the transferred subnetwork (whose frozen part lives in weight
parametrizations, so only the new weights are parameters that train), the
data-mixture fine-tuning, and linear fine-tuning (every parameter but the
classifier frozen, the backbone left in eval mode so batch-norm statistics
stay the base model's). The paper trains ResNets with SGD (momentum 0.9,
weight decay 1e-4); the demo uses the same optimiser family at a higher rate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from subnetlab import optim
from subnetlab.analysis.shape_bias import evaluate_shape_bias
from subnetlab.errors import SubnetlabError
from subnetlab.tasks.images.imageset import ImageSource, iter_batches, normalize


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters of one training run (written to the run's config)."""

    steps: int = 500
    batch_size: int = 64
    lr: float = 0.05
    optimizer: str = "sgd"  # sgd (momentum) or adamw
    momentum: float = 0.9
    weight_decay: float = 1e-4
    warmup: int = 0  # linear warm-up steps, then cosine decay to 0
    eval_every: int = 100
    flip: bool = False  # random horizontal flips (off for the generated benchmark: they mirror diagonal textures)
    class_weights: bool = False  # cross-entropy weighted by inverse class frequency (the released vision_transfer.py)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0:
            raise SubnetlabError(f"training config {self}: steps, batch_size and lr must be positive")
        if self.optimizer not in ("sgd", "adamw"):
            raise SubnetlabError(f"optimizer {self.optimizer!r}: choose sgd or adamw")

    def to_dict(self) -> dict:
        return asdict(self)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up (the first step already at ``lr / warmup``), then cosine decay to zero at ``cfg.steps``."""
    return optim.lr_factor(step, total=cfg.steps, warmup=cfg.warmup, decay="cosine", warmup_from_one=True)


def class_weights(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``[C]`` weights ``N / n_c`` scaled to unit L2 norm, as the released ``vision/vision_transfer.py`` weights
    its ``CrossEntropyLoss`` (a class absent from ``labels`` gets weight 0)."""
    counts = torch.bincount(labels.long().flatten(), minlength=num_classes).double()
    weights = torch.where(counts > 0, counts.sum() / counts.clamp(min=1), torch.zeros_like(counts))
    return (weights / weights.norm()).float()


def _stream(data: ImageSource, batch_size: int, generator: torch.Generator):
    """Endless shuffled batches (epoch after epoch)."""
    while True:
        yield from iter_batches(data, batch_size, shuffle=True, generator=generator)


def train_classifier(
    model: nn.Module,
    data: ImageSource,
    cfg: TrainConfig,
    mean: Sequence[float],
    std: Sequence[float],
    seed: int,
    eval_sets: dict[str, ImageSource] | None = None,
    train_mode: bool = True,
    on_eval: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Train every parameter with ``requires_grad`` on ``data``; return the evaluation curve.

    ``train_mode=False`` keeps the model in eval mode while training (linear
    fine-tuning: frozen batch-norm statistics). The curve has one row per
    ``cfg.eval_every`` steps (and at step 0 and the end): ``{"step": s, split: acc, ...}``.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise SubnetlabError("nothing to train: no parameter requires grad")
    generator = torch.Generator().manual_seed(seed)
    optimizer = optim.make_optimizer(params, cfg.optimizer, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
    curve: list[dict] = []

    def evaluate(step: int) -> None:
        if eval_sets:
            row = {"step": step, **evaluate_shape_bias(model, eval_sets, mean, std)}
            curve.append(row)
            if on_eval is not None:
                on_eval(row)

    evaluate(0)
    weight = None
    if cfg.class_weights:
        num_classes = int(getattr(getattr(model, "config", None), "num_labels", 0) or int(data.labels.max()) + 1)
        weight = class_weights(data.labels, num_classes).to(next(model.parameters()).device)
    batches = _stream(data, cfg.batch_size, generator)
    model.train(train_mode)
    for step in range(1, cfg.steps + 1):
        images, labels = next(batches)
        if cfg.flip:
            flip = torch.rand(images.shape[0], generator=generator) < 0.5
            images = torch.where(flip.view(-1, 1, 1, 1), images.flip(-1), images)
        logits = model(pixel_values=normalize(images, mean, std)).logits
        loss = F.cross_entropy(logits, labels, weight=weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            evaluate(step)
            model.train(train_mode)
    model.eval()
    return curve


def freeze_all_but(model: nn.Module, trainable: Sequence[str]) -> None:
    """``requires_grad`` only for the named parameters (linear fine-tuning: the classifier)."""
    names = set(trainable)
    missing = names - {n for n, _ in model.named_parameters()}
    if missing:
        raise SubnetlabError(f"no such parameter(s): {', '.join(sorted(missing))}")
    for name, p in model.named_parameters():
        p.requires_grad_(name in names)


__all__ = ["TrainConfig", "class_weights", "train_classifier", "freeze_all_but", "lr_factor"]
