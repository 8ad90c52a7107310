"""Training a small GPT-2 on repeated random spans until it forms induction heads.

The model is a plain ``transformers`` ``GPT2LMHeadModel`` built from a config
(2 layers x 4 heads, width 64 in the demo), so every tool that takes a Hugging
Face model takes it unchanged. It trains with the causal-LM cross-entropy on
the *predictable* positions only (the second span after its first token,
``RepeatedBatch.predictable``): the other tokens are uniformly random and carry
no signal. AdamW with the house recipe (``subnetlab.optim``: no decay on biases
and LayerNorm weights, linear warm-up, then constant), gradient clipping at 1.

Every ``eval_every`` steps the curve records, on a fixed held-out set: the loss
and accuracy on the predictable positions (``repeat_loss``, ``repeat_accuracy``),
the loss on the first span (``first_loss``, which stays near ``ln`` of the
number of unseen tokens whatever the model learns), and the heads' best
previous-token score in layer 0 and induction score in the last layer
(``analysis.induction_scores``), so the loss's phase change can be read side by
side with the heads forming (Olsson et al., 2022, section 5).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from subnetlab import optim
from subnetlab.analysis.induction_scores import head_scores
from subnetlab.errors import SubnetlabError
from subnetlab.progress import stage
from subnetlab.tasks.induction import InductionConfig, RepeatedBatch, repeated_sequences


@dataclass(frozen=True)
class ModelShape:
    """The model's size and family. ``mlp=False`` zeroes and freezes every MLP (an attention-only model in
    effect, still the standard class: GPT-2's GELU of zero plus a zero bias, Llama's zero down-projection,
    write exactly zero)."""

    layers: int = 2
    heads: int = 4
    width: int = 64
    mlp_width: int = 256
    mlp: bool = True
    family: str = "gpt2"  # gpt2 (learned absolute positions) or llama (rotary positions, no biases)

    def __post_init__(self) -> None:
        if self.family not in ("gpt2", "llama"):
            raise SubnetlabError(f"model family {self.family!r}: choose gpt2 or llama", setting="family")
        for name in ("layers", "heads", "width", "mlp_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SubnetlabError(f"model {name} {value!r}: expected a positive integer", setting=name)
        if self.width % self.heads:
            raise SubnetlabError(f"model width {self.width} is not a multiple of heads {self.heads}", setting="width")


@dataclass(frozen=True)
class TrainSettings:
    """Optimiser, length and evaluation of the training run."""

    steps: int = 2500
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 100
    eval_every: int = 100
    eval_size: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "eval_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SubnetlabError(f"training {name} {value!r}: expected a positive integer", setting=name)
        if not self.lr > 0 or self.weight_decay < 0 or self.warmup < 0:
            raise SubnetlabError(f"training lr {self.lr}, weight_decay {self.weight_decay}, warmup {self.warmup}: "
                                 "expected lr > 0 and the others >= 0", setting="lr")


def model_config(task: InductionConfig, shape: ModelShape):
    """The ``transformers`` config of ``shape`` over the task's vocabulary (no dropout)."""
    return config_for(shape, task.model_vocab_size, task.length, bos=task.bos_id, pad=task.vocab_size + 1)


def config_for(shape: ModelShape, vocab_size: int, positions: int, *, bos: int | None, pad: int):
    """A ``transformers`` config of ``shape`` for ``vocab_size`` tokens and ``positions`` positions (no dropout)."""
    if shape.family == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(vocab_size=vocab_size, hidden_size=shape.width, intermediate_size=shape.mlp_width,
                           num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                           num_key_value_heads=shape.heads, max_position_embeddings=positions, bos_token_id=bos,
                           eos_token_id=bos, pad_token_id=pad, tie_word_embeddings=False)
    from transformers import GPT2Config

    return GPT2Config(vocab_size=vocab_size, n_positions=positions, n_embd=shape.width, n_layer=shape.layers,
                      n_head=shape.heads, n_inner=shape.mlp_width, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      bos_token_id=bos, eos_token_id=bos, pad_token_id=pad)


def build_model_from(config, shape: ModelShape, seed: int) -> nn.Module:
    """A fresh causal LM from ``config`` (eager attention, so attention weights can be read) from ``seed``;
    ``shape.mlp=False`` zeroes and freezes its MLPs."""
    from subnetlab.models import build_model

    model = build_model(config, head="causal-lm", seed=seed, attn_implementation="eager").model
    if not shape.mlp:
        for block in model.base_model.layers if shape.family == "llama" else model.transformer.h:
            for p in block.mlp.parameters():
                p.data.zero_()
                p.requires_grad_(False)
    return model


