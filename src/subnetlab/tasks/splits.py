"""One split per data file: which rows of the user's own data are training, evaluation and test rows.

Every command that reads ``file:PATH`` or ``hub:NAME`` data (fine-tuning, evaluation, pruning, lottery
tickets, discovery, transfer) carves the same rows the same way, so no command evaluates or tests on a
row that an earlier command on the same data trained on. The split is a function of the data's content
(a SHA-256 of the file, of every file of a ``save_to_disk`` folder, or a hub dataset's fingerprint) and of
three split settings only: ``eval_fraction`` and ``test_fraction`` (shares of all the rows) and
``split_seed``. A command's own seed varies training order and initialisation, never the split.

One permutation of the ``N`` rows drawn from ``split_seed`` gives the test rows (its first
``round(test_fraction * N)``, at least one), then the evaluation rows (the next ``round(eval_fraction * N)``),
and the rest train. With a held-out source (a file, or a split of held-out rows) all of that source is the
evaluation split and the same test rows are still held out of the training rows. ``test_fraction`` 0
carves no test split.

``SplitManifest`` records the outcome (row indices, counted from 0 in the order of the data); runs save
it as ``splits.json`` next to their config, and a later command given a run's model compares against it
(``subnetlab.runs.splits``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from subnetlab.errors import SubnetlabError

FORMAT = "subnetlab.splits/1"
DEFAULTS = {"eval_fraction": 0.1, "test_fraction": 0.1, "split_seed": 0}
SETTINGS = tuple(DEFAULTS)  # the split settings: task options that decide which rows are held out


def content_hash(path: str | Path) -> str:
    """SHA-256 of a file's bytes, or of a folder's files (relative names and bytes, in sorted order)."""
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        if f is not path:
            digest.update(f.relative_to(path).as_posix().encode() + b"\0")
        with f.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _count(fraction: Any, rows: int, setting: str) -> int:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction < 1.0:
        raise SubnetlabError(f"{setting} {fraction!r} is outside [0, 1)", setting="task_options")
    return max(1, round(fraction * rows)) if fraction > 0 else 0


@dataclass(frozen=True)
class SplitManifest:
    """Which rows of one data table are ``train``, ``eval`` and ``test`` (indices from 0, sorted).

    ``data`` names the table (a path or hub spec), ``sha256`` its content, ``rows`` its length;
    ``settings`` the split settings that drew it; ``eval_source`` the held-out file or split whose rows
    are all the evaluation split (``eval`` is then empty here), with its own content hash.
    """

    data: str
    sha256: str
    rows: int
    settings: dict[str, Any]
    train: tuple[int, ...]
    eval: tuple[int, ...]
    test: tuple[int, ...]
    eval_source: dict[str, str] | None = field(default=None)

    @classmethod
    def carve(cls, data: str, sha256: str, rows: int, *, eval_fraction: float = 0.1, test_fraction: float = 0.1,
              split_seed: int = 0, eval_source: dict[str, str] | None = None) -> "SplitManifest":
        """The split of ``rows`` rows (module doc); too few rows to hold anything out is refused naming ``data``."""
        if isinstance(split_seed, bool) or not isinstance(split_seed, int):
            raise SubnetlabError(f"split_seed {split_seed!r}: expected an integer", setting="task_options")
        n_eval = 0 if eval_source is not None else _count(eval_fraction, rows, "eval_fraction")
        if eval_source is None and n_eval == 0:
            raise SubnetlabError(f"eval_fraction {eval_fraction!r}: without a held-out file some rows must be held out "
                                 "for evaluation", setting="task_options")
        n_test = _count(test_fraction, rows, "test_fraction")
        if n_eval + n_test >= rows:
            raise SubnetlabError(f"{data}: {rows} rows are too few to hold out {n_eval} evaluation and {n_test} test rows",
                                 setting="task")
        order = torch.randperm(rows, generator=torch.Generator().manual_seed(split_seed)).tolist()
        settings = {"eval_fraction": None if eval_source is not None else eval_fraction,
                    "test_fraction": test_fraction, "split_seed": split_seed}
        test, held = order[:n_test], order[n_test:n_test + n_eval]  # test first: the same rows with or without a held-out file
        return cls(data, sha256, rows, settings, tuple(sorted(order[n_test + n_eval:])), tuple(sorted(held)),
                   tuple(sorted(test)), eval_source)

    @property
    def held_out(self) -> frozenset[int]:
        """Rows of this table that no command trains on."""
        return frozenset(self.eval) | frozenset(self.test)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "data": self.data, "sha256": self.sha256, "rows": self.rows,
                "settings": dict(self.settings), "eval_source": self.eval_source,
                "train": list(self.train), "eval": list(self.eval), "test": list(self.test)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "SplitManifest":
        """A manifest read back from ``to_json``'s form; anything else is refused naming ``where``."""
        keys = ("data", "sha256", "rows", "settings", "train", "eval", "test")
        if not isinstance(data, dict) or data.get("format") != FORMAT or any(k not in data for k in keys):
            raise SubnetlabError(f"{where}: not a split manifest ({FORMAT})")
        try:
            parts = {k: tuple(int(i) for i in data[k]) for k in ("train", "eval", "test")}
            manifest = cls(str(data["data"]), str(data["sha256"]), int(data["rows"]), dict(data["settings"]),
                           eval_source=data.get("eval_source"), **parts)
        except (TypeError, ValueError):
            raise SubnetlabError(f"{where}: malformed split manifest") from None
        every = sorted(manifest.train + manifest.eval + manifest.test)
        if every != list(range(manifest.rows)):
            raise SubnetlabError(f"{where}: its splits are not a partition of the {manifest.rows} rows")
        return manifest


__all__ = ["DEFAULTS", "SETTINGS", "SplitManifest", "content_hash"]
