"""What a plan is of: the command's method and its per-step sizes (``PlanSettings``). The method's typed config at
those sizes and the run's number of steps are its step module's (``circuit``, ``discover``, ``transfer``,
``finetune``, ``lottery``)."""

from __future__ import annotations

from dataclasses import dataclass

from subnetlab.errors import SubnetlabError
from subnetlab.methods.attribution.names import METHODS as ATTRIBUTION

METHODS = ("head-pruning", "edge-pruning", *ATTRIBUTION, "discover", "transfer", "finetune", "lottery-prune")
DTYPES = ("float32", "bfloat16", "float16")
UNACCUMULATED = (*ATTRIBUTION, "discover", "transfer", "finetune", "lottery-prune")  # the batch is one forward
DEFAULT_PRESETS = {"finetune": "heuristic-core"}  # the others: "paper"
MAX_EXAMPLES = 1 << 20  # the largest batch (and micro-batch) a plan takes: a fake batch is still built in Python
AUTOCAST = ("discover", "transfer", "finetune", "lottery-prune")  # dtype: the forwards' autocast; weights float32


@dataclass(frozen=True)
class PlanSettings:
    """What a run does per step: the method, examples per optimiser step (``batch``, of ``micro_batch`` per
    forward), tokens per example, the frozen weights' dtype (``AUTOCAST`` methods: the forward passes' autocast
    dtype, as those commands' dtype setting). ``examples``: the pairs an attribution run scores, the training rows
    of discover / transfer / finetune, or the development rows of lottery-prune (the steps are batches of them).
    ``preset``: the command's preset."""

    method: str
    batch: int
    length: int
    micro_batch: int | None = None
    dtype: str = "float32"
    preset: str | None = None  # the method's (``DEFAULT_PRESETS``) when not given
    sparsity: float | None = None
    ig_steps: int = 5
    examples: int | None = None
    labels: int = 3  # classes of a classification task (MNLI: 3)
    position_chunk: int | None = None  # eap, eap-ig: tokens scored per chunk (the method's setting; None: its auto)
    checkpoint_blocks: bool | None = None  # edge-pruning: blocks recomputed in the backward (None: its auto)
    edges: int | None = None  # exact: the edges patched (None: every edge of the graph)
    copies: int | None = None  # exact: copies of the batch a patched forward holds (None: the method's bound)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise SubnetlabError(f"method {self.method!r}: choose one of {', '.join(METHODS)}", setting="method")
        if self.preset is None:
            object.__setattr__(self, "preset", DEFAULT_PRESETS.get(self.method, "paper"))
        for name in ("batch", "length", "ig_steps", "labels"):
            if int(getattr(self, name)) < 1:
                raise SubnetlabError(f"{name} {getattr(self, name)} must be at least 1", setting=name)
        for name in ("micro_batch", "examples", "edges", "copies"):
            if getattr(self, name) is not None and int(getattr(self, name)) < 1:
                raise SubnetlabError(f"{name} {getattr(self, name)} must be at least 1", setting=name)
        for name in ("batch", "micro_batch"):
            if getattr(self, name) is not None and int(getattr(self, name)) > MAX_EXAMPLES:
                raise SubnetlabError(f"{name} {getattr(self, name)} is more than the plan's bound of {MAX_EXAMPLES:,} "
                                     "examples", setting=name)
        if self.length > MAX_EXAMPLES:
            raise SubnetlabError(f"length {self.length} is more than the plan's bound of {MAX_EXAMPLES:,} tokens",
                                 setting="length")
        if self.batch % self.micro:
            raise SubnetlabError(f"micro-batch {self.micro} does not divide the batch {self.batch}",
                                 setting="micro_batch")
        for name in ("edges", "copies"):
            if getattr(self, name) is not None and self.method != "exact":
                raise SubnetlabError(f"{name}: read by exact patching only, not {self.method}", setting=name)
        if self.method in ATTRIBUTION and self.micro != self.batch:
            raise SubnetlabError("attribution has no optimiser step to accumulate micro-batches into: its batch "
                                 "is the micro-batch", setting="micro_batch")
        if self.method in UNACCUMULATED and self.micro != self.batch:
            raise SubnetlabError(f"{self.method} does not accumulate micro-batches: its batch is the micro-batch",
                                 setting="micro_batch")
        if self.dtype not in DTYPES:
            raise SubnetlabError(f"dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}", setting="dtype")
        if self.method in AUTOCAST and self.dtype == "float16":
            raise SubnetlabError(f"dtype float16 has no loss scaling in {self.method} (gradients would underflow); "
                                 "use bfloat16 or float32", setting="dtype")
        if self.sparsity is not None and not 0.0 < self.sparsity < 1.0:
            raise SubnetlabError(f"sparsity {self.sparsity} is outside (0, 1)", setting="sparsity")

    @property
    def weights_dtype(self) -> str:
        """The dtype the model is built in: float32 where ``dtype`` is an autocast (``AUTOCAST``)."""
        return "float32" if self.method in AUTOCAST else self.dtype

    @property
    def micro(self) -> int:
        return self.micro_batch or self.batch

    def with_micro(self, micro: int) -> "PlanSettings":
        """The same run at ``micro`` examples per forward (the batch a whole number of micro-batches)."""
        from dataclasses import replace

        batch = micro if self.method in UNACCUMULATED else micro * (self.batch // self.micro)
        return replace(self, batch=batch, micro_batch=micro)


__all__ = ["ATTRIBUTION", "AUTOCAST", "DEFAULT_PRESETS", "DTYPES", "MAX_EXAMPLES", "METHODS", "UNACCUMULATED", "PlanSettings"]
