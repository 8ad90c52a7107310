"""Every job config is a ``JobConfig``: keys checked and typed by ``from_dict``, and one ``record()`` writes the
config.json of the commands that run their one job themselves (evaluate, circuit-eval, circuit --method eap)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import subnetlab.runs
from subnetlab.errors import SubnetlabError
from subnetlab.runs.job_config import JobConfig
from subnetlab.tasks.spec import TaskSpec


def _job_configs() -> list[type]:
    found = []
    for info in pkgutil.iter_modules(subnetlab.runs.__path__):
        module = importlib.import_module(f"subnetlab.runs.{info.name}")
        found += [c for name, c in vars(module).items()
                  if name.endswith("JobConfig") and inspect.isclass(c) and c.__module__ == module.__name__
                  and c is not JobConfig]
    return found


def test_every_job_config_is_on_the_one_base_with_its_record() -> None:
    configs = _job_configs()
    assert {"AttributionJobConfig", "CircuitEvalJobConfig", "EvaluateJobConfig", "CircuitJobConfig"} <= \
        {c.__name__ for c in configs}
    assert [c.__name__ for c in configs if not issubclass(c, JobConfig)] == []
    assert [c.__name__ for c in configs if "record" in vars(c)] == []


def test_record_is_the_command_the_keys_and_what_the_run_learnt(tmp_path) -> None:
    from subnetlab.runs.attribution import AttributionJobConfig
    from subnetlab.runs.evaluate import EvaluateJobConfig

    eap = AttributionJobConfig.from_dict({"model": "minilm", "task": TaskSpec("circuit:ioi"), "ig_steps": "9",
                                          "limit": 4})
    assert eap.ig_steps == 1  # eap takes one step; eap-ig integrates over ig_steps
    assert eap.record(task={"task": "circuit:ioi", "n_train": 200}) == {
        "command": "circuit", "model": "minilm", "task": {"task": "circuit:ioi", "n_train": 200}, "method": "eap",
        "ig_steps": 1, "split": "train", "metric": "logit_diff", "batch_size": 16, "limit": 4,
        "embedding_nodes": None, "device": "auto"}
    (tmp_path / "model").mkdir()
    job = EvaluateJobConfig(model=str(tmp_path / "model"), task=TaskSpec("hans"), splits=(), means_examples=30)
    record = job.record(task={"task": "hans"})
    assert list(record)[:4] == ["command", "model", "task", "eval_data"] and record["splits"] is None
    assert "means_examples" not in record  # config.json's means_from holds the count a run used


def test_from_dict_types_and_names_the_keys() -> None:
    from subnetlab.runs.circuit_eval import CircuitEvalJobConfig

    for data, message in [({"model": "m", "task": "circuit:ioi", "scores": "x"}, "task: expected TaskSpec"),
                          ({"model": "m", "task": TaskSpec("circuit:ioi"), "batch_size": "many"}, "batch_size"),
                          ({"model": "m", "task": TaskSpec("circuit:ioi"), "colour": "red"}, "unknown job setting"),
                          ({"task": TaskSpec("circuit:ioi")}, r"missing job setting\(s\) model")]:
        with pytest.raises(SubnetlabError, match=message):
            CircuitEvalJobConfig.from_dict(data)
