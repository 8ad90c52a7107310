"""What ``subnetlab prune``, ``discover``, ``transfer``, ``circuit`` and ``circuit-eval`` do, as one Python call each:
``sl.prune``, ``sl.discover``, ``sl.transfer_subnetwork`` (``sl.transfer`` is the package of transfer's parts),
``sl.circuit`` and ``sl.circuit_eval``.

A notebook user gets the command's runs without the command line: each function builds the same typed
job configs as the command, runs them through the executor (in this process by default; ``jobs=N``
for N worker processes) into ``out`` (a rerun skips finished runs and resumes killed ones, as the
command's does) and returns what the command prints, as a typed result (``subnetlab.api_results``: fields
documented, each also a read-only mapping with ``to_dict()``), with the paths of what it wrote::

    import subnetlab as sl
    result = sl.prune("runs/ft/model", "nli-synthetic", "runs/prune", sparsity=0.5, seeds=[0], preset="demo")
    sub = result.load_subnetworks()[0]  # result.subnetworks: the files; result.summary: what the command prints

Settings are the commands' options under their library names; a failed run raises ``SubnetlabError``.

The command's guarantees hold here too, since both run the same checks in ``subnetlab.runs``: a bad setting or
file is refused with the command's message (naming the setting, not the flag) before any run starts; a split
that would evaluate on the training rows of the run that fine-tuned ``model`` is refused; and every health
problem the command prints as ``warning: LINE`` is issued as a ``HealthWarning`` (``warnings.warn``, category
``subnetlab.HealthWarning``, the same LINE; a notebook shows it under the cell) and returned in
``result.warnings``, with each run's health in ``result.health``. ``strict=True`` (the command's strict
mode) refuses the first problem instead, once the results are written::

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", sl.HealthWarning)  # or strict=True: raise on the first problem
        sl.prune(...)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from subnetlab.api_results import CircuitEvalResult, CircuitResult, DiscoverResult, PruneResult, TransferResult
from subnetlab.errors import SubnetlabError, check_distinct_names, check_whole_numbers
from subnetlab.executor import Job, SweepReport, run_jobs
from subnetlab.run_directory import lock
from subnetlab.runs.health import Health, HealthWarning, report_health
from subnetlab.runs.job_config import check_call, check_seeds


def _run(jobs: Sequence[Job], out: Path, n_jobs: int | None, what: str) -> SweepReport:
    """Run ``jobs`` into ``out`` holding its writer lock, as the command does; raise on a failed run."""
    with lock(out):  # a second writer (this call twice, or the command at once) is refused, naming the holder
        report = run_jobs(jobs, backend="processes" if n_jobs and n_jobs > 1 else "local", n_jobs=n_jobs,
                          sweep_dir=out)
    failed = [j for j in report.jobs if j.status == "failed"]
    if failed:
        raise SubnetlabError(f"{len(failed)} of {len(report.jobs)} {what} runs failed; {failed[0].name}: "
                             f"{failed[0].error} (details in {out / 'sweep.json'})")
    return report


def _seeds(seeds: int | Sequence[int]) -> list[int]:
    return [seeds] if isinstance(seeds, int) else list(seeds)


def _warn(line: str) -> None:
    warnings.warn(line, HealthWarning, stacklevel=5)  # points at the caller's line


def _health(entries: Iterable[tuple[str, Health | None]], strict: bool) -> tuple[dict[str, Any], list[str]]:
    """Each run's health entry, and the problems as the command's warning lines (warned, or refused under strict)."""
    entries = list(entries)
    lines = report_health(entries, strict=strict, emit=_warn)
    return {what: h.to_dict() for what, h in entries if h is not None}, lines


def prune(model: str, task: str, out: str | Path, *, sparsity: float | Sequence[float] = 0.5,
          seeds: int | Sequence[int] = 0, preset: str = "paper", schedule: str = "linear", levels: Sequence[float] = (),
          task_options: Mapping[str, Any] | None = None, eval_data: Sequence[str] = (),
          splits: Sequence[str] | None = None, device: str = "auto", jobs: int | None = None, strict: bool = False,
          controls: Sequence[str] = (), device_map: Any = None, max_memory: Any = None,
          offload_folder: str | Path | None = None, **settings: Any) -> PruneResult:
    """Prune ``model``'s heads and MLPs on ``task`` to each ``sparsity`` with each seed (``subnetlab prune``).

    ``device_map`` (``"auto"``, ``{module: device}`` or a JSON file; ``max_memory`` and ``offload_folder`` as
    accelerate takes them) spreads a model too large for one device over GPUs, the CPU and disk
    (``models.device_map``).

    ``settings`` override the preset's pruning settings (``total_steps=500``, ``ablation="zero"``, ...);
    ``controls`` (``"random-weights"``, ``"shuffled-labels"``: ``methods.controls``) run the same search beside
    it. Returns a ``PruneResult`` (``out``, ``summary``, ``health``, ``warnings``, ``runs``, ``subnetworks``,
    ``controls``): the summary
    across seeds that the command prints (with each sparsity's health counts), each run's health and the problems
    as warning lines (module doc), each run's metrics, the chosen subnetwork of each run, and the comparison with
    the controls (``runs.controls``; empty without).
    """
    from subnetlab.io import write_json
    from subnetlab.methods.controls import check_controls
    from subnetlab.models.device_map import DeviceMap
    from subnetlab.runs.controls import subnetwork_measure, write_comparison
    from subnetlab.runs.prune import SUBNETWORK_FILE
    from subnetlab.runs.prune_plan import plan_prune, sweep_healths, sweep_summary
    from subnetlab.runs.prune_summary import SUMMARY_FILE

    check_call(model=model, task=task, out=out, jobs=jobs, controls=controls, task_options=task_options,
               device=device, preset=preset, seeds=seeds)  # at the call, before anything is read or written
    check_seeds(seeds)  # None too: a sweep has seeds
    out = Path(out)
    targets = [sparsity] if isinstance(sparsity, (int, float)) else sparsity
    sweep = plan_prune(model, task, out, targets=targets, seeds=_seeds(seeds), preset=preset, schedule=schedule,
                       levels=levels, overrides=settings, task_options=task_options, eval_data=eval_data,
                       splits=splits, device=device, controls=check_controls(controls),
                       device_map=DeviceMap.given(device_map, max_memory, offload_folder))  # the command's checks
    report = _run(sweep, out, jobs, "pruning")
    comparison = write_comparison(out, report.jobs, "prune", controls=controls, measure=subnetwork_measure,
                                  score_name="accuracy") if controls else {}
    summary = sweep_summary(report)
    write_json(out / SUMMARY_FILE, summary)  # as the command writes it
    health, lines = _health(sweep_healths(report), strict)
    runs = {job.name: job.metrics for job in report.jobs}
    subnetworks = [job.out_dir / SUBNETWORK_FILE for job in sweep if (job.out_dir / SUBNETWORK_FILE).is_file()]
    return PruneResult(out=out, summary=summary, health=health, warnings=lines, runs=runs, subnetworks=subnetworks,
                       controls=comparison)


def discover(model: str, task: str, out: str | Path, *, lambdas: Sequence[float] | None = None, seed: int = 0,
             task_options: Mapping[str, Any] | None = None, selection: Any = None, device: str = "auto",
             jobs: int | None = None, preset: str | None = None, samples: int | None = None,
             controls: Sequence[str] = (), **cs: Any) -> DiscoverResult:
    """Find a weight mask for ``task`` in a causal LM with continuous sparsification, one run per lambda
    (``subnetlab discover``).

    ``preset`` (``paper`` or ``quick``: ``methods.continuous_sparsification.DISCOVERY_PRESETS``, as the command's
    preset) sets the epochs, learning rate, batch size, lambdas and arithmetic rows (``samples``) that are
    not given; without one, the lambdas are 1e-7, 5e-7 and 1e-8 and the rest ``ContinuousSparsification``'s
    defaults. ``cs`` are ``ContinuousSparsification`` settings (``epochs``, ``lr``, ``batch_size``, ``include``, ...);
    ``selection`` a ``methods.continuous_sparsification.LambdaChoice`` (default: the sparsest subnetwork within
    a point of the best evaluation accuracy). ``controls`` (``"random-weights"``, ``"shuffled-labels"``:
    ``methods.controls``) run the same sweep beside it, each control's lambda chosen alike. Returns a
    ``DiscoverResult``: the chosen run's metrics (``chosen``; ``subnetwork``, its file), ``sweep`` (every lambda's
    metrics) and ``controls`` (the
    chosen masks compared with the controls' as ``out/controls/metrics.json`` holds it; empty without).
    """
    from subnetlab.errors import preset_values
    from subnetlab.methods.continuous_sparsification import DISCOVERY_PRESETS
    from subnetlab.methods.controls import CONTROLS_DIR, SHUFFLED_LABELS, check_controls, check_shufflable
    from subnetlab.run_directory import absolute_input
    from subnetlab.runs.controls import control_jobs, discovery_measure, selected_comparison
    from subnetlab.runs.transfer import (
        DiscoverJobConfig,
        check_lm_task,
        lm_task_options,
        select_best,
        task_options_for,
    )

    check_call(model=model, task=task, out=out, jobs=jobs, controls=controls, task_options=task_options,
               device=device, preset=preset, samples=samples)  # at the call, before anything is read or written
    check_seeds(seed, "seed")
    out = Path(out)
    controls = check_controls(controls)
    options = dict(task_options or {})
    if preset is not None:
        given = {"lambdas": lambdas, "samples": samples, **{k: cs.get(k) for k in ("epochs", "lr", "batch_size")}}
        settings = preset_values(DISCOVERY_PRESETS, preset, given)
        lambdas, samples = settings.pop("lambdas"), settings.pop("samples")
        cs.update(settings)
    if samples is not None and task.startswith("arith:"):
        options.setdefault("n_train", samples)
    lambdas = (1e-7, 5e-7, 1e-8) if lambdas is None else lambdas
    options = lm_task_options(str(model), task, options)  # your own data: the fine-tuning's split
    configs = [DiscoverJobConfig.from_dict({"model": str(absolute_input(model)), "task": task, "task_options": options,
                                            "seed": seed, "device": device, "cs": {**cs, "l0_lambda": lam}}).to_dict()
               for lam in lambdas]
    fn = "subnetlab.runs.transfer:discover_job"
    sweep = [Job(fn, config, out / f"lambda_{lam:g}") for config, lam in zip(configs, lambdas)]
    built = check_lm_task(configs[0]["model"], task, task_options_for(task, options, seed), "discovery")
    if SHUFFLED_LABELS in controls:  # as the command: a task with one answer is refused before any job
        check_shufflable(built)
    report = _run(sweep + control_jobs(sweep, out, controls, fn), out, jobs, "discovery")
    metrics = [job.metrics for job in report.jobs if not job.metrics.get("control")]
    comparison = selected_comparison(out / CONTROLS_DIR, report.jobs, "discover", controls=controls,
                                     select=lambda runs: select_best(runs, selection), measure=discovery_measure,
                                     score_name="test_accuracy") if controls else {}
    return DiscoverResult(out=out, chosen=select_best(metrics, selection), sweep=metrics, controls=comparison)


def transfer_subnetwork(model: str, task: str, out: str | Path, *, subnetwork: str | Path | None = None,
             conditions: Sequence[str] = ("subnetwork",), sizes: Sequence[int] | None = None,
             seeds: int | Sequence[int] = 0, task_options: Mapping[str, Any] | None = None, reinit: str = "all",
             freeze: bool = True, device: str = "auto", jobs: int | None = None, preset: str | None = None,
             **train: Any) -> TransferResult:
    """Transfer ``subnetwork`` from ``model`` into fresh models and train them on ``task``, for every condition,
    number of disambiguation rows (``sizes``: arithmetic tasks only, default 0, 100 and 1000) and seed
    (``subnetlab transfer``).

    ``train`` are ``transfer.TrainSettings`` fields (``epochs``, ``lr``, ``batch_size``, ...); ``preset``
    (``paper`` or ``quick``: ``transfer.train.TRANSFER_PRESETS``, as the command's preset) sets the epochs,
    learning rate and batch size not given. Returns a
    ``TransferResult`` (``out``, ``summary``, ``runs``): per condition and size the mean test accuracy over seeds (at each run's
    best evaluation epoch), and every run's record.
    """
    from subnetlab.experiments.subtask_induction.report import summarise
    from subnetlab.run_directory import absolute_input
    from subnetlab.runs.transfer import TransferJobConfig, check_lm_task, lm_task_options, own_data, task_options_for
    from subnetlab.transfer import TrainSettings, check_conditions

    check_call(model=model, task=task, out=out, jobs=jobs, subnetwork=subnetwork, task_options=task_options,
               device=device, preset=preset, seeds=seeds)  # at the call, before anything is read or written
    out = Path(out)
    check_conditions(check_distinct_names("conditions", list(conditions)), has_subnetwork=subnetwork is not None)
    if subnetwork is not None:  # an empty subnetwork is refused before any training, as the command does
        from subnetlab.runs.transfer import check_transfer_input, subnetwork_health
        from subnetlab.subnetwork import Subnetwork

        check_transfer_input(subnetwork_health(Subnetwork.load(subnetwork), subnetwork), list(conditions))
    if sizes is None:
        sizes = (0,) if own_data(task) else (0, 100, 1000)
    sizes = check_whole_numbers("sizes", sizes, least=0)
    options = lm_task_options(str(model), task, dict(task_options or {}),  # your own data: the earlier runs' split
                              None if subnetwork is None else str(subnetwork))
    if preset is not None:
        from subnetlab.errors import preset_values
        from subnetlab.transfer.train import TRANSFER_PRESETS

        train = {**train, **preset_values(TRANSFER_PRESETS, preset,
                                          {k: train.get(k) for k in ("epochs", "lr", "batch_size")})}
    settings = TrainSettings(**train).config()
    arithmetic = {} if own_data(task) else {"ambiguous": True, "n_disambiguation": max(sizes)}
    check_lm_task(str(absolute_input(model)), task, task_options_for(task, {**arithmetic, **options},
                                                                     check_seeds(seeds)[0]), "transfer training",
                  None if subnetwork is None else str(absolute_input(subnetwork)))  # as the command, before any job
    sweep = []
    for condition in conditions:
        for size in sizes:
            for seed in _seeds(seeds):
                config = TransferJobConfig.from_dict({
                    "model": str(absolute_input(model)), "task": task, "task_options": options,
                    "subnetwork": str(absolute_input(subnetwork)) if subnetwork is not None else None,
                    "runs": [{"condition": condition, "size": size, "seed": seed}], "train": settings,
                    "reinit": reinit, "freeze": freeze, "device": device}).to_dict()
                sweep.append(Job("subnetlab.runs.transfer:transfer_job", config, out / condition / f"n{size}_s{seed}"))
    report = _run(sweep, out, jobs, "transfer")
    runs = [run for job in report.jobs for run in job.metrics["runs"]]
    return TransferResult(out=out, summary=summarise(runs), runs=runs)


def circuit(model: str, task: str, out: str | Path, *, method: str = "edge-pruning",
            sparsity: float | Sequence[float] | None = None, seeds: int | Sequence[int] | None = None,
            preset: str | None = None, ablation: str | None = None, embedding_nodes: int | None = None,
            task_options: Mapping[str, Any] | None = None, split: str | None = None, limit: int | None = None,
            ig_steps: int | Sequence[int] | None = None, metric: str | None = None, init_from: str | Path | None = None,
            device: str = "auto", jobs: int | None = None, strict: bool = False, controls: Sequence[str] = (),
            warm_start: str | None = None, device_map: Any = None, max_memory: Any = None,
            offload_folder: str | Path | None = None, **settings: Any) -> CircuitResult:
    """Edge-level circuits of ``model`` on a circuit ``task`` (``subnetlab circuit``): Edge Pruning at each target
    ``sparsity`` (fraction of edges removed) and seed (defaults: seed 0, the ``paper`` preset, measured on the
    ``eval`` pairs), or attribution scores of every edge (``method="eap"`` / ``"eap-ig"``, on the training pairs),
    or of every node (``"nap"`` / ``"nap-ig"``: no ``graph`` in the paths). ``ablation="mean"`` under eap and nap:
    each writer's mean output over the clean prompts in place of the corrupted one (MIB's "EAP (mean)").

    Attribution over several ``ig_steps`` (a list) or ``seeds`` (each scores a seeded draw of ``limit`` training
    pairs): one run per (steps, seed) and the stability of their top-``|score|`` circuits at each target
    ``sparsity`` (default 0.95), returned under ``"stability"`` and written to ``out/metrics.json``.

    ``settings`` override edge pruning's preset (``total_steps=500``, ...). A setting the method does not read
    is refused, as the command refuses its option. ``warm_start="eap"`` (or ``"eap-ig"``) scores the edges first
    into ``out/warm-start/`` and starts the log-alphas from them (``init_from`` given that file). ``device_map``
    (with ``max_memory``, ``offload_folder``) places the model's modules on devices as ``sl.prune``'s does, without
    offloading (edge interventions read weights outside a module's call). Returns a ``CircuitResult``
    (``out``, ``summary``, ``health``, ``warnings``, ``runs``, ``paths``; ``circuits()`` reads them): per run its kept edges, sparsity and faithfulness (edge pruning) or the scores' summary
    (attribution), each run's health and the problems as warning lines (module doc), each run's metrics, and
    the files written (``graph``, ``circuits``, ``figures``; or ``scores``, ``node_scores``, ``graph``).
    """
    from subnetlab.methods.controls import check_controls
    from subnetlab.models.device_map import DeviceMap
    from subnetlab.runs.attribution import SCORES_FILE
    from subnetlab.runs.circuit import (
        CIRCUIT_FIGURE,
        GRAPH_FILE,
        SUBNETWORK_FILE,
        WARM_START_DIR,
        CircuitJobConfig,
        check_warm_start,
        plan_circuit,
        write_sweep_graph,
    )
    from subnetlab.runs.circuit_methods import check_method, refuse_unused
    from subnetlab.runs.controls import circuit_masks, circuit_measure, write_comparison
    from subnetlab.runs.health import read_health

    check_call(model=model, task=task, out=out, jobs=jobs, controls=controls, task_options=task_options,
               device=device, preset=preset, seeds=seeds, method=method, init_from=init_from,
               limit=limit)  # at the call, before anything is read or written
    check_method(method)
    refuse_unused(method, {"sparsity": sparsity, "seeds": seeds, "preset": preset, "ablation": ablation,
                            "split": split, "init_from": init_from, "jobs": jobs, "settings": settings or None,
                            "metric": metric, "ig_steps": ig_steps, "control": list(controls) or None,
                            "warm_start": warm_start, "device_map": device_map, "max_memory": max_memory,
                            "offload_folder": offload_folder})
    out = Path(out)
    if method != "edge-pruning":
        return _attribution(model, task, out, method, ig_steps=5 if ig_steps is None else ig_steps,
                            metric=metric or "logit_diff", task_options=task_options, embedding_nodes=embedding_nodes,
                            limit=limit, device=device, seeds=None if seeds is None else _seeds(seeds),
                            sparsity=sparsity, ablation=ablation)
    if sparsity is None:
        raise SubnetlabError("sparsity: give at least one target", setting="sparsity")
    overrides = dict(settings)
    if ablation is not None:
        overrides["ablation"] = ablation
    if embedding_nodes is not None:
        overrides["embedding_nodes"] = embedding_nodes
    targets = [sparsity] if isinstance(sparsity, (int, float)) else list(sparsity)
    placement = DeviceMap.given(device_map, max_memory, offload_folder)
    check_warm_start(warm_start, init_from, placement)
    if warm_start is not None:  # every check of the sweep first (no work), then the scores it starts from
        plan_circuit(model, task, out, targets=targets, seeds=_seeds(0 if seeds is None else seeds),
                     preset=preset or "paper", overrides=overrides, task_options=task_options, split=split or "eval",
                     limit=limit, device=device, controls=check_controls(controls))
        _attribution(model, task, out / WARM_START_DIR, warm_start, ig_steps=5, metric="logit_diff",
                     task_options=task_options, embedding_nodes=embedding_nodes, limit=None, device=device)
        init_from = out / WARM_START_DIR / SCORES_FILE
    sweep, adapter = plan_circuit(model, task, out, targets=targets, seeds=_seeds(0 if seeds is None else seeds),
                                  preset=preset or "paper", overrides=overrides, task_options=task_options,
                                  split=split or "eval", limit=limit,
                                  init_from=None if init_from is None else str(init_from), device=device,
                                  controls=check_controls(controls),
                                  device_map=placement)
    with lock(out):
        write_sweep_graph(adapter, out, CircuitJobConfig.from_dict(sweep[0].config).settings.embedding_nodes)
    report = _run(sweep, out, jobs, "edge-pruning")
    comparison = write_comparison(out, report.jobs, "circuit", controls=controls, measure=circuit_measure,
                                  score_name="logit_diff", masks=circuit_masks)
    runs = {job.name: job.metrics for job in report.jobs}
    summary = {name: {"kept_edges": m["kept_edges"], "edges": m["edges"], "sparsity": m["sparsity"],
                      "faithfulness": m["faithfulness"], "kl": m["eval"].get("kl")} for name, m in runs.items()
               if not m.get("control")}  # the controls' runs are compared in "controls"
    health, lines = _health([(name, read_health(m)) for name, m in runs.items()], strict)
    paths = {"graph": out / GRAPH_FILE, "circuits": [job.out_dir / SUBNETWORK_FILE for job in sweep],
             "figures": [job.out_dir / CIRCUIT_FIGURE for job in sweep]}
    return CircuitResult(out=out, summary=summary, health=health, warnings=lines, runs=runs, paths=paths,
                         controls=comparison)


def _attribution(model: str, task: str, out: Path, method: str, *, ig_steps: int | Sequence[int], metric: str,
                 task_options: Mapping[str, Any] | None, embedding_nodes: int | None, limit: int | None,
                 device: str, seeds: list[int] | None = None,
                 sparsity: float | Sequence[float] | None = None, ablation: str | None = None) -> CircuitResult:
    """One attribution run, or with several step counts or seeds one per (steps, seed) and the stability of their
    circuits at each target ``sparsity`` (``runs.attribution_sweep``; returned under ``"stability"``)."""
    from subnetlab.runs.attribution import NODE_SCORES_FILE, SCORES_FILE, AttributionJobConfig, attribution_run
    from subnetlab.runs.attribution_sweep import (
        DEFAULT_TARGET,
        attribution_sweep,
        check_step_counts,
        check_sweep_targets,
    )
    from subnetlab.tasks.spec import TaskSpec

    steps = check_step_counts(list(ig_steps) if isinstance(ig_steps, (list, tuple, range)) else [ig_steps])
    job = AttributionJobConfig(model=model, task=TaskSpec(task, dict(task_options or {})), method=method,
                               ig_steps=steps[0], split="train", metric=metric, limit=limit,
                               embedding_nodes=embedding_nodes, device=device, ablation=ablation)
    targets = None if sparsity is None else [sparsity] if isinstance(sparsity, (int, float)) else list(sparsity)
    if check_sweep_targets(method, steps, seeds, targets):
        with lock(out):
            result = attribution_sweep(job, out, steps=steps, seeds=seeds, targets=targets or [DEFAULT_TARGET])
        return CircuitResult(out=out, summary={k: v for k, v in result.items() if k != "runs"}, health={}, warnings=[],
                             runs=result["runs"], stability=result["targets"], paths={"metrics": out / "metrics.json"})
    with lock(out):
        metrics = attribution_run(job, out)
    paths = {"scores": out / SCORES_FILE, "node_scores": out / NODE_SCORES_FILE,
             **({} if metrics.get("level") == "nodes" else {"graph": out / "graph.json"})}
    return CircuitResult(out=out, summary=metrics, health={}, warnings=[], runs={str(out): metrics}, paths=paths)


def circuit_eval(model: str, task: str, out: str | Path, *, scores: str | Path | None = None,
                 circuits: Sequence[str | Path] = (), split: str = "eval", metric: str = "logit_diff",
                 ablation: str = "corrupted", sizes: Sequence[float] | None = None, batch_size: int = 32,
                 limit: int | None = None, task_options: Mapping[str, Any] | None = None, device: str = "auto",
                 strict: bool = False, definition: str = "subnetlab", bootstrap: int | None = None,
                 bootstrap_seed: int = 0, selection: str = "topn", random_circuits: int = 0, random_seed: int = 0,
                 permute_pairs: bool = False, permute_seed: int = 0,
                 ablations: Sequence[str] = ()) -> CircuitEvalResult:
    """The faithfulness curve (MIB's CPR and CMD) of edge or node ``scores``, or of ``circuits``, on a circuit
    ``task`` (``subnetlab circuit-eval``). ``sizes`` are fractions of the items (the command's percentages / 100;
    default MIB's ten).

    Returns a ``CircuitEvalResult`` (``out``, ``summary``, ``areas``, ``health``, ``warnings``, ``result``,
    ``paths``): metrics.json's content;
    CPR and CMD as the command prints them (labelled with their span when the circuits cover part of the size
    range); the health (a degenerate baseline is a ``HealthWarning``, refused under ``strict``); the whole curve
    (faithfulness.json); and the files written. ``definition="mib"``: CPR and CMD as MIB's circuit track computes
    them (its fixed sizes), with ``bootstrap`` resamples a 95% percentile interval of both over the pairs
    (``result["bootstrap"]``, seeded by ``bootstrap_seed``).

    The nulls (``runs.circuit_eval``): ``random_circuits=N`` measures N random circuits of each size, drawn by the
    method's own ``selection`` rule (seeded by ``random_seed``) and gives, per size, their mean and spread, the
    circuit's percentile and empirical p-value, and the random mean curve's CPR / CMD
    (``result["random_circuits"]``); ``permute_pairs=True`` measures again with the clean and corrupted prompts
    re-paired at random (``result["permuted_pairs"]``, seeded by ``permute_seed``); ``ablations`` (of corrupted,
    mean, zero) measures the same circuits under each, side by side (``result["ablations"]``). Every figure is
    labelled with its ``ablation``, ``selection`` and ``ranking``.
    """
    from subnetlab.analysis.faithfulness import CIRCUIT_SIZES, describe_areas
    from subnetlab.runs.circuit_eval import CircuitEvalJobConfig, circuit_eval_run
    from subnetlab.runs.health import read_health
    from subnetlab.tasks.spec import TaskSpec

    check_call(model=model, task=task, out=out, scores=scores, task_options=task_options, device=device,
               limit=limit, batch_size=batch_size)  # at the call, before anything is read or written
    out = Path(out)
    job = CircuitEvalJobConfig(model=model, task=TaskSpec(task, dict(task_options or {})),
                               scores=None if scores is None else str(scores), circuits=tuple(str(c) for c in circuits),
                               split=split, metric=metric, ablation=ablation,
                               sizes=CIRCUIT_SIZES if sizes is None else tuple(float(s) for s in sizes),
                               batch_size=batch_size, limit=limit, device=device, definition=definition,
                               bootstrap=bootstrap, bootstrap_seed=bootstrap_seed, selection=selection,
                               random_circuits=random_circuits, random_seed=random_seed, permute_pairs=permute_pairs,
                               permute_seed=permute_seed,
                               ablations=(ablations,) if isinstance(ablations, str) else tuple(ablations))
    if definition == "mib" and sizes is not None:
        raise SubnetlabError("sizes: MIB's sizes are fixed (0.1 % ... 100 %); leave sizes out with MIB's definition",
                             setting="sizes")
    with lock(out):
        result = circuit_eval_run(job, out)
    health, lines = _health([(str(out), read_health(result))], strict)
    from subnetlab.io import read_json

    areas = describe_areas(result["cpr"], result["cmd"], result.get("span"), result["level"]) if "cpr" in result else None
    return CircuitEvalResult(out=out, summary=read_json(out / "metrics.json"), areas=areas, health=health,
                             warnings=lines, result=result,
                             paths={"faithfulness": out / "faithfulness.json", "metrics": out / "metrics.json"})


__all__ = ["HealthWarning", "circuit", "circuit_eval", "discover", "prune", "transfer_subnetwork"]
