"""Search controls: would the same search find as good a mask where there is nothing to find?

A mask search can fit a task with weights that never computed it (masks over randomly initialised networks
reach high accuracy: Zhou et al. 2019; Ramanujan et al. 2020). Two controls run the *same* search, budget and
seed on inputs that hold no learned solution:

* ``random-weights``: the same architecture built from the model's config and initialised by its own
  initialiser (``post_init``, i.e. ``_init_weights``) under a seed drawn from the run's (``control_init_seed``);
* ``shuffled-labels``: the same inputs with the answers permuted within each split (a classification
  task's labels; a circuit task's answer and wrong answer moved across prompt pairs), seeded.

``control_verdict`` says whether the real mask beats every control by more than the spread over seeds.
Every command that searches for a subnetwork builds its controls here.
"""

from __future__ import annotations

import copy
import hashlib
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from subnetlab.errors import SubnetlabError, check_distinct_names
from subnetlab.models.adapters import get_adapter
from subnetlab.models.loading import LoadedModel
from subnetlab.tasks.base import Task

RANDOM_WEIGHTS = "random-weights"
SHUFFLED_LABELS = "shuffled-labels"
CONTROLS = (RANDOM_WEIGHTS, SHUFFLED_LABELS)
CONTROLS_DIR = "controls"  # a sweep's controls: DIR/controls/<control>/<the real run's relative path>


def check_controls(names: Sequence[str]) -> tuple[str, ...]:
    """The controls named, in the order given; an unknown, empty or repeated one is refused."""
    out: list[str] = []
    for name in check_distinct_names("control", list(names)):
        if name not in CONTROLS:
            raise SubnetlabError(f"control {name!r}: expected one of {', '.join(CONTROLS)}", setting="control")
        if name not in out:
            out.append(name)
    return tuple(out)


def control_init_seed(seed: int) -> int:
    """The initialisation seed of the random-weights control of a run with ``seed``: its own stream, so a model
    that was itself built from a config with the run's seed (a tiny or scratch model) is not rebuilt exactly."""
    digest = hashlib.sha256(f"{RANDOM_WEIGHTS}:{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def reinitialised(loaded: LoadedModel, seed: int) -> LoadedModel:
    """A fresh model of the same class and config, initialised by its own initialiser from
    ``control_init_seed(seed)``, on the same device and dtype, in the same train/eval mode, with its own adapter.
    Refused if the fresh weights equal the model's: such a control would measure the model itself."""
    model = loaded.model
    if not hasattr(model, "post_init") or not hasattr(model, "config"):
        raise SubnetlabError(f"{loaded.source}: a random-weights control needs a Hugging Face model (built from its "
                             "config)", setting="control")
    first = next(model.parameters())
    init = control_init_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init)
        fresh = type(model)(copy.deepcopy(model.config))  # its __init__ ends in post_init: the model's initialiser
    fresh.to(device=first.device, dtype=first.dtype)
    fresh.train(model.training)
    theirs = model.state_dict()
    if all(torch.equal(v, theirs[k]) for k, v in fresh.state_dict().items() if k in theirs):
        raise SubnetlabError(f"{loaded.source}: the random-weights control initialised from seed {init} has the "
                             "model's own weights (the model is itself an untrained initialisation from that seed); "
                             "use another seed", setting="control")
    return LoadedModel(fresh, loaded.tokenizer, get_adapter(fresh),
                       f"{loaded.source} ({RANDOM_WEIGHTS}, seed {seed}, initialised from {init})")


