"""One job in its own process: ``child_main(SPEC.json)``, or ``python -m subnetlab.executor.worker SPEC.json``.

The ``processes`` backend forks one ``child_main`` per job attempt from a
fork server that has already imported subnetlab (so a job starts in
milliseconds, in a fresh process). ``SPEC.json`` holds the job, the thread
count, environment variables to set (GPU assignment) and where to write the
outcome. The command-line form runs one job by hand (debugging, scheduler array
jobs). The parent tells the three endings apart by what is left behind:

- job finished: outcome file says ``done``, exit 0;
- job function raised: outcome file says ``failed`` with the error, exit 1
  (reported, never retried: rerunning a deterministic error wastes the slot);
- worker died (killed, out of memory, segfault): no outcome file; the parent
  retries the job up to its ``max_retries``.

A worker whose parent dies (the sweep was killed with SIGKILL, so no ``finally``
ran to stop it) stops at once: a watchdog thread sees its
parent's end of the pipe ``multiprocessing`` keeps between them close and ends
the process at once, as a kill would (the fork server, the worker's parent in
the process table, outlives the sweep, so its pid tells nothing). The job's run
directory is left as a killed job leaves it (no ``metrics.json``), so a rerun of
the command resumes it.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from subnetlab.errors import SubnetlabError
from subnetlab.executor.job import Job, execute
from subnetlab.executor.report import error_text, traceback_text
from subnetlab.io import read_json, write_json

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
EXIT_ORPHANED = 137  # what a SIGKILL would give: the parent treats it as a death
PARENT_POLL_SECONDS = 0.2


def watch_parent(parent: int | None = None, interval: float = PARENT_POLL_SECONDS) -> threading.Thread:
    """Start a daemon thread that ends this process (``os._exit``) once its parent process is gone.

    A ``multiprocessing`` worker waits on the pipe its parent holds open
    (``parent_process().sentinel``: end of file when the parent dies, however it
    dies); any other process polls its parent pid every ``interval`` seconds
    (an orphan's parent pid changes to 1 or a subreaper). ``parent`` names the
    pid to watch instead (it must be this process's parent).
    """
    import multiprocessing
    import multiprocessing.connection

    sentinel = None
    if parent is None:
        process = multiprocessing.parent_process()
        sentinel = process.sentinel if process is not None else None
        parent = os.getppid()
    if sentinel is None and os.getppid() != parent:  # already gone
        os._exit(EXIT_ORPHANED)

    def poll() -> None:
        if sentinel is not None:
            multiprocessing.connection.wait([sentinel])  # returns at end of file: the parent is gone
            os._exit(EXIT_ORPHANED)
        while True:
            if os.getppid() != parent:
                os._exit(EXIT_ORPHANED)
            time.sleep(interval)

    thread = threading.Thread(target=poll, name="subnetlab-parent-watch", daemon=True)
    thread.start()
    return thread


def run_spec(spec_path: str) -> int:
    """Run the job described by ``spec_path``; return the process exit status."""
    spec = read_json(spec_path)
    os.environ.update(spec.get("env", {}))  # before any CUDA initialisation in the job
    outcome_path = spec["outcome"]
    try:
        job = Job.from_dict(spec["job"])
        execute(job, threads=spec.get("threads"))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (Exception, SystemExit) as e:  # a job's own error, reported by the parent
        write_json(outcome_path, {"status": "failed", "error": error_text(e), "traceback": traceback_text(e),
                                  "cpu_seconds": time.process_time()})
        return EXIT_FAILED
    # the worker's own CPU time, all threads: a forked or spawned process starts its counters at zero
    write_json(outcome_path, {"status": "done", "cpu_seconds": time.process_time()})
    return EXIT_DONE


def child_main(spec_path: str) -> None:
    """Entry point of a forked worker process: stops by itself if the sweep's process dies."""
    watch_parent()
    sys.exit(run_spec(spec_path))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m subnetlab.executor.worker SPEC.json", file=sys.stderr)
        return 2
    try:
        return run_spec(args[0])
    except SubnetlabError as e:  # unreadable spec: the parent sees no outcome and retries
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
