"""How long the demo will take: its known work per stage, times rates measured on this machine.

The demo's work is counted from its resolved settings, never assumed in
seconds: optimiser steps of hard-concrete pruning and of fine-tuning on
MiniLM, examples MiniLM evaluates, and rows the arithmetic GPT-2 trains on,
masks or evaluates (``stages``). ``calibrate`` measures what one unit of each
costs here; ``Plan`` multiplies the two and, as stages finish, rescales the
rest by how long the finished stages really took (``Plan.remaining``).

    plan = Plan(stages(settings_by_demo), rates)
    plan.total()                      # seconds expected before anything runs
    plan.start(key); ...; plan.finish(key)
    plan.remaining()                  # seconds left for the whole demo, re-calibrated
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# the units of work; calibration measures seconds per unit of each
UNITS = {
    "minilm_finetune_step": "one fine-tuning optimiser step of MiniLM (demo batch and length)",
    "minilm_gate_step": "one hard-concrete optimiser step on MiniLM (demo pruning batch and length)",
    "minilm_eval_example": "MiniLM's forward pass over one evaluation example",
    "minilm_job_gate_step": "a hard-concrete step inside a sweep job (the job's threads: one)",
    "minilm_job_eval_example": "an evaluation example inside a sweep job (the job's threads: one)",
    "gpt2_train_row": "one training row of the arithmetic GPT-2 (forward, backward, AdamW), one thread",
    "gpt2_mask_row": "one row of weight-mask training on the arithmetic GPT-2, one thread",
    "gpt2_eval_row": "the arithmetic GPT-2's forward pass over one evaluation row, one thread",
    "tiny_train_step": "one training step of the circuits demo's 2-layer model (its batch and length), one thread",
    "tiny_prune_step": "one edge-pruning optimiser step on the circuits demo's model (its batch), one thread",
    "tiny_node_step": "one node-level (heads and MLPs) hard-concrete step on the circuits demo's model, one thread",
    "tiny_eval_pair": "one clean/corrupted pair through the circuits demo's edge evaluator, one thread",
    "lottery_train_row": "one fine-tuning row of the lottery demo's MiniLM (its batch and length), a job's threads",
    "lottery_eval_example": "MiniLM's forward pass over one of the lottery demo's evaluation examples, a job's threads",
    "lottery_importance_row": "s-pruning's importance (gate gradients) over one of the lottery demo's rows, a job's threads",
    "lottery_pattern_pair": "one sentence pair's attention maps typed for every head (raw and normed), in-process",
    "lottery_model_load": "MiniLM loaded with a classification head (each job; each pattern reading)",
    "sweep_start": "a sweep of worker processes starting: its fork server imports torch, transformers and subnetlab",
}
HANS_SUBCASES = 30  # HANS (and the synthetic HANS-style generator) has 30 subcases
ENTAILMENT_SUBCASES = 5  # per heuristic (HANS: 5 entailment and 5 non-entailment subcases per heuristic)
ABLATED_HEADS_GUESS = 7  # heads in the core (or the top-3 when it is empty): unknown before pruning; the tour's 3
# seeds found 7 in both of its runs (the demo preset's 4 seeds found 5: a core over fewer seeds is at least as large)
S_PRUNING_STEPS_GUESS = 17  # s-pruning steps tried per seed (joint, then heads-only and MLP-only refinement): the
# lottery demo tried 18, 12, 18 and the tour 19, 16, 18 (nli-synthetic, seeds 0-2); unknown before pruning
M_PRUNING_STEPS_GUESS = 9  # m-pruning steps tried (10% of the remaining weights each): the lottery demo tried 9
INDUCTION_HEADS_GUESS = 2  # induction heads of the circuits demo (each adds a cut key edge): unknown before training
CIRCUIT_SIZES = 10  # MIB's circuit sizes (analysis.faithfulness.CIRCUIT_SIZES): one evaluation each per curve
EVALUATOR_PASSES = 2  # building an evaluator runs every pair twice (the clean capture and the corrupted run)


@dataclass(frozen=True)
class Stage:
    """One stage of one demo: its work in units, how many jobs share the machine, the stage line that opens it."""

    demo: str
    key: str
    label: str
    work: Mapping[str, float]
    match: str = ""  # a substring of the stage line (subnetlab.progress.stage) that starts this stage
    parallel: int = 1
    family: str = ""  # stages of one family share a correction factor (minilm / gpt2)
    # when given, the stage is these jobs (each one's work; ``work`` is their sum) run by ``parallel`` workers in
    # this order, each worker taking the next job when it is free: the stage lasts until the last job ends
    jobs: tuple[Mapping[str, float], ...] = ()
    serial: Mapping[str, float] = field(default_factory=dict)  # work done once, before the jobs (a sweep's start)

    def predicted(self, rates: Mapping[str, float]) -> float:
        """Seconds this stage should take at ``rates`` (seconds per unit): the ``serial`` work, then the work shared
        ``parallel`` ways, or, with ``jobs``, the time the workers need to run them in order (3 like jobs on 2
        workers take 2 rounds)."""
        missing = [u for u in {**self.work, **self.serial} if u not in rates]
        if missing:
            raise KeyError(f"no rate for {', '.join(missing)}")
        first = sum(rates[u] * n for u, n in self.serial.items())
        if self.jobs:
            free = [0.0] * max(1, self.parallel)
            for job in self.jobs:
                i = free.index(min(free))
                free[i] += sum(rates[u] * n for u, n in job.items())
            return first + max(free)
        return first + sum(rates[u] * n for u, n in self.work.items()) / max(1, self.parallel)


def sweep_start(settings: Mapping[str, Any]) -> dict[str, float]:
    """The serial work of one sweep: a fork server's start when its jobs run in worker processes, else none."""
    return {"sweep_start": 1} if settings.get("backend", "local") != "local" else {}


