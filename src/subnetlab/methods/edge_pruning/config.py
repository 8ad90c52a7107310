"""Settings of one edge-pruning run, and the ``paper`` and ``demo`` presets.

``paper`` is the authors' training (princeton-nlp/Edge-Pruning at a918efd: ``run_scripts/ioi_sweep.sh``,
``src/prune/fpt2_ioi.py``, ``src/modeling/modeling_fpt2.py``, ``src/modeling/l0.py``, ``src/eval/ioi.py``)
wherever subnetlab can express it:

* learning rate 0.8 for the edge and node log-alphas and for the Lagrange multipliers, 3,000 steps of
  which the target edge sparsity rises linearly from 0 over the first 2,500 (fpt2_ioi.py:94-108), a
  200-step linear learning-rate warm-up then linear decay to 0 (fpt2_ioi.py:563, the first step at rate 0),
  batch 32, log-alphas initialised at 10 with noise 0.01 (modeling_fpt2.py:500-508, ``reset_all_log_alphas``
  after loading, fpt2_ioi.py:640), corrupted-input ablation, node masks without a node sparsity target
  (the script sets ``disable_node_loss``, ioi_sweep.sh:14), embedding nodes (it sets ``with_embedding_nodes``, ioi_sweep.sh:78);
* ``optimizer="adamw"``, ``weight_decay=0.01``: the authors build ``torch.optim.AdamW`` without a decay
  (fpt2_ioi.py:540-562), so torch's default 0.01 decays the log-alphas *and* the multipliers;
* ``max_grad_norm=1.0``: the Hugging Face Trainer's default clipping, over every parameter with a
  gradient. That includes the node multipliers, which ``disable_node_loss`` leaves out of the
  optimiser (fpt2_ioi.py:537) but whose node loss is still added (fpt2_ioi.py:153-158; it is 0, the
  multipliers stay 0, but their gradients ``s - t`` and ``(s - t)^2`` are not): ``clip_node_target=0.72``
  (ioi_sweep.sh:6, ``NODE_SPARSITY``) puts the same terms in the clipped norm;
* ``sparsity_estimate="sample"``: the Lagrangian reads the sampled edge masks, ``1 - sum(z) / edges``
  (modeling_fpt2.py:1377), edge masks alone (the node masks do not enter it);
* ``selection="threshold"``: the authors' final circuit (``EdgePruner.selection``, ``edge_pruning.tensors``,
  ``models.circuit.threshold_choice``): deterministic masks per parameter tensor with the read tensors'
  padding (l0.py:22-39, modeling_fpt2.py:496-522), a bisected threshold meeting the model's own
  deterministic edge sparsity (eval/ioi.py:158-163, 194-217), the same for the nodes (:218-240), then the edges of
  removed writers dropped (modeling_fpt2.py:997-1066);
* ``embedding_nodes=0`` gives the authors' default graph without embedding nodes (fpt2_ioi.py:256-259;
  32,046 edges for GPT-2 small); the sweep script, and so the preset, has them.

Where the paper (Bhaskar et al., 2024) and the code differ, the preset follows the code: the paper writes
the sparsity as the expected L0 and the final circuit as the masks above a threshold at the target; the code
samples the sparsity and meets the model's own deterministic sparsity. The Lagrangian is written
``lambda1 (t - s) + lambda2 (t - s)^2`` here and ``lambda1 (s - t) + ...`` there (modeling_fpt2.py:1383-1387):
the same up to the sign of ``lambda1``, which starts at 0 and decays symmetrically.

What remains different, on purpose or by construction:

* the frozen model runs in eval mode here; the authors' Trainer puts the pruned model in training mode, so
  GPT-2's dropout (0.1) is on in their training forwards (fpt2_ioi.py:681, the full model in eval,
  :646). Models without dropout (every model the demo trains) are unaffected;
* masks are drawn from a seeded generator of the run, one draw over the flat edge vector per forward; the
  authors draw per tensor from the global generator (l0.py:41-46), padding included; the data order is
  subnetlab's ``DataOrder`` (full batches), theirs the Trainer's shuffled sampler (a short last batch);
* the KL is taken at the prediction position (one position per pair); the authors' collator takes every
  position from the last word's first token to the end of the text (fpt2_ioi.py:451-467, 161-168), which
  for one-token answers is the same position;
* ties: among equal soft masks the authors' ``torch.topk(largest=False)`` picks an unspecified one
  (l0.py:35), subnetlab the first in its edge order (reader by reader; theirs is writer by reader inside a
  tensor), and the own-sparsity sum adds a tensor's masks in that order (float32 rounding of the target);
* ``embedding_nodes=1`` (one ``input`` node) has no counterpart in the authors' code; its node tensor is [1].

``repair="greedy"`` and ``restarts`` go beyond both (``select.greedy_repair``): on 1-layer GPT-2s with 8 and
13 edges, the demo settings' circuits fell up to 0.319 below the exhaustive optimum's faithfulness; greedy
repair (double swaps, by the logit difference) with 3 restarts came within 0.000 at every size
(tests/unit/test_edge_pruning_optimum.py). They cost exact evaluations over the training pairs (a round of
``C(pool, d)^2`` at depth ``d``), so neither preset turns them on.

``demo`` keeps subnetlab's own rules (Adam without decay or clipping, expected L0, connected top-k at the
target, which keeps exactly ``round((1 - t) n)`` edges, none a dead end) and scales steps down for tiny
models on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from subnetlab.errors import SubnetlabError, check_field_types
from subnetlab.methods.l0.schedule import LinearSchedule
from subnetlab.methods.l0.settings import OPTIMIZERS, DictSettings, check_grad_norm

ABLATIONS = ("corrupted", "mean", "zero")
SELECTIONS = ("connected", "topk", "threshold", "greedy")
REPAIRS = ("none", "greedy")
REPAIR_OBJECTIVES = ("logit_diff", "kl")
DTYPES = ("float32", "bfloat16", "float16")


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
    # connected: top-k of the deterministic masks among edges connected to the logits; topk: plain top-k;
    # threshold: the authors' final circuit (module docstring); greedy: EAP-IG's apply_greedy on the masks
    selection: str = "connected"
    clip_node_target: float | None = None  # node target whose untrained Lagrangian's gradients enter the clipped norm
    checkpoint_every: int = 50
    eval_batch_size: int = 64
    # after selection: swap edges while an exactly evaluated loss falls (``select.greedy_repair``); none: as trained
    repair: str = "none"
    repair_objective: str = "logit_diff"  # logit_diff: maximise f of the logit difference; kl: the training KL
    repair_pool: int = 8  # swaps among the pool weakest kept and pool strongest removed edges
    repair_depth: int = 2  # up to this many edges swapped at once
    restarts: int = 1  # train seeds seed .. seed + restarts - 1 and keep the circuit of lowest exact loss
    # the frozen weights' (and the edge buffers') dtype; masks, lambdas and the objective stay float32
    dtype: str = "float32"
    # keep each attention block's reader inputs for the backward instead of recomputing them: a step about 10%
    # faster once edges are cut, for 2 x 3 x heads x batch x length x hidden more memory per layer (bench_edges.py)
    keep_reader_inputs: bool = False
    # recompute each block's forward in the backward (activation checkpointing, ``intervene.checkpoint``): the
    # same masks bit for bit, one block's activations kept at a time for about a forward more per step; None:
    # for forwards of more than ``train.AUTO_CHECKPOINT_TOKENS`` tokens (long contexts; bench_long_context.py)
    checkpoint_blocks: bool | None = None

    def __post_init__(self) -> None:
        check_field_types(self, "edge pruning setting")
        if not 0.0 < self.sparsity < 1.0:
            raise SubnetlabError(f"sparsity: {self.sparsity} is outside (0, 1)", setting="sparsity")
        if self.node_sparsity is not None and not 0.0 <= self.node_sparsity < 1.0:
            raise SubnetlabError(f"node_sparsity: {self.node_sparsity} is outside [0, 1)", setting="node_sparsity")
        choices = {"ablation": ABLATIONS, "sparsity_estimate": ("expected", "sample"), "selection": SELECTIONS,
                   "lr_decay": ("linear", "constant"), "optimizer": OPTIMIZERS,
                   "repair": REPAIRS, "repair_objective": REPAIR_OBJECTIVES, "dtype": DTYPES}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise SubnetlabError(f"{name} {getattr(self, name)!r}: expected one of {', '.join(allowed)}",
                                     setting=name)
        for name in ("batch_size", "accumulation", "checkpoint_every", "eval_batch_size", "repair_pool",
                     "repair_depth", "restarts"):
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
        if self.clip_node_target is not None:
            if not 0.0 <= self.clip_node_target < 1.0:
                raise SubnetlabError(f"clip_node_target: {self.clip_node_target} is outside [0, 1)",
                                     setting="clip_node_target")
            if not self.node_masks or self.node_sparsity is not None or self.max_grad_norm is None:
                raise SubnetlabError("clip_node_target is for node masks without a node sparsity target under "
                                     "gradient clipping (max_grad_norm)", setting="clip_node_target")
        self.make_schedule()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        for name, default in (("dtype", "float32"), ("keep_reader_inputs", False), ("checkpoint_blocks", None)):
            if out[name] == default:
                del out[name]  # the default: a run written before the setting existed is the same run (it resumes)
        return out

    def make_schedule(self) -> LinearSchedule:
        return LinearSchedule(self.sparsity, self.warmup_steps, self.total_steps)


PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(warmup_steps=2500, total_steps=3000, batch_size=32, lr=0.8, lambda_lr=0.8, lr_warmup_steps=200,
                  init_log_alpha=10.0, checkpoint_every=64, optimizer="adamw", weight_decay=0.01, max_grad_norm=1.0,
                  sparsity_estimate="sample", selection="threshold", clip_node_target=0.72),
    # tiny models on a CPU: fewer steps, gates starting nearer the decision (see head_pruning.config's demo note)
    "quick": dict(warmup_steps=200, total_steps=300, batch_size=16, lr=0.1, lambda_lr=0.5, lr_warmup_steps=0,
                  init_log_alpha=3.0, checkpoint_every=50),
}
PRESETS["demo"] = PRESETS["quick"]  # the name the circuits study and older runs use; the same settings


def preset_config(preset: str, sparsity: float, seed: int = 0, **overrides: Any) -> EdgePruneConfig:
    if preset not in PRESETS:
        raise SubnetlabError(f"preset {preset!r}: expected one of {', '.join(PRESETS)}", setting="preset")
    return EdgePruneConfig.from_dict({**PRESETS[preset], "sparsity": sparsity, "seed": seed, **overrides})
