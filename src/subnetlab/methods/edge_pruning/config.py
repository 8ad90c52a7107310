"""Settings of one edge-pruning run, and the ``paper`` and ``demo`` presets.

``paper`` follows Edge Pruning's GPT-2 IOI sweep (princeton-nlp/Edge-Pruning,
``run_scripts/ioi_sweep.sh`` and ``src/prune/fpt2_ioi.py``): learning rate 0.8
for the edge (and node) log-alphas and 0.8 for the Lagrange multipliers, 3,000
steps of which the target edge sparsity rises linearly from 0 over the first
2,500, a 200-step linear learning-rate warm-up then linear decay, log-alphas
initialised at 10 with noise 0.01, corrupted-input ablation, node masks trained
without a node sparsity target (the sweep script disables the node loss), batch 32. The objective
is the KL divergence from the full model's next-token distribution at the
prediction position to the circuit's.

Where this implementation differs, on purpose: the Lagrangian reads the expected
L0 of the masks (``sparsity_estimate="expected"``, Louizos et al.) unless set
to ``sample`` (the sampled masks' sparsity, as the authors' code), the frozen
model runs in eval mode (no dropout), and the final circuit is the top-k of the
deterministic masks (``select.py``), which is the limit of the authors' binary
search for a threshold that meets the target exactly; by default (``selection=
"connected"``) taken among edges connected to the logits, so no kept edge is a
dead end (``topk``: the authors' rule).

``demo`` keeps the rules and scales steps down for tiny models on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from subnetlab.errors import SubnetlabError, check_field_types
from subnetlab.methods.l0.schedule import LinearSchedule
from subnetlab.methods.l0.settings import OPTIMIZERS, DictSettings, check_grad_norm

ABLATIONS = ("corrupted", "mean", "zero")


@dataclass(frozen=True)
class EdgePruneConfig(DictSettings):
    """Everything that determines an edge-pruning run (with the model and the data)."""

    what: ClassVar[str] = "edge pruning setting"

    sparsity: float = 0.95  # target fraction of edges removed
    seed: int = 0
    warmup_steps: int = 2500  # the target rises linearly from 0 over these steps
    total_steps: int = 3000
    batch_size: int = 32
    accumulation: int = 1  # micro-batches of batch_size per optimiser step
    lr: float = 0.8
    lambda_lr: float = 0.8
    optimizer: str = "adam"
    weight_decay: float = 0.0  # on log-alphas and lambdas alike, as AdamW applies it
    max_grad_norm: float | None = None  # clip the gradient norm of log-alphas and lambdas together (None: no clipping)
    lr_warmup_steps: int = 200
    lr_decay: str = "linear"
    init_log_alpha: float = 10.0
    init_std: float = 0.01
    node_masks: bool = True  # masks over writers too (a node's mask multiplies its outgoing edges')
    node_sparsity: float | None = None  # a Lagrangian target for the nodes; None trains them without one
    embedding_nodes: int | None = None  # None: as many as the family has (token and position for GPT-2)
    ablation: str = "corrupted"
    sparsity_estimate: str = "expected"
    selection: str = "connected"  # top-k of the deterministic masks among edges connected to the logits, or plain topk
    checkpoint_every: int = 50
    eval_batch_size: int = 64

    def __post_init__(self) -> None:
        check_field_types(self, "edge pruning setting")
        if not 0.0 < self.sparsity < 1.0:
            raise SubnetlabError(f"sparsity: {self.sparsity} is outside (0, 1)", setting="sparsity")
        if self.node_sparsity is not None and not 0.0 <= self.node_sparsity < 1.0:
            raise SubnetlabError(f"node_sparsity: {self.node_sparsity} is outside [0, 1)", setting="node_sparsity")
        choices = {"ablation": ABLATIONS, "sparsity_estimate": ("expected", "sample"), "selection": ("connected", "topk"),
                   "lr_decay": ("linear", "constant"), "optimizer": OPTIMIZERS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise SubnetlabError(f"{name} {getattr(self, name)!r}: expected one of {', '.join(allowed)}",
                                     setting=name)
        for name in ("batch_size", "accumulation", "checkpoint_every", "eval_batch_size"):
            if int(getattr(self, name)) < 1:
                raise SubnetlabError(f"{name} {getattr(self, name)} must be at least 1", setting=name)
        if self.lr <= 0 or self.lambda_lr <= 0:
            raise SubnetlabError(f"learning rates must be positive, got lr={self.lr}, lambda_lr={self.lambda_lr}",
                                 setting="lr" if self.lr <= 0 else "lambda_lr")
        if self.lr_warmup_steps < 0:
            raise SubnetlabError(f"lr_warmup_steps {self.lr_warmup_steps} must be non-negative",
                                 setting="lr_warmup_steps")
        if self.weight_decay < 0:
            raise SubnetlabError(f"weight_decay {self.weight_decay} must be non-negative", setting="weight_decay")
        check_grad_norm(self.max_grad_norm)
        if self.node_sparsity is not None and not self.node_masks:
            raise SubnetlabError("a node sparsity target needs node masks", setting="node_sparsity")
        self.make_schedule()

    def make_schedule(self) -> LinearSchedule:
        return LinearSchedule(self.sparsity, self.warmup_steps, self.total_steps)


PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(warmup_steps=2500, total_steps=3000, batch_size=32, lr=0.8, lambda_lr=0.8, lr_warmup_steps=200,
                  init_log_alpha=10.0, checkpoint_every=64),
    # tiny models on a CPU: fewer steps, gates starting nearer the decision (see head_pruning.config's demo note)
    "demo": dict(warmup_steps=200, total_steps=300, batch_size=16, lr=0.1, lambda_lr=0.5, lr_warmup_steps=0,
                 init_log_alpha=3.0, checkpoint_every=50),
}


def preset_config(preset: str, sparsity: float, seed: int = 0, **overrides: Any) -> EdgePruneConfig:
    if preset not in PRESETS:
        raise SubnetlabError(f"preset {preset!r}: expected one of {', '.join(PRESETS)}", setting="preset")
    return EdgePruneConfig.from_dict({**PRESETS[preset], "sparsity": sparsity, "seed": seed, **overrides})
