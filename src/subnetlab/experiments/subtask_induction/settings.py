"""The Subtask Induction study's typed settings (the keys of its presets, ``reproduce.PRESETS``)."""

from __future__ import annotations

from dataclasses import dataclass

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.settings import StudySettings, optional


@dataclass(frozen=True, kw_only=True)
class SubtaskInductionSettings(StudySettings):
    """Base models (``base_*``) per depth of ``layers``; continuous-sparsification discovery of ``sub_op`` (``cs_*``,
    one run per L0 weight of ``lambdas``, one chosen by ``selection``); the transfer grid to ``target_op``
    (``conditions`` x ``sizes`` x ``seeds``, ``transfer_*``; ``secondary_conditions`` again under
    ``secondary_reinit``)."""

    reproduction = "subtask-induction"

    layers: list[int]
    max_number: int
    modulus: int
    base_op: str
    sub_op: str
    target_op: str
    base_train: int
    base_lr: float
    base_batch: int
    base_epochs: int
    base_scheduler: str
    cs_samples: int
    cs_epochs: int
    cs_lr: float
    cs_batch: int
    lambdas: list[float]
    cs_include: list[str]
    cs_keep: str
    selection: str
    selection_tolerance: float
    selection_lambda: float | None
    sizes: list[int]
    seeds: list[int]
    conditions: list[str]
    reinit: str
    secondary_reinit: str | None
    secondary_conditions: list[str]
    transfer_epochs: int
    transfer_min_steps: int
    transfer_lr: float
    transfer_batch: int
    eval_every: int
    transfer_evals: int
    n_eval: int
    n_test: int
    freeze: bool
    cs_loss: str
    cs_accuracy: str
    transfer_loss: str
    transfer_accuracy: str
    transfer_ties: str
    transfer_init_std: float | None
    backend: str
    jobs: int | None
    threads: int
    stack: int
    seed: int
    device: str
    # search controls (methods.controls) of the chosen lambda's discovery, each run with every seed of
    # ``control_seeds`` beside the real discovery's (``seed`` is the sweep's own run); None: no controls
    controls: list[str] | None = optional()
    control_seeds: list[int] | None = optional()
    # plateau stopping (optim.Plateau) of transfer runs (evaluations, on the evaluation accuracy; transfer_epochs and
    # transfer_min_steps then set the cap) and of discovery runs (epochs, on the held-out objective; cs_epochs the
    # cap); None: fixed epochs (the paper preset)
    transfer_patience: int | None = optional()
    transfer_min_delta: float | None = optional()
    cs_patience: int | None = optional()
    cs_min_delta: float | None = optional()

    def check(self) -> None:
        """Every setting that can be checked without training: conditions, choices, the tasks' sizes, learning
        rates and batches, the base model's fine-tuning configuration and the three operations."""
        from subnetlab.methods.finetune.config import resolve_config
        from subnetlab.tasks.arithmetic import parse_operation
        from subnetlab.transfer.conditions import check_conditions, check_reinit

        check_conditions(self.conditions, setting="conditions")
        check_reinit(self.reinit)
        if self.secondary_conditions:
            check_conditions(self.secondary_conditions, setting="secondary_conditions")
        if self.secondary_reinit:
            check_reinit(self.secondary_reinit)
        self.lambda_choice()  # a bad rule fails before any training
        self._check_choices()
        self._check_sizes()
        self._check_controls()
        from subnetlab.optim import Plateau

        for key, delta in (("transfer_patience", "transfer_min_delta"), ("cs_patience", "cs_min_delta")):
            if getattr(self, key) is not None:
                try:
                    Plateau(getattr(self, key), getattr(self, delta) or 0.0)
                except SubnetlabError as e:
                    raise SubnetlabError(f"{key}/{delta}: {e}", setting=key) from None
        for key in ("base_lr", "cs_lr", "transfer_lr"):
            if getattr(self, key) <= 0:
                raise SubnetlabError(f"{key} {getattr(self, key)}: must be positive", setting=key)
        for key in ("base_batch", "cs_batch", "transfer_batch", "base_epochs", "cs_epochs"):
            if getattr(self, key) < 1:
                raise SubnetlabError(f"{key} {getattr(self, key)}: must be at least 1", setting=key)
        resolve_config(preset="subtask-induction", model=f"gpt2-arith:{self.layers[0]}", task=f"arith:{self.base_op}",
                       lr=self.base_lr, batch_size=self.base_batch, epochs=float(self.base_epochs),
                       scheduler=self.base_scheduler, seed=self.seed, eval_at_start=False, device=self.device,
                       eval_every=10**9, save_every=10**9)
        for key in ("base_op", "sub_op", "target_op"):
            parse_operation(getattr(self, key))

    def lambda_choice(self):
        """The ``LambdaChoice`` (which discovery run's subnetwork transfers) the settings ask for."""
        from subnetlab.methods.continuous_sparsification import LambdaChoice

        lam = self.selection_lambda
        return LambdaChoice(self.selection, float(self.selection_tolerance), None if lam is None else float(lam))

    def _check_choices(self) -> None:
        """The loss, accuracy, tie and initialisation settings."""
        from subnetlab.transfer.train import ACCURACIES, LOSSES, TIES, check_choice

        for key, choices in (("cs_loss", LOSSES), ("transfer_loss", LOSSES), ("cs_accuracy", ACCURACIES),
                             ("transfer_accuracy", ACCURACIES), ("transfer_ties", TIES)):
            check_choice(getattr(self, key), choices, key)
        std = self.transfer_init_std
        if std is not None and std <= 0:
            raise SubnetlabError(f"transfer_init_std {std!r}: expected a positive standard deviation or none",
                                 setting="transfer_init_std")

    def _check_controls(self) -> None:
        """Known controls, and seeds that include the sweep's own (its run is the real seed's discovery)."""
        from subnetlab.methods.controls import check_controls

        if not self.controls:
            return
        check_controls(self.controls)
        seeds = self.control_seeds or []
        if self.seed not in seeds or len(set(seeds)) != len(seeds):
            raise SubnetlabError(f"control_seeds {seeds}: distinct seeds that include seed {self.seed} (the "
                                 "sweep's own run)", setting="control_seeds")

    def _check_sizes(self) -> None:
        """The arithmetic tasks' sizes (base, subtask, transfer with the largest disambiguation set), checked as the
        task generator checks them, without generating any rows."""
        n, p = self.max_number, self.modulus
        if n < 2:
            raise SubnetlabError(f"max_number {n} must be at least 2", setting="max_number")
        if not 2 <= p <= n:
            raise SubnetlabError(f"modulus {p} must be in [2, max_number={n}]", setting="modulus")
        n_eval, n_test = self.n_eval, self.n_test
        if min(n_eval, n_test) < 1:
            raise SubnetlabError(f"n_eval={n_eval}, n_test={n_test} must be at least 1", setting="n_eval")
        for key in ("base_train", "cs_samples"):
            rows = getattr(self, key)
            if rows < n:
                raise SubnetlabError(f"{key}={rows} must be at least max_number={n} so that every number token "
                                     "appears", setting=key)
            if rows + n_eval + n_test > n * n:
                raise SubnetlabError(f"{key} + n_eval + n_test = {rows + n_eval + n_test} exceeds the {n * n} "
                                     f"distinct pairs of max_number={n}", setting=key)
        sizes = self.sizes
        if not sizes or min(sizes) < 0:
            raise SubnetlabError(f"sizes {sizes}: expected one or more disambiguation sizes >= 0", setting="sizes")
        if n_eval + n_test + max(sizes) > n * (n - 1):
            raise SubnetlabError(f"n_eval + n_test + the largest size = {n_eval + n_test + max(sizes)} exceed the "
                                 f"{n * (n - 1)} pairs with a != b of max_number={n}", setting="sizes")
        for key in ("layers", "seeds", "lambdas"):
            if not getattr(self, key):
                raise SubnetlabError(f"{key}: at least one value is needed", setting=key)
        if any(x < 1 for x in self.layers):
            raise SubnetlabError(f"layers {self.layers}: every depth must be at least 1", setting="layers")
        if any(x <= 0 for x in self.lambdas):
            raise SubnetlabError(f"lambdas {self.lambdas}: every L0 weight must be positive", setting="lambdas")
