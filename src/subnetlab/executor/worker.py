"""One job in its own process: ``python -m subnetlab.executor.worker SPEC.json``.

The ``processes`` backend starts one of these per job attempt. ``SPEC.json``
holds the job, the thread count and where to write the outcome. The parent tells
the three endings apart by what is left behind:

- job finished: outcome file says ``done``, exit 0;
- job function raised: outcome file says ``failed`` with the error, exit 1
  (reported, never retried: rerunning a deterministic error wastes the slot);
- worker died (killed, out of memory, segfault): no outcome file; the parent
  retries the job up to its ``max_retries``.
"""

from __future__ import annotations

import sys

from subnetlab.errors import SubnetlabError
from subnetlab.executor.job import Job, execute
from subnetlab.executor.report import error_text, traceback_text
from subnetlab.io import read_json, write_json

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def run_spec(spec_path: str) -> int:
    """Run the job described by ``spec_path``; return the process exit status."""
    spec = read_json(spec_path)
    outcome_path = spec["outcome"]
    try:
        job = Job.from_dict(spec["job"])
        execute(job, threads=spec.get("threads"))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (Exception, SystemExit) as e:  # a job's own error, reported by the parent
        write_json(outcome_path, {"status": "failed", "error": error_text(e), "traceback": traceback_text(e)})
        return EXIT_FAILED
    write_json(outcome_path, {"status": "done"})
    return EXIT_DONE


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