def permutation(n: int, seed: int) -> list[int]:
    """A permutation of ``range(n)`` drawn from ``seed`` (the same on every machine)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(seed))).tolist()


def check_shufflable(task: Task) -> None:
    """Refuse a task whose answers cannot be permuted into anything else: one answer only (a circuit task is
    checked once bound to its tokenizer)."""
    if hasattr(task, "permute_answers"):
        answers = {(p.answer, p.wrong) for split in task.split_names for p in task.pairs(split)}
    else:
        answers = {e.label for split in task.split_names for e in task.examples(split)}
    if len(answers) < 2:
        raise SubnetlabError(f"task {task.name}: every example has the same answer; a shuffled-labels control "
                             "permutes answers and needs at least two", setting="control")


def shuffle_labels(task: Task, seed: int) -> Task:
    """``task`` with the answers of each split permuted (split ``k`` by ``seed + k``), in place.

    A classification (or language-model) task's labels move between its examples, the inputs stay; a circuit
    task's answer and wrong answer move across its prompt pairs (``CircuitTask.permute_answers``; bind it first).
    """
    check_shufflable(task)
    for k, split in enumerate(task.split_names):
        examples = task.examples(split)
        order = permutation(len(examples), seed + k)
        if hasattr(task, "permute_answers"):
            task.permute_answers(split, order)
        else:
            task.replace_examples(split, [replace(e, label=examples[j].label) for e, j in zip(examples, order)])
    return task


def apply_control(control: str | None, loaded: LoadedModel, task: Task, seed: int) -> LoadedModel:
    """The model a control's search runs on (``task`` shuffled in place for ``shuffled-labels``; bound first)."""
    if control is None:
        return loaded
    check_controls([control])
    if control == RANDOM_WEIGHTS:
        return reinitialised(loaded, seed)
    shuffle_labels(task, seed)
    return loaded


def spread(values: Sequence[float]) -> float:
    """The sample standard deviation over seeds (0 for one value)."""
    values = [float(v) for v in values]
    return statistics.stdev(values) if len(values) > 1 else 0.0


def control_verdict(real: Sequence[float], controls: Mapping[str, Sequence[float]], *,
                    higher_is_better: bool = True) -> dict[str, Any]:
    """Does the real mask beat every control beyond the seed spread?

    ``real`` and each control hold one score per seed (accuracy, faithfulness, logit difference). A control is
    beaten when ``mean(real) - mean(control) > sd(real) + sd(control)`` (sample standard deviations over the
    seeds; the sign flips for a score where lower is better). The verdict needs at least two real seeds, so
    that there is a spread to judge by, and a score for every control; otherwise ``beats`` is None and
    ``reason`` says why.
    """
    sign = 1.0 if higher_is_better else -1.0
    real = [float(v) for v in real if v is not None and not math.isnan(float(v))]
    rows: dict[str, Any] = {}
    for name, values in controls.items():
        values = [float(v) for v in values if v is not None and not math.isnan(float(v))]
        if not values or not real:
            rows[name] = {"mean": None, "sd": None, "n": len(values), "gap": None, "margin": None, "beaten": None}
            continue
        gap = sign * (statistics.fmean(real) - statistics.fmean(values))
        margin = spread(real) + spread(values)
        rows[name] = {"mean": statistics.fmean(values), "sd": spread(values), "n": len(values), "gap": gap,
                      "margin": margin, "beaten": gap > margin}
    out: dict[str, Any] = {"real": {"mean": statistics.fmean(real) if real else None, "sd": spread(real),
                                    "n": len(real)}, "controls": rows}
    if len(real) < 2:
        out.update(beats=None, reason=f"{len(real)} real seed(s): no seed spread to judge by")
    elif not rows or any(r["beaten"] is None for r in rows.values()):
        out.update(beats=None, reason="a control has no score")
    else:
        out["beats"] = all(r["beaten"] for r in rows.values())
        out["reason"] = ("the found mask beats every control beyond the seed spread" if out["beats"] else
                         "not beyond the seed spread of " + ", ".join(n for n, r in rows.items() if not r["beaten"]))
    return out


__all__ = ["CONTROLS", "CONTROLS_DIR", "RANDOM_WEIGHTS", "SHUFFLED_LABELS", "apply_control", "check_controls",
           "check_shufflable", "control_init_seed", "control_verdict", "permutation", "reinitialised", "shuffle_labels", "spread"]
