"""Everything a pruning job loads from its JSON config: model, task, training data, ablation values.

A job config (what ``config.json`` of a run holds) looks like::

    {"model": "runs/ft/model", "task": "nli-synthetic", "task_options": {"n_train": 2000},
     "eval_data": ["hans=../shared/data/hans/hans_subset_val.tsv"], "splits": null,
     "cache_dir": "DIR/cache", "preset": "demo", "prune": {...PruneConfig...}}

``splits`` (None: every evaluation split of the task) are checked before any
training, so a missing split fails at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from transformers import PreTrainedModel

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import ComponentValues
from subnetlab.methods.hard_concrete.ablation import ablation_values, mean_activations
from subnetlab.methods.hard_concrete.config import PruneConfig
from subnetlab.methods.hard_concrete.data import PruningData
from subnetlab.methods.model_fit import check_model_fits_task
from subnetlab.models import LoadedModel, load_model
from subnetlab.tasks.base import Task
from subnetlab.runs.job_config import JobConfig, require_positive
from subnetlab.tasks.spec import TaskSpec, eval_splits


@dataclass(frozen=True)
class ModelAndTask(JobConfig):
    """The keys every pruning-study job shares: which model, which task, which evaluation splits."""

    model: str
    task: str
    task_options: dict[str, Any] = field(default_factory=dict)
    eval_data: list[str] = field(default_factory=list)
    splits: list[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise SubnetlabError(f"model: expected a model name or directory, got {self.model!r}", setting="model")
        if self.splits is not None and (isinstance(self.splits, str) or not all(isinstance(s, str) for s in self.splits)):
            raise SubnetlabError(f"splits: expected a list of split names, got {self.splits!r}", setting="splits")
        self.task_spec  # checks the task name, options and evaluation files

    @property
    def task_spec(self) -> TaskSpec:
        return TaskSpec(self.task, self.task_options, tuple(self.eval_data))


@dataclass(frozen=True)
class PruneJobConfig(ModelAndTask):
    """``prune_job``'s config: model and task, the mean-activation cache, the preset and the pruning settings."""

    cache_dir: str | None = None
    preset: str | None = None
    prune: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.settings  # checks the pruning settings

    @cached_property
    def settings(self) -> PruneConfig:
        return PruneConfig.from_dict(self.prune)


@dataclass(frozen=True)
class EvalSettings:
    """How the full model is scored: the same batch size, length and example limit as the runs."""

    batch_size: int
    max_length: int
    limit: int | None = None

    def __post_init__(self) -> None:
        require_positive("evaluation", "batch_size", self.batch_size)
        require_positive("evaluation", "max_length", self.max_length)
        require_positive("evaluation", "limit", self.limit, allow_none=True)


@dataclass(frozen=True)
class FullModelJobConfig(ModelAndTask):
    """``full_model_job``'s config: model and task, and the evaluation settings of the runs."""

    eval: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        EvalSettings(**self.eval)

    @property
    def eval_settings(self) -> EvalSettings:
        return EvalSettings(**self.eval)


def check_checkpoint(name: str) -> None:
    """Cheap check before a sweep starts: a local checkpoint must be a supported architecture."""
    from pathlib import Path

    from transformers import AutoConfig

    from subnetlab.models import FAMILIES, resolve

    source = Path(resolve(name)).expanduser()
    if not source.exists():
        return  # a hub id: checked when the jobs load it
    if not (source / "config.json").is_file():
        raise SubnetlabError(f"{name}: not a Hugging Face model directory (no config.json)")
    try:
        model_type = AutoConfig.from_pretrained(str(source)).model_type
    except (OSError, ValueError, KeyError) as e:
        raise SubnetlabError(f"{source / 'config.json'}: cannot read the model config ({str(e).splitlines()[0]})") from None
    supported = sorted(t for spec in FAMILIES.values() if spec.has_components for t in spec.model_types)
    if model_type not in supported:
        raise SubnetlabError(f"{name}: model type {model_type!r} is not supported (supported: {', '.join(supported)})")


def task_tokenizer(loaded: LoadedModel, task: Task) -> Any:
    """The task's own tokenizer (arithmetic vocabularies) if it has one, else the model's."""
    return task.tokenizer if task.tokenizer is not None else loaded.tokenizer


def load_pruning_model(name: str, task: Task) -> LoadedModel:
    """Load a fine-tuned checkpoint with the head the task needs; refuse what cannot be pruned."""
    head = "causal-lm" if task.kind == "lm" else "classification"
    try:
        loaded = load_model(name, head=head)
    except SubnetlabError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SubnetlabError(f"{name}: not a supported model checkpoint ({first})") from None
    if not isinstance(loaded.model, PreTrainedModel):
        raise SubnetlabError(f"{name}: not a Hugging Face model")
    if task.kind == "classification":
        task.model_labels(int(getattr(loaded.model.config, "num_labels", 0) or 0))  # raises on a wrong head
    check_model_fits_task(loaded.model, task_tokenizer(loaded, task), task, name)
    return loaded


@dataclass
class PruningSetup:
    """A loaded model, its task and pruning data, and the replacement values for training and evaluation."""

    loaded: LoadedModel
    tokenizer: Any
    task: Task
    data: PruningData
    splits: list[str]
    ablation: ComponentValues | None  # used while training (None: zero, or resample per batch)
    eval_ablation: ComponentValues | None  # used to evaluate the binary subnetworks

    @classmethod
    def from_job(cls, job: PruneJobConfig) -> "PruningSetup":
        prune = job.settings
        task = job.task_spec.build()
        splits = eval_splits(task, job.splits)
        if not task.train:
            raise SubnetlabError(f"task {task.name} has no training examples to prune on (pass train data)")
        loaded = load_pruning_model(job.model, task)
        tokenizer = task_tokenizer(loaded, task)
        data = PruningData.from_task(task, tokenizer, "train", prune.max_length, prune.train_limit)
        cache = job.cache_dir
        model, adapter = loaded.model, loaded.adapter
        ablation = ablation_values(prune.ablation, model, adapter, data, prune.means_examples,
                                   prune.eval_batch_size, cache)
        # resample needs pairs of batches; its subnetworks are scored under mean ablation
        eval_ablation = ablation if prune.ablation != "resample" else mean_activations(
            model, adapter, data, prune.means_examples, prune.eval_batch_size, cache)
        return cls(loaded, tokenizer, task, data, splits, ablation, eval_ablation)
