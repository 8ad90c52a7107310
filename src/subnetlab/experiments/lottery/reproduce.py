"""`subnetlab reproduce lottery`: When BERT Plays the Lottery, All Tickets Are Winning (Prasanna et al., 2020).

For every task: fine-tune the pre-trained model with several seeds; prune every
seed's model by importance (s-pruning) and the chosen seeds' by magnitude
(m-pruning); re-fine-tune the good, random and bad subnetworks from the
*pre-trained* weights with the mask fixed; measure the stability of the
s-pruned heads across seeds (Jaccard, super-survivors); classify every head's
attention pattern, raw and normed, and compare the super-survivors with all
heads. Everything runs as executor jobs (``backend`` / ``jobs`` settings), so
a rerun skips finished work. The run directory::

    DIR/config.json  DIR/metrics.json  DIR/report.md  DIR/figures/*.png
    DIR/<task>/finetune/seed<S>/       (run/model: the fine-tuned model)
    DIR/<task>/prune/{magnitude,importance}-seed<S>/   subnetwork / random / bad .safetensors
    DIR/<task>/retrain/{magnitude,importance}-{good,random,bad}-seed<S>/
    DIR/<task>/patterns-finetuned-seed<S>[-super].json  DIR/<task>/patterns-pretrained[-super].json

Presets: ``demo`` is MiniLM on the synthetic NLI corpus, sized for a 2-core
CPU (attention maps on the real MNLI rows in ``../shared/data/mnli`` when
present); ``tour`` is ``demo`` with 200 development rows (``subnetlab demo``);
``paper`` is bert-base-uncased on all nine GLUE tasks (GPU), 5 seeds, the full
development sets.

The ``paper`` preset is the authors' recipe (Prasanna et al. 2020 and their
released code, sai-prasanna/bert-experiments); each choice is a setting, with
an alternative available by name:

* ``stop_metric="task"``: stop before 90% of the full model's *task metric*
  (``find_*_mask.py``'s ``metric_name``: MCC for CoLA, mean of Pearson and
  Spearman for STS-B, accuracy for the others, MRPC and QQP included; GLUE also
  reports F1 for those two: ``task_options: {metric: f1}`` picks it).
  ``"accuracy"``: accuracy for every task.
* ``control_scope="global"``: m-pruning's random control keeps as many weights
  as the good subnetwork in total, uniformly over all prunable weights, and the
  bad one the globally smallest-magnitude weights (``global_unstructured`` with
  ``RandomUnstructured`` / ``L1UnstructuredInvert``). ``"per-matrix"``: the good
  subnetwork's count in every matrix.
* ``criterion="sensitivity-per-batch"`` with ``importance_batch_size=64``:
  ``|d(batch-mean loss)/d gate|`` per batch of 64 (``compute_heads_mlps_importance``,
  the batch size 64 of ``find_masks.sh``). ``"sensitivity"``: per example,
  ``E_x |dL(x)/d gate|`` (Michel et al.'s eq. 2 as written).
* ``bad_fill="random"``: when the good s-subnetwork keeps more components than
  it removed, the bad one is filled with a random sample of good components
  (``create_random_masks.ipynb``). ``"least-important"``: the least important
  good ones.
* ``pattern_counting="per-map"``, ``pattern_seeds="all"``: every one of the 100
  dev maps per head is classified and the labels are counted over heads and
  seeds (the paper's Figure 4). ``"per-head"`` / ``"first"``: one label per head
  from features averaged over the maps, first seed only.
* ``super_survivor_maps="pruned"``: super-survivors' maps are read in the model
  pruned to the super-survivors (``compute_super_masks.py``, the notebook).
  ``"full"``: in the full model.
* all nine GLUE tasks (``glue-cola`` ... ``glue-wnli``) from the hub, or from a
  GLUE release on disk with ``glue_dir`` (``data_dir`` of every GLUE task).

Where the paper and the authors' code differ from each other or from subnetlab:
the paper classifies maps with a CNN trained on 400 + 600 annotated maps; the
annotations (``data/head_classification_data.tar.gz``) are not in the
repository snapshot subnetlab can read, so maps are typed by the rule-based
classifier (``analysis.attention_types``). The authors' m-pruning also prunes
the biases of the Q/K/V, attention-output and intermediate layers; subnetlab
prunes weight matrices only. Their structured random control keeps each
component with probability "share kept" (a size that varies); subnetlab draws
exactly the good subnetwork's number. Their importance loop never zeroes the
gate gradient between batches (batch ``k`` adds ``|g_1 + ... + g_k|``);
subnetlab uses each batch's own gradient. The paper's seeds are 1337, 42, 86,
71, 166; here 0-4.

The ``demo`` preset uses the same choices (on the synthetic NLI task,
``stop_metric="task"`` is accuracy).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job, run_jobs
from subnetlab.experiments.lottery.settings import METHODS, LotterySettings
from subnetlab.io import read_json, write_json
from subnetlab.methods.finetune.config import FinetuneConfig
from subnetlab.progress import stage
from subnetlab.run_directory import claim

NAME = "lottery"
CONTROLS = ("good", "random", "bad")

_GLUE = "hub:nyu-mll/glue"
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
_GLUE_DEV = {"mnli": "validation_matched"}
_PAPER_CHOICES = {"stop_metric": "task", "control_scope": "global", "bad_fill": "random",
                  "pattern_counting": "per-map", "pattern_seeds": "all", "super_survivor_maps": "pruned"}
PRESETS: dict[str, dict[str, Any]] = {
    "demo": {
        "model": "minilm",
        "tasks": ["nli-synthetic"],
        "task_options": {"nli-synthetic": {"n_train": 2000, "n_eval": 300, "hans_per_subcase": 10}},
        "eval_data": {},
        "split": "id",
        "seeds": [0, 1, 2],
        "retrain_seeds": [0],
        "magnitude_seeds": [0],
        "lr": 1e-4, "batch_size": 32, "epochs": 1.0, "max_steps": None, "warmup_ratio": 0.1,
        "weight_decay": 0.01, "max_length": 64,
        "eval_limit": 300, "importance_limit": 96,
        "threshold": 0.9, "fraction": 0.1, "criterion": "sensitivity-per-batch", "importance_batch_size": None,
        "refine": True, "prune_max_steps": None, **_PAPER_CHOICES,
        "pattern_pairs": 40, "pattern_source": "mnli-shared", "glue_dir": None,
        # two one-thread jobs at a time: a MiniLM step gains only ~1.5x from a second thread (the Heuristic Core
        # demo's measurement), and every stage here is a sweep of 3 to 6 jobs
        "backend": "processes", "jobs": 2, "device": "cpu",
        # the paper re-fine-tunes every subnetwork for 3 epochs: at 1 the random and bad s-tickets had not caught up
        # (good 98.5, random 92.0, bad 87.5); the full models keep 1 epoch (99.5-100% in-domain already)
        "retrain_epochs": 3.0,
    },
    "paper": {
        "model": "bert-base-uncased",
        "tasks": [f"glue-{t}" for t in GLUE_TASKS],
        "task_options": {f"glue-{t}": {"train": f"{_GLUE}:{t}@train", "eval": f"{_GLUE}:{t}@{_GLUE_DEV.get(t, 'validation')}"}
                         for t in GLUE_TASKS},
        "eval_data": {},
        "split": "id",
        "seeds": [0, 1, 2, 3, 4],
        "retrain_seeds": [0, 1, 2, 3, 4],
        "magnitude_seeds": [0, 1, 2, 3, 4],
        "lr": 2e-5, "batch_size": 32, "epochs": 3.0, "max_steps": None, "warmup_ratio": 0.1,
        "weight_decay": 0.01, "max_length": 128,
        "eval_limit": None, "importance_limit": None,
        "threshold": 0.9, "fraction": 0.1, "criterion": "sensitivity-per-batch", "importance_batch_size": 64,
        "refine": True, "prune_max_steps": None, **_PAPER_CHOICES,
        "pattern_pairs": 100, "pattern_source": "task", "glue_dir": None,
        "backend": "local", "jobs": None, "device": "auto",
    },
}
# ``tour``: the demo trimmed to its share of ``subnetlab demo`` (four studies in about 16 minutes on a 2-core CPU): the
# pruning steps and the closing evaluations score 200 in-domain rows instead of 300 (the stopping rule then resolves
# half a point); everything else is the demo's
PRESETS["tour"] = {**PRESETS["demo"], "eval_limit": 200}
Settings = LotterySettings


def finetune_config(settings: LotterySettings | Mapping[str, Any], task: str, seed: int,
                    model: str | None = None, retrain: bool = False) -> FinetuneConfig:
    """``LotterySettings.finetune_config`` of typed settings or of a mapping of them (the demo's estimate)."""
    return LotterySettings.of(settings).finetune_config(task, seed, model, retrain)


def _run(jobs: list[Job], settings: LotterySettings, sweep_dir: Path, what: str) -> None:
    report = run_jobs(jobs, backend=settings.backend, n_jobs=settings.jobs, sweep_dir=sweep_dir)
    failed = [j for j in report.jobs if j.status != "done" and j.status != "skipped"]
    if failed:
        raise SubnetlabError(f"{what}: {len(failed)} job(s) failed, first {failed[0].name}: {failed[0].error} "
                             f"(see {sweep_dir / 'sweep.json'}; rerun to retry)")


def prune_job_config(settings: LotterySettings | Mapping[str, Any], task: str, method: str, seed: int,
                     model: str) -> dict[str, Any]:
    """``LotterySettings.prune_job_config`` of typed settings or of a mapping of them (the demo's estimate)."""
    return LotterySettings.of(settings).prune_job_config(task, method, seed, model)


def _task_stage(settings: LotterySettings, task: str, tdir: Path) -> dict[str, Any]:
    """Fine-tune, prune and re-fine-tune for one task; return the measured numbers."""
    seeds = list(settings.seeds)
    ft = {s: tdir / "finetune" / f"seed{s}" for s in seeds}
    stage(f"{task}: fine-tuning {len(seeds)} seeds")
    _run([Job("subnetlab.runs.lottery:finetune_job", {"finetune": settings.finetune_config(task, s).to_json()},
              ft[s]) for s in seeds], settings, tdir / "finetune", "fine-tuning")

    prune_dirs: dict[tuple[str, int], Path] = {}
    jobs = []
    for method, method_seeds in (("importance", seeds), ("magnitude", list(settings.magnitude_seeds))):
        for s in method_seeds:
            prune_dirs[(method, s)] = d = tdir / "prune" / f"{method}-seed{s}"
            config = settings.prune_job_config(task, method, s, str(ft[s] / "run" / "model"))
            jobs.append(Job("subnetlab.runs.lottery:prune_job", config, d))
    stage(f"{task}: pruning ({len(jobs)} jobs)")
    _run(jobs, settings, tdir / "prune", "pruning")

    retrain_dirs: dict[tuple[str, str, int], Path] = {}
    jobs = []
    for s in settings.retrain_seeds:
        cfg = settings.finetune_config(task, s, retrain=True).to_json()
        for method in METHODS:
            for control in CONTROLS:
                name = "subnetwork" if control == "good" else control
                retrain_dirs[(method, control, s)] = d = tdir / "retrain" / f"{method}-{control}-seed{s}"
                jobs.append(Job("subnetlab.runs.lottery:retrain_job",
                                {"finetune": cfg, "subnetwork": str(prune_dirs[(method, s)] / f"{name}.safetensors"),
                                 "save_model": False}, d))
    stage(f"{task}: re-fine-tuning good / random / bad subnetworks ({len(jobs)} jobs)")
    _run(jobs, settings, tdir / "retrain", "re-fine-tuning")

    return {
        "finetune": {str(s): read_json(ft[s] / "metrics.json") for s in seeds},
        "prune": {f"{m}-seed{s}": read_json(d / "metrics.json") for (m, s), d in prune_dirs.items()},
        "retrain": {f"{m}-{c}-seed{s}": read_json(d / "metrics.json") for (m, c, s), d in retrain_dirs.items()},
        "dirs": {"finetune": {str(s): str(p) for s, p in ft.items()},
                 "importance": {str(s): str(prune_dirs[("importance", s)]) for s in seeds}},
    }


def _analysis_stage(settings: LotterySettings, task: str, tdir: Path, measured: dict[str, Any]) -> dict[str, Any]:
    """Stability of the s-pruned heads over seeds and the attention pattern types (cached as JSON).

    Pattern types are read from every fine-tuned seed (``pattern_seeds="all"``) or
    the first, and from the pre-trained model; with ``super_survivor_maps="pruned"``
    each is read a second time in the model pruned to the super-survivors (heads
    and MLPs kept in every seed). Per-seed readings are merged (``HeadTypes.merge``:
    per-map counts summed over seeds).
    """
    import torch

    from subnetlab.analysis.attention_types import HeadTypes
    from subnetlab.analysis.stability import stability_summary
    from subnetlab.experiments.lottery.jobs import pattern_types, sentence_pairs
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.tasks.registry import shared_data_dir
    from subnetlab.tasks.spec import TaskSpec

    subs = [Subnetwork.load(Path(d) / "subnetwork.safetensors") for d in measured["dirs"]["importance"].values()]
    stability = stability_summary(subs)
    seeds = sorted(settings.seeds)
    pattern_seeds = seeds if settings.pattern_seeds == "all" else seeds[:1]
    task_obj = TaskSpec(task, settings.options_for(task)).build()
    pairs, source = sentence_pairs(task_obj, settings.split, int(settings.pattern_pairs),
                                   settings.pattern_source, shared_data_dir())
    heads = torch.stack([s.heads for s in subs]).amin(0)  # 1 = kept in every seed
    mlps = torch.stack([s.mlps for s in subs]).amin(0)
    pruned = settings.super_survivor_maps == "pruned" and bool(heads.sum() > 0)

    def read(name: str, path: str, gates: Any = None) -> HeadTypes:
        cache = tdir / f"patterns-{name}.json"
        if not cache.is_file():
            what = "pruned to the super-survivors" if gates is not None else "full"
            stage(f"{task}: attention pattern types of {name} ({what}) on {len(pairs)} pairs")
            write_json(cache, {"source": source, "model": path,
                               **pattern_types(path, pairs, settings.max_length, settings.device, gates)})
        return HeadTypes.from_dict(read_json(cache))

    models = {"finetuned": [(f"finetuned-seed{s}", str(Path(measured["dirs"]["finetune"][str(s)]) / "run" / "model"))
                            for s in pattern_seeds],
              "pretrained": [("pretrained", settings.model)]}
    patterns: dict[str, Any] = {"source": source, "seeds": pattern_seeds, "pruned_to_super_survivors": pruned}
    for which, runs in models.items():
        patterns[which] = HeadTypes.merge([read(name, path) for name, path in runs]).to_dict()
        patterns[f"{which}_super"] = (HeadTypes.merge([read(f"{name}-super", path, (heads, mlps)) for name, path in runs])
                                      .to_dict() if pruned else None)
    return {"stability": stability, "patterns": patterns, "pattern_seed": pattern_seeds[0]}


def run(settings: LotterySettings | Mapping[str, Any], out: Path) -> Path:
    """Run (or resume) the whole study into ``out``; returns the report's path."""
    from subnetlab.experiments.lottery.report import write_report

    settings = LotterySettings.of(settings)  # checked before config.json: a refusal leaves nothing behind
    out = Path(out)
    claim(out, settings.to_dict(), what="study configuration")
    started = time.time()
    results: dict[str, Any] = {}
    for task in settings.tasks:
        tdir = out / task.replace(":", "_")
        measured = _task_stage(settings, task, tdir)
        measured.update(_analysis_stage(settings, task, tdir, measured))
        results[task] = measured
    elapsed = time.time() - started
    write_json(out / "metrics.json", {"tasks": results, "wall_seconds_this_run": elapsed})
    return write_report(settings, results, out, elapsed)
