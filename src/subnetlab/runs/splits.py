"""No command evaluates or tests on rows an earlier command trained on.

``tasks.splits`` fixes one split per data file; this module ties runs to it. A run on your own data
saves its ``SplitManifest`` as ``splits.json`` beside its ``config.json`` (``save_splits``). A later
command given that run's model (a fine-tuning run: ``DIR/model`` or ``DIR/checkpoints/...``) or its
subnetwork (a discovery run) finds the run (``earlier_runs``), takes the run's split settings for the
same data unless told otherwise (``inherit_split_settings``: the same content and settings carve the same
rows), and ``check_held_out`` refuses a task whose evaluation or test rows were training rows of such a
run: by row index when the data are the same file (by content hash), by content (text, text pair and
label name) when they differ. A model that no subnetlab run trained is not checked (nothing records its
training data).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.io import read_json, write_json
from subnetlab.progress import stage
from subnetlab.tasks.base import Task
from subnetlab.tasks.spec import TaskSpec
from subnetlab.tasks.splits import DEFAULTS, SETTINGS, SplitManifest, content_hash

SPLITS_FILE = "splits.json"
OWN_DATA = ("file:", "hub:")


def save_splits(out: str | Path, task: Task) -> None:
    """``out/splits.json``: which rows of its data file the run trains, evaluates and tests on (own data only)."""
    if task.manifest is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_json(Path(out) / SPLITS_FILE, task.manifest.to_json())


@dataclass(frozen=True)
class EarlierRun:
    """A run whose training rows a later command must not evaluate on: its directory, task and split record."""

    run: Path
    what: str  # "fine-tuning run" or "discovery run"
    task: str
    task_options: dict[str, Any]
    manifest: SplitManifest | None

    @property
    def own_data(self) -> bool:
        return self.task.startswith(OWN_DATA)


def _run_of(path: Path, depth: int) -> EarlierRun | None:
    """The nearest run directory at or above ``path`` (``depth`` levels) that trained on a task."""
    for d in [path, *path.parents][: depth + 1]:
        cfg_path = d / "config.json"
        if not cfg_path.is_file():
            continue
        try:
            cfg = read_json(cfg_path)
        except SubnetlabError:
            continue
        if not isinstance(cfg, dict):
            continue
        section, what = (cfg["finetune"], "fine-tuning run") if isinstance(cfg.get("finetune"), dict) else (cfg, "discovery run")
        if what == "discovery run" and not ("cs" in cfg and "task" in cfg):
            continue  # a model's own config.json, or a run that trains nothing
        record = d / SPLITS_FILE
        manifest = SplitManifest.from_json(read_json(record), str(record)) if record.is_file() else None
        return EarlierRun(d, what, str(section.get("task")), dict(section.get("task_options") or {}), manifest)
    return None


def earlier_runs(model: str | Path | None = None, subnetwork: str | Path | None = None) -> list[EarlierRun]:
    """The fine-tuning run that made ``model`` and the discovery run that found ``subnetwork``, where subnetlab made them."""
    found = []
    if model is not None and Path(model).expanduser().is_dir():
        run = _run_of(Path(model).expanduser().resolve(), 2)  # DIR/model, DIR/checkpoints/step-N
        if run is not None and run.what == "fine-tuning run":
            found.append(run)
    if subnetwork is not None and Path(subnetwork).expanduser().is_file():
        run = _run_of(Path(subnetwork).expanduser().resolve().parent, 1)  # DIR/subnetwork..., DIR/lambda_X/...
        if run is not None and run.what == "discovery run":
            found.append(run)
    return found


def inherit_split_settings(task: str, options: Mapping[str, Any], earlier: list[EarlierRun]) -> dict[str, Any]:
    """``options`` with the split settings of an earlier run on the same data file where they are not given,
    so this command holds out the rows that run held out (the split is a function of content and settings)."""
    out = dict(options)
    path = task.split(":", 1)[1] if task.startswith("file:") else None  # hub data: their own splits or none
    if path is None or not Path(path).expanduser().exists():
        return out
    digest = None
    for run in earlier:
        if run.manifest is None:
            continue
        digest = digest or content_hash(Path(path).expanduser())
        if run.manifest.sha256 == digest:
            for key in SETTINGS:  # only what differs from the default: configs stay as the user wrote them
                value = run.manifest.settings.get(key)
                if key not in out and value is not None and value != DEFAULTS[key]:
                    out[key] = value
    return out


def _rows(task: Task, split: str) -> list[tuple[str, str | None, str]]:
    names = task.split_labels(split)
    return [(e.text_a, e.text_b, names[e.label]) for e in task.examples(split)]


def _training_rows(run: EarlierRun) -> set[tuple[str, str | None, str]]:
    """The content of the earlier run's training rows, rebuilt from its config (its data must be unchanged)."""
    earlier = TaskSpec(run.task, run.task_options).build()
    if earlier.manifest is None or earlier.manifest.sha256 != run.manifest.sha256:
        raise SubnetlabError(f"{run.manifest.data}: the data changed since {run.what} {run.run} trained on it (its "
                             "content hash differs from the one in its split record); which rows it trained on is "
                             "unknown", setting="task")
    return set(_rows(earlier, "train"))


