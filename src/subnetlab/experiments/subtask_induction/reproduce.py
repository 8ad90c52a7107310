"""`subnetlab reproduce subtask-induction`: Zhang, Lepori & Pavlick (2024), section 4 and appendix B.

For every model depth: train a GPT-2 on ``a+ab mod 7`` (``subnetlab.runs.finetune``),
discover the ``ab mod 7`` subnetwork by continuous sparsification (one job per
lambda, the best on evaluation kept), then transfer it to ``a^2+ab mod 7``
under every condition, disambiguation size and seed (``subnetlab.executor``),
and write ``report.md`` with Figure 3 and Table 3. Every stage is a run
directory that a rerun skips when finished.

Settings not stated in the paper (base-model epochs and batch size, transfer
batch size) are marked as our choices in the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.executor import Job, run_jobs
from subnetlab.io import read_json, write_json
from subnetlab.progress import stage
from subnetlab.runs.directory import claim
from subnetlab.transfer.conditions import CONDITIONS, check_conditions

NAME = "subtask-induction"

# the released code's 16 log-spaced sizes from 10 to 10^4, plus 0 (the ambiguous set alone)
PAPER_SIZES = [0, 10, 16, 25, 40, 64, 100, 160, 250, 400, 640, 1000, 1600, 2500, 4000, 6400, 10000]
CONDITIONS_ALL = list(CONDITIONS)  # every transfer condition, in the table's order (a list: settings are JSON)
# also run these with reinit="masked" (the released code: embeddings, biases and norms copied), labelled apart
MASKED_VARIANTS = ["subnetwork", "random-matched"]
MASKED_SUFFIX = ", reinit masked"

PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(
        layers=[2, 4, 6, 8, 10, 12], max_number=1000, modulus=7,
        base_op="a+ab", sub_op="ab", target_op="a^2+ab",
        base_train=200_000, base_lr=5e-4, base_batch=500, base_epochs=20, base_scheduler="linear",
        cs_samples=50_000, cs_epochs=50, cs_lr=1e-3, cs_batch=500, lambdas=[1e-7, 5e-7, 1e-8],
        cs_include=["attention", "mlp"], cs_keep="best",
        sizes=PAPER_SIZES, seeds=[0, 1, 2, 3, 4], conditions=CONDITIONS_ALL, also_reinit_masked=MASKED_VARIANTS,
        transfer_epochs=100, transfer_lr=2e-4, transfer_batch=64, eval_every=1,
        n_eval=1000, n_test=1000, reinit="all", freeze=True,
        backend="processes", jobs=2, threads=1, stack=1, seed=0, device="auto",
    ),
    "demo": dict(
        layers=[2], max_number=100, modulus=7,
        base_op="a+ab", sub_op="ab", target_op="a^2+ab",
        base_train=5000, base_lr=1e-3, base_batch=64, base_epochs=30, base_scheduler="linear",
        cs_samples=5000, cs_epochs=30, cs_lr=1e-3, cs_batch=100, lambdas=[1e-7, 1e-8],
        cs_include=["attention", "mlp"], cs_keep="best",
        sizes=[0, 30, 100, 300, 1000], seeds=[0, 1], conditions=CONDITIONS_ALL, also_reinit_masked=MASKED_VARIANTS,
        transfer_epochs=80, transfer_lr=1e-3, transfer_batch=64, eval_every=4,
        n_eval=500, n_test=500, reinit="all", freeze=True,
        backend="processes", jobs=2, threads=1, stack=1, seed=0, device="cpu",
    ),
}


def _base(settings: dict, layers: int, out: Path) -> Path:
    """Train (or reuse) the base model on ``base_op``; returns its model directory."""
    from subnetlab.runs.finetune import finetune
    from subnetlab.methods.finetune.config import resolve_config

    run = out / f"L{layers}" / "base"
    cfg = resolve_config(
        preset="subtask-induction", model=f"gpt2-arith:{layers}", task=f"arith:{settings['base_op']}",
        task_options={"n_train": settings["base_train"], "max_number": settings["max_number"],
                      "modulus": settings["modulus"], "n_eval": settings["n_eval"], "n_test": settings["n_test"],
                      "seed": settings["seed"]},
        lr=settings["base_lr"], batch_size=settings["base_batch"], epochs=float(settings["base_epochs"]),
        scheduler=settings["base_scheduler"], seed=settings["seed"], eval_at_start=False, device=settings["device"],
        eval_every=10**9, save_every=10**9,
    )
    from subnetlab.runtime import torch_threads

    stage(f"base model: {layers}-layer GPT-2 on {settings['base_op']} mod {settings['modulus']}")
    with torch_threads(settings["threads"]):
        metrics = finetune(cfg, run)
    accuracy = metrics["final"]["test"]["accuracy"] if "test" in metrics.get("final", {}) else None
    write_json(out / f"L{layers}" / "base_summary.json", {"test_accuracy": accuracy, "wall_seconds": metrics.get("wall_seconds")})
    return run / "model"


def _discover(settings: dict, layers: int, model_dir: Path, out: Path) -> dict:
    """One discovery job per lambda; the best on evaluation is the subnetwork."""
    from subnetlab.runs.transfer import select_best

    root = out / f"L{layers}" / "discover"
    jobs = []
    for lam in (float(x) for x in settings["lambdas"]):
        config = {
            "model": str(model_dir), "task": f"arith:{settings['sub_op']}", "seed": settings["seed"],
            "task_options": {"n_train": settings["cs_samples"], "modulus": settings["modulus"],
                             "n_eval": settings["n_eval"], "n_test": settings["n_test"]},
            "cs": {"l0_lambda": float(lam), "epochs": settings["cs_epochs"], "lr": settings["cs_lr"],
                   "batch_size": settings["cs_batch"], "include": list(settings["cs_include"]), "keep": settings["cs_keep"]},
            "threads": settings["threads"], "device": settings["device"],
        }
        jobs.append(Job("subnetlab.runs.transfer:discover_job", config, root / f"lambda_{lam:g}"))
    report = _run(jobs, settings, root)
    best = select_best([r.metrics for r in report.jobs])
    write_json(root / "selected.json", best)
    return best


def _transfer_jobs(settings: dict, layers: int, model_dir: Path, subnetwork: str, out: Path) -> list[Job]:
    """One job per (condition, size, seed), or per (condition, size) with ``stack > 1``; the conditions in
    ``also_reinit_masked`` once more with ``reinit="masked"``."""
    variants = [(c, settings["reinit"], c) for c in settings["conditions"]]
    if settings["reinit"] != "masked":
        variants += [(c, "masked", c + MASKED_SUFFIX) for c in settings.get("also_reinit_masked", [])]
    jobs = []
    for condition, reinit, label in variants:
        folder = condition if label == condition else f"{condition}.reinit-masked"
        for size in settings["sizes"]:
            runs = [{"condition": condition, "size": size, "seed": seed, "label": label} for seed in settings["seeds"]]
            # stack > 1: the seeds of one size train together in one job (torch.func; pays off on a GPU)
            for pack in ([runs] if settings["stack"] > 1 else [[r] for r in runs]):
                name = f"n{size}_s{pack[0]['seed']}" if len(pack) == 1 else f"n{size}"
                config = {
                    "model": str(model_dir), "subnetwork": subnetwork, "task": f"arith:{settings['target_op']}",
                    "task_options": {"modulus": settings["modulus"], "n_eval": settings["n_eval"], "n_test": settings["n_test"]},
                    "runs": pack,
                    "train": {"epochs": settings["transfer_epochs"], "lr": settings["transfer_lr"],
                              "batch_size": settings["transfer_batch"], "eval_every": settings["eval_every"]},
                    "reinit": reinit, "freeze": settings["freeze"], "stack": settings["stack"],
                    "threads": settings["threads"], "layers": layers, "device": settings["device"],
                }
                jobs.append(Job("subnetlab.runs.transfer:transfer_job", config, out / f"L{layers}" / "transfer" / folder / name))
    return jobs


def _run(jobs: list[Job], settings: dict, sweep_dir: Path):
    report = run_jobs(jobs, backend=settings["backend"], n_jobs=settings["jobs"] if settings["backend"] != "local" else None,
                      cpus_per_job=max(1, int(settings["threads"])), sweep_dir=sweep_dir)
    failed = [j for j in report.jobs if j.status != "done" and j.status != "skipped"]
    if failed:
        raise SubnetlabError(f"{len(failed)} job(s) failed, first {failed[0].name}: {failed[0].error}; see {sweep_dir}/sweep.json")
    return report


def run(settings: dict, out: Path) -> Path:
    """Base models, discovery, the transfer grid, then ``report.md`` (see the module docstring)."""
    from subnetlab.experiments.subtask_induction.report import write_report

    out = Path(out)
    claim(out, settings, what="study configuration")
    if settings["conditions"]:
        check_conditions(settings["conditions"], setting="conditions")
    if settings.get("also_reinit_masked"):
        check_conditions(settings["also_reinit_masked"], setting="also_reinit_masked")
    discovered: dict[int, dict] = {}
    transfer: list[Job] = []
    for layers in settings["layers"]:
        model_dir = _base(settings, layers, out)
        discovered[layers] = _discover(settings, layers, model_dir, out)
        transfer += _transfer_jobs(settings, layers, model_dir, discovered[layers]["subnetwork"], out)
    stage(f"transfer: {len(transfer)} runs")
    report = _run(transfer, settings, out)
    runs = []
    for job in report.jobs:
        for r in job.metrics["runs"]:
            runs.append({**r, "layers": job.config["layers"], "seconds_job": job.seconds})
    bases = {layers: read_json(out / f"L{layers}" / "base_summary.json") for layers in settings["layers"]}
    return write_report(out, settings, bases, discovered, runs)


__all__ = ["CONDITIONS_ALL", "MASKED_VARIANTS", "NAME", "PAPER_SIZES", "PRESETS", "run"]
