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
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import ComponentValues
from subnetlab.methods.controls import RANDOM_WEIGHTS, apply_control, check_controls
from subnetlab.methods.head_pruning.ablation import ablation_values, mean_activations
from subnetlab.methods.head_pruning.config import PruneConfig
from subnetlab.methods.l0.data import PruningData
from subnetlab.methods.model_fit import check_lengths_fit, check_model_fits_task
from subnetlab.models import LoadedModel, load_model
from subnetlab.models.device_map import DeviceMap
from subnetlab.models.loading import refuse_exported, refuse_pickled_weights
from subnetlab.runs.job_config import JobConfig, optional, require_positive
from subnetlab.runtime import DTYPE_NAMES, resolve_device
from subnetlab.tasks.base import Task
from subnetlab.tasks.spec import TaskSpec, eval_splits


@dataclass(frozen=True)
class ModelAndTask(JobConfig):
    """The keys every pruning-study job shares: which model, which task, which evaluation splits."""

    model: str
    task: str
    task_options: dict[str, Any] = field(default_factory=dict)
    eval_data: list[str] = field(default_factory=list)
    splits: list[str] | None = None
    device: str = "auto"  # where the model runs (``runtime.resolve_device``); not part of a run's identity
    # a search control (``methods.controls``): random-weights or shuffled-labels, seeded by the run's seed
    control: str | None = field(default=None, metadata={"optional": True})
    # accelerate's placement of a model too large for one device (``models.device_map.DeviceMap.to_dict``); not part
    # of a run's identity: a split model computes what the whole one does
    device_map: dict[str, Any] | None = field(default=None, metadata={"optional": True})

    def __post_init__(self) -> None:
        if self.control is not None:
            check_controls([self.control])
        if self.device_map is not None:
            DeviceMap.from_dict(self.device_map)
            if self.device != "auto":
                raise SubnetlabError(f"device {self.device!r}: a device map places the model itself; leave the "
                                     "device at auto", setting="device")
            if self.control == RANDOM_WEIGHTS:
                raise SubnetlabError("the random-weights control builds a fresh copy of the whole model on one "
                                     "device, which a device map exists to avoid", setting="control")
        if not isinstance(self.device, str) or not self.device:
            raise SubnetlabError(f"device: expected auto, cpu, cuda, cuda:N or mps, got {self.device!r}", setting="device")
        if not isinstance(self.model, str) or not self.model:
            raise SubnetlabError(f"model: expected a model name or directory, got {self.model!r}", setting="model")
        if self.splits is not None and (isinstance(self.splits, str) or not all(isinstance(s, str) for s in self.splits)):
            raise SubnetlabError(f"splits: expected a list of split names, got {self.splits!r}", setting="splits")
        self.task_spec  # checks the task name, options and evaluation files

    @property
    def task_spec(self) -> TaskSpec:
        return TaskSpec(self.task, self.task_options, tuple(self.eval_data))

    @property
    def placement(self) -> DeviceMap | None:
        """The device map the model is loaded with (None: the whole model on ``device``)."""
        return None if self.device_map is None else DeviceMap.from_dict(self.device_map)

    def place(self, loaded: LoadedModel) -> LoadedModel:
        """Move the model to ``device``, unless its device map placed it already (gates and data follow it)."""
        if self.device_map is None:
            loaded.model.to(resolve_device(self.device))
        return loaded


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
    dtype: str | None = optional()  # the runs' weight dtype (None: float32), so the "model" column is their model

    def __post_init__(self) -> None:
        super().__post_init__()
        EvalSettings(**self.eval)
        if self.dtype not in (None, *DTYPE_NAMES):
            raise SubnetlabError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPE_NAMES)}", setting="dtype")

    @property
    def eval_settings(self) -> EvalSettings:
        return EvalSettings(**self.eval)


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_weight_files(source: Path) -> None:
    """A local checkpoint has weights, and a single ``model.safetensors`` has a readable header (not the data)."""
    from safetensors import SafetensorError, safe_open

    if not any((source / name).is_file() for name in WEIGHT_FILES):
        raise SubnetlabError(f"{source}: no weights (model.safetensors or pytorch_model.bin) beside config.json",
                             setting="model")
    refuse_pickled_weights(source, str(source))
    single = source / "model.safetensors"
    if single.is_file():
        try:
            with safe_open(str(single), "pt") as f:
                f.keys()
        except (SafetensorError, OSError, ValueError) as e:
            raise SubnetlabError(f"{single}: not a readable safetensors file ({str(e).splitlines()[0]})",
                                 setting="model") from None


def check_checkpoint(name: str) -> None:
    """Cheap check before a sweep starts: a local checkpoint must be a supported architecture."""
    from pathlib import Path

    from subnetlab.models import FAMILIES, resolve
    from subnetlab.models.loading import read_config

    source = Path(resolve(name)).expanduser()
    if not source.exists():
        if name.startswith((".", "/", "~")) or name.count("/") > 1:
            raise SubnetlabError(f"{name}: no such model directory", setting="model")
        return  # a hub id: checked when the jobs load it
    if not (source / "config.json").is_file():
        raise SubnetlabError(f"{name}: not a Hugging Face model directory (no config.json)")
    refuse_exported(name, "pruning")
    try:
        model_type = read_config(str(source)).model_type
    except (OSError, ValueError, KeyError) as e:
        raise SubnetlabError(f"{source / 'config.json'}: cannot read the model config ({str(e).splitlines()[0]})") from None
    supported = sorted(t for spec in FAMILIES.values() if spec.has_components for t in spec.model_types)
    if model_type not in supported:
        raise SubnetlabError(f"{name}: model type {model_type!r} is not supported (supported: {', '.join(supported)})")


