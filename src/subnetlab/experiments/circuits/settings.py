"""The circuits study's typed settings (the keys of its presets, ``reproduce.PRESETS``).

``study`` picks what runs: ``induction`` (the demo: a small model trained here, its mechanism, the circuit methods'
curves, the IOI-style model) or ``ioi-gpt2`` (the paper: Edge Pruning's GPT-2 IOI sweep). The keys only one of them
reads are optional: absent from the other's preset and from its ``config.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.settings import StudySettings, optional


@dataclass(frozen=True, kw_only=True)
class CircuitsSettings(StudySettings):
    """``model``: the trained model's shape (``induction``: a mapping of ``steps.ModelShape``) or the model to load
    (``ioi-gpt2``: a name); ``circuit``: the circuit task's sizes; ``node_pruning`` / ``edge_pruning`` / ``ioi``
    None turn that step off."""

    reproduction = "circuits"

    study: str
    threads: int
    seed: int
    task: dict[str, Any] | None = optional()
    model: dict[str, Any] | str
    device: str | None = optional()
    training: dict[str, Any] | None = optional()
    scores_size: int | None = optional()
    induction_threshold: float | None = optional()
    circuit: dict[str, Any]
    node_pruning: dict[str, Any] | None = optional()
    edge_pruning: dict[str, Any] | None
    ioi: dict[str, Any] | None = optional()
    # the edge-pruning search at ``edge_pruning.curve_sparsity`` again with every seed of ``seeds`` (``seed``'s is the
    # study's run) and as each search control of ``controls`` (methods.controls); None: no controls
    search_controls: dict[str, Any] | None = optional()

    def check(self) -> None:
        """The seed; for ``induction`` the task, model shape, training and circuit sizes; for ``ioi-gpt2`` every
        sparsity's Edge Pruning settings (the device is checked when the study runs)."""
        from subnetlab.experiments.circuits.training import ModelShape, TrainSettings
        from subnetlab.tasks.induction import InductionConfig

        if self.seed < 0:
            raise SubnetlabError(f"seed {self.seed!r}: expected a non-negative integer", setting="seed")
        if self.study == "induction":
            for key in ("task", "model", "training"):
                if not isinstance(getattr(self, key), dict):
                    raise SubnetlabError(f"{key} {getattr(self, key)!r}: the induction study trains its own model; "
                                         "expected a mapping of its settings", setting=key)
            InductionConfig(**self.task)
            shape = ModelShape(**self.model)
            TrainSettings(**self.training, seed=self.seed)
            if shape.layers < 2:
                raise SubnetlabError(f"model layers {shape.layers}: an induction circuit needs two layers (a "
                                     "previous-token head before the induction head)", setting="model")
            for key in ("n_train", "n_eval", "batch_size"):
                value = self.circuit.get(key)
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise SubnetlabError(f"circuit.{key} {value!r}: expected a positive integer", setting="circuit")
            threshold = self.induction_threshold
            if threshold is None or not 0 < threshold <= 1:
                raise SubnetlabError(f"induction_threshold {threshold!r}: expected a number in (0, 1]",
                                     setting="induction_threshold")
            size = self.scores_size
            if size is None or size < 1:
                raise SubnetlabError(f"scores_size {size!r}: expected a positive number of sequences",
                                     setting="scores_size")
            self._check_search_controls()
        elif self.study == "ioi-gpt2":
            from subnetlab.methods.edge_pruning.config import preset_config

            if not isinstance(self.model, str):
                raise SubnetlabError(f"model {self.model!r}: the paper study loads a model; expected its name",
                                     setting="model")
            ep = self.edge_pruning
            if not ep:
                raise SubnetlabError("edge_pruning: the paper study is Edge Pruning's sweep; it needs its settings",
                                     setting="edge_pruning")
            for sparsity in ep["sparsities"]:  # every target's settings, before the model loads
                preset_config("paper", float(sparsity), seed=self.seed, **dict(ep.get("overrides") or {}))
            if float(ep["curve_sparsity"]) not in [float(x) for x in ep["sparsities"]]:
                raise SubnetlabError(f"edge_pruning.curve_sparsity {ep['curve_sparsity']} is not one of the "
                                     "sparsities", setting="edge_pruning")
        else:
            raise SubnetlabError(f"study {self.study!r}: expected 'induction' or 'ioi-gpt2'", setting="study")

    def _check_search_controls(self) -> None:
        """Known controls, distinct seeds that include ``seed``, and an edge-pruning step to repeat."""
        from subnetlab.methods.controls import check_controls

        sc = self.search_controls
        if sc is None:
            return
        if not isinstance(sc, dict) or set(sc) - {"controls", "seeds"}:
            raise SubnetlabError(f"search_controls {sc!r}: expected a mapping of controls and seeds",
                                 setting="search_controls")
        check_controls(list(sc.get("controls") or []))
        seeds = list(sc.get("seeds") or [])
        if self.seed not in seeds or len(set(seeds)) != len(seeds):
            raise SubnetlabError(f"search_controls.seeds {seeds}: distinct seeds that include seed {self.seed} (the "
                                 "study's own edge-pruning run)", setting="search_controls")
        if not self.edge_pruning:
            raise SubnetlabError("search_controls: they repeat the edge-pruning step, which these settings turn off; "
                                 "turn search_controls off too",
                                 setting="search_controls")