def check_held_out(task: Task, earlier: list[EarlierRun]) -> None:
    """Refuse ``task`` if any of its evaluation or test rows was a training row of an ``earlier`` run (module doc)."""
    if task.manifest is None:
        return  # a builtin task: its generator or its files fix its splits
    for run in earlier:
        if not run.own_data:
            continue  # trained on a builtin task: its rows are not the user's
        if run.manifest is None:
            raise SubnetlabError(f"{run.run}: this {run.what} trained on {run.task} but records no split of its rows "
                                 f"({SPLITS_FILE}); which rows it trained on is unknown, so held-out rows cannot be "
                                 "told apart from them: run it again with this version", setting="model")
        manifest, trained_rows = run.manifest, None
        same_table = manifest.sha256 == task.manifest.sha256
        leaked: dict[str, tuple[int, int]] = {}
        for split in task.eval_splits:
            if same_table and (split == "test" or (split == "eval" and task.manifest.eval_source is None)):
                rows = task.manifest.test if split == "test" else task.manifest.eval
                hit, total = len(set(rows) & set(manifest.train)), len(rows)  # the same table: by row index
            else:  # rows of another table (another file, a held-out file): by content
                trained_rows = trained_rows if trained_rows is not None else _training_rows(run)
                held = _rows(task, split)
                hit, total = sum(row in trained_rows for row in held), len(held)
            if hit:
                leaked[split] = (hit, total)
        if leaked:
            counts = ", ".join(f"{n} of the {total} {s} rows" for s, (n, total) in leaked.items())
            settings = ", ".join(f"{k}={v}" for k, v in manifest.settings.items() if v is not None)
            raise SubnetlabError(
                f"{task.manifest.data}: {counts} were training rows of {run.what} {run.run} (data {manifest.data}, "
                f"split {settings}); evaluating on them would report memorised rows as held out. Use that run's "
                "split settings, or data it did not train on", setting="task_options")
        stage(f"held-out rows checked: no evaluation or test row of {task.name} was a training row of "
              f"{run.what} {run.run}")


def held_out_options(model: str | Path | None, task: str, options: Mapping[str, Any],
                     subnetwork: str | Path | None = None) -> dict[str, Any]:
    """``options`` with the split settings of the runs that made ``model`` / ``subnetwork`` on the same data file
    where not given (``inherit_split_settings``); for a command that puts them into its jobs' configs."""
    return inherit_split_settings(task, options, earlier_runs(model, subnetwork))


def held_out_task(spec: TaskSpec, model: str | Path | None = None, subnetwork: str | Path | None = None) -> Task:
    """``spec``'s task built with the split settings of the runs that made ``model`` / ``subnetwork`` on the same
    data (unless given), and refused if its held-out rows were their training rows."""
    earlier = earlier_runs(model, subnetwork)
    options = inherit_split_settings(spec.name, spec.options, earlier)
    task = TaskSpec(spec.name, options, spec.eval_data).build()
    check_held_out(task, earlier)
    return task


__all__ = ["EarlierRun", "SPLITS_FILE", "check_held_out", "earlier_runs", "held_out_options", "held_out_task",
           "inherit_split_settings", "save_splits"]