def load_trained_model(model_dir: Path) -> nn.Module:
    """A model this study trained and saved (eager attention, eval mode), from its safetensors only.

    A directory holding only a pickle (``pytorch_model.bin``) is refused: nothing is unpickled.
    """
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    from subnetlab.models.loading import quiet_transformers, refuse_pickled_weights

    refuse_pickled_weights(model_dir, str(model_dir))
    try:
        with quiet_transformers():
            return AutoModelForCausalLM.from_pretrained(str(model_dir), attn_implementation="eager",
                                                        use_safetensors=True).eval()
    except (OSError, ValueError, RuntimeError, KeyError, SafetensorError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise SubnetlabError(f"{model_dir}: cannot load the trained model ({first}); remove the directory to "
                             "train it again", setting="out") from None


def build_induction_model(task: InductionConfig, shape: ModelShape, seed: int) -> nn.Module:
    """A fresh causal LM for the induction task (see ``build_model_from``)."""
    return build_model_from(model_config(task, shape), shape, seed)


def _losses(model: nn.Module, batch: RepeatedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position cross-entropy of the next token ``[n, T-1]`` and its argmax hits."""
    logits = model(input_ids=batch.input_ids).logits[:, :-1]
    target = batch.input_ids[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none")
    return loss.view_as(target), logits.argmax(-1) == target


def evaluate(model: nn.Module, batch: RepeatedBatch, task: InductionConfig) -> dict[str, float]:
    """Held-out loss and accuracy on the predictable positions, loss on the first span, head scores."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            loss, hit = _losses(model, batch)
        scores = head_scores(model, batch.input_ids)
    finally:
        model.train(was_training)
    predictable = batch.predictable[:, 1:]
    pos = torch.arange(1, task.length).unsqueeze(0)
    first = (pos >= batch.start.unsqueeze(1)) & (pos < (batch.start + batch.span).unsqueeze(1))
    last = scores.previous.shape[0] - 1
    return {"repeat_loss": float(loss[predictable].mean()), "repeat_accuracy": float(hit[predictable].float().mean()),
            "first_loss": float(loss[first].mean()),
            "previous_token_L0": scores.best("previous", 0)[1], "induction_last": scores.best("induction", last)[1]}


def train_induction_model(model: nn.Module, task: InductionConfig, cfg: TrainSettings) -> list[dict[str, Any]]:
    """Train ``model`` in place; return the evaluation curve (one row per ``eval_every`` steps, step 0 and the end)."""
    train_gen = torch.Generator().manual_seed(cfg.seed)
    held_out = repeated_sequences(task, cfg.eval_size, torch.Generator().manual_seed(cfg.seed + 1_000_003))
    optimizer = optim.make_optimizer(model, "adamw", lr=cfg.lr, weight_decay=cfg.weight_decay, no_decay_1d=True)
    scheduler = optim.lr_scheduler(optimizer, total=cfg.steps, warmup=cfg.warmup, decay="constant",
                                   warmup_from_one=True)
    curve = [{"step": 0, **evaluate(model, held_out, task)}]
    model.train()
    for step in range(1, cfg.steps + 1):
        batch = repeated_sequences(task, cfg.batch_size, train_gen)
        loss, _ = _losses(model, batch)
        loss = loss[batch.predictable[:, 1:]].mean()
        if not torch.isfinite(loss):
            raise SubnetlabError(f"the training loss became {loss.item()} at step {step}; lower the learning rate",
                                 setting="lr")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        scheduler.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            row = {"step": step, **evaluate(model, held_out, task)}
            curve.append(row)
            stage(f"induction model: step {step}/{cfg.steps}, loss on the repeat {row['repeat_loss']:.3f}, "
                  f"accuracy {row['repeat_accuracy']:.2f}, best previous-token score {row['previous_token_L0']:.2f} "
                  f"(layer 0), induction score {row['induction_last']:.2f} (last layer)")
    model.eval()
    return curve


def phase_change(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the loss on the repeat falls: the evaluation interval with the steepest fall, and the first step
    whose accuracy on the repeat reaches 0.5 and 0.9 (None if never)."""
    if len(curve) < 2:
        return {"steepest_fall": None, "accuracy_0.5": None, "accuracy_0.9": None}
    falls = [(curve[i - 1]["repeat_loss"] - curve[i]["repeat_loss"], i) for i in range(1, len(curve))]
    drop, i = max(falls)
    first = {f"accuracy_{t}": next((r["step"] for r in curve if r["repeat_accuracy"] >= t), None) for t in (0.5, 0.9)}
    return {"steepest_fall": {"from_step": curve[i - 1]["step"], "to_step": curve[i]["step"],
                              "loss_from": curve[i - 1]["repeat_loss"], "loss_to": curve[i]["repeat_loss"]},
            **first}


def training_record(task: InductionConfig, shape: ModelShape, cfg: TrainSettings) -> dict[str, Any]:
    return {"task": task.to_dict(), "model": asdict(shape), "training": asdict(cfg)}


__all__ = ["ModelShape", "TrainSettings", "build_induction_model", "build_model_from", "config_for", "evaluate", "model_config", "phase_change",
           "train_induction_model", "training_record"]
