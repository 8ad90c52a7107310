"""Kill and resume, shared by the unit tests (``tests/unit/test_kill_resume.py``) and the demo integration tests.

A command or study runs in a subprocess that SIGKILLs itself right after a chosen atomic write
(``SUBNETLAB_TEST_KILL_AFTER_WRITE``); the rerun's results are then compared with an uninterrupted run's:
every safetensors tensor bit for bit (dtype and bytes) with its metadata, every JSON result equal once timing
fields (``elapsed``, ``resumed_from`` and every key naming seconds) are dropped and the run directory's own path
is replaced by ``OUT``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from safetensors import safe_open

from subnetlab.io import KILL_AFTER_WRITE

TIMING = {"elapsed", "resumed_from"}  # and every key naming seconds
CACHE_NAME = re.compile(r"means-[0-9a-f]{20}\.safetensors$")

# runs a study in a fresh interpreter: argv = name, settings as JSON, output directory
_STUDY = ("import json, sys; from pathlib import Path; from subnetlab.experiments import get_reproduction; "
          "get_reproduction(sys.argv[1]).run(json.loads(sys.argv[2]), Path(sys.argv[3]))")


def _env(kill_after: str) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path),
                **{KILL_AFTER_WRITE: kill_after})


def _killed(argv: list[str], kill_after: str, timeout: int) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, env=_env(kill_after), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == -9, f"not killed at {kill_after} (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return proc


def run_killed(args: list[str], kill_after: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """The command ``subnetlab ARGS`` in a subprocess that SIGKILLs itself right after the write ``kill_after`` names."""
    return _killed([sys.executable, "-m", "subnetlab.cli", *args], kill_after, timeout)


def run_study_killed(name: str, settings: dict, out: Path, kill_after: str, timeout: int = 1800
                     ) -> subprocess.CompletedProcess:
    """``get_reproduction(name).run(settings, out)`` in a subprocess (one thread) killed after the write
    ``kill_after`` names (a glob under ``out``)."""
    return _killed([sys.executable, "-c", _STUDY, name, json.dumps(settings), str(out)], f"{out}/{kill_after}", timeout)


def _plain(value, roots: list[str], ignore: frozenset[str]):
    """JSON with timing fields dropped and the run directory's own path replaced by OUT."""
    if isinstance(value, dict):
        return {k: _plain(v, roots, ignore) for k, v in value.items()
                if k not in TIMING and k not in ignore and "seconds" not in k}
    if isinstance(value, list):
        return [_plain(v, roots, ignore) for v in value]
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, "OUT")
    return value


def results(out: Path, *, skip_files: Iterable[str] = (), ignore_keys: Iterable[str] = ()) -> dict[str, object]:
    """Every JSON and safetensors result under ``out`` (tensors as bytes: compared bit for bit).

    Left out: ``sweep.json`` (the executor's log of one invocation), hidden files (the lock), files named in
    ``skip_files`` (logs of invocations), and JSON keys in ``ignore_keys`` (a study's own timing records).
    """
    roots = [str(out.resolve()), str(out)]
    skip, ignore = {"sweep.json", *skip_files}, frozenset(ignore_keys)
    found: dict[str, object] = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        if path.name in skip or path.name.startswith("."):
            continue
        # a mean-activation cache is named by a hash of its inputs, the data files' paths among them: compare contents
        rel = CACHE_NAME.sub("means-KEY.safetensors", rel)
        assert rel not in found, f"two cached means files in {path.parent}"
        if path.suffix == ".json":
            found[rel] = _plain(json.loads(path.read_text()), roots, ignore)
        elif path.suffix == ".safetensors":
            with safe_open(str(path), "pt") as f:
                found[rel] = ({k: (str(f.get_tensor(k).dtype), f.get_tensor(k).numpy().tobytes()) for k in f.keys()},
                              _plain(f.metadata() or {}, roots, ignore))
    return found


def assert_same_results(whole: Path, resumed: Path, **kwargs) -> int:
    """Assert that two run directories hold the same results (see ``results``); returns how many files."""
    a, b = results(whole, **kwargs), results(resumed, **kwargs)
    assert sorted(a) == sorted(b), f"only uninterrupted: {sorted(set(a) - set(b))}; only resumed: {sorted(set(b) - set(a))}"
    for name in a:
        assert a[name] == b[name], f"{name} differs after kill and resume"
    return len(a)
