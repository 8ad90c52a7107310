"""``subnetlab evaluate`` as a run: score a model (or one of its subnetworks) on a task's splits.

``evaluate_run(job, out)`` writes ``config.json`` (what was scored, how) and
``metrics.json`` (``{split: task.score(...)}``: accuracy, per label, per
out-of-domain subcase) into ``out`` and returns the metrics. A subnetwork is
applied with its own ablation unless the job names another; mean ablation uses
a means file when given, else means over the task's training split (or its
first evaluation split).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from subnetlab.errors import SubnetlabError, check_distinct_names
from subnetlab.io import write_json
from subnetlab.runs.job_config import JobConfig, require_positive, unrecorded
from subnetlab.runs.splits import held_out_task, save_splits
from subnetlab.tasks.spec import TaskSpec

ABLATIONS = ("zero", "mean")


@dataclass(frozen=True)
class EvaluateJobConfig(JobConfig):
    """What to score: a model, a task, optionally a subnetwork and how it is ablated."""

    command: ClassVar[str] = "evaluate"
    model: str
    task: TaskSpec
    eval_data: tuple[str, ...] = field(default=(), repr=False)
    splits: tuple[str, ...] | None = None  # None (or empty): every evaluation split
    subnetwork: str | None = None
    ablation: str | None = None
    means: str | None = None
    means_examples: int = unrecorded(512)  # config.json's means_from holds the count used, when means are computed
    batch_size: int = 64
    max_length: int = 128
    limit: int | None = None
    device: str = "auto"
    dtype: str = "float32"  # forward passes: float32, or bfloat16 / float16 autocast on accelerators

    def __post_init__(self) -> None:
        from subnetlab.methods.finetune.model import ARITH_PREFIX

        if not self.splits:
            object.__setattr__(self, "splits", None)
        else:
            check_distinct_names("splits", list(self.splits))  # a split twice, or '': refused
        if self.model.startswith(ARITH_PREFIX):
            raise SubnetlabError(f"model {self.model}: evaluate a trained model directory, not a fresh "
                                 f"{ARITH_PREFIX} model", setting="model")
        if self.ablation is not None and self.ablation not in ABLATIONS:
            raise SubnetlabError(f"ablation {self.ablation!r}: choose one of {', '.join(ABLATIONS)}", setting="ablation")
        for name in ("means_examples", "batch_size", "max_length"):
            require_positive("evaluation", name, getattr(self, name))
        require_positive("evaluation", "limit", self.limit, allow_none=True)
        if self.means is not None and self.subnetwork is None:
            raise SubnetlabError(f"means {self.means}: mean activations replace the components a subnetwork removes; "
                                 "give the subnetwork too", setting="means")
        for name in ("subnetwork", "means"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                if Path(path).exists() and not Path(path).is_dir():  # a named pipe would block its reader
                    raise SubnetlabError(f"{name} {path}: not a regular file (a named pipe, device or socket)",
                                         setting=name)
                raise SubnetlabError(f"{name} {path}: no such file", setting=name)


def evaluate_run(job: EvaluateJobConfig, out: Path) -> dict[str, Any]:
    """Score ``job`` and write its run directory; returns ``{split: scores}``."""
    from subnetlab.methods.evaluate import evaluate, subnetwork_context
    from subnetlab.methods.model_fit import check_lengths_fit, check_model_fits_task
    from subnetlab.models import load_model
    from subnetlab.models.loading import refuse_exported
    from subnetlab.progress import stage
    from subnetlab.runtime import autocast, describe_runtime, resolve_device, resolve_dtype, runtime_record

    device = resolve_device(job.device)
    dtype = resolve_dtype(job.dtype, device)
    if job.subnetwork is not None:
        refuse_exported(job.model, "applying a subnetwork")  # its gates are sized for the full model
    stage(describe_runtime(device, dtype))
    task = held_out_task(job.task, job.model, job.subnetwork)  # not the rows that trained the model (own data)
    loaded = load_model(job.model, head="causal-lm" if task.kind == "lm" else "classification")
    archs = getattr(loaded.model.config, "architectures", None) or []
    if task.kind == "classification" and not any(a.endswith("ForSequenceClassification") for a in archs):
        raise SubnetlabError(f"model {job.model} has no trained classification head ({', '.join(archs) or 'none'}); "
                             "fine-tune it first", setting="model")
    tokenizer = task.tokenizer or loaded.tokenizer
    check_model_fits_task(loaded.model, tokenizer, task, job.model)
    splits = list(job.splits) if job.splits else None
    check_lengths_fit(loaded.model, tokenizer, task, job.max_length, job.model, splits or list(task.eval_splits))
    config = {**job.record(task=task.options), **runtime_record(device, dtype)}
    loaded.model.to(device)
    if job.subnetwork is None:
        with autocast(device, dtype):
            results = evaluate(loaded.model, tokenizer, task, splits, job.batch_size, job.max_length, limit=job.limit)
    else:
        from subnetlab.intervene import ComponentValues
        from subnetlab.methods.evaluate import mean_values
        from subnetlab.subnetwork import Subnetwork

        sub = Subnetwork.load(job.subnetwork, loaded.adapter)
        given = ComponentValues.load(job.means).check(loaded.adapter, job.means) if job.means is not None else None
        values = None
        if sub.kind == "structured" and (job.ablation or sub.ablation) == "mean":
            if given is not None:
                values = given
            else:
                source = "train" if task.train else (splits or list(task.eval_splits))[0]
                count = min(job.means_examples, len(task.examples(source)))
                stage(f"mean activations over {count} examples of {source}")
                with autocast(device, dtype):
                    values = mean_values(loaded.model, loaded.adapter, task, tokenizer, source, count, job.batch_size,
                                         job.max_length)
                config["means_from"] = {"split": source, "examples": count}
        with subnetwork_context(loaded.model, loaded.adapter, sub, ablation=job.ablation, means=values), \
                autocast(device, dtype):
            results = evaluate(loaded.model, tokenizer, task, splits, job.batch_size, job.max_length, limit=job.limit)
        config["subnetwork_sparsity"] = sub.sparsity
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", config)
    save_splits(out, task)
    write_json(out / "metrics.json", results)
    return results


__all__ = ["EvaluateJobConfig", "evaluate_run"]
