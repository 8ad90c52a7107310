"""One task of the Heuristic Core reproduction, stage by stage; every stage resumes.

    finetune/            fine-tuning with checkpoints (runs.finetune)
    data/                the chosen OOD subcases and files holding only them
    prune/               N seeds x two sparsities (runs.prune.prune_sweep through the executor)
    curves/              every checkpoint on the report's rows: Figure 1, one source with Tables 1 and 4
    core/                frequencies, heatmap, core, rho (steps.core_step)
    ablation/            Table 3 for the core heads
    effective_size/      staircase sweeps over checkpoints and the Figure 6 analysis
    attention/           attention patterns of the core heads (Figures 7 and 9)

``run_study`` returns a dict of everything the report needs (read back from
the stages' files, so a finished study re-renders without recomputation).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from subnetlab.analysis.scores import score_columns
from subnetlab.errors import SubnetlabError
from subnetlab.executor import run_jobs
from subnetlab.experiments.heuristic_core import data, steps
from subnetlab.experiments.heuristic_core.effective_size import (
    SearchSettings,
    analyse_sweep,
    check_sweep,
    search_sweep,
    sweep_jobs,
)
from subnetlab.experiments.heuristic_core.settings import HeuristicCoreSettings
from subnetlab.io import read_json, write_json
from subnetlab.methods.head_pruning.config import PruneConfig
from subnetlab.progress import stage
from subnetlab.run_directory import finished_metrics

ID_SPLITS = ["id"]


def _real_file(study: dict) -> Path | None:
    """The real HANS file when configured and present; ``auto:REL`` looks under ../shared/data."""
    spec = study.get("real_ood")
    if not spec:
        return None
    path = str(spec["path"])
    if path.startswith("auto:"):
        from subnetlab.tasks.registry import shared_data_dir

        candidate = shared_data_dir() / path[5:]
        return candidate if candidate.is_file() else None
    if not path.startswith("hub:") and not Path(path).is_file():
        raise SubnetlabError(f"real_ood: {path}: no such file")
    return Path(path) if not path.startswith("hub:") else path  # type: ignore[return-value]


def _curve_data(study: dict, out: Path) -> list[str]:
    """``[SPLIT:]FORMAT=FILE`` splits for the fine-tuning curves: every real HANS subcase, a few rows each."""
    from subnetlab.tasks.registry import load_file

    real = _real_file(study)
    if real is None:
        return list(study.get("finetune_eval_data") or [])
    path = out / "real_curves.tsv"
    if not path.is_file():
        examples, _ = load_file("hans", real)
        subcases = list(dict.fromkeys(ex.subcase for ex in examples))
        data.write_hans_tsv(path, data.select(examples, subcases, study["real_ood"].get("curve_per_subcase")))
    return [*(study.get("finetune_eval_data") or []), f"hans:hans={path}"]


def _finetune(study: dict, settings: HeuristicCoreSettings, eval_data: list[str], out: Path) -> dict:
    from subnetlab.methods.finetune.config import resolve_config
    from subnetlab.runs.finetune import finetune

    cfg = resolve_config(settings.finetune_preset, model=settings.model, task=study["task"],
                         task_options=study.get("task_options") or {}, eval_data=eval_data,
                         **{**settings.finetune, **(study.get("finetune") or {})})
    stage(f"[{study['name']}] fine-tuning {settings.model} on {study['task']}")
    return finetune(cfg, out)


def _entailed_rows(study: dict) -> dict[str, int | None]:
    """Rows per entailment subcase for the ablation table's entailment columns, per source (``ood``, ``real``).

    ``entailed_per_subcase`` under ``ood`` / ``real_ood``; absent, the source's ``per_subcase``. The chosen
    heuristics have 15 entailment subcases against 4 non-entailment ones, so at the same rows per subcase the
    entailment columns would be two thirds of every ablation evaluation; the demo reads 10 rows of each (a
    column averages one heuristic's 5 subcases, 50 rows): its ablation table took 225 s at 16 rows and 169 s
    at 10 in ``make demo`` on 2 cores.
    """
    ood, real = study.get("ood") or {}, study.get("real_ood") or {}
    return {"ood": ood.get("entailed_per_subcase", ood.get("per_subcase")),
            "real": real.get("entailed_per_subcase", real.get("per_subcase"))}


def _prepare_data(study: dict, settings: HeuristicCoreSettings, finetuned: dict, out: Path) -> dict:
    """Choose the OOD subcases; write ``ood`` (and ``real``) evaluation files holding just those."""
    ood = study["ood"]
    if (out / "data.json").is_file():
        saved = read_json(out / "data.json")
        if (saved.get("rule") == ood.get("subcases") and saved.get("entailment_floor") == ood.get("entailment_floor", 0.5)
                and saved.get("entailed_per_subcase") == _entailed_rows(study)):
            return saved
    from subnetlab.tasks.registry import load_file

    if ood["source"] == "synthetic":
        pool = data.synthetic_ood_examples(study.get("task_options") or {}, ood["per_subcase"])
    else:
        pool, _ = load_file(ood["format"], ood["path"], **({"not_equivalent_only": True} if ood.get("not_equivalent_only") else {}))
    files: dict[str, str] = {}
    entailed: dict[str, str] = {}  # the chosen heuristics' entailment subcases: the ablation table's other columns
    info: dict[str, Any] = {"rule": ood.get("subcases"), "entailment_floor": ood.get("entailment_floor", 0.5),
                            "entailed_per_subcase": _entailed_rows(study)}
    if ood.get("subcases") is None:  # an OOD set without subcases (PAWS-QQP): one column
        subcases = None
        files["ood"] = f"paws-qqp={data.write_pairs_jsonl(out / 'ood.jsonl', pool)}"
        attention = pool[: settings.attention["examples"]]
    else:
        final = finetuned["final"].get(ood.get("choose_from", ""), {}).get("subcases")
        subcases = data.choose_subcases(ood["subcases"], final, settings.n_ood_subcases,
                                        entailment_floor=info["entailment_floor"])
        info["chosen_from"] = final
        if final:
            info["balanced"] = data.balanced_accuracies(final)
        heuristics = list(dict.fromkeys(data.heuristic_of(s) for s in subcases))
        consistent = [e for h in heuristics for e in data.entailment_subcases(h)]
        info["entailment_subcases"] = consistent
        files["ood"] = f"hans={data.write_hans_tsv(out / 'ood.tsv', data.select(pool, subcases, ood['per_subcase']))}"
        present = {ex.subcase for ex in pool}
        if all(e in present for e in consistent):
            rows = data.select(pool, consistent, _entailed_rows(study)["ood"])
            entailed["ood-entailed"] = f"hans={data.write_hans_tsv(out / 'ood_entailed.tsv', rows)}"
        real = _real_file(study)
        if real is not None:
            examples, _ = load_file("hans", real)
            rows = data.select(examples, subcases, study["real_ood"].get("per_subcase"))
            files["real"] = f"hans={data.write_hans_tsv(out / 'real.tsv', rows)}"
            rows = data.select(examples, consistent, _entailed_rows(study)["real"])
            entailed["real-entailed"] = f"hans={data.write_hans_tsv(out / 'real_entailed.tsv', rows)}"
            pool = examples
        lexical = lambda ex: ex.heuristic == "lexical_overlap"  # noqa: E731
        attention = data.interleave(pool, lexical, settings.attention["examples"])
    data.write_pairs_jsonl(out / "attention.jsonl", attention)
    info.update(subcases=subcases, files=files, entailed_files=entailed, attention=str(out / "attention.jsonl"))
    write_json(out / "data.json", info)
    return info


def _base_config(study: dict, model: str, prepared: dict) -> dict:
    eval_data = [f"{split}:{spec}" for split, spec in prepared["files"].items()]
    return {"model": model, "task": study["task"], "task_options": study.get("task_options") or {},
            "eval_data": eval_data, "splits": [*ID_SPLITS, *prepared["files"]]}


def step_overrides(settings: HeuristicCoreSettings, target: float) -> dict[str, int]:
    """The pruning runs' step counts when the study changes the preset's step rule: ``prune_steps_scale`` shrinks
    warm-up and total for a small CPU budget; ``prune_hold_steps`` sets how long the target is held after the
    warm-up (total = warm-up + hold). Empty when neither is set."""
    from subnetlab.methods.head_pruning.config import STEP_RULES

    scale, hold = settings.prune_steps_scale, settings.prune_hold_steps
    if scale is None and hold is None:
        return {}
    warmup, total = STEP_RULES[settings.prune_preset](target)
    if scale is not None:
        warmup, total = max(1, round(warmup * scale)), max(2, round(total * scale))
    if hold is not None:
        total = warmup + int(hold)
    return {"warmup_steps": warmup, "total_steps": total}


def _prune(study: dict, settings: HeuristicCoreSettings, base: dict, out: Path) -> dict:
    from subnetlab.runs.prune import prune_sweep

    jobs = prune_sweep(base, out, targets=study["sparsities"], seeds=settings.seeds, preset=settings.prune_preset,
                       overrides=lambda target: {**step_overrides(settings, target), **settings.prune})
    cfg = PruneConfig.from_dict(jobs[-1].config["prune"])
    stage(f"[{study['name']}] pruning: {len(settings.seeds)} seeds x {len(study['sparsities'])} sparsities")
    check_sweep(run_jobs(jobs, backend=settings.backend, n_jobs=settings.jobs, sweep_dir=out))
    return {"cache_dir": out / "cache", "max_length": cfg.max_length, "train_limit": cfg.train_limit,
            "means_examples": cfg.means_examples, "eval_batch_size": cfg.eval_batch_size, "settings": cfg}


def _curves(study: dict, settings: HeuristicCoreSettings, base: dict, pruning: dict, ft_dir: Path, subcases: list[str] | None,
            out: Path) -> dict[str, list]:
    """Figure 1's points: every fine-tuning checkpoint evaluated on the report's own rows (the ID split, the
    chosen OOD subcases, real HANS when present) by the full-model job the pruning and effective-size sweeps run,
    at their evaluation settings. A model's accuracy then has one source: the last point is the full model of
    Table 1, and every checkpoint's ID and OOD accuracy is the effective-size table's (the fine-tuning's own log
    scores other rows: 10 per subcase, all 30 subcases, and is used only to choose the subcases).
    ``{"step": [...], "id": [...], "ood": [...], "real": [...]}`` (``real`` only with real HANS)."""
    from subnetlab.analysis.effective_size import id_ood_accuracy
    from subnetlab.methods.finetune.state import checkpoint_dirs
    from subnetlab.runs.prune import full_model_eval_job

    checkpoints = checkpoint_dirs(ft_dir)
    jobs = [full_model_eval_job({**base, "model": str(path)}, out / f"step-{step}", pruning["settings"],
                                name=f"step-{step}") for step, path in checkpoints]
    stage(f"[{study['name']}] accuracy curves: {len(jobs)} checkpoints on the report's evaluation rows")
    check_sweep(run_jobs(jobs, backend=settings.backend, n_jobs=settings.jobs, sweep_dir=out))
    curves: dict[str, list] = {"step": [], "id": [], "ood": []}
    for step, _ in checkpoints:
        scores = read_json(out / f"step-{step}" / "metrics.json")["eval"]
        curves["step"].append(step)
        for name in [n for n in scores if n not in ID_SPLITS]:  # ood, real: each on its own, as in Tables 1 and 4
            _, accuracy = id_ood_accuracy({**{i: scores[i] for i in ID_SPLITS}, name: scores[name]}, ID_SPLITS, subcases)
            curves.setdefault(name, []).append(accuracy)
        curves["id"].append(id_ood_accuracy(scores, ID_SPLITS, subcases)[0])
    write_json(out / "curves.json", curves)
    return curves


def seed_table(study: dict, settings: HeuristicCoreSettings, prune_dir: Path, subcases: list[str]) -> dict:
    """Table 5 / Figure 2 data: the full model's columns and each sparsity's per-seed columns."""
    from subnetlab.runs.prune import run_dir_name

    model = score_columns(read_json(prune_dir / "full-model" / "metrics.json")["eval"], ID_SPLITS, subcases)
    by: dict[str, dict[str, list[float]]] = {}
    for target in study["sparsities"]:
        label = f"{100 * target:g}%"
        for seed in settings.seeds:
            m = read_json(prune_dir / run_dir_name(target, seed, "linear") / "metrics.json")
            for col, acc in score_columns(m["eval"], ID_SPLITS, subcases).items():
                by.setdefault(label, {}).setdefault(col, []).append(acc)
    return {"model": model, "by_sparsity": by, "columns": list(model)}


def identification(study: dict, settings: HeuristicCoreSettings, prune_dir: Path) -> dict:
    """Per sparsity and seed: gates still undecided at the end (0.05 < P(open) < 0.95), the Jaccard of the
    top-k and threshold selections and the run's health entry; how firmly each run's subnetwork is identified."""
    from subnetlab.runs.prune import run_dir_name

    out: dict[str, dict[str, list]] = {}
    for target in study["sparsities"]:
        label = f"{100 * target:g}%"
        for seed in settings.seeds:
            metrics = read_json(prune_dir / run_dir_name(target, seed, "linear") / "metrics.json")
            sel = metrics["selections"]
            row = out.setdefault(label, {"undecided": [], "gates": [], "jaccard": [], "health": []})
            row["undecided"].append(sel.get("undecided_gates"))
            row["gates"].append(sel.get("gates"))
            row["jaccard"].append(sel.get("jaccard"))
            row["health"].append(metrics.get("health"))  # runs.health's judgement (None: written before it)
    return out


def _heads_to_study(core: dict, k: int = 3) -> tuple[list[tuple[int, int]], str]:
    """The core, or (when it is empty) the ``k`` heads kept most often over both sparsities."""
    L, H = core["num_layers"], core["num_heads"]
    if core["core"]:
        return [(int(n[1:].split(".H")[0]), int(n.split(".H")[1])) for n in core["core"]], "core"
    total = [[core["frequency_a"][l][h] + core["frequency_b"][l][h] for h in range(H)] for l in range(L)]
    ranked = sorted(((l, h) for l in range(L) for h in range(H)), key=lambda x: (-total[x[0]][x[1]], x))
    return ranked[:k], f"top-{k} most frequent (the core is empty)"


def _ablation(study: dict, settings: HeuristicCoreSettings, base: dict, prepared: dict, heads: list, pruning: dict, subcases: list[str],
              out: Path) -> dict:
    from subnetlab.methods.head_pruning.ablation import mean_activations
    from subnetlab.methods.l0.data import PruningData
    from subnetlab.runs.prune_setup import load_pruning_model
    from subnetlab.tasks.spec import task_from_config

    opts = dict(settings.ablation)
    entailed = prepared.get("entailed_files") or {}
    splits = [*base["splits"], *entailed]
    eval_data = [*base["eval_data"], *(f"{split}:{spec}" for split, spec in entailed.items())]
    config = {"command": "ablate", "model": base["model"], "splits": splits, "eval_data": eval_data,
              "heads": [f"L{l}.H{h}" for l, h in heads], "subcases": subcases, **opts}
    done = finished_metrics(out, config, redo_other=True)
    if done is not None:
        return done
    task = task_from_config({**base, "eval_data": eval_data})
    for split in list(task.eval_splits):
        if split not in splits:
            del task.eval_splits[split]
    loaded = load_pruning_model(base["model"], task)
    tok = loaded.tokenizer if loaded.tokenizer is not None else task.tokenizer
    data_ = PruningData.from_task(task, tok, "train", pruning["max_length"], pruning["train_limit"])
    means = mean_activations(loaded.model, loaded.adapter, data_, pruning["means_examples"],
                             pruning["eval_batch_size"], pruning["cache_dir"])
    stage(f"[{study['name']}] ablating {len(heads)} heads")
    return steps.ablation_step(loaded, task, heads, out, config=config, means=means, id_splits=ID_SPLITS,
                               subcases=subcases, batch_size=pruning["eval_batch_size"], max_length=pruning["max_length"],
                               limit=opts.get("limit"), non_listed=opts.get("non_listed", "all"), seed=opts.get("seed", 0),
                               joint=steps.parse_joint(opts.get("joint_heads", "top-3"), loaded.adapter.num_layers,
                                                       loaded.adapter.num_heads),
                               all_jointly=opts.get("all_jointly", True), controls=opts.get("controls", ()),
                               entailed_splits=list(entailed))


def pick_checkpoints(found: list, count: int | None) -> list:
    """``count`` checkpoints evenly spaced over training (always the first and the last); None = all."""
    if count is None or count >= len(found):
        return list(found)
    if count < 2:
        return [found[-1]]
    idx = sorted({round(i * (len(found) - 1) / (count - 1)) for i in range(count)})
    return [found[i] for i in idx]


def _effective_size(study: dict, settings: HeuristicCoreSettings, base: dict, ft_dir: Path, core: list[str], subcases: list[str],
                    out: Path) -> dict | None:
    """Figure 6's staircase sweeps; None when the settings skip the stage (``effective_size: null``)."""
    from subnetlab.methods.finetune.state import checkpoint_dirs
    from subnetlab.methods.l0.schedule import parse_levels

    es = settings.effective_size
    if es is None:
        return None
    checkpoints = pick_checkpoints(checkpoint_dirs(ft_dir), es.get("checkpoints"))
    levels = list(parse_levels(es["levels"]))
    config = {"command": "effective-size", **es, "levels": levels, "steps": [step for step, _ in checkpoints],
              "core": list(core), "subcases": subcases}
    done = finished_metrics(out, config, redo_other=True)
    if done is not None:
        return done
    slim = {**{k: v for k, v in base.items() if k != "model"}, "splits": [*ID_SPLITS, "ood"],  # the curves need no real HANS
            "eval_data": [e for e in base["eval_data"] if e.startswith("ood:")]}
    overrides = {**settings.prune, **es.get("prune", {})}
    search = SearchSettings.from_dict(es.get("search"))  # absent (the presets): every level of every checkpoint
    sides, aggregate = es.get("sides", "two"), es.get("aggregate", "seed-mean")
    if search is not None and sides != "two":
        raise SubnetlabError("effective_size: the level search stops on two-sided faithfulness; with sides=one "
                             "run every level (drop 'search')", setting="effective_size")
    stage(f"[{study['name']}] effective size: {len(checkpoints)} checkpoints x {len(es['seeds'])} seeds x {len(levels)} levels"
          + (f" (search: {search.to_dict()})" if search else ""))
    dirs = None
    if search is None:
        jobs = sweep_jobs(checkpoints, slim, es["seeds"], levels, settings.prune_preset, overrides, out)
        check_sweep(run_jobs(jobs, backend=settings.backend, n_jobs=settings.jobs, sweep_dir=out))
    else:
        dirs = search_sweep(checkpoints, slim, es["seeds"], levels, settings.prune_preset, overrides, out,
                            search=search, on=es["on"], faithfulness=es["faithfulness"], id_splits=ID_SPLITS,
                            subcases=subcases,
                            run=lambda jobs, where: run_jobs(jobs, backend=settings.backend,
                                                             n_jobs=settings.jobs, sweep_dir=where))
    result = analyse_sweep(checkpoints, es["seeds"], levels, out, on=es["on"], faithfulness=es["faithfulness"],
                           id_splits=ID_SPLITS, subcases=subcases, core=core, search=dirs, sides=sides,
                           aggregate=aggregate)
    steps.effective_size_outputs(result, out, config=config)
    return result


def _attention(study: dict, settings: HeuristicCoreSettings, model: str, prepared: dict, heads: list, out: Path) -> dict:
    from subnetlab.models import load_model
    from subnetlab.tasks.registry import load_file

    opts = settings.attention
    pool, _ = load_file("paws-qqp", prepared["attention"])
    pairs = [(ex.text_a, ex.text_b) for ex in pool]
    config = {"command": "attention", "model": model, "data": prepared["attention"],
              "heads": [f"L{l}.H{h}" for l, h in heads], **opts}
    done = finished_metrics(out, config, redo_other=True)
    if done is not None:
        return done
    loaded = load_model(model, head="base", attn_implementation="eager")
    return steps.attention_step(loaded, pairs, heads, out, config=config, maps=opts["maps"], max_length=opts.get("max_length", 128))


class _Timer:
    """Seconds spent in each stage of this invocation (a skipped stage takes ~0)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn, *args, **kwargs):
        t0 = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds[name] = round(time.time() - t0, 2)


def run_study(study: dict, settings: HeuristicCoreSettings, out: Path) -> dict[str, Any]:
    """Every stage of one task's study; returns the paths and metrics the report renders."""
    t = _Timer()
    finetuned = t("finetune", _finetune, study, settings, _curve_data(study, out / "data"), out / "finetune")
    model = str(out / "finetune" / "model")
    prepared = t("data", _prepare_data, study, settings, finetuned, out / "data")
    subcases = prepared["subcases"]
    base = _base_config(study, model, prepared)
    pruning = t("prune", _prune, study, settings, base, out / "prune")
    curves = t("curves", _curves, study, settings, base, pruning, out / "finetune", subcases, out / "curves")
    groups = [out / "prune" / f"sparsity-{s:.2f}" for s in study["sparsities"]]
    core = t("core", steps.core_step, groups, out / "core")
    heads, which = _heads_to_study(core)
    table = seed_table(study, settings, out / "prune", subcases)
    identified = identification(study, settings, out / "prune")
    ablation = t("ablation", _ablation, study, settings, base, prepared, heads, pruning, subcases, out / "ablation")
    es = t("effective_size", _effective_size, study, settings, base, out / "finetune", core["core"], subcases,
           out / "effective_size")
    attention = t("attention", _attention, study, settings, model, prepared, heads, out / "attention")
    stage(f"[{study['name']}] stage seconds: {t.seconds}")
    return {"finetune": finetuned, "curves": curves, "data": prepared, "core": core, "heads_studied": which, "seeds_table": table,
            "identification": identified, "ablation": ablation, "effective_size": es, "attention": attention, "dir": str(out),
            "stage_seconds": t.seconds}
