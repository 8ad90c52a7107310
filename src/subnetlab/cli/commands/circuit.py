"""`subnetlab circuit`: edge-level circuits by Edge Pruning, over target sparsities and seeds, or attribution
scores of every edge (``--method eap|eap-ig|eap-ig-activations|clean-corrupted|exact``) or of every node
(``--method nap|nap-ig``), ``_circuit_attribution``.

    subnetlab circuit --model gpt2 --task circuit:ioi --method edge-pruning --sparsity 0.95 0.98 --seeds 0-2 \\
        --preset paper --out runs/ioi-circuits

One run directory per (sparsity, seed) through ``subnetlab.executor`` (finished
runs skipped, killed runs resumed); the layout is documented in
``subnetlab.runs.circuit``. ``DIR/graph.json`` holds the model's graph.
Under ``torchrun --nproc-per-node N -m subnetlab circuit ...`` every rank runs the same sweep on the local
backend, each run's mask training data parallel; rank 0 writes, measures and reports (``docs/distributed.md``).

The two pipelines read different options (``runs.circuit_methods.METHOD_SETTINGS``): an option the
chosen method does not read, given on the command line, is refused before any
work rather than ignored. ``--limit`` is read by both and counts what each
method measures on: the evaluation pairs of ``--split`` for edge-pruning (which
trains on every training pair), the training pairs for eap / eap-ig.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.cli.commands._controls import CONTROL_HELP
from subnetlab.cli.commands._executor_options import PARAMETERS as EXECUTOR_PARAMETERS
from subnetlab.cli.commands._executor_options import executor_options
from subnetlab.cli.commands._options import (
    DEVICE_HELP,
    data_flag_options,
    device_map_option,
    given_options,
    max_memory_option,
    offload_folder_option,
    with_data_options,
)
from subnetlab.errors import SubnetlabError
from subnetlab.executor import ExecutorOptions
from subnetlab.runs.circuit_methods import CIRCUIT_METHODS as METHODS
from subnetlab.runs.circuit_methods import joined, readers

# The command's parameters by the setting each sets (runs.circuit_methods.METHOD_SETTINGS says which methods read it).
SETTING_OF = {"more": "sparsity", "set_": "settings", **{name: "jobs" for name in EXECUTOR_PARAMETERS}}


def refuse_unused_options(method: str) -> None:
    """One error naming every option the user gave that ``method`` does not read, and the methods that do.

    Given means set on the command line (click's parameter source), not "differs from the default": an
    explicit ``--metric logit_diff`` under edge-pruning is refused too.
    """
    unused: dict[tuple[str, ...], list[str]] = {}
    for name, flag in given_options().items():
        users = readers(SETTING_OF.get(name, name))
        flag = "--sparsity" if name == "more" else flag  # further targets are --sparsity values
        if method not in users and flag not in unused.get(users, []):
            unused.setdefault(users, []).append(flag)
    if not unused:
        return
    flags = ", ".join(f for group in unused.values() for f in group)
    if len(unused) == 1:
        whose = "used only by " + joined(next(iter(unused)))
    else:
        whose = "; ".join(f"{', '.join(group)} used only by {joined(users)}" for users, group in unused.items())
    raise SubnetlabError(f"{flags}: not used by --method {method} ({whose})")


def parse_step_counts_text(text: str) -> list[str]:
    return [part for part in str(text).split(",") if part.strip()]


def refuse_across_processes(method: str, *, device: str, device_map: Optional[str], executor: ExecutorOptions | None,
                            sweep: bool) -> None:
    """Under torchrun (``subnetlab.distributed``): one error line for what does not split across processes.

    Supported: one attribution run (each rank scores its share of the pairs) and an edge-pruning sweep (every
    rank runs every job in the same order, in its own process, the mask training data parallel; rank 0 writes).
    Refused: attribution sweeps, another executor than the local one (worker processes or Ray would each join
    no group), a device map (one model over several devices of one process), and a named CUDA device (each rank
    takes the GPU of its local rank)."""
    from subnetlab.distributed import launched, launched_size

    if not launched():
        return
    where = f"under torchrun ({launched_size()} processes)"
    if device_map is not None:
        raise SubnetlabError(f"--device-map: {where} each rank holds the whole model; a device map spreads one "
                             "model over the devices of one process: run it without torchrun")
    if device.strip().lower().startswith("cuda:"):
        raise SubnetlabError(f"--device {device}: {where} each rank takes the GPU of its local rank; give "
                             "--device cuda (or auto)")
    if method == "edge-pruning":
        if executor is not None and executor.resolved_backend != "local":
            raise SubnetlabError(f"--backend {executor.resolved_backend}: {where} every rank runs the sweep's runs one "
                                 "after another in its own process (the local backend), each run's mask training "
                                 "split across the processes; leave out --jobs, --backend and --address")
        return
    if sweep:
        raise SubnetlabError(f"--ig-steps / --seeds: {where} one scoring run splits its pairs across the processes; "
                             "a sweep over step counts or seeds runs without torchrun (or one torchrun per run)")


def circuit(
    model: str = typer.Option(..., "--model", help="A pre-LN causal language model (GPT-2, Llama, Mistral, Qwen): "
                              "a local directory or hub id."),
    task: str = typer.Option(..., "--task", help="A circuit task: circuit:ioi, circuit:greater-than, "
                             "circuit:arith:<op>, or file:PATH with --corrupted-column (your own prompt pairs)."),
    method: str = typer.Option("edge-pruning", "--method", help="edge-pruning (Bhaskar et al., 2024), or scores of every "
                               "edge written to DIR/scores.safetensors, on the training pairs: eap / eap-ig (Syed et al. "
                               "2023; Hanna et al. 2024), eap-ig-activations and clean-corrupted (as hannamw/EAP-IG), "
                               "exact (patching each edge: one forward per edge, for small graphs); or scores of every "
                               "node (head, MLP, embedding): nap / nap-ig (node attribution patching, MIB's node "
                               "baselines). An option marked for another method is refused."),
    ig_steps: str = typer.Option("5", "--ig-steps", help="eap-ig, eap-ig-activations, nap-ig: the interpolation steps k "
                                 "(k forward+backward passes per batch, per layer node for eap-ig-activations); "
                                 "several, 5,10,20: one run per count in DIR/steps-K/ and the circuits' stability "
                                 "across them in DIR/metrics.json."),
    position_chunk: Optional[int] = typer.Option(None, "--position-chunk", help="eap, eap-ig, eap-ig-activations, "
                                                 "clean-corrupted: tokens of a batch scored per chunk, blocks "
                                                 "recomputed in the backward (long contexts: memory linear in the "
                                                 "length at a lower slope); 0: never; default: chunks of 512 tokens "
                                                 "in batches of more."),
    metric: str = typer.Option("logit_diff", "--metric", help="attribution methods: the metric scored "
                               "(logit_diff, answer_prob or kl)."),
    init_from: Optional[Path] = typer.Option(None, "--init-from", help="edge-pruning: warm-start the edge log-alphas "
                                             "from attribution scores (the scores.safetensors or graph.json of eap / "
                                             "eap-ig), checked before anything is written."),
    warm_start: Optional[str] = typer.Option(None, "--warm-start", help="edge-pruning: eap or eap-ig: score the edges "
                                             "first (into DIR/warm-start/, as --method METHOD would) and warm-start "
                                             "from them: --init-from in one command (MIB's EAP-IG -> Edge Pruning "
                                             "ensemble)."),
    sparsity: list[str] = typer.Option([], "--sparsity", help="Target edge sparsity (fraction of edges removed) in "
                                       "(0, 1): --sparsity 0.95 0.98, or 0.95,0.98. Attribution methods: the circuits "
                                       "(top |score| edges) compared across step counts or seeds (default 0.95)."),
    more: Optional[list[str]] = typer.Argument(None, metavar="[SPARSITY]...", help="edge-pruning: further targets."),
    seeds: str = typer.Option("0", "--seeds", help="Seeds, 0-2, 0,3,5 or 0-2,7. Attribution methods: each seed "
                              "scores its own draw of --limit training pairs, and the circuits' stability across seeds "
                              "(and step counts) goes in DIR/metrics.json."),
    out: Path = typer.Option(..., "--out", help="edge-pruning: the sweep directory (a rerun skips finished runs and "
                             "resumes killed ones); eap / eap-ig: the run directory of the scores."),
    preset: str = typer.Option("paper", "--preset", help="edge-pruning: paper (Edge Pruning's GPT-2 IOI settings) "
                               "or quick (your own small model on a CPU: 300 steps of 16 pairs per run; demo is the same)."),
    ablation: Optional[str] = typer.Option(None, "--ablation", help="edge-pruning: what a removed edge delivers, "
                                           "corrupted (default: its writer's output on the corrupted prompt), mean or "
                                           "zero. eap, nap: corrupted (default) or mean (each writer's mean output "
                                           "over the clean prompts in place of the corrupted one: MIB's EAP (mean))."),
    embedding_nodes: Optional[int] = typer.Option(None, "--embedding-nodes", help="0 leaves the embeddings out of the "
                                                  "graph (Edge Pruning's own default: they reach every reader and are "
                                                  "never cut); 1 joins the token and position embeddings into one "
                                                  "writer (default: as many as the family has)."),
    kv_readers: Optional[str] = typer.Option(None, "--kv-readers", help="eap / eap-ig, grouped-query models (Llama, "
                                             "Qwen, Gemma): query (default) one key and value reader per query head, "
                                             "EAP-IG's and MIB's graph; kv one per key/value head, Edge Pruning's."),
    task_option: list[str] = typer.Option([], "--task-option", help="Task option KEY=VALUE (repeatable), e.g. n_train=200."),
    data_flags: dict = None,
    set_: list[str] = typer.Option([], "--set", help="edge-pruning: override a setting KEY=VALUE, e.g. "
                                   "total_steps=500 or node_masks=false (repeatable)."),
    split: str = typer.Option("eval", "--split", help="edge-pruning: the split of prompt pairs each circuit is "
                               "measured on (eap / eap-ig score on the training pairs)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="The first N prompt pairs: edge-pruning measures each "
                                        "circuit on the first N pairs of --split (and trains on every training pair); "
                                        "eap / eap-ig score the edges on the first N training pairs."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    device_map: Optional[str] = device_map_option("edge-pruning: "),
    max_memory: Optional[str] = max_memory_option("edge-pruning: "),
    offload_folder: Optional[Path] = offload_folder_option("edge-pruning: "),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="edge-pruning: the frozen weights' dtype, float32 "
                                        "(default), bfloat16 or float16 (CUDA); masks and the loss stay float32."),
    control: list[str] = typer.Option([], "--control", help="edge-pruning: " + CONTROL_HELP),
    executor: ExecutorOptions = None,
) -> None:
    """Find edge-level circuits with Edge Pruning: hard-concrete masks over the edges of the model's computation
    graph, on the unmodified model; each circuit's faithfulness (MIB) and health go in its metrics.json, its
    figure (kept edges, Q/K/V readers marked) in circuit.png. Or score every edge by attribution patching
    (--method eap / eap-ig, --ablation mean under eap), or every node (--method nap / nap-ig). An option marked with methods (edge-pruning, eap-ig, eap / eap-ig; the Execution
    options are edge-pruning's) is refused under another method."""
    from rich.console import Console
    from rich.table import Table

    from subnetlab.cli.commands._controls import parse_controls, report_sweep
    from subnetlab.cli.commands._health import report_health
    from subnetlab.cli.commands._options import (
        parse_int_list,
        parse_key_values,
        parse_sparsities,
        parse_task_options,
        writes_here,
    )
    from subnetlab.models.device_map import DeviceMap
    from subnetlab.progress import stage
    from subnetlab.runs.circuit import CircuitJobConfig, check_warm_start, plan_circuit, write_sweep_graph
    from subnetlab.runs.controls import circuit_masks, circuit_measure
    from subnetlab.runs.health import read_health
    from subnetlab.runtime import describe_runtime, resolve_device

    if method not in METHODS:
        raise SubnetlabError(f"--method {method!r}: choose one of {', '.join(METHODS)}")
    refuse_unused_options(method)
    refuse_across_processes(method, device=device, device_map=device_map, executor=executor,
                            sweep=len(parse_step_counts_text(ig_steps)) > 1 or "seeds" in given_options())
    if method != "edge-pruning":
        from subnetlab.cli.commands._circuit_attribution import attribution_command, parse_step_counts

        given = given_options()
        return attribution_command(model=model, task=task, out=out, method=method,
                                   ig_steps=parse_step_counts(ig_steps), task_option=task_option,
                                   data_flags=data_flags, metric=metric, embedding_nodes=embedding_nodes, limit=limit,
                                   device=device, seeds=parse_int_list(seeds, "--seeds") if "seeds" in given else None,
                                   kv_readers=kv_readers, position_chunk=position_chunk, ablation=ablation,
                                   targets=parse_sparsities([*sparsity, *(more or [])]) if sparsity or more else None)
    runs_on = resolve_device(device)
    placement = DeviceMap.given(device_map, max_memory, offload_folder)
    check_warm_start(warm_start, init_from, placement)
    targets = parse_sparsities([*sparsity, *(more or [])])
    seed_list = parse_int_list(seeds, "--seeds")
    controls = parse_controls(control)
    overrides = parse_key_values(set_, "--set")
    if ablation is not None:
        overrides["ablation"] = ablation
    if embedding_nodes is not None:
        overrides["embedding_nodes"] = embedding_nodes
    if dtype is not None:
        overrides["dtype"] = dtype
    task_options = with_data_options(task, parse_task_options(task_option, None, "train"), **data_flags)
    base = {"model": model, "task": task, "task_options": task_options, "device": device}
    if warm_start is not None:
        init_from = warm_start_scores(warm_start, init_from, base, out, targets=targets, seeds=seed_list,
                                      preset=preset, overrides=overrides, task_option=task_option,
                                      data_flags=data_flags, embedding_nodes=embedding_nodes, device=device,
                                      ig_steps=int(ig_steps), metric=metric)
    jobs, adapter = plan_circuit(model, task, out, targets=targets, seeds=seed_list, preset=preset,
                                 overrides=overrides, task_options=task_options, split=split, limit=limit,
                                 init_from=None if init_from is None else str(init_from),
                                 device=device, controls=controls,
                                 device_map=placement)  # every check sl.circuit runs too, before any job
    if writes_here():  # across processes rank 0 writes the sweep's files
        write_sweep_graph(adapter, out, CircuitJobConfig.from_dict(jobs[0].config).settings.embedding_nodes)
    stage(describe_runtime(runs_on) if placement is None else f"device map {placement.describe()}")
    report = executor.run(jobs, sweep_dir=out)
    if not writes_here():  # the other ranks trained the same circuits; rank 0 measured, wrote and reports them
        return
    table = Table(title=f"edge circuits ({method})")
    for col in ("run", "kept edges", "sparsity", "f(logit_diff)", "kl"):
        table.add_column(col, justify="right")
    for job in report.jobs:
        m = job.metrics or {}
        if not m:
            continue
        f = m["faithfulness"].get("logit_diff")
        table.add_row(job.name, f"{m['kept_edges']} of {m['edges']}", f"{m['sparsity']:.4f}",
                      "n/a" if f is None else f"{f:.3f}", f"{m['eval'].get('kl', float('nan')):.4g}")
    Console().print(table)
    figure = _curve_figure([job.metrics for job in report.jobs if job.metrics and not job.metrics.get("control")], out)
    if figure is not None:
        print(f"written: {figure} (faithfulness over the circuit sizes; each run's circuit.png beside its metrics)")
    failed = [j for j in report.jobs if j.status == "failed"]
    if failed:
        raise SubnetlabError(f"{len(failed)} of {len(report.jobs)} runs failed; {failed[0].name}: {failed[0].error} "
                             f"(details in {out / 'sweep.json'}; rerun the same command to resume)")
    report_sweep(out, report.jobs, "circuit", controls=controls, measure=circuit_measure, score_name="logit_diff",
                 masks=circuit_masks)
    report_health([(job.name, read_health(job.metrics)) for job in report.jobs if job.metrics])


def sweep_curve(metrics: list[dict]) -> tuple[list[float], dict[str, list[float]]]:
    """Kept edges and f (logit diff, KL) per target sparsity, sparsest first, each the mean over its seeds (runs
    whose f is undefined left out of the mean; NaN where none has one)."""
    from statistics import fmean

    by_target: dict[float, list[dict]] = {}
    for m in metrics:
        by_target.setdefault(m["target_sparsity"], []).append(m)
    rows = [by_target[t] for t in sorted(by_target, reverse=True)]

    def mean_f(runs: list[dict], name: str) -> float:
        values = [m["faithfulness"].get(name) for m in runs if m["faithfulness"].get(name) is not None]
        return fmean(values) if values else float("nan")

    return ([fmean(m["kept_edges"] for m in runs) for runs in rows],
            {f"f({name})": [mean_f(runs, name) for runs in rows] for name in ("logit_diff", "kl")})


def _curve_figure(metrics: list[dict], out: Path) -> Optional[Path]:
    """``faithfulness.png`` in the sweep's directory (``sweep_curve``); none with a single target (each run's f is
    in its metrics.json, its circuit in its circuit.png)."""
    from subnetlab.report.plots import curves

    x, series = sweep_curve(metrics)
    if len(x) < 2:
        return None
    return curves(x, series, out / "faithfulness.png", xlabel=f"kept edges (of {metrics[0]['edges']})",
                  ylabel="faithfulness", title="edge pruning: faithfulness over circuit sizes (mean over seeds)")


def warm_start_scores(method: str, init_from: Optional[Path], base: dict, out: Path, *, targets: list[float],
                      seeds: list[int], preset: str, overrides: dict, task_option: list[str], data_flags: dict,
                      embedding_nodes: Optional[int], device: str, ig_steps: int, metric: str) -> Path:
    """``--warm-start``: check the sweep, score the edges into ``DIR/warm-start/`` exactly as ``circuit --method
    METHOD --out DIR/warm-start`` would (``ig_steps`` and ``metric`` are the defaults: edge-pruning refuses
    their flags), and return the scores file for ``--init-from``."""
    from subnetlab.cli.commands._circuit_attribution import attribution_command
    from subnetlab.distributed import world
    from subnetlab.runs.attribution import SCORES_FILE
    from subnetlab.runs.circuit import WARM_START_DIR, check_warm_start, circuit_sweep

    check_warm_start(method, init_from)
    circuit_sweep(base, out, targets=targets, seeds=seeds, preset=preset, overrides=overrides)  # checks, no work
    attribution_command(model=base["model"], task=base["task"], out=out / WARM_START_DIR, method=method,
                        ig_steps=[ig_steps], task_option=task_option, data_flags=data_flags, metric=metric,
                        embedding_nodes=embedding_nodes, limit=None, device=device,
                        kv_readers="kv")  # Edge Pruning's graph: one key/value reader per key/value head
    world().barrier()  # across processes: rank 0 has written the scores every rank reads next
    return out / WARM_START_DIR / SCORES_FILE


def register(app: typer.Typer) -> None:
    app.command("circuit")(executor_options(data_flag_options(circuit)))
