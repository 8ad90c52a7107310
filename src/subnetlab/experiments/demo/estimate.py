"""How long the demo will take: each stage's work, counted from the settings its study runs, times seconds per unit
(``calibrate`` times one of each on this machine).

Where the data decides a stage's size (the core's heads, the lottery's pruning steps and attention readings, the
induction heads) the stage is counted at the most its settings allow and names that bound; the ablation is counted
again when its start line names the core. ``Plan`` adds the stages up and, as they finish, rescales the rest by how
long the exactly counted ones really took.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subnetlab.analysis.faithfulness import CIRCUIT_SIZES
from subnetlab.experiments.heuristic_core.reproduce import plan as heuristic_core_plan
from subnetlab.experiments.lottery.reproduce import CONTROLS, METHODS, finetune_config, prune_job_config
from subnetlab.experiments.subtask_induction.reproduce import schedule
from subnetlab.methods.edge_pruning.config import preset_config as edge_config
from subnetlab.methods.head_pruning.config import preset_config as node_config
from subnetlab.methods.lottery.magnitude import magnitude_prune
from subnetlab.progress import Status
from subnetlab.tasks.nli.hans_generator import ENT, SUBCASES

Work = Mapping[str, float]


def cost(work: Work, rates: Mapping[str, float]) -> float:
    return sum(rates[unit] * n for unit, n in work.items())


@dataclass(frozen=True)
class Stage:
    """One stage: its jobs' work run by ``parallel`` workers in order, after ``serial`` work (a sweep's start).

    ``bound`` names what the data decides (counted at its most); where the start line names the real count (the
    group of the regex ``count``), each item short of ``most`` takes ``per`` off the work."""

    demo: str
    key: str
    label: str
    match: str  # a substring of the stage line (subnetlab.progress.stage) that starts this stage
    jobs: tuple[Work, ...]
    parallel: int = 1
    serial: Work = field(default_factory=dict)
    bound: str = ""
    count: str = ""
    most: int = 0
    per: Work = field(default_factory=dict)

    def predicted(self, rates: Mapping[str, float], items: int | None = None) -> float:
        """Seconds at ``rates`` (with ``items`` of the counted kind): each job goes to the first free worker."""
        free = [0.0] * max(1, self.parallel)
        for job in self.jobs:
            free[free.index(min(free))] += cost(job, rates)
        less = 0 if items is None else (self.most - items) * cost(self.per, rates)
        return cost(self.serial, rates) + max(free) - less


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
    """Per study, from ``heuristic_core.reproduce.plan``: fine-tuning, pruning jobs (and the full model's), accuracy
    curves, the ablation table, effective size (where the settings run it) and attention."""
    demo, (workers, start), (layers, heads) = "heuristic-core", sweep(settings, cores), model_shape(settings["model"])
    heuristics = {h for h, _, _ in SUBCASES.values()}
    entailed = sum(label == ENT for _, label, _ in SUBCASES.values()) // len(heuristics)  # subcases per heuristic
    chosen, ab, out = int(settings.get("n_ood_subcases", 4)), settings["ablation"], []
    for study, steps in zip(settings["studies"], heuristic_core_plan(dict(settings), Path("."))["steps"].values()):
        name, ft, configs = study["name"], steps["finetune"], list(steps["prune"]["config_by_sparsity"].values())
        opts, ood, real = study.get("task_options") or {}, study.get("ood") or {}, study.get("real_ood") or {}
        real = real if real_hans else {}
        id_rows = min(int(opts.get("n_eval", 0)), int(configs[0]["eval_limit"] or 10**9))
        ood_rows, real_rows = (int(d.get("per_subcase") or 0) * chosen for d in (ood, real))
        rows = id_rows + ood_rows + real_rows  # one model's evaluation in a job
        curve = int(opts.get("n_eval", 0)) + len(SUBCASES) * (
            int(opts.get("hans_per_subcase", 0)) + int(real.get("curve_per_subcase") or 0))
        evals = ft["max_steps"] // ft["eval_every"] + int(ft["eval_at_start"])
        # every pruning run caches its teacher over the training rows; the full model's job collects the means
        runs = [{"minilm_load": 1, "minilm_job_gate_step": c["total_steps"],
                 "minilm_job_eval_row": rows + int(c["train_limit"] or 0)}
                for c in configs for _ in steps["prune"]["seeds"]]
        full = {"minilm_load": 1, "minilm_job_eval_row": rows + int(configs[0]["means_examples"])}
        # top-k keeps round((1 - sparsity) * components) of each subnetwork: the core cannot hold more heads
        comps = layers * heads + layers
        core = min(layers * heads, comps - round(max(study["sparsities"]) * comps))
        others = layers * heads - core if ab.get("non_listed") == "all" else int(ab.get("non_listed") or 0)
        joint, controls = int(ab.get("joint_heads", "top-3") is not None), len(ab.get("controls") or ())
        ablations = 1 + others + core + joint + int(bool(ab.get("all_jointly"))) + controls * (core + joint)
        consistent = [min(chosen, len(heuristics)) * entailed * int(d.get("entailed_per_subcase", d.get("per_subcase"))
                                                                    or 0) for d in (ood, real)]
        per_pass = sum(min(n, int(ab.get("limit") or 10**9)) for n in (id_rows, ood_rows, real_rows, *consistent))
        per_head = 1 + controls - int(ab.get("non_listed") == "all")  # its own row and controls; one fewer other
        out += [Stage(demo, f"{name}/finetune", f"{name}: fine-tuning", f"[{name}] fine-tuning", (
                    {"minilm_train_row": ft["max_steps"] * ft["batch_size"], "minilm_eval_row": evals * curve},)),
                Stage(demo, f"{name}/prune", f"{name}: pruning {len(runs)} subnetworks", f"[{name}] pruning",
                      (*runs, full), workers, start),
                Stage(demo, f"{name}/curves", f"{name}: accuracy curves", f"[{name}] accuracy curves",
                      ({"minilm_load": 1, "minilm_job_eval_row": rows},) * math.ceil(
                          ft["max_steps"] / ft["save_every"]), workers, start),
                Stage(demo, f"{name}/ablation", f"{name}: ablating the core", f"[{name}] ablating",
                      ({"minilm_eval_row": ablations * per_pass},),
                      bound=f"a core of at most {core} heads", count=r"ablating (\d+) heads", most=core,
                      per={"minilm_eval_row": per_head * per_pass}),
                *effective_size_stage(name, steps, configs[0], id_rows + ood_rows, workers, start),
                Stage(demo, f"{name}/attention", f"{name}: attention patterns", "attention patterns of",
                      ({"minilm_eval_row": int(settings["attention"]["examples"])},))]
    return out


def effective_size_stage(name: str, steps: Mapping[str, Any], prune: Mapping[str, Any], rows: int, workers: int,
                         start: Mapping[str, float]) -> list[Stage]:
    """Figure 6's sweep (none where the settings skip it): per checkpoint the full model's job (its means and every
    row) and one staircase per seed, which caches its teacher over the training rows, climbs every level and
    scores the in-domain and OOD rows at each (no real HANS: the curves need none)."""
    es = steps.get("effective_size")
    if not es:
        return []
    from subnetlab.methods.head_pruning.config import PruneConfig

    stair, levels = PruneConfig.from_dict(es["staircase_prune_config"]), list(es["levels"])
    climb = {"minilm_load": 1, "minilm_job_gate_step": stair.make_schedule().total_steps,
             "minilm_job_eval_row": len(levels) * rows + int(stair.train_limit or 0)}
    full = {"minilm_load": 1, "minilm_job_eval_row": rows + int(prune["means_examples"])}
    jobs = [full, *[climb] * len(es["seeds"])] * int(es["checkpoints"])
    return [Stage("heuristic-core", f"{name}/effective-size",
                  f"{name}: effective size, {len(jobs) - int(es['checkpoints'])} staircases",
                  f"[{name}] effective size", tuple(jobs), workers, start)]


def lottery_stages(settings: Mapping[str, Any], cores: int | None = None) -> list[Stage]:
    """Per task: fine-tuning jobs, s- and m-pruning jobs, re-fine-tuning jobs, then the attention pattern types."""
    demo, (workers, start), (layers, heads) = "lottery", sweep(settings, cores), model_shape(settings["model"])
    seeds, out = list(settings["seeds"]), []
    for task in settings["tasks"]:
        ft, job = finetune_config(dict(settings), task, seeds[0]), prune_job_config(dict(settings), task, "s", 0, "")
        opts, limit = ft.task_options, int(ft.eval_limit or 10**9)
        rows = ft.max_steps * ft.batch_size if ft.max_steps else math.ceil(int(opts.get("n_train", 0)) * ft.epochs)
        dev = min(int(opts.get("n_eval", 0)), limit)
        final = dev + min(int(opts.get("hans_per_subcase", 0)) * len(SUBCASES), limit)
        tuning = {"minilm_load": 1, "minilm_job_train_row": rows, "minilm_job_eval_row": final}
        again = finetune_config(dict(settings), task, seeds[0], retrain=True)  # re-fine-tuning: its own epochs
        retrain_rows = (again.max_steps * again.batch_size if again.max_steps
                        else math.ceil(int(opts.get("n_train", 0)) * again.epochs))
        retuning = {**tuning, "minilm_job_train_row": retrain_rows}
        # s-pruning: the most evaluations its phases allow (joint, heads-only, MLP-only; at least one head is kept)
        per_step = max(1, int(float(job["fraction"]) * layers * heads))
        s_steps = ((layers * heads - 1) // max(1, per_step // 2) + layers + 3 if job["refine"]
                   else (layers * heads - 1) // per_step + 1)
        m_steps = magnitude_prune.__kwdefaults__["max_steps"]
        s_steps, m_steps = (min(n, int(job["max_steps"] or n)) for n in (s_steps, m_steps))
        importance = int(job["importance_limit"] or dev)
        # every pruning job: the full model, its steps, then the random and bad controls, evaluated once each
        pruning = [{"minilm_load": 1, "minilm_job_importance_row": s_steps * importance,
                    "minilm_job_eval_row": (s_steps + 3) * dev}] * len(seeds) + [
            {"minilm_load": 1, "minilm_job_eval_row": (m_steps + 3) * dev}] * len(settings["magnitude_seeds"])
        retrain = len(settings["retrain_seeds"]) * len(METHODS) * len(CONTROLS)
        readings = (len(seeds) if settings.get("pattern_seeds") == "all" else 1) + 1
        readings *= 2 if settings.get("super_survivor_maps") == "pruned" else 1
        out += [Stage(demo, f"{task}/finetune", f"{task}: fine-tuning {len(seeds)} seeds", f"{task}: fine-tuning",
                      (tuning,) * len(seeds), workers, start),
                Stage(demo, f"{task}/prune", f"{task}: pruning", f"{task}: pruning", tuple(pruning), workers, start,
                      bound=f"at most {s_steps} s-pruning and {m_steps} m-pruning steps"),
                Stage(demo, f"{task}/retrain", f"{task}: re-fine-tuning {retrain} subnetworks",
                      f"{task}: re-fine-tuning", (retuning,) * retrain, workers, start),
                Stage(demo, f"{task}/patterns", f"{task}: attention pattern types", f"{task}: attention pattern types",
                      ({"minilm_load": readings, "minilm_pattern_pair": readings * int(settings["pattern_pairs"])},),
                      bound=f"at most {readings} attention readings")]
    return out


def subtask_induction_stages(settings: Mapping[str, Any], cores: int | None = None) -> list[Stage]:
    """Per depth: the base model, the discovery jobs (one per lambda) and the search controls' (the chosen lambda
    with the other seeds, and each control with every seed); then every transfer run."""
    demo, (workers, start), s = "subtask-induction", sweep(settings, cores), settings
    n_eval, lambdas, out = int(s["n_eval"]), len(s["lambdas"]), []
    variants = len(s["conditions"]) + (len(s.get("secondary_conditions") or []) if s.get("secondary_reinit") and
                                       s["secondary_reinit"] != s["reinit"] else 0)
    discovery = {"gpt2_mask_row": s["cs_samples"] * s["cs_epochs"], "gpt2_eval_row": (s["cs_epochs"] + 2) * n_eval}
    for layers in s["layers"]:
        base = {"gpt2_train_row": s["base_train"] * s["base_epochs"], "gpt2_eval_row": 2 * n_eval}
        out += [Stage(demo, f"L{layers}/base", f"{layers}-layer GPT-2: base model", f"base model: {layers}-layer",
                      (base,)),
                Stage(demo, f"L{layers}/discover", f"{layers}-layer GPT-2: discovery, {lambdas} lambdas",
                      f"sweep: {lambdas} jobs", (discovery,) * lambdas, workers, start)]
        seeds, controls = len(s.get("control_seeds") or [s["seed"]]), len(s.get("controls") or [])
        if controls:
            runs = seeds - 1 + controls * seeds
            out.append(Stage(demo, f"L{layers}/controls", f"{layers}-layer GPT-2: search controls, {runs} discoveries",
                             "search controls: ", (discovery,) * runs, workers, start))
    runs: list[Work] = []
    for size in s["sizes"]:
        epochs, every = schedule(dict(s), int(size))
        runs += [{"gpt2_train_row": epochs * (int(s["max_number"]) + int(size)),
                  "gpt2_eval_row": math.ceil(epochs / every) * n_eval + int(s["n_test"])}] * (
            variants * len(s["seeds"]) * len(s["layers"]))
    return out + [Stage(demo, "transfer", f"transfer: {len(runs)} runs", "transfer: ", tuple(runs), workers, start)]


def circuits_stages(settings: Mapping[str, Any], cores: int | None = None) -> list[Stage]:
    """The induction study: training, the mechanism's cuts, random circuits, node and edge pruning, the IOI model.
    Evaluations count pairs through an edge evaluator; building one runs every pair twice (clean and corrupted)."""
    demo, sizes, n, tr = "circuits", len(CIRCUIT_SIZES), int(settings["circuit"]["n_eval"]), settings["training"]
    heads = int(settings["model"]["heads"])  # every last-layer head may be an induction head: one key cut each

    def edges(ep: Mapping[str, Any], pairs: int) -> dict[str, float]:
        steps = sum(edge_config("demo", float(sp), **dict(ep.get("overrides") or {})).total_steps
                    for sp in ep["sparsities"])
        return {"tiny_prune_step": steps, "tiny_eval_pair": pairs * (2 + 2 * len(ep["sparsities"]) + sizes + 1)}

    out = [Stage(demo, "train", "training the induction model", "training a ", ({
               "tiny_train_step": tr["steps"], "tiny_eval_pair": (1 + math.ceil(tr["steps"] / tr["eval_every"]))
               * tr["eval_size"]},)),
           Stage(demo, "mechanism", "head scores and the mechanism's edges", "scoring every head",
                 ({"tiny_eval_pair": settings["scores_size"] + n * (2 + 2 + 3 + heads)},),
                 bound=f"at most {heads} induction heads"),
           Stage(demo, "random", "random edge and node circuits", "faithfulness curves: random",
                 ({"tiny_eval_pair": n * (4 + (sizes + 2) + (sizes + 1))},))]
    if settings.get("node_pruning"):
        cfg = node_config("demo", float(settings["node_pruning"]["sparsity"]),
                          **dict(settings["node_pruning"].get("overrides") or {}))
        out.append(Stage(demo, "node", "node-level pruning", "node-level pruning", ({
            "tiny_node_step": cfg.total_steps,
            "tiny_eval_pair": min(cfg.means_examples, settings["circuit"]["n_train"]) + n * (2 + sizes + 1)},)))
    if settings.get("edge_pruning"):
        out.append(Stage(demo, "edge", f"edge pruning at {len(settings['edge_pruning']['sparsities'])} sparsities",
                         "edge pruning to", (edges(settings["edge_pruning"], n),)))
    sc = settings.get("search_controls")
    if sc and settings.get("edge_pruning"):  # one run per seed and kind but the study's own; a new evaluator each
        ep = settings["edge_pruning"]
        runs = len(sc["seeds"]) * (1 + len(sc.get("controls") or [])) - 1
        steps = edge_config("demo", float(ep["curve_sparsity"]), **dict(ep.get("overrides") or {})).total_steps
        out.append(Stage(demo, "controls", f"search controls: {runs} edge-pruning runs", "search controls: ",
                         ({"tiny_prune_step": runs * steps, "tiny_eval_pair": runs * n * 4},)))
    ioi = settings.get("ioi")
    if ioi:  # its own edge pruning's lines read as the induction model's: one stage for all of IOI
        m, evals = int(ioi["n_eval"]), 1 + ioi["steps"] // ioi["eval_every"]
        train = {"tiny_train_step": ioi["steps"], "tiny_eval_pair": m * (evals + 2 + 1 + sizes + 2)}
        out.append(Stage(demo, "ioi", "the IOI-style model and its circuits", "IOI: training",
                         (train, edges(ioi["edge_pruning"], m) if ioi.get("edge_pruning") else {})))
    return out


STAGE_BUILDERS: dict[str, Callable[..., list[Stage]]] = {
    "heuristic-core": heuristic_core_stages, "subtask-induction": subtask_induction_stages,
    "lottery": lottery_stages, "circuits": circuits_stages}


@dataclass
class Plan:
    """The stages in order with their predicted seconds; as stage lines arrive, when each started and ended.

    A stage ends when a later one of its demo starts or its demo ends. The finished stages whose count was exact,
    and that ran at least ``min_seconds`` (a resumed run skips them in no time), rescale the rest by how long they
    really took over their prediction."""

    stages: Sequence[Stage]
    rates: Mapping[str, float]
    clock: Callable[[], float] = time.monotonic
    min_seconds: float = 1.0
    # CPU seconds used so far (this process and its finished workers); None: not recorded
    cpu_clock: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        self.predicted = [s.predicted(self.rates) for s in self.stages]
        self.exact = [not s.bound for s in self.stages]
        self.started: dict[int, float] = {}
        self.ended: dict[int, float] = {}
        self.cpu: dict[int, list[float]] = {}  # per stage: CPU seconds at its start and at its end
        self.demo: str | None = None

    def total(self, exact: bool | None = None) -> float:
        """Predicted seconds of every stage (``exact``: only those whose count is, or is not, exact)."""
        return sum(p for p, e in zip(self.predicted, self.exact) if exact in (None, e))

    def bounds(self) -> list[str]:
        return [f"{s.demo}: {s.bound}" for s in self.stages if s.bound]

    def start(self, stage: int) -> None:
        """Stage ``stage`` (an index; past the last: none) starts; every earlier one of the running demo has ended."""
        now, cpu = self.clock(), self.cpu_clock() if self.cpu_clock else None
        for i, s in enumerate(self.stages[:stage]):
            if s.demo == self.demo and i not in self.ended:
                self.ended[i] = now
                if cpu is not None and i in self.cpu:
                    self.cpu[i].append(cpu)
        if stage < len(self.stages) and stage not in self.started:
            self.started[stage] = now
            if cpu is not None:
                self.cpu[stage] = [cpu]

    def begin(self, demo: str) -> None:
        """``demo`` runs now: its first stage starts."""
        self.demo = demo
        self.start(next((i for i, s in enumerate(self.stages) if s.demo == demo), len(self.stages)))

    def end(self) -> None:
        """The running demo returned: its stages have ended."""
        self.start(len(self.stages))

    def on_line(self, message: str) -> bool:
        """Start the first unstarted stage of the running demo whose ``match`` is in ``message``, counted again if
        the line names its count; whether one started."""
        for i, s in enumerate(self.stages):
            if s.demo == self.demo and i not in self.started and s.match in message:
                found = re.search(s.count, message) if s.count else None
                if found:
                    self.predicted[i], self.exact[i] = s.predicted(self.rates, int(found.group(1))), True
                self.start(i)
                return True
        return False

    def measured(self, i: int) -> float | None:
        return self.ended[i] - self.started[i] if i in self.started and i in self.ended else None

    def factor(self) -> float:
        """Measured over predicted seconds of the finished exact stages; 1 before any."""
        done = [(m, p) for i, p in enumerate(self.predicted) for m in [self.measured(i)]
                if self.exact[i] and m is not None and m >= self.min_seconds]
        return sum(m for m, _ in done) / sum(p for _, p in done) if sum(p for _, p in done) > 0 else 1.0

    def remaining(self) -> float:
        """Seconds left: unstarted stages, and a running one's rest (a tenth of its elapsed time once past it)."""
        now, factor = self.clock(), self.factor()
        return sum(max(p * factor - t, 0.1 * t) for i, p in enumerate(self.predicted) if i not in self.ended
                   for t in [now - self.started.get(i, now)])

    def status(self) -> Status:
        """The running stage, the share of the time gone (since the first stage began) and the seconds left."""
        running = [s for i, s in enumerate(self.stages) if i in self.started and i not in self.ended]
        label = (f"{running[-1].demo}: {running[-1].label}" if running else
                 f"{self.demo}: done" if self.demo else "starting")
        gone, left = self.clock() - min(self.started.values(), default=self.clock()), self.remaining()
        return Status(label, gone / (gone + left) if gone + left > 0 else 1.0, left)

    def cpu_seconds(self, i: int) -> float | None:
        """CPU seconds stage ``i`` used, every process and thread of the demo counted (None: not recorded)."""
        marks = self.cpu.get(i, [])
        return marks[1] - marks[0] if len(marks) == 2 else None

    def table(self) -> list[dict[str, Any]]:
        """Per stage (``demo-timings.json``): what the data decides, predicted and measured seconds, CPU seconds."""
        return [{"demo": s.demo, "stage": s.key, "label": s.label, "bound": s.bound or None,
                 "predicted_seconds": round(self.predicted[i], 1),
                 "measured_seconds": None if m is None else round(m, 1),
                 **({} if c is None else {"cpu_seconds": round(c, 1)})}
                for i, s in enumerate(self.stages) for m, c in [(self.measured(i), self.cpu_seconds(i))]]


def minutes(seconds: float) -> str:
    """``'about 14 min'`` (``'under a minute'`` below 60 s)."""
    return "under a minute" if seconds < 60 else f"about {round(seconds / 60):d} min"


__all__ = ["Plan", "STAGE_BUILDERS", "Stage", "circuits_stages", "cost", "heuristic_core_stages", "lottery_stages",
           "minutes", "model_shape", "subtask_induction_stages", "sweep"]