def like_jobs(work: Mapping[str, float], n: int) -> tuple[Mapping[str, float], ...]:
    """``n`` jobs sharing ``work`` equally."""
    return tuple({u: v / n for u, v in work.items()} for _ in range(n)) if n > 0 else ()


def summed(jobs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The work of ``jobs`` together, unit by unit."""
    total: dict[str, float] = {}
    for job in jobs:
        for u, v in job.items():
            total[u] = total.get(u, 0) + v
    return total


def _levels(text: Any) -> list[float]:
    from subnetlab.methods.l0.schedule import parse_levels

    return list(parse_levels(text)) if isinstance(text, str) else [float(x) for x in text]


def sweep_workers(settings: Mapping[str, Any], cores: int | None = None) -> int:
    """Jobs a study's sweeps run at once: 1 in-process (``backend="local"``), else ``jobs`` capped by the cores
    (one thread per job: the ``threads`` setting, 1 when absent)."""
    import os

    if settings.get("backend", "local") == "local":
        return 1
    cores = cores or os.cpu_count() or 1
    return max(1, min(int(settings.get("jobs") or cores), cores // max(1, int(settings.get("threads") or 1))))


def heuristic_core_stages(settings: Mapping[str, Any], real_hans: bool, demo: str = "heuristic-core",
                          cores: int | None = None) -> list[Stage]:
    """The Heuristic Core study's stages, counted from its settings (``experiments/heuristic_core``).

    ``real_hans``: whether the real HANS file is present (it adds a column to every evaluation). Pruning and
    effective size run as sweep jobs: with the ``processes`` backend they count in ``minilm_job_*`` units (one
    thread) and share the machine ``sweep_workers`` ways; fine-tuning and the ablation table run in-process.
    """
    from subnetlab.methods.head_pruning.config import PRESETS as PRUNE_PRESETS, STEP_RULES, preset_config

    workers = sweep_workers(settings, cores)
    in_process = settings.get("backend", "local") == "local"
    gate_unit, job_eval = (("minilm_gate_step", "minilm_eval_example") if in_process
                           else ("minilm_job_gate_step", "minilm_job_eval_example"))
    out: list[Stage] = []
    ft = dict(settings["finetune"])
    preset = settings["prune_preset"]
    prune = {**PRUNE_PRESETS[preset], **{k: v for k, v in (settings.get("prune") or {}).items() if v is not None}}
    for study in settings["studies"]:
        name = study["name"]
        opts = study.get("task_options") or {}
        ood = study.get("ood") or {}
        real = study.get("real_ood") or {}
        id_rows = int(opts.get("n_eval", 0))
        if prune.get("eval_limit") is not None:
            id_rows = min(id_rows, int(prune["eval_limit"]))
        ab = settings.get("ablation") or {}
        ab_limit = int(ab["limit"]) if ab.get("limit") is not None else None  # per split, in the ablation table
        ood_rows = int(ood.get("per_subcase") or 0) * int(settings.get("n_ood_subcases", 4))
        real_rows = int(real.get("per_subcase") or 0) * int(settings.get("n_ood_subcases", 4)) if real_hans else 0
        eval_rows = id_rows + ood_rows + real_rows
        # fine-tuning: max_steps steps; an evaluation at the start and every eval_every steps of ID,
        # the synthetic HANS split and (when present) the real HANS curve rows
        steps = int(ft.get("max_steps") or 0)
        evals = steps // max(1, int(ft.get("eval_every") or steps or 1)) + (1 if ft.get("eval_at_start", True) else 0)
        curve_rows = (int(opts.get("n_eval", 0)) + int(opts.get("hans_per_subcase", 0)) * HANS_SUBCASES
                      + (int(real.get("curve_per_subcase") or 0) * HANS_SUBCASES if real_hans else 0))
        out.append(Stage(demo, f"{name}/finetune", f"{name}: fine-tuning", {
            "minilm_finetune_step": steps, "minilm_eval_example": evals * curve_rows},
            match=f"[{name}] fine-tuning", family="minilm"))
        # pruning: every seed at every sparsity, each evaluated once; the full model once; teacher and means once
        from subnetlab.experiments.heuristic_core.study import step_overrides

        gate_steps = 0
        for target in study["sparsities"]:  # the study's own step rule (preset, scale, hold)
            total = step_overrides(settings, float(target)).get("total_steps") or STEP_RULES[preset](float(target))[1]
            gate_steps += total * len(settings["seeds"])
        runs = len(settings["seeds"]) * len(study["sparsities"])
        once = int(prune.get("train_limit") or 0) + int(prune.get("means_examples") or 0)
        out.append(Stage(demo, f"{name}/prune", f"{name}: pruning {runs} subnetworks", {
            gate_unit: gate_steps, job_eval: (runs + 1) * eval_rows + once},
            match=f"[{name}] pruning", parallel=workers, family="minilm", serial=sweep_start(settings),
            jobs=like_jobs({gate_unit: gate_steps, job_eval: (runs + 1) * eval_rows + once}, runs) if workers > 1 else ()))
        # accuracy curves (study._curves): every saved checkpoint's full model on the report's rows, as sweep jobs
        n_saved = math.ceil(steps / max(1, int(ft.get("save_every") or steps or 1))) if steps else 0
        out.append(Stage(demo, f"{name}/curves", f"{name}: accuracy curves", {job_eval: n_saved * eval_rows},
                         match=f"[{name}] accuracy curves", parallel=workers, family="minilm",
                         serial=sweep_start(settings)))
        # ablation table (steps.ablation_step): no ablation, the non-listed heads sampled, each listed head, the
        # joint row, every listed head jointly; each control replacement repeats the single and joint rows
        others = ab.get("non_listed", 0)
        others = 72 - ABLATED_HEADS_GUESS if others == "all" else int(others or 0)  # MiniLM: 6 x 12 heads
        joint = 1 if ab.get("joint_heads", True) is not None else 0
        every = 1 if ab.get("all_jointly", False) else 0
        controls = len(ab.get("controls") or ())
        rows = 1 + others + ABLATED_HEADS_GUESS + joint + every + controls * (ABLATED_HEADS_GUESS + joint)
        # every evaluation also reads the chosen heuristics' entailment subcases (``study._entailed_rows``)
        heuristics = min(int(settings.get("n_ood_subcases", 4)), 3)  # at most the three HANS heuristics
        ood_entailed = heuristics * ENTAILMENT_SUBCASES * int(ood.get("entailed_per_subcase", ood.get("per_subcase")) or 0)
        real_entailed = (heuristics * ENTAILMENT_SUBCASES
                         * int(real.get("entailed_per_subcase", real.get("per_subcase")) or 0) if real_hans else 0)

        def capped(n: int) -> int:  # the ablation's ``limit`` caps every split
            return n if ab_limit is None else min(n, ab_limit)

        per_pass = sum(capped(n) for n in (id_rows, ood_rows, real_rows, ood_entailed, real_entailed))
        out.append(Stage(demo, f"{name}/ablation", f"{name}: ablating the core", {
            "minilm_eval_example": rows * per_pass}, match=f"[{name}] ablating", family="minilm"))
        # effective size: one staircase per checkpoint and seed, evaluated (ID + OOD) at every level
        es = settings["effective_size"]
        if es is None:  # skipped (the tour preset)
            add_attention_stage(out, demo, name, settings)
            continue
        levels = _levels(es["levels"])
        cfg = preset_config(preset, levels[-1], schedule="staircase", levels=tuple(levels),
                            **{k: v for k, v in {**(settings.get("prune") or {}), **(es.get("prune") or {})}.items()
                               if k in ("ramp_steps", "hold_steps", "first_ramp_steps")})
        per_run = cfg.make_schedule().total_steps
        n_ckpt = int(es.get("checkpoints") or max(1, steps // max(1, int(ft.get("save_every") or steps or 1))))
        n_seeds = len(es["seeds"])
        out.append(Stage(demo, f"{name}/effective_size", f"{name}: effective size over training", {
            gate_unit: n_ckpt * n_seeds * per_run,
            job_eval: n_ckpt * (n_seeds * len(levels) + 1) * (id_rows + ood_rows) + n_ckpt * once},
            match=f"[{name}] effective size", parallel=workers, family="minilm", serial=sweep_start(settings)))
        add_attention_stage(out, demo, name, settings)
    return out


def add_attention_stage(out: list[Stage], demo: str, name: str, settings: Mapping[str, Any]) -> None:
    """The attention-pattern stage that closes each Heuristic Core study."""
    att = settings.get("attention") or {}
    out.append(Stage(demo, f"{name}/attention", f"{name}: attention patterns", {
        "minilm_eval_example": int(att.get("examples") or 0)}, match="attention patterns of", family="minilm"))


def lottery_stages(settings: Mapping[str, Any], demo: str = "lottery", cores: int | None = None) -> list[Stage]:
    """The lottery study's stages per task (``experiments/lottery``): fine-tuning every seed, pruning (s- and
    m-pruning jobs), re-fine-tuning good / random / bad subnetworks, then the attention pattern types in-process.

    Fine-tuning and re-fine-tuning count their training rows and their closing evaluation (every evaluation split,
    ``eval_limit`` rows each); a pruning step evaluates ``eval_limit`` rows, and an s-pruning step first takes the
    importance gradients over ``importance_limit`` rows.
    The numbers of pruning steps are guesses (``S_PRUNING_STEPS_GUESS``, ``M_PRUNING_STEPS_GUESS``).
    """
    workers = sweep_workers(settings, cores)
    out: list[Stage] = []
    seeds, m_seeds, r_seeds = (list(settings[k]) for k in ("seeds", "magnitude_seeds", "retrain_seeds"))
    for task in settings["tasks"]:
        opts = dict(settings["task_options"].get(task) or {})
        n_train = int(opts.get("n_train") or 0)
        if settings.get("max_steps"):
            rows = int(settings["max_steps"]) * int(settings["batch_size"])
        else:
            rows = math.ceil(n_train * float(settings["epochs"]))
        limit = int(settings.get("eval_limit") or 0)
        # the synthetic NLI task evaluates its in-domain split and the HANS-style one (30 subcases)
        split_rows = [int(opts.get("n_eval", 0)), int(opts.get("hans_per_subcase", 0)) * HANS_SUBCASES]
        eval_rows = sum(min(n, limit) if limit else n for n in split_rows if n)
        dev = min(int(opts.get("n_eval", 0)), limit) if limit else int(opts.get("n_eval", 0))
        importance = int(settings.get("importance_limit") or dev)

        def sweep(key: str, label: str, match: str, jobs: list[dict[str, float]]) -> Stage:
            jobs = [{**job, "lottery_model_load": 1} for job in jobs]
            return Stage(demo, f"{task}/{key}", f"{task}: {label}", summed(jobs), match=f"{task}: {match}",
                         parallel=workers, family="lottery", jobs=tuple(jobs), serial=sweep_start(settings))

        tuning = {"lottery_train_row": rows, "lottery_eval_example": eval_rows}  # one (re-)fine-tuning run
        out.append(sweep("finetune", f"fine-tuning {len(seeds)} seeds", "fine-tuning", [tuning] * len(seeds)))
        # every pruning job: the full model once, its steps, then the random and bad controls once each; the
        # s-pruning jobs first, as the study submits them
        s_job = {"lottery_importance_row": S_PRUNING_STEPS_GUESS * importance,
                 "lottery_eval_example": (S_PRUNING_STEPS_GUESS + 3) * dev}
        m_job = {"lottery_eval_example": (M_PRUNING_STEPS_GUESS + 3) * dev}
        out.append(sweep("prune", "pruning", "pruning", [s_job] * len(seeds) + [m_job] * len(m_seeds)))
        n_retrain = len(r_seeds) * 6  # two methods x good / random / bad
        out.append(sweep("retrain", f"re-fine-tuning {n_retrain} subnetworks", "re-fine-tuning", [tuning] * n_retrain))
        readings = (len(seeds) if settings.get("pattern_seeds", "first") == "all" else 1) + 1  # and the pre-trained
        readings *= 2 if settings.get("super_survivor_maps", "full") == "pruned" else 1
        out.append(Stage(demo, f"{task}/patterns", f"{task}: attention pattern types", {
            "lottery_pattern_pair": readings * int(settings["pattern_pairs"]), "lottery_model_load": readings},
            match=f"{task}: attention pattern types", family="lottery"))
    return out


def subtask_induction_stages(settings: Mapping[str, Any], demo: str = "subtask-induction",
                             cores: int | None = None) -> list[Stage]:
    """The Subtask Induction study's stages (``experiments/subtask_induction``), per model depth."""
    from subnetlab.experiments.subtask_induction.reproduce import schedule

    jobs = sweep_workers(settings, cores)
    out: list[Stage] = []
    n_eval = int(settings["n_eval"])
    variants = len(settings["conditions"])
    if settings.get("secondary_reinit") and settings["secondary_reinit"] != settings["reinit"]:
        variants += len(settings.get("secondary_conditions") or [])
    for layers in settings["layers"]:
        base_rows = int(settings["base_train"]) * int(settings["base_epochs"])
        out.append(Stage(demo, f"L{layers}/base", f"{layers}-layer GPT-2: base model", {
            "gpt2_train_row": base_rows, "gpt2_eval_row": 2 * n_eval},
            match=f"base model: {layers}-layer", family="gpt2"))
        lambdas = len(settings["lambdas"])
        per_lambda = {"gpt2_mask_row": int(settings["cs_samples"]) * int(settings["cs_epochs"]),
                      "gpt2_eval_row": (int(settings["cs_epochs"]) + 2) * n_eval}
        # one job per lambda, shared evenly (as whole rounds, 3 lambdas on 2 workers predicted 70 s against the
        # 54 s measured: the lambdas' jobs differ in length)
        out.append(Stage(demo, f"L{layers}/discover", f"{layers}-layer GPT-2: discovery, {lambdas} lambdas",
                         {u: lambdas * n for u, n in per_lambda.items()}, match=f"sweep: {lambdas} jobs",
                         parallel=min(jobs, lambdas), family="gpt2", serial=sweep_start(settings)))
    train_rows = eval_rows = 0
    runs = 0
    for size in settings["sizes"]:
        epochs, every = schedule(dict(settings), int(size))
        rows = int(settings["max_number"]) + int(size)
        n = variants * len(settings["seeds"]) * len(settings["layers"])
        runs += n
        train_rows += n * epochs * rows
        eval_rows += n * (math.ceil(epochs / every) * n_eval + int(settings["n_test"]))
    out.append(Stage(demo, "transfer", f"transfer: {runs} runs", {"gpt2_train_row": train_rows, "gpt2_eval_row": eval_rows},
                     match="transfer: ", parallel=jobs, family="gpt2", serial=sweep_start(settings)))
    return out


