"""Job functions for the executor tests, importable by worker processes and Ray tasks.

One function, ``draw``, whose behaviour the config selects: it logs each call
(so tests can count attempts), may sleep or wait for a file, raise, kill its own process once or
always, or raise KeyboardInterrupt once, and otherwise returns metrics computed
from a generator seeded by ``config["seed"]``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch

from subnetlab.io import save_tensors

CALLS = "calls.log"


def calls(out_dir: Path) -> int:
    """How many times the job function started in ``out_dir``."""
    path = Path(out_dir) / CALLS
    return len(path.read_text().splitlines()) if path.exists() else 0


def expected_metrics(config: dict) -> dict:
    """What ``draw`` returns, computed independently of any executor."""
    x = torch.randn(config["n"], generator=torch.Generator().manual_seed(config["seed"]))
    return {"mean": float(x.mean()), "norm": float(x.norm()), "grid": {"seed": config["seed"], "n": config["n"]}}


def draw(config: dict, out_dir: Path) -> dict:
    with open(out_dir / CALLS, "a") as f:  # a log: appending is the operation
        f.write(f"{os.getpid()}\n")
    marker = out_dir / "once.marker"
    if config.get("sleep"):
        time.sleep(config["sleep"])
    if config.get("wait_for"):  # hold the job until the test creates this file (at most a minute)
        deadline = time.monotonic() + 60
        while not Path(config["wait_for"]).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    if config.get("fail"):
        raise ValueError(f"seed {config['seed']} fails on purpose")
    if config.get("die") == "always" or (config.get("die") == "once" and not marker.exists()):
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    if config.get("interrupt") and not marker.exists():
        marker.touch()
        raise KeyboardInterrupt
    if config.get("not_a_dict"):
        return [1, 2]  # type: ignore[return-value]
    x = torch.randn(config["n"], generator=torch.Generator().manual_seed(config["seed"]))
    save_tensors(out_dir / "x.safetensors", {"x": x})
    metrics = expected_metrics(config)
    metrics["threads"] = torch.get_num_threads()
    metrics["global_draw"] = float(torch.rand(()))  # seeded by the executor from the config
    return metrics


def spin(config: dict, out_dir: Path) -> dict:
    """Keep one core busy until this process has used ``config["cpu"]`` more CPU seconds."""
    until = time.process_time() + config["cpu"]
    while time.process_time() < until:
        pass
    return {"cpu": config["cpu"]}
