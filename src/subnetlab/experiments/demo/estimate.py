"""How long the demo will take: each stage's work, read off the settings its study runs, times seconds per unit.

Work is counted in units (steps, rows, jobs; ``calibrate`` times one of each on this machine) from the studies'
own resolved settings and public helpers. Where the work depends on the data (the core's size, how many steps a
pruning loop takes before its metric drops), the stage counts the most its settings allow and says so in
``Stage.bound``. ``Plan`` adds the stages up and, as they finish, rescales each study's rest by how long its
finished stages really took.
"""

from __future__ import annotations

import inspect
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Work = Mapping[str, float]


@dataclass(frozen=True)
class Stage:
    """One stage: its jobs' work run by ``parallel`` workers in order, after ``serial`` work (a sweep's start)."""

    demo: str
    key: str
    label: str
    match: str  # a substring of the stage line (subnetlab.progress.stage) that starts this stage
    jobs: tuple[Work, ...]
    parallel: int = 1
    serial: Work = field(default_factory=dict)
    bound: str = ""  # what is counted at the most the settings allow

    @property
    def work(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for job in self.jobs:
            for unit, n in job.items():
                total[unit] = total.get(unit, 0) + n
        return total

    def predicted(self, rates: Mapping[str, float]) -> float:
        """Seconds at ``rates``: each job goes to the first free worker; the stage lasts until the last ends."""
        free = [0.0] * max(1, self.parallel)
        for job in self.jobs:
            free[free.index(min(free))] += sum(rates[u] * n for u, n in job.items())
        return sum(rates[u] * n for u, n in self.serial.items()) + max(free)


def sweep(settings: Mapping[str, Any], cores: int | None) -> tuple[int, dict[str, float]]:
    """Workers of a study's sweeps (``jobs``, at most the cores; 1 in-process) and their serial start."""
    if settings.get("backend", "local") == "local":
        return 1, {}
    cores = cores or os.cpu_count() or 1
    return max(1, min(int(settings.get("jobs") or cores), cores)), {"sweep_start": 1}


def model_shape(model: str) -> tuple[int, int]:
    """``(layers, heads per layer)`` of a Hugging Face model, from its config alone."""
    from transformers import AutoConfig

    from subnetlab.models.aliases import resolve

    config = AutoConfig.from_pretrained(resolve(model))
    return int(config.num_hidden_layers), int(config.num_attention_heads)


def heuristic_core_stages(settings: Mapping[str, Any], real_hans: bool, cores: int | None = None) -> list[Stage]:
    """Fine-tuning, pruning jobs, accuracy curves, the ablation table, effective size and attention, per study,
    from ``heuristic_core.reproduce.plan`` (the resolved fine-tuning and pruning configs)."""
    from subnetlab.experiments.heuristic_core.reproduce import plan
    from subnetlab.tasks.nli.hans_generator import ENT, SUBCASES

    demo, (workers, start) = "heuristic-core", sweep(settings, cores)
    layers, heads = model_shape(settings["model"])
    heuristics = {h for h, _, _ in SUBCASES.values()}
    entailed = sum(label == ENT for _, label, _ in SUBCASES.values()) // len(heuristics)  # per heuristic
    chosen, ab, out = int(settings.get("n_ood_subcases", 4)), settings["ablation"], []
    for study, steps in zip(settings["studies"], plan(dict(settings), Path("."))["steps"].values()):
        name, ft, configs = study["name"], steps["finetune"], list(steps["prune"]["config_by_sparsity"].values())
        opts, ood, real = study.get("task_options") or {}, study.get("ood") or {}, study.get("real_ood") or {}
        real = real if real_hans else {}
        id_rows = min(int(opts.get("n_eval", 0)), int(configs[0]["eval_limit"] or 10**9))
        ood_rows, real_rows = (int(d.get("per_subcase") or 0) * chosen for d in (ood, real))
        eval_rows = id_rows + ood_rows + real_rows
        # every run caches its teacher over the training rows; the mean activations are computed once, shared
        teacher, means = int(configs[0]["train_limit"] or 0), int(configs[0]["means_examples"])
        ft_steps = int(ft["max_steps"] or 0)  # the demo presets fine-tune for a fixed number of steps
        curve = int(opts.get("n_eval", 0)) + len(SUBCASES) * (
            int(opts.get("hans_per_subcase", 0)) + int(real.get("curve_per_subcase") or 0))
        evals = ft_steps // ft["eval_every"] + int(ft["eval_at_start"])
        out.append(Stage(demo, f"{name}/finetune", f"{name}: fine-tuning", f"[{name}] fine-tuning", (
            {"hc_train_row": ft_steps * ft["batch_size"], "hc_eval_row": evals * curve},)))
        runs = [{"hc_job_gate_step": c["total_steps"], "hc_job_eval_row": eval_rows + teacher}
                for c in configs for _ in steps["prune"]["seeds"]]
        out.append(Stage(demo, f"{name}/prune", f"{name}: pruning {len(runs)} subnetworks", f"[{name}] pruning",
                         (*runs, {"hc_job_eval_row": eval_rows + means}), workers, start))
        out.append(Stage(demo, f"{name}/curves", f"{name}: accuracy curves", f"[{name}] accuracy curves",
                         ({"hc_job_eval_row": eval_rows},) * math.ceil(ft_steps / ft["save_every"]), workers, start))
        # top-k keeps round((1 - sparsity) * components) of each subnetwork: the core cannot hold more heads
        comps = layers * heads + layers
        core = min(layers * heads, comps - round(max(study["sparsities"]) * comps))
        others = layers * heads - core if ab.get("non_listed") == "all" else int(ab.get("non_listed") or 0)
        joint, controls = int(ab.get("joint_heads", "top-3") is not None), len(ab.get("controls") or ())
        rows = 1 + others + core + joint + int(bool(ab.get("all_jointly"))) + controls * (core + joint)
        consistent = [min(chosen, len(heuristics)) * entailed * int(d.get("entailed_per_subcase", d.get("per_subcase"))
                                                                    or 0) for d in (ood, real)]
        per_pass = sum(min(n, int(ab.get("limit") or 10**9)) for n in (id_rows, ood_rows, real_rows, *consistent))
        out.append(Stage(demo, f"{name}/ablation", f"{name}: ablating the core", f"[{name}] ablating",
                         ({"hc_eval_row": rows * per_pass},), bound=f"a core of at most {core} heads"))
        es = steps["effective_size"]
        if es is not None:
            per = {"hc_job_gate_step": es["staircase_prune_config"]["total_steps"],
                   "hc_job_eval_row": len(es["levels"]) * (id_rows + ood_rows) + teacher}
            out.append(Stage(demo, f"{name}/effective_size", f"{name}: effective size over training",
                             f"[{name}] effective size", ({"hc_job_eval_row": id_rows + ood_rows},) * es["checkpoints"]
                             + (per,) * (es["checkpoints"] * len(es["seeds"])), workers, start))
        out.append(Stage(demo, f"{name}/attention", f"{name}: attention patterns", "attention patterns of",
                         ({"hc_eval_row": int(settings["attention"]["examples"])},)))
    return out


def lottery_stages(settings: Mapping[str, Any], cores: int | None = None) -> list[Stage]:
    """Per task: fine-tuning jobs, s- and m-pruning jobs, re-fine-tuning jobs, then the attention pattern types."""
    from subnetlab.experiments.lottery.reproduce import CONTROLS, METHODS, finetune_config, prune_job_config
    from subnetlab.methods.lottery.magnitude import magnitude_prune
    from subnetlab.tasks.nli.hans_generator import SUBCASES

    demo, (workers, start) = "lottery", sweep(settings, cores)
    layers, heads = model_shape(settings["model"])
    seeds, out = list(settings["seeds"]), []
    for task in settings["tasks"]:
        ft, job = finetune_config(settings, task, seeds[0]), prune_job_config(settings, task, "importance", 0, "")
        opts, limit = ft.task_options, int(ft.eval_limit or 10**9)
        rows = ft.max_steps * ft.batch_size if ft.max_steps else math.ceil(int(opts.get("n_train", 0)) * ft.epochs)
        dev = min(int(opts.get("n_eval", 0)), limit)
        final = dev + min(int(opts.get("hans_per_subcase", 0)) * len(SUBCASES), limit)
        tuning = {"lottery_load": 1, "lottery_train_row": rows, "lottery_eval_row": final}
        # s-pruning: the most evaluations its phases allow (joint, heads-only, MLP-only; at least one head is kept)
        per_step = max(1, int(float(job["fraction"]) * layers * heads))
        s_steps = ((layers * heads - 1) // max(1, per_step // 2) + layers + 3 if job["refine"]
                   else (layers * heads - 1) // per_step + 1)
        m_steps = inspect.signature(magnitude_prune).parameters["max_steps"].default
        s_steps, m_steps = (min(n, int(job["max_steps"] or n)) for n in (s_steps, m_steps))
        importance = int(job["importance_limit"] or dev)
        # every pruning job: the full model, its steps, then the random and bad controls, evaluated once each
        s_job = {"lottery_load": 1, "lottery_importance_row": s_steps * importance,
                 "lottery_eval_row": (s_steps + 3) * dev}
        m_job = {"lottery_load": 1, "lottery_eval_row": (m_steps + 3) * dev}
        pruning = [s_job] * len(seeds) + [m_job] * len(settings["magnitude_seeds"])
        retrain = len(settings["retrain_seeds"]) * len(METHODS) * len(CONTROLS)
        readings = (len(seeds) if settings.get("pattern_seeds") == "all" else 1) + 1
        readings *= 2 if settings.get("super_survivor_maps") == "pruned" else 1
        out += [Stage(demo, f"{task}/finetune", f"{task}: fine-tuning {len(seeds)} seeds", f"{task}: fine-tuning",
                      (tuning,) * len(seeds), workers, start),
                Stage(demo, f"{task}/prune", f"{task}: pruning", f"{task}: pruning", tuple(pruning), workers, start,
                      bound=f"at most {s_steps} s-pruning and {m_steps} m-pruning steps"),
                Stage(demo, f"{task}/retrain", f"{task}: re-fine-tuning {retrain} subnetworks",
                      f"{task}: re-fine-tuning", (tuning,) * retrain, workers, start),
                Stage(demo, f"{task}/patterns", f"{task}: attention pattern types", f"{task}: attention pattern types",
                      ({"lottery_load": 1, "lottery_pattern_pair": int(settings["pattern_pairs"])},) * readings,
                      bound=f"at most {readings} readings")]
    return out


def subtask_induction_stages(settings: Mapping[str, Any], cores: int | None = None) -> list[Stage]:
    """Per depth: the base model and the discovery jobs (one per lambda); then every transfer run."""
    from subnetlab.experiments.subtask_induction.reproduce import schedule

    demo, (workers, start) = "subtask-induction", sweep(settings, cores)
    n_eval, out = int(settings["n_eval"]), []
    variants = len(settings["conditions"])
    if settings.get("secondary_reinit") and settings["secondary_reinit"] != settings["reinit"]:
        variants += len(settings.get("secondary_conditions") or [])
    lam = {"gpt2_mask_row": settings["cs_samples"] * settings["cs_epochs"],
           "gpt2_eval_row": (settings["cs_epochs"] + 2) * n_eval}  # one discovery job per lambda
    for layers in settings["layers"]:
        base = {"gpt2_train_row": settings["base_train"] * settings["base_epochs"], "gpt2_eval_row": 2 * n_eval}
        lambdas = len(settings["lambdas"])
        out += [Stage(demo, f"L{layers}/base", f"{layers}-layer GPT-2: base model", f"base model: {layers}-layer",
                      (base,)),
                Stage(demo, f"L{layers}/discover", f"{layers}-layer GPT-2: discovery, {lambdas} lambdas",
                      f"sweep: {lambdas} jobs", (lam,) * lambdas, workers, start)]
    runs: list[Work] = []
    for size in settings["sizes"]:
        epochs, every = schedule(dict(settings), int(size))
        runs += [{"gpt2_train_row": epochs * (int(settings["max_number"]) + int(size)),
                  "gpt2_eval_row": math.ceil(epochs / every) * n_eval + int(settings["n_test"])}] * (
            variants * len(settings["seeds"]) * len(settings["layers"]))
    return out + [Stage(demo, "transfer", f"transfer: {len(runs)} runs", "transfer: ", tuple(runs), workers, start)]


def circuits_stages(settings: Mapping[str, Any], cores: int | None = None) -> list[Stage]:
    """The induction study: training, the mechanism's cuts, random circuits, node and edge pruning, the IOI model.

    Evaluations count pairs through an edge evaluator; building one runs every pair twice (clean and corrupted)."""
    from subnetlab.analysis.faithfulness import CIRCUIT_SIZES
    from subnetlab.methods.edge_pruning.config import preset_config as edge_config
    from subnetlab.methods.head_pruning.config import preset_config as node_config

    if settings.get("study", "induction") != "induction":
        return []
    demo, sizes, n = "circuits", len(CIRCUIT_SIZES), int(settings["circuit"]["n_eval"])
    tr = settings["training"]
    evals = 1 + math.ceil(tr["steps"] / tr["eval_every"])
    heads = int(settings["model"]["heads"])  # every last-layer head may be an induction head: one key cut each
    out = [Stage(demo, "train", "training the induction model", "training a ",
                 ({"tiny_train_step": tr["steps"], "tiny_eval_pair": evals * tr["eval_size"]},)),
           Stage(demo, "mechanism", "head scores and the mechanism's edges", "scoring every head",
                 ({"tiny_eval_pair": settings["scores_size"] + n * (2 + 2 + 3 + heads)},),
                 bound=f"at most {heads} induction heads"),
           Stage(demo, "random", "random edge and node circuits", "faithfulness curves: random",
                 ({"tiny_eval_pair": n * (4 + (sizes + 2) + (sizes + 1))},))]
    if settings.get("node_pruning"):
        np_ = settings["node_pruning"]
        cfg = node_config("demo", float(np_["sparsity"]), **dict(np_.get("overrides") or {}))
        out.append(Stage(demo, "node", "node-level pruning", "node-level pruning", ({
            "tiny_node_step": cfg.total_steps,
            "tiny_eval_pair": min(cfg.means_examples, settings["circuit"]["n_train"]) + n * (2 + sizes + 1)},)))

    def edges(ep: Mapping[str, Any], pairs: int) -> dict[str, float]:
        overrides = dict(ep.get("overrides") or {})
        steps = sum(edge_config("demo", float(sp), **overrides).total_steps for sp in ep["sparsities"])
        return {"tiny_prune_step": steps, "tiny_eval_pair": pairs * (2 + 2 * len(ep["sparsities"]) + sizes + 1)}

    if settings.get("edge_pruning"):
        out.append(Stage(demo, "edge", f"edge pruning at {len(settings['edge_pruning']['sparsities'])} sparsities",
                         "edge pruning to", (edges(settings["edge_pruning"], n),)))
    ioi = settings.get("ioi")
    if ioi:  # its own edge pruning's lines read as the induction model's: one stage for all of IOI
        m = int(ioi["n_eval"])
        evals = 1 + ioi["steps"] // ioi["eval_every"]  # held out; then the evaluator, the full model, the random curve
        train = {"tiny_train_step": ioi["steps"], "tiny_eval_pair": m * (evals + 2 + 1 + sizes + 2)}
        out.append(Stage(demo, "ioi", "the IOI-style model and its circuits", "IOI: training",
                         (train, edges(ioi["edge_pruning"], m) if ioi.get("edge_pruning") else {})))
    return out


STAGE_BUILDERS: dict[str, Callable[..., list[Stage]]] = {
    "heuristic-core": heuristic_core_stages, "subtask-induction": subtask_induction_stages,
    "lottery": lottery_stages, "circuits": circuits_stages}


@dataclass
class Plan:
    """The stages in order with their predicted seconds; ``remaining`` rescales by the finished stages.

    A stage's measured time counts only when it ran at least ``min_seconds`` (a resumed run skips in no time)."""

    stages: Sequence[Stage]
    rates: Mapping[str, float]
    clock: Callable[[], float] = time.monotonic
    min_seconds: float = 1.0

    def __post_init__(self) -> None:
        keys = [self.key(s) for s in self.stages]
        if len(set(keys)) != len(keys):
            raise ValueError(f"stage keys repeat: {keys}")
        self.predicted = {self.key(s): s.predicted(self.rates) for s in self.stages}
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}

    @staticmethod
    def key(stage: Stage) -> str:
        return f"{stage.demo}:{stage.key}"

    def total(self) -> float:
        return sum(self.predicted.values())

    def start(self, key: str) -> None:
        """Stage ``key`` begins; every earlier unfinished stage of its demo ends now."""
        now, demo = self.clock(), key.split(":")[0]
        for s in self.stages[:[self.key(s) for s in self.stages].index(key)]:
            if s.demo == demo:
                self.finished.setdefault(self.key(s), now)
        self.started.setdefault(key, now)

    def finish_demo(self, demo: str) -> None:
        for s in self.stages:
            if s.demo == demo:
                self.finished.setdefault(self.key(s), self.clock())

    def on_line(self, demo: str, message: str) -> str | None:
        """Start the first unstarted stage of ``demo`` whose ``match`` is in ``message``; its key."""
        for s in self.stages:
            if s.demo == demo and self.key(s) not in self.started and s.match in message:
                self.start(self.key(s))
                return self.key(s)
        return None

    def measured(self, key: str) -> float | None:
        return self.finished[key] - self.started[key] if key in self.started and key in self.finished else None

    def factor(self, demo: str | None = None) -> float:
        """Measured over predicted seconds of the finished stages (of ``demo`` when it has any); 1 before any."""
        for pick in ((lambda s: s.demo == demo), (lambda s: True)):
            done = [(self.measured(self.key(s)), self.predicted[self.key(s)]) for s in self.stages if pick(s)]
            done = [(m, p) for m, p in done if m is not None and m >= self.min_seconds and p > 0]
            if done:
                return sum(m for m, _ in done) / sum(p for _, p in done)
        return 1.0

    def _left(self, s: Stage, now: float) -> tuple[float, float]:
        """``(expected seconds, elapsed seconds)`` of an unfinished stage."""
        return self.predicted[self.key(s)] * self.factor(s.demo), now - self.started.get(self.key(s), now)

    def remaining(self) -> float:
        """Seconds left: unstarted stages, and a running one's rest (a tenth of its elapsed time once past it)."""
        now = self.clock()
        return sum(max(e - t, 0.1 * t) if t else e for s in self.stages if self.key(s) not in self.finished
                   for e, t in [self._left(s, now)])

    def done_fraction(self) -> float:
        """Share of the predicted work finished (a running stage counts its elapsed share, at most 95%)."""
        now, total = self.clock(), self.total()
        done = sum(self.predicted[self.key(s)] * (1.0 if self.key(s) in self.finished else min(0.95, t / e if e else 0))
                   for s in self.stages for e, t in [self._left(s, now)])
        return min(1.0, done / total) if total > 0 else 1.0

    def current(self) -> Stage | None:
        running = [s for s in self.stages if self.key(s) in self.started and self.key(s) not in self.finished]
        return running[-1] if running else None

    def bounds(self) -> list[str]:
        return [f"{s.demo}: {s.bound}" for s in self.stages if s.bound]

    def table(self) -> list[dict[str, Any]]:
        """Per stage: its work, how it is shared, predicted and measured seconds (``demo-timings.json``)."""
        return [{"demo": s.demo, "stage": s.key, "label": s.label, "work": s.work, "jobs": len(s.jobs),
                 "parallel": s.parallel, "serial": dict(s.serial), "bound": s.bound or None,
                 "predicted_seconds": round(self.predicted[self.key(s)], 1),
                 "measured_seconds": None if m is None else round(m, 1)}
                for s in self.stages for m in [self.measured(self.key(s))]]


def minutes(seconds: float) -> str:
    """``'about 14 min'`` (``'under a minute'`` below 60 s)."""
    return "under a minute" if seconds < 60 else f"about {round(seconds / 60):d} min"


__all__ = ["Plan", "STAGE_BUILDERS", "Stage", "circuits_stages", "heuristic_core_stages", "lottery_stages",
           "minutes", "model_shape", "subtask_induction_stages", "sweep"]
