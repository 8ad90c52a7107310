"""One job of a sweep: a JSON config, its own run directory, and the function that runs it.

A job function is named by an import string ``"package.module:function"`` (so
any worker process or Ray node can import it; nothing is pickled) and is called
as ``fn(config: dict, out_dir: Path) -> dict``; the returned dict is the run's
metrics. ``execute`` wraps the call with the run-directory contract: it writes
``config.json`` before and ``metrics.json`` after, both atomically, so a job is
*done* exactly when its ``metrics.json`` exists. The job function writes its
other artefacts itself (through ``subnetlab.io``) and may resume from its own
checkpoints.

Across processes (``subnetlab.distributed``, the local backend under ``torchrun``) every rank calls the job
function and rank 0 alone writes ``config.json`` and ``metrics.json``; the job function leaves its own writes to
rank 0 too (``world().is_writer``) and returns what it likes on the other ranks. Every rank leaves ``execute``
at one barrier, after ``metrics.json`` is written.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subnetlab.distributed import world
from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json, write_json
from subnetlab.run_directory import CONFIG_FILE, METRICS_FILE, check_config, remove_temporaries
from subnetlab.runtime import seed_globals, torch_threads

JobFunction = Callable[[dict, Path], dict]

_IMPORT_STRING = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _plain(value: Any) -> Any:
    """JSON ``default=``: paths become strings; anything else is refused."""
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def canonical_config(config: Mapping[str, Any], where: str = "config") -> dict:
    """A JSON round-trip of ``config``: what ``config.json`` will hold, as plain dicts and lists."""
    if not isinstance(config, Mapping):
        raise SubnetlabError(f"{where}: expected a dict, got {type(config).__name__}")
    try:
        return json.loads(json.dumps(dict(config), default=_plain, allow_nan=True))
    except (TypeError, ValueError) as e:
        raise SubnetlabError(f"{where}: cannot be written as JSON ({e})") from None


@dataclass(frozen=True)
class Job:
    """A unit of work: ``fn(config, out_dir)`` writing into its own ``out_dir``.

    ``name`` identifies the job in reports and ``sweep.json``; it defaults to the
    run directory's path relative to the sweep directory.
    """

    fn: str
    config: dict = field(hash=False)
    out_dir: Path
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.fn, str) or not _IMPORT_STRING.match(self.fn):
            raise SubnetlabError(f"job function {self.fn!r}: expected an import string 'package.module:function'")
        object.__setattr__(self, "config", canonical_config(self.config, f"config of job {self.name or self.out_dir}"))
        object.__setattr__(self, "out_dir", Path(self.out_dir))

    @property
    def is_done(self) -> bool:
        """A job is done iff its ``metrics.json`` exists (it is written last, atomically)."""
        return (self.out_dir / METRICS_FILE).is_file()

    def to_dict(self) -> dict:
        return {"fn": self.fn, "config": self.config, "out_dir": str(self.out_dir), "name": self.name}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        return cls(fn=data["fn"], config=data["config"], out_dir=Path(data["out_dir"]), name=data.get("name"))


def resolve_function(spec: str) -> JobFunction:
    """Import ``"package.module:function"``; a typo is reported before any job starts."""
    if not _IMPORT_STRING.match(spec):
        raise SubnetlabError(f"job function {spec!r}: expected an import string 'package.module:function'")
    module_name, attr = spec.split(":")
    if module_name == "__main__":
        raise SubnetlabError(f"job function {spec!r}: must live in an importable module, not in a script's __main__")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SubnetlabError(f"job function {spec!r}: cannot import {module_name} ({e})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise SubnetlabError(f"job function {spec!r}: {module_name} has no function {attr}")
    return fn


def config_seed(config: Mapping[str, Any]) -> int:
    """A stable 63-bit integer from the config's canonical JSON (same on every backend and node)."""
    text = json.dumps(config, sort_keys=True, default=_plain)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") >> 1


def _reset_global_rngs(config: Mapping[str, Any]) -> None:
    """Seed the process-global RNGs from the config, never from the worker's history.

    Job functions should draw from explicit ``torch.Generator`` objects seeded from
    ``config["seed"]``; this makes even accidental global sampling give the same
    result whichever backend, worker or order runs the job.
    """
    seed_globals(config_seed(config))


def check_existing_config(job: Job) -> None:
    """Refuse to resume or skip a run directory that holds a different config."""
    check_config(job.out_dir, job.config)


def execute(job: Job, threads: int | None = None) -> dict:
    """Run ``job`` in this process: write ``config.json``, call the function, write ``metrics.json``.

    Returns the metrics as read back from ``metrics.json``, so every backend hands
    the caller exactly what a later rerun would load. Exceptions from the job
    function propagate; nothing is written under ``metrics.json`` then.
    """
    fn = resolve_function(job.fn)
    here = world()
    job.out_dir.mkdir(parents=True, exist_ok=True)
    if here.is_writer:
        remove_temporaries(job.out_dir)  # left by a killed earlier attempt
        write_json(job.out_dir / CONFIG_FILE, job.config)
    with torch_threads(threads):
        _reset_global_rngs(job.config)
        metrics = fn(copy.deepcopy(job.config), job.out_dir)
    if not isinstance(metrics, Mapping):
        raise TypeError(f"{job.fn} returned {type(metrics).__name__}; a job function must return a dict of metrics")
    if not here.is_writer:  # rank 0 writes the run (and measures it); this rank waits for it, then goes on
        here.barrier()
        return dict(metrics)
    write_json(job.out_dir / METRICS_FILE, dict(metrics))
    here.barrier()  # across processes: the run is finished (metrics.json written) when every rank leaves it
    return read_json(job.out_dir / METRICS_FILE)


def load_metrics(job: Job) -> dict:
    return read_json(job.out_dir / METRICS_FILE)