def circuits_stages(settings: Mapping[str, Any], demo: str = "circuits", cores: int | None = None) -> list[Stage]:
    """The circuits study's stages (``experiments/circuits``, ``induction`` study), counted from its settings.

    Evaluations are counted in pairs through an edge evaluator (``tiny_eval_pair``): a curve evaluates the full
    circuit and every MIB size (and the empty one when not given), a one-circuit faithfulness the full circuit and
    the circuit, an evaluator's construction ``EVALUATOR_PASSES`` passes. The training run's held-out evaluations
    and the head scores count their sequences as pairs too, and the IOI model's training steps as the induction
    model's (a model of the same depth and width; the family's correction absorbs the difference). Everything runs
    in-process, one thread.
    """
    from subnetlab.methods.edge_pruning.config import preset_config as edge_config
    from subnetlab.methods.head_pruning.config import preset_config as node_config

    if settings.get("study", "induction") != "induction":
        return []
    seed = int(settings.get("seed", 0))
    tr = settings["training"]
    steps, every = int(tr["steps"]), int(tr.get("eval_every") or tr["steps"])
    evals = 1 + steps // every + (1 if steps % every else 0)
    n_eval = int(settings["circuit"]["n_eval"])
    out = [Stage(demo, "train", "training the induction model", {
        "tiny_train_step": steps, "tiny_eval_pair": evals * int(tr.get("eval_size") or 0)},
        match="training a ", family="circuits")]
    cuts = 3 + INDUCTION_HEADS_GUESS  # key, query and value edges together, then each key edge alone
    out.append(Stage(demo, "mechanism", "head scores and the mechanism's edges", {
        "tiny_eval_pair": int(settings["scores_size"]) + n_eval * (EVALUATOR_PASSES + 2 + cuts)},
        match="scoring every head", family="circuits"))
    out.append(Stage(demo, "random", "random edge and node circuits", {
        "tiny_eval_pair": n_eval * (2 * EVALUATOR_PASSES + (CIRCUIT_SIZES + 2) + (CIRCUIT_SIZES + 1))},
        match="faithfulness curves: random", family="circuits"))
    if settings.get("node_pruning"):
        npr = settings["node_pruning"]
        cfg = node_config("demo", float(npr["sparsity"]), seed=seed, **dict(npr.get("overrides") or {}))
        means = min(int(cfg.means_examples), int(settings["circuit"]["n_train"]))
        out.append(Stage(demo, "node", "node-level pruning", {
            "tiny_node_step": int(cfg.total_steps),
            "tiny_eval_pair": means + n_eval * (EVALUATOR_PASSES + CIRCUIT_SIZES + 1)},
            match="node-level pruning", family="circuits"))

    def edge_work(ep: Mapping[str, Any], pairs: int) -> dict[str, float]:
        total = sum(int(edge_config("demo", float(sp), seed=seed, **dict(ep.get("overrides") or {})).total_steps)
                    for sp in ep["sparsities"])
        return {"tiny_prune_step": total,
                "tiny_eval_pair": pairs * (EVALUATOR_PASSES + 2 * len(ep["sparsities"]) + CIRCUIT_SIZES + 1)}

    if settings.get("edge_pruning"):
        out.append(Stage(demo, "edge", f"edge pruning at {len(settings['edge_pruning']['sparsities'])} sparsities",
                         edge_work(settings["edge_pruning"], n_eval), match="edge pruning to", family="circuits"))
    ioi = settings.get("ioi")
    if ioi:
        io_steps, io_every, io_eval = int(ioi["steps"]), int(ioi.get("eval_every") or ioi["steps"]), int(ioi["n_eval"])
        work = {"tiny_train_step": io_steps,
                "tiny_eval_pair": io_eval * (1 + io_steps // io_every + EVALUATOR_PASSES + 1 + CIRCUIT_SIZES + 2)}
        if ioi.get("edge_pruning"):  # its edge-pruning lines read as the induction model's: one stage for all of IOI
            for unit, n in edge_work(ioi["edge_pruning"], io_eval).items():
                work[unit] = work.get(unit, 0) + n
        out.append(Stage(demo, "ioi", "the IOI-style model and its circuits", work, match="IOI: training",
                         family="circuits"))
    return out


STAGE_BUILDERS: dict[str, Callable[..., list[Stage]]] = {
    "heuristic-core": heuristic_core_stages,
    "subtask-induction": subtask_induction_stages,
    "circuits": circuits_stages,
    "lottery": lottery_stages,
}


@dataclass
class _Progress:
    started: float | None = None
    finished: float | None = None


@dataclass
class Plan:
    """The demo's stages in order with their predicted seconds, re-calibrated as stages finish.

    ``clock`` is injectable (tests pass a fake). A stage's measured time counts toward
    re-calibration only when both its start and its end were seen and it ran for at least
    ``min_seconds`` (a resumed run skips finished stages in no time).
    """

    stages: Sequence[Stage]
    rates: Mapping[str, float]
    clock: Callable[[], float] = time.monotonic
    min_seconds: float = 1.0
    state: dict[str, _Progress] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = [self.key(s) for s in self.stages]
        if len(set(keys)) != len(keys):
            raise ValueError(f"stage keys repeat: {keys}")
        self.state = {k: _Progress() for k in keys}
        self.predicted = {self.key(s): s.predicted(self.rates) for s in self.stages}

    @staticmethod
    def key(stage: Stage) -> str:
        return f"{stage.demo}:{stage.key}"

    def total(self) -> float:
        """Seconds the whole demo should take before any stage has run."""
        return sum(self.predicted.values())

    # -- events ---------------------------------------------------------------------------------
    def start(self, key: str) -> None:
        """Stage ``key`` begins; every earlier unfinished stage of the same demo ends now."""
        now = self.clock()
        index = self._index(key)
        for s in self.stages[:index]:
            k = self.key(s)
            if s.demo == self.stages[index].demo and self.state[k].finished is None:
                self.state[k].finished = now
        if self.state[key].started is None:
            self.state[key].started = now

    def finish(self, key: str) -> None:
        now = self.clock()
        if self.state[key].finished is None:
            self.state[key].finished = now

    def finish_demo(self, demo: str) -> None:
        """Every stage of ``demo`` is over (the reproduction returned)."""
        for s in self.stages:
            if s.demo == demo:
                self.finish(self.key(s))

    def on_line(self, demo: str, message: str) -> str | None:
        """Start the first stage of ``demo`` not yet started whose ``match`` is in ``message``; its key."""
        for s in self.stages:
            k = self.key(s)
            if s.demo == demo and s.match and self.state[k].started is None and s.match in message:
                self.start(k)
                return k
        return None

    def _index(self, key: str) -> int:
        for i, s in enumerate(self.stages):
            if self.key(s) == key:
                return i
        raise KeyError(key)

    # -- estimates --------------------------------------------------------------------------------
    def measured(self, key: str) -> float | None:
        st = self.state[key]
        if st.started is None or st.finished is None:
            return None
        return st.finished - st.started

    def factor(self, family: str | None = None) -> float:
        """Measured over predicted seconds of the finished stages (of ``family`` when it has any); 1 before any."""
        def ratio(stages: Iterable[Stage]) -> float | None:
            done = [(self.measured(self.key(s)), self.predicted[self.key(s)]) for s in stages]
            done = [(m, p) for m, p in done if m is not None and m >= self.min_seconds and p > 0]
            return sum(m for m, _ in done) / sum(p for _, p in done) if done else None

        if family:
            own = ratio(s for s in self.stages if s.family == family)
            if own is not None:
                return own
        every = ratio(self.stages)
        return every if every is not None else 1.0

    def remaining(self) -> float:
        """Seconds left for the whole demo: unstarted stages and the running ones' rest, re-calibrated."""
        now = self.clock()
        left = 0.0
        for s in self.stages:
            k = self.key(s)
            st = self.state[k]
            if st.finished is not None:
                continue
            expected = self.predicted[k] * self.factor(s.family)
            if st.started is None:
                left += expected
            else:
                elapsed = now - st.started
                # past its estimate, a stage is assumed to need a tenth of its elapsed time more
                left += max(expected - elapsed, 0.1 * elapsed)
        return left

    def done_fraction(self) -> float:
        """Share of the predicted work finished (running stages count their elapsed share)."""
        total = self.total()
        if total <= 0:
            return 1.0
        now = self.clock()
        done = 0.0
        for s in self.stages:
            k = self.key(s)
            st = self.state[k]
            if st.finished is not None:
                done += self.predicted[k]
            elif st.started is not None:
                expected = self.predicted[k] * self.factor(s.family)
                done += self.predicted[k] * min(0.95, (now - st.started) / expected if expected > 0 else 0.0)
        return min(1.0, done / total)

    def current(self) -> Stage | None:
        """The stage running now (the latest started, unfinished)."""
        running = [s for s in self.stages if self.state[self.key(s)].started is not None
                   and self.state[self.key(s)].finished is None]
        return running[-1] if running else None

    def table(self) -> list[dict[str, Any]]:
        """Per stage: predicted and measured seconds, its work (for the closing timing table)."""
        return [{"demo": s.demo, "stage": s.key, "label": s.label, "work": dict(s.work), "parallel": s.parallel,
                 "jobs": len(s.jobs), "serial": dict(s.serial),
                 "predicted_seconds": round(self.predicted[self.key(s)], 1),
                 "measured_seconds": None if self.measured(self.key(s)) is None else round(self.measured(self.key(s)), 1)}
                for s in self.stages]


def minutes(seconds: float) -> str:
    """``'about 14 min'`` (``'under a minute'`` below 60 s)."""
    if seconds < 60:
        return "under a minute"
    return f"about {round(seconds / 60):d} min"


__all__ = ["ABLATED_HEADS_GUESS", "CIRCUIT_SIZES", "EVALUATOR_PASSES", "HANS_SUBCASES", "INDUCTION_HEADS_GUESS",
           "M_PRUNING_STEPS_GUESS", "Plan", "S_PRUNING_STEPS_GUESS", "STAGE_BUILDERS", "Stage", "UNITS",
           "add_attention_stage", "circuits_stages", "heuristic_core_stages", "like_jobs", "lottery_stages", "minutes",
           "subtask_induction_stages", "summed", "sweep_start"]
