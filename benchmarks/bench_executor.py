"""Wall time of a 4-job grid under local, processes --jobs 2 and ray, side by side.

    .venv/bin/python benchmarks/bench_executor.py --prune-steps 10   # Heuristic Core pruning on MiniLM
    .venv/bin/python benchmarks/bench_executor.py --job standin      # MiniLM forward/backward stand-in
    .venv/bin/python benchmarks/bench_executor.py --job standin --fn pkg.mod:job --base-config '{...}'

The grid is seed {0, 1} x target sparsity {0.5, 0.7}. ``--job prune`` (the
default) runs ``subnetlab.runs.prune:prune_job`` with the demo preset
shortened to ``--prune-steps`` steps, on MiniLM given a seeded 3-label head
and the generated NLI task; the mean-activation cache is filled once before the
timings so every backend does the same work. ``--job standin`` runs MiniLM
forward/backward steps on seeded random tokens (or ``--fn`` with
``--base-config``). A second measurement runs ``--noop-jobs`` empty jobs on warm
backends, isolating each backend's per-job cost (fork + job setup, or a Ray task
round trip) from the one-off cost of starting Ray. Figures belong in notes, not
tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

STANDIN = "bench_executor:standin_job"
NOOP = "bench_executor:noop_job"


def standin_job(config: dict, out_dir: Path) -> dict:
    """MiniLM fine-tuning steps: the compute shape of one pruning run, without the method."""
    import torch
    import transformers

    from subnetlab.models import load_model

    transformers.logging.set_verbosity_error()
    loaded = load_model("minilm", head="classification", num_labels=3)
    model = loaded.model.train()
    generator = torch.Generator().manual_seed(config["seed"])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    vocab = model.config.vocab_size
    started = time.perf_counter()
    for _ in range(config["steps"]):
        ids = torch.randint(1000, vocab, (config["batch"], config["seq_len"]), generator=generator)  # [batch, pos]
        labels = torch.randint(0, 3, (config["batch"],), generator=generator)
        loss = torch.nn.functional.cross_entropy(model(input_ids=ids).logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {"final_loss": loss.item(), "train_seconds": time.perf_counter() - started,
            "threads": torch.get_num_threads()}


def noop_job(config: dict, out_dir: Path) -> dict:
    return {"seed": config["seed"]}


def grid(fn: str, base: dict, root: Path):
    from subnetlab.executor import Job

    return [Job(fn, dict(base, seed=seed, sparsity=sparsity), root / f"seed{seed}_sp{sparsity}")
            for seed in (0, 1) for sparsity in (0.5, 0.7)]


def prune_grid(base: dict, steps: int, root: Path):
    """The ``subnetlab prune --preset demo`` jobs, shortened to ``steps`` steps."""
    from subnetlab.executor import Job
    from subnetlab.methods.head_pruning.config import preset_config
    from subnetlab.runs.prune import PRUNE_JOB

    short = dict(total_steps=steps, warmup_steps=max(1, int(0.8 * steps)), batch_size=8, means_examples=64,
                 eval_limit=64, train_limit=256, checkpoint_every=10 * steps)
    return [Job(PRUNE_JOB, {**base, "prune": preset_config("demo", sp, seed=seed, **short).to_dict()},
                root / f"seed{seed}_sp{sp}") for seed in (0, 1) for sp in (0.5, 0.7)]


def prune_setup(root: Path) -> dict:
    """A 3-label MiniLM checkpoint (seeded head) and a warm mean-activation cache shared by all backends."""
    import torch
    import transformers

    from subnetlab.executor import run_jobs
    from subnetlab.models import load_model

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    loaded = load_model("minilm", head="classification", num_labels=3)
    loaded.model.save_pretrained(root / "checkpoint")
    loaded.tokenizer.save_pretrained(root / "checkpoint")
    base = {"model": str(root / "checkpoint"), "task": "nli-synthetic", "task_options": {}, "eval_data": [],
            "splits": None, "cache_dir": str(root / "cache"), "preset": "demo"}
    run_jobs(prune_grid(base, 1, root / "warm-cache")[:1])
    return base


def timed(label: str, jobs, **kwargs) -> dict:
    from subnetlab.executor import run_jobs

    started = time.perf_counter()
    report = run_jobs(jobs, **kwargs)
    wall = time.perf_counter() - started
    if not report.ok:
        raise SystemExit(f"{label}: {report.summary()}")
    return {"label": label, "wall": wall, "metrics": report.metrics,
            "job_seconds": [j.seconds for j in report.jobs]}


def noop_overhead(root: Path, count: int) -> dict[str, float]:
    """Seconds per empty job: processes (spawn + import per job) and ray (task on warm workers)."""
    import ray

    from subnetlab.executor import Job

    def jobs(sub: str):
        return [Job(NOOP, {"seed": i}, root / sub / f"j{i}") for i in range(count)]

    out = {"processes": timed("noop processes", jobs("p"), backend="processes", n_jobs=2)["wall"] / count}
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", object_store_memory=100 * 1024**2)
    out["ray_start"] = time.perf_counter() - started
    timed("ray warm-up", jobs("w")[:2], backend="ray")  # workers start and import subnetlab once
    out["ray"] = timed("noop ray", jobs("r"), backend="ray")["wall"] / count
    started = time.perf_counter()
    ray.shutdown()
    out["ray_stop"] = time.perf_counter() - started
    return out


def _results(metrics: list[dict]) -> list[dict]:
    """Flattened metrics without timings and thread counts, which legitimately differ between backends."""
    from subnetlab.executor.results import flatten

    def timing(key: str) -> bool:
        last = key.rsplit(".", 1)[-1]
        return "second" in last or "time" in last or last == "threads"

    return [{k: v for k, v in flatten(m).items() if not timing(k)} for m in metrics]


def _compare(a: list[dict], b: list[dict]) -> str:
    """'identical', or the largest difference (thread counts change float summation order)."""
    a, b = _results(a), _results(b)
    if a == b:
        return "identical"
    diffs = [abs(x[k] - y[k]) for x, y in zip(a, b) for k in x if isinstance(x[k], float) and k in y]
    return f"differ, max |difference| {max(diffs, default=float('nan')):.2e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=("prune", "standin"), default="prune")
    parser.add_argument("--prune-steps", type=int, default=10, help="pruning steps per job (--job prune)")
    parser.add_argument("--fn", default=STANDIN, help="job function import string (--job standin)")
    parser.add_argument("--base-config", default='{"steps": 100, "batch": 4, "seq_len": 32}',
                        help="JSON merged into every job's config")
    parser.add_argument("--backends", default="local,processes,ray")
    parser.add_argument("--noop-jobs", type=int, default=20, help="0 skips the per-job overhead measurement")
    parser.add_argument("--local-threads", type=int, default=None,
                        help="torch threads for the local backend (default: torch's choice, all cores)")
    parser.add_argument("--keep", type=Path, default=None, help="keep run directories here")
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # workers import this file as bench_executor
    from subnetlab.progress import set_quiet

    set_quiet(True)
    if args.local_threads:
        import torch

        torch.set_num_threads(args.local_threads)
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-executor-"))
    what = f"{args.fn} {args.base_config}"
    if args.job == "prune":
        what = f"prune_job, demo preset, {args.prune_steps} steps"
    settings = {"local": dict(backend="local"),
                "processes": dict(backend="processes", n_jobs=2, cpus_per_job=1),
                "ray": dict(backend="ray", n_jobs=2, cpus_per_job=1)}
    print(f"cpus: {os.cpu_count()}  load average: {os.getloadavg()[0]:.2f}  job: {what}"
          f"  local threads: {args.local_threads or 'default'}")
    try:
        if args.job == "prune":
            base = prune_setup(root)
            make_grid = lambda sub: prune_grid(base, args.prune_steps, root / sub)  # noqa: E731
        else:
            base = json.loads(args.base_config)
            make_grid = lambda sub: grid(args.fn, base, root / sub)  # noqa: E731
        rows = [timed(name, make_grid(name), **settings[name]) for name in args.backends.split(",")]
        overhead = noop_overhead(root / "noop", args.noop_jobs) if args.noop_jobs else None
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)

    reference = rows[0]
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"\n{'backend':<12}{'wall s':>9}{'vs ' + reference['label']:>12}{'mean job s':>12}")
    for row in rows:
        mean_job = sum(row["job_seconds"]) / len(row["job_seconds"])
        print(f"{row['label']:<12}{row['wall']:>9.1f}{row['wall'] / reference['wall']:>11.2f}x{mean_job:>12.1f}")
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            print(f"metrics {b['label']} vs {a['label']}: {_compare(a['metrics'], b['metrics'])}")
    if overhead:
        print(f"\nper-job overhead ({args.noop_jobs} empty jobs, 2 at a time): "
              f"processes {overhead['processes']:.2f} s/job, ray {overhead['ray'] * 1000:.0f} ms/job on warm workers; "
              f"starting a local Ray instance {overhead['ray_start']:.1f} s, stopping it {overhead['ray_stop']:.1f} s")
    if "ray" in [r["label"] for r in rows] and "processes" in [r["label"] for r in rows]:
        by = {r["label"]: r for r in rows}
        print(f"ray minus processes, per grid job: {(by['ray']['wall'] - by['processes']['wall']) / 4:+.2f} s")


if __name__ == "__main__":
    main()
