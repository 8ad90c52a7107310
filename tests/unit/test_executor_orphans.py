"""Workers of a killed sweep stop: SIGKILL the parent of a `processes` sweep, its workers end within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from subnetlab.executor.worker import EXIT_ORPHANED, watch_parent

FN = "tests.unit.executor_jobs:draw"


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_for(condition, limit: float = 60.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_workers_stop_when_the_sweep_process_is_killed(tmp_path: Path) -> None:
    configs = [{"seed": s, "n": 3, "sleep": 300} for s in (0, 1)]  # would run five minutes if left alone
    driver = textwrap.dedent(f"""
        from pathlib import Path
        from subnetlab.executor import Job, run_jobs
        jobs = [Job({FN!r}, c, Path({str(tmp_path)!r}) / f"seed{{c['seed']}}") for c in {configs!r}]
        run_jobs(jobs, backend="processes", n_jobs=2)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path), OMP_NUM_THREADS="1")
    errors = open(tmp_path / "stderr.txt", "w")  # not a pipe: orphans holding it open must not block the test
    proc = subprocess.Popen([sys.executable, "-c", driver], env=env, stderr=errors)
    logs = [tmp_path / f"seed{c['seed']}" / "calls.log" for c in configs]
    try:
        assert wait_for(lambda: all(p.is_file() and p.read_text().strip() for p in logs)), "workers never started"
        workers = [int(p.read_text().split()[0]) for p in logs]
        assert all(alive(pid) for pid in workers)
        os.kill(proc.pid, signal.SIGKILL)  # no finally, no atexit: only the workers themselves can notice
        proc.wait(timeout=30)
        assert wait_for(lambda: not any(alive(pid) for pid in workers), limit=10.0), \
            f"workers {[pid for pid in workers if alive(pid)]} still run after their parent was killed"
        assert not any((tmp_path / f"seed{c['seed']}" / "metrics.json").exists() for c in configs)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        errors.close()


def test_watch_parent_exits_an_orphan_with_the_kill_status(tmp_path: Path) -> None:
    """The watchdog itself: a grandchild whose parent exits ends with EXIT_ORPHANED, not after its sleep."""
    status = tmp_path / "status"
    script = textwrap.dedent(f"""
        import os, sys, time
        parent = os.getpid()
        if os.fork():                # the middle process: exit once the child's watchdog runs
            while not os.path.exists({str(status)!r}):
                time.sleep(0.02)
            os._exit(0)
        sys.path[:0] = {sys.path!r}
        from subnetlab.executor.worker import watch_parent
        watch_parent(parent, interval=0.05)
        with open({str(status)!r} + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace({str(status)!r} + ".tmp", {str(status)!r})
        time.sleep(300)
        open({str(status)!r}, "w").write("slept")
    """)
    proc = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert proc.returncode == 0
    assert wait_for(lambda: status.is_file() and status.read_text().isdigit())
    pid = int(status.read_text())
    assert wait_for(lambda: not alive(pid), limit=10.0)
    assert status.read_text() == str(pid)  # it never reached the end of its sleep
    assert EXIT_ORPHANED == 137 and callable(watch_parent)
