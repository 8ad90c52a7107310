"""Task names -> Task objects: ``get_task("mnli", train=..., eval=...)``.

Known names and their options (paths may be local files or ``hub:`` specs,
see ``subnetlab.tasks.hub``):

* ``nli-synthetic``: the synthetic 3-way corpus. ``n_train=20000``,
  ``n_eval=2000``, ``minority_fraction=0.1``, ``seed=0``,
  ``hans_per_subcase=100``, ``eval_vocab_fraction=0.5``. Splits: ``id``
  (synthetic, training vocabulary) and ``hans-synthetic`` (HANS-style, the
  held-out vocabulary).
* ``hans-synthetic``: HANS-style pairs, 2-way; ``n_per_subcase=200``
  (training, training vocabulary), ``eval_per_subcase=100`` (split
  ``hans-synthetic``, held-out vocabulary), ``seed``, ``eval_vocab_fraction``.
* ``mnli``: ``train=`` / ``eval=`` files (``eval`` becomes split ``id``; a
  dict ``{split: path}`` gives several splits).
* ``hans``: ``eval=`` a HANS file -> split ``hans``; ``perturbed=exclude|only|all``.
* ``qqp``: ``train=`` / ``eval=`` QQP files (split ``id``).
* ``paws-qqp``: ``eval=`` a PAWS-QQP file -> split ``paws-qqp``;
  ``not_equivalent_only=False`` (True keeps label-0 pairs, as the Heuristic
  Core paper does).
* ``glue-cola``, ``glue-sst2``, ``glue-mrpc``, ``glue-stsb``, ``glue-qqp``,
  ``glue-mnli``, ``glue-qnli``, ``glue-rte``, ``glue-wnli``: the GLUE tasks
  scored with their GLUE metric (``subnetlab.tasks.glue``); ``data_dir=`` a
  GLUE release, or ``train=`` / ``eval=`` TSV files or ``hub:`` specs; ``metric=``.
* ``arith:<op>``: modular arithmetic, e.g. ``arith:a+ab`` (see ``arithmetic``).
* ``circuit:ioi``, ``circuit:greater-than``, ``circuit:arith:<op>``, ``circuit:induction``: prompt pairs
  (clean, corrupted) with the answer and the wrong answer, for circuit methods
  and faithfulness (``subnetlab.tasks.circuits``); ``file:PATH`` / ``hub:NAME``
  with ``corrupted_column`` (and ``answer_column``, ``wrong_answer_column``) reads
  your own pairs.
* ``mib-ioi``, ``mib-mcqa``, ``mib-arithmetic-addition``, ``mib-arithmetic-subtraction``, ``mib-arc-easy``,
  ``mib-arc-challenge``: MIB's circuit-track datasets as prompt pairs, from a local copy (``path=``;
  ``counterfactual=``, ``unfit=refuse|drop``; ``subnetlab.tasks.circuits.mib``).

Any task takes further evaluation splits from files through
``add_file_split(task, split, format, path)`` (e.g. the real HANS file next to
the synthetic training corpus).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError, check_typed
from subnetlab.tasks.arithmetic import make_arithmetic_task
from subnetlab.tasks.base import NLI2, NLI3, PARAPHRASE, Example, Task
from subnetlab.tasks.circuits.arithmetic import make_arithmetic_pairs_task
from subnetlab.tasks.circuits.greater_than import make_greater_than_task
from subnetlab.tasks.circuits.ioi import make_ioi_task
from subnetlab.tasks.circuits.mib import MIB_TASKS
from subnetlab.tasks.data_location import SHARED_DATA, find_data_root
from subnetlab.tasks.glue.task import GLUE_TASKS
from subnetlab.tasks.hub import is_hub_spec, load_hub
from subnetlab.tasks.induction import make_induction_task
from subnetlab.tasks.nli.files import load_hans, load_mnli
from subnetlab.tasks.nli.hans_generator import generate_hans_style
from subnetlab.tasks.nli.hans_vocab import DEFAULT_VOCABULARY
from subnetlab.tasks.nli.paraphrase_files import load_paraphrase
from subnetlab.tasks.nli.synthetic import generate_synthetic_nli
from subnetlab.tasks.sampling import seeded

PathLike = str | os.PathLike

# file format name -> (loader, label space); used for evaluation data given as FORMAT=FILE
FILE_FORMATS: dict[str, tuple[Callable[..., list[Example]], list[str]]] = {
    "mnli": (load_mnli, NLI3),
    "hans": (load_hans, NLI2),
    "qqp": (load_paraphrase, PARAPHRASE),
    "paws-qqp": (load_paraphrase, PARAPHRASE),
}


def load_file(fmt: str, path: PathLike, **options: Any) -> tuple[list[Example], list[str]]:
    """Examples and label space of a data file (or ``hub:`` spec) in format ``fmt``."""
    if fmt not in FILE_FORMATS:
        raise SubnetlabError(f"unknown data format {fmt!r} (known: {', '.join(FILE_FORMATS)})")
    loader, labels = FILE_FORMATS[fmt]
    if is_hub_spec(path):
        return load_hub(fmt, str(path), **options), labels
    return loader(path, **options), labels


def add_file_split(task: Task, split: str, fmt: str, path: PathLike, **options: Any) -> None:
    """Attach the file at ``path`` (format ``fmt``) to ``task`` as evaluation split ``split``."""
    examples, labels = load_file(fmt, path, **options)
    task.add_eval_split(split, examples, labels)


def _nli_synthetic(n_train: int = 20000, n_eval: int = 2000, minority_fraction: float = 0.1, seed: int = 0,
                   hans_per_subcase: int = 100, eval_vocab_fraction: float = 0.5) -> Task:
    train_vocab, eval_vocab = DEFAULT_VOCABULARY.split(eval_vocab_fraction, seeded(seed))
    train = generate_synthetic_nli(n_train, generator=seeded(seed + 1), minority_fraction=minority_fraction, nouns=train_vocab.nouns)
    in_domain = _unseen(train, n_eval, lambda n: generate_synthetic_nli(
        n, generator=seeded(seed + 2), minority_fraction=minority_fraction, nouns=train_vocab.nouns))
    hans = generate_hans_style(hans_per_subcase, generator=seeded(seed + 3), vocabulary=eval_vocab)
    options = dict(n_train=n_train, n_eval=n_eval, minority_fraction=minority_fraction, seed=seed,
                   hans_per_subcase=hans_per_subcase, eval_vocab_fraction=eval_vocab_fraction)
    return Task("nli-synthetic", "classification", NLI3, train, {"id": in_domain, "hans-synthetic": hans},
                split_labels={"hans-synthetic": NLI2}, options=options)


def _unseen(train: list[Example], n: int, generate: Callable[[int], list[Example]]) -> list[Example]:
    """The first ``n`` generated examples that are not training examples.

    The synthetic corpus draws from templates and a small vocabulary, so independent draws repeat each
    other (at the defaults 185 of 2,000 in-domain rows were training rows): such a row would score
    memorisation as generalisation. ``generate(k)`` must give a prefix of ``generate(k')`` for ``k < k'``
    (one generator, one example at a time), so the result does not depend on how many were drawn."""
    seen = {(e.text_a, e.text_b, e.label) for e in train}
    size = n
    while True:
        fresh = [e for e in generate(size) if (e.text_a, e.text_b, e.label) not in seen]
        if len(fresh) >= n:
            return fresh[:n]
        if size >= 64 * n:
            raise SubnetlabError(f"only {len(fresh)} of {size} generated evaluation examples differ from the training "
                                 f"examples; ask for fewer than {n}", setting="task_options")
        size *= 2


def _hans_synthetic(n_per_subcase: int = 200, eval_per_subcase: int = 100, seed: int = 0, eval_vocab_fraction: float = 0.5) -> Task:
    train_vocab, eval_vocab = DEFAULT_VOCABULARY.split(eval_vocab_fraction, seeded(seed))
    train = generate_hans_style(n_per_subcase, generator=seeded(seed + 1), vocabulary=train_vocab)
    evals = generate_hans_style(eval_per_subcase, generator=seeded(seed + 3), vocabulary=eval_vocab)
    options = dict(n_per_subcase=n_per_subcase, eval_per_subcase=eval_per_subcase, seed=seed, eval_vocab_fraction=eval_vocab_fraction)
    return Task("hans-synthetic", "classification", NLI2, train, {"hans-synthetic": evals}, options=options)


def _eval_dict(eval: PathLike | dict[str, PathLike] | None, default_split: str) -> dict[str, PathLike]:
    if eval is None:
        return {}
    if isinstance(eval, dict):
        return dict(eval)
    return {default_split: eval}


def _file_task(name: str, fmt: str, labels: list[str], train: PathLike | None, eval: Any, default_split: str, **options: Any) -> Task:
    splits = _eval_dict(eval, default_split)
    if train is None and not splits:
        raise SubnetlabError(f"task {name} reads its examples from data files and was given none (its options "
                             "train=FILE and eval=FILE name them)", setting="task_data")
    train_examples = load_file(fmt, train, **options)[0] if train is not None else []
    eval_splits = {split: load_file(fmt, path, **options)[0] for split, path in splits.items()}
    recorded = dict(options, train=str(train) if train else None, eval={k: str(v) for k, v in splits.items()})
    return Task(name, "classification", labels, train_examples, eval_splits, options=recorded)


def _mnli(train: PathLike | None = None, eval: Any = None) -> Task:
    return _file_task("mnli", "mnli", NLI3, train, eval, "id")


def _hans(eval: Any = None, train: PathLike | None = None, perturbed: str = "exclude") -> Task:
    return _file_task("hans", "hans", NLI2, train, eval, "hans", perturbed=perturbed)


def _qqp(train: PathLike | None = None, eval: Any = None) -> Task:
    return _file_task("qqp", "qqp", PARAPHRASE, train, eval, "id")


def _paws(eval: Any = None, train: PathLike | None = None, not_equivalent_only: bool = False) -> Task:
    return _file_task("paws-qqp", "paws-qqp", PARAPHRASE, train, eval, "paws-qqp", not_equivalent_only=not_equivalent_only)


# circuit tasks (prompt pairs); circuit:arith:<op> is built in get_task like arith:<op>
CIRCUIT_TASKS: dict[str, Callable[..., Task]] = {
    "circuit:ioi": make_ioi_task,
    "circuit:greater-than": make_greater_than_task,
    "circuit:induction": make_induction_task,  # repeated random spans (tasks.induction), its own tokenizer
}

_TASKS: dict[str, Callable[..., Task]] = {
    "nli-synthetic": _nli_synthetic,
    "hans-synthetic": _hans_synthetic,
    "mnli": _mnli,
    "hans": _hans,
    "qqp": _qqp,
    "paws-qqp": _paws,
    **GLUE_TASKS,
    **MIB_TASKS,  # MIB's circuit-track datasets from a local copy (tasks.circuits.mib)
}


def task_names() -> list[str]:
    return [*_TASKS, "arith:<op>", "file:<path>", "hub:<name>[:<config>]", *CIRCUIT_TASKS, "circuit:arith:<op>"]


def _circuit_factory(name: str) -> tuple[Callable[..., Task], inspect.Signature]:
    """The factory of a ``circuit:`` task and the signature its options are checked against."""
    if name.startswith("circuit:arith:"):
        op = name.split(":", 2)[2]
        signature = inspect.signature(make_arithmetic_pairs_task, eval_str=True)
        return (lambda **kw: make_arithmetic_pairs_task(op, **kw),  # noqa: E731
                signature.replace(parameters=[p for p in signature.parameters.values() if p.name != "op"]))
    if name not in CIRCUIT_TASKS:
        raise SubnetlabError(f"unknown task {name!r} (known: {', '.join(task_names())})", setting="task")
    return CIRCUIT_TASKS[name], inspect.signature(CIRCUIT_TASKS[name], eval_str=True)


def get_task(name: str, **options: Any) -> Task:
    """Build the task called ``name`` with ``options`` (see the module doc)."""
    if name.startswith("arith:"):
        op = name.split(":", 1)[1]
        factory: Callable[..., Task] = lambda **kw: make_arithmetic_task(op, **kw)  # noqa: E731
        signature = inspect.signature(make_arithmetic_task, eval_str=True).replace(
            parameters=[p for p in inspect.signature(make_arithmetic_task, eval_str=True).parameters.values() if p.name != "op"]
        )
    elif name.startswith("circuit:"):
        factory, signature = _circuit_factory(name)
    elif name.startswith(("file:", "hub:")):
        from subnetlab.tasks.user_files import make_file_task

        make: Callable[..., Task] = make_file_task
        if options.get("corrupted_column") is not None or options.get("wrong_answer_column") is not None:
            from subnetlab.tasks.circuits.files import make_circuit_file_task  # your own prompt pairs

            make = make_circuit_file_task
        path = name.split(":", 1)[1] if name.startswith("file:") else name  # hub:NAME[:CONFIG] keeps its prefix
        factory = lambda **kw: make(path, **kw)  # noqa: E731
        signature = inspect.signature(make, eval_str=True).replace(
            parameters=[p for p in inspect.signature(make, eval_str=True).parameters.values() if p.name != "path"]
        )
    elif name in _TASKS:
        factory = _TASKS[name]
        signature = inspect.signature(factory, eval_str=True)
    else:
        raise SubnetlabError(f"unknown task {name!r} (known: {', '.join(task_names())})")
    unknown = sorted(set(options) - set(signature.parameters))
    if unknown:
        known = ", ".join(signature.parameters)
        raise SubnetlabError(f"task {name}: unknown option(s) {', '.join(unknown)} (known: {known})")
    options = _typed_options(name, signature, options)
    task = factory(**options)
    task.options.setdefault("task", name)
    return task


def _typed_options(name: str, signature: inspect.Signature, options: dict[str, Any]) -> dict[str, Any]:
    """Each option read as the type its parameter declares (``n_train="2000"`` -> 2000); a wrong type is refused."""
    typed_options = dict(options)
    for key, value in options.items():
        annotation = signature.parameters[key].annotation
        if annotation is inspect.Parameter.empty or isinstance(annotation, str):
            continue
        try:
            typed_options[key] = check_typed(f"task {name}: option", key, value, annotation)
        except SubnetlabError as e:
            raise SubnetlabError(str(e), setting="task_options") from None
    return typed_options


def shared_data_dir(start: PathLike | None = None) -> Path:
    """The bundled data directory for tests, benchmarks and the demo (may not exist).

    ``subnetlab.tasks.data_location`` finds it (``SUBNETLAB_DATA``, then
    ``../shared/data`` next to the checkout). When there is none this is
    ``../shared/data`` from the working directory (normally absent), so
    ``shared_data_dir() / REL`` is simply not there. ``start`` names the checkout
    explicitly: ``start/../shared/data``.
    """
    if start is not None:
        return (Path(start) / ".." / SHARED_DATA).resolve()
    return find_data_root() or (Path.cwd().parent / SHARED_DATA).resolve()