def check_sweep_inputs(name: str, task: Task, jobs: list[PruneJobConfig]) -> None:
    """What the jobs of a sweep would find out only after loading the model, checked before any starts.

    Every job's training data must fill a batch, a local checkpoint must have readable
    weights, and every ``max_length`` must fit the model's positions (read from the
    checkpoint's config and tokenizer, not its weights).
    """
    from transformers import AutoTokenizer

    from subnetlab.methods.model_fit import check_lengths_fit, position_limit
    from subnetlab.models import resolve
    from subnetlab.models.loading import has_tokenizer_files, read_config

    if task.tokenizer_dependent:  # circuit tasks: their prompt pairs are made (and checked) for the tokenizer
        tokenizer = task.tokenizer or _checkpoint_tokenizer(name)
        if tokenizer is None:
            return  # a hub id: each job binds the task once its model is loaded
        task.bind(tokenizer)
    if not task.train:
        raise SubnetlabError(f"task {task.name} has no training examples to prune on (pass train data)",
                             setting="task_options")
    for job in jobs:
        prune = job.settings
        size = len(task.train) if prune.train_limit is None else min(len(task.train), prune.train_limit)
        if prune.batch_size > size:
            raise SubnetlabError(f"batch_size {prune.batch_size} is larger than the {size} training examples of "
                                 f"task {task.name}", setting="batch_size")
    source = Path(resolve(name)).expanduser()
    longest = max(job.settings.max_length for job in jobs)
    if not (source / "config.json").is_file():
        return  # a hub id: the jobs check it once loaded
    check_weight_files(source)
    try:
        config = read_config(str(source))
    except (OSError, ValueError, KeyError):
        return  # check_checkpoint reports an unreadable config
    limit = position_limit(config)
    if limit is None or longest <= limit:
        return
    tokenizer = task.tokenizer
    if tokenizer is None and has_tokenizer_files(source):
        tokenizer = AutoTokenizer.from_pretrained(str(source))
    if tokenizer is not None:
        check_lengths_fit(config, tokenizer, task, longest, name, ["train", *eval_splits(task, jobs[0].splits)])


def _checkpoint_tokenizer(name: str) -> Any:
    """The tokenizer saved beside a local checkpoint, or None."""
    from transformers import AutoTokenizer

    from subnetlab.models import resolve
    from subnetlab.models.loading import has_tokenizer_files

    source = Path(resolve(name)).expanduser()
    return AutoTokenizer.from_pretrained(str(source)) if has_tokenizer_files(source) else None


def task_tokenizer(loaded: LoadedModel, task: Task) -> Any:
    """The task's own tokenizer (arithmetic vocabularies) if it has one, else the model's."""
    return task.tokenizer if task.tokenizer is not None else loaded.tokenizer


def load_pruning_model(name: str, task: Task, device_map: DeviceMap | None = None,
                       dtype: str = "float32") -> LoadedModel:
    """Load a fine-tuned checkpoint with the head the task needs (placed by ``device_map`` if given; its weights
    in ``dtype``); refuse what cannot be pruned."""
    import torch

    head = "causal-lm" if task.kind == "lm" else "classification"
    refuse_exported(name, "gating heads and MLPs")
    try:
        loaded = load_model(name, head=head, device_map=device_map,
                            **({} if dtype == "float32" else {"dtype": getattr(torch, dtype)}))
    except SubnetlabError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SubnetlabError(f"{name}: not a supported model checkpoint ({first})") from None
    if not isinstance(loaded.model, PreTrainedModel):
        raise SubnetlabError(f"{name}: not a Hugging Face model")
    check_model_fits_task(loaded.model, task_tokenizer(loaded, task), task, name)  # names the model and both sizes
    if task.kind == "classification":
        task.model_labels(int(getattr(loaded.model.config, "num_labels", 0) or 0))  # raises on a wrong head
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
        if not task.train and not task.tokenizer_dependent:
            raise SubnetlabError(f"task {task.name} has no training examples to prune on (pass train data)")
        loaded = job.place(load_pruning_model(job.model, task, job.placement, prune.dtype))  # gates, data, teacher
        # follow the model's device
        tokenizer = task_tokenizer(loaded, task)
        task.bind(tokenizer)
        loaded = apply_control(job.control, loaded, task, prune.seed)
        check_lengths_fit(loaded.model, tokenizer, task, prune.max_length, job.model, ["train", *splits])
        data = PruningData.from_task(task, tokenizer, "train", prune.max_length, prune.train_limit)
        cache = job.cache_dir
        model, adapter = loaded.model, loaded.adapter
        ablation = ablation_values(prune.ablation, model, adapter, data, prune.means_examples,
                                   prune.eval_batch_size, cache)
        # resample needs pairs of batches; its subnetworks are scored under mean ablation
        eval_ablation = ablation if prune.ablation != "resample" else mean_activations(
            model, adapter, data, prune.means_examples, prune.eval_batch_size, cache)
        return cls(loaded, tokenizer, task, data, splits, ablation, eval_ablation)
