"""Where the bundled data files (HANS, MNLI, PAWS-QQP samples, ...) are: the one place that decides.

In order:

1. the environment variable ``SUBNETLAB_DATA`` (an error when it is set but
   is not a directory);
2. ``../shared/data`` next to the repository checkout: walking up from the
   current working directory, then from this package's location, the first
   repository checkout (a directory with ``pyproject.toml`` or ``.git``)
   whose parent ``X`` holds ``X/shared/data``. Running from ``/work/main``
   (or below it) finds ``/work/shared/data``; a stray ``shared/data`` above a
   directory that is no checkout is not picked up.

``data_root()`` raises ``SubnetlabError`` naming both places when neither
exists; ``find_data_root()`` returns None instead, for callers that use the
data only when it is there.
"""

from __future__ import annotations

import os
from pathlib import Path

from subnetlab.errors import SubnetlabError

ENV_VAR = "SUBNETLAB_DATA"
SHARED_DATA = Path("shared") / "data"  # relative to the directory holding the repository checkout


def _starts() -> list[Path]:
    """Where the upward search begins: the working directory, then the installed package."""
    return [Path.cwd(), Path(__file__).resolve().parent]


def _from_env() -> Path | None:
    value = os.environ.get(ENV_VAR)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise SubnetlabError(f"{ENV_VAR}={value}: not a directory (unset it to use ../{SHARED_DATA.as_posix()})")
    return path.resolve()


def _is_checkout(directory: Path) -> bool:
    return (directory / "pyproject.toml").is_file() or (directory / ".git").exists()


def _next_to_checkout(start: Path) -> Path | None:
    """``X/shared/data`` for the nearest checkout at or above ``start`` whose parent ``X`` has one."""
    start = start.resolve()
    for checkout in [start, *start.parents]:
        if checkout.parent == checkout:  # the filesystem root has no parent to hold shared/data
            break
        candidate = checkout.parent / SHARED_DATA
        if _is_checkout(checkout) and candidate.is_dir():
            return candidate
    return None


def find_data_root() -> Path | None:
    """The bundled data directory, or None when there is none (a bad ``SUBNETLAB_DATA`` still raises)."""
    env = _from_env()
    if env is not None:
        return env
    for start in _starts():
        found = _next_to_checkout(start)
        if found is not None:
            return found
    return None


def data_root() -> Path:
    """The bundled data directory; ``SubnetlabError`` naming where it was looked for when there is none."""
    found = find_data_root()
    if found is None:
        places = " and ".join(str(s.resolve()) for s in _starts())
        raise SubnetlabError(
            f"no bundled data directory: {ENV_VAR} is not set and there is no ../{SHARED_DATA.as_posix()} "
            f"next to the repository checkout (looked upward from {places}); "
            f"set {ENV_VAR} to the data directory"
        )
    return found
