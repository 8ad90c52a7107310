"""The lottery study's headline claims against its run, as rows of the demo's ``findings.md`` (``experiments.demo``).

1. m-pruning: re-fine-tuned from the pre-trained weights with the mask fixed,
   the random and the bad subnetworks fall far below the good one (the paper:
   the good subnetworks "perform considerably better than similarly-sized
   subnetworks sampled from other parts of the model").
2. s-pruning: even the bad subnetworks stay highly trainable (re-fine-tuned
   random and bad subnetworks close to the good one).
3. The good s-subnetworks are unstable across fine-tuning seeds: few heads
   survive in every seed (the super-survivors).
4. Super-survivors are not preferentially heterogeneous (the paper: Pearson r
   0.015 raw, 0.025 normed). The verdict compares the numbers the report's
   pattern table shows (``report.pattern_shares``): the super-survivors'
   heterogeneous share against all heads', raw and normed.

The margins are chosen, not calibrated (``FAR_BELOW``, ``CLOSE``, ``UNSTABLE``,
``NO_PREFERENCE``); the good / random / bad comparisons are about subnetworks
drawn and re-fine-tuned at random, so with fewer than ``MIN_SEEDS``
re-fine-tuning seeds they are not measurable ("one run: not measurable").
"""

from __future__ import annotations

import statistics
from pathlib import Path

from subnetlab.experiments.demo.verdicts import (
    MIN_SEEDS,
    NOT_MEASURABLE,
    NOT_SHOWN,
    SHOWN,
    Finding,
    Missing,
    get,
    missing,
    read_json_or_missing,
    section_link,
    too_few_runs,
)

PAPER = "BERT lottery tickets (Prasanna et al.)"
FAR_BELOW = 10.0  # points: "far below" the good subnetwork
CLOSE = 5.0  # points: "close to" the good subnetwork
UNSTABLE = 0.5  # mean pairwise Jaccard of the kept heads below this: two seeds share less than half their heads
NO_PREFERENCE = 10.0  # points: super-survivors' heterogeneous share above all heads' by more is a preference
PAPER_EPOCHS = 3.0  # the paper fine-tunes (and re-fine-tunes) for 3 epochs
CLAIMS = {
    "magnitude": ("m-pruning: re-fine-tuned random and bad subnetworks fall far below the good one",
                  "good subnetworks considerably better than similarly-sized ones from the rest of the model "
                  "(Table 2, 9 GLUE tasks)", "pruning and re-fine-tuning"),
    "importance": ("s-pruning: even the bad subnetworks stay highly trainable (random and bad close to good)",
                   "with structured pruning even the worst subnetworks remain highly trainable (Table 2)",
                   "pruning and re-fine-tuning"),
    "stability": ("The good s-subnetworks are unstable across fine-tuning seeds",
                  "good subnetworks unstable across random initialisations; few super-survivors (Section 5.1)",
                  "stability across fine-tuning seeds"),
    "patterns": ("Super-survivors are not preferentially heterogeneous (linguistic) heads",
                 "Pearson r between super-survivor and heterogeneous pattern 0.015 raw, 0.025 normed (Section 5.2)",
                 "attention pattern types"),
}


def tickets(result: dict, method: str) -> dict[str, list[float]]:
    """Re-fine-tuned score (points) of the good / random / bad subnetworks of ``method``, one per seed, in the
    metric and on the split the task was pruned on (``report.metric_name``, ``report.score``)."""
    from subnetlab.experiments.lottery.report import metric_name, score

    retrain = get(result, "retrain", what="metrics.json")
    prune = next(iter(get(result, "prune", what="metrics.json").values()))
    name, split = metric_name(result), str(prune.get("split", "id"))
    seeds = sorted({k.rsplit("-seed", 1)[1] for k in retrain if k.startswith(f"{method}-")})
    if not seeds:
        raise Missing(f"no re-fine-tuned {method} subnetwork in metrics.json")
    return {c: [100.0 * score(get(retrain, f"{method}-{c}-seed{s}"), split, name) for s in seeds]
            for c in ("good", "random", "bad")}


def _gaps(scores: dict[str, list[float]]) -> tuple[str, float, float]:
    good = statistics.mean(scores["good"])
    random, bad = good - statistics.mean(scores["random"]), good - statistics.mean(scores["bad"])
    n = len(scores["good"])
    text = (f"good {good:.1f}, random {statistics.mean(scores['random']):.1f}, bad {statistics.mean(scores['bad']):.1f} "
            f"after re-fine-tuning ({'mean of ' + str(n) + ' seeds' if n > 1 else 'one seed'}): random "
            f"{random:.1f} and bad {bad:.1f} points below good")
    return text, random, bad


def _length_note(epochs: float | None) -> str:
    """How long each subnetwork was re-fine-tuned, beside the paper's 3 epochs (the gap depends on it)."""
    return "" if epochs is None else f"; re-fine-tuned for {epochs:g} epoch(s), the paper {PAPER_EPOCHS:g}"


def far_below(random: float, bad: float, seeds: int, epochs: float | None = None) -> tuple[str, str]:
    """m-pruning's rule on the mean gaps (points below good): random and bad each at least ``FAR_BELOW`` below;
    not measurable from fewer than ``MIN_SEEDS`` re-fine-tuning seeds."""
    thin = too_few_runs(seeds, "re-fine-tuning seed")
    if thin:
        return thin[0], thin[1] + _length_note(epochs)
    ok = random >= FAR_BELOW and bad >= FAR_BELOW
    return SHOWN if ok else NOT_SHOWN, (f"random and bad each at least {FAR_BELOW:g} points below good (means of "
                                        f"{seeds} seeds)" + _length_note(epochs))


def close_to(random: float, bad: float, seeds: int, epochs: float | None = None) -> tuple[str, str]:
    """s-pruning's rule on the mean gaps: random and bad each within ``CLOSE`` points of good; not measurable from
    fewer than ``MIN_SEEDS`` re-fine-tuning seeds."""
    thin = too_few_runs(seeds, "re-fine-tuning seed")
    if thin:
        return thin[0], thin[1] + _length_note(epochs)
    ok = random <= CLOSE and bad <= CLOSE
    return SHOWN if ok else NOT_SHOWN, (f"random and bad each within {CLOSE:g} points of good (means of {seeds} "
                                        "seeds)" + _length_note(epochs))


def no_preference(shares: dict[str, tuple[float, float]]) -> tuple[str, str]:
    """Per attention kind, ``(super-survivors' heterogeneous share, all heads')`` in percent, as the report's
    table shows them: shown when in no kind the super-survivors' share exceeds all heads' by more than
    ``NO_PREFERENCE`` points; not shown naming the kinds where it does."""
    if not shares:
        return NOT_MEASURABLE, "no pattern shares to compare"
    over = {k: sup - every for k, (sup, every) in shares.items() if sup - every > NO_PREFERENCE}
    if over:
        return NOT_SHOWN, ("super-survivors more heterogeneous than all heads by more than "
                           f"{NO_PREFERENCE:g} points in " + ", ".join(f"{k} attention ({v:.1f} points)"
                                                                     for k, v in over.items())
                           + " (the shares of the report's table; maps typed by rules, not the paper's CNN)")
    return SHOWN, (f"super-survivors' heterogeneous share at most {NO_PREFERENCE:g} points above all heads' in "
                   + " and ".join(shares) + " attention (the shares of the report's table; maps typed by rules, not "
                   "the paper's CNN)")


def magnitude_row(result: dict, epochs: float | None = None) -> tuple[str, str, str]:
    scores = tickets(result, "magnitude")
    text, random, bad = _gaps(scores)
    return (text, *far_below(random, bad, len(scores["good"]), epochs))


def importance_row(result: dict, epochs: float | None = None) -> tuple[str, str, str]:
    scores = tickets(result, "importance")
    text, random, bad = _gaps(scores)
    return (text, *close_to(random, bad, len(scores["good"]), epochs))


def stability_row(result: dict) -> tuple[str, str, str]:
    st = get(result, "stability", what="metrics.json")
    seeds = len(get(st, "seeds"))
    heads = get(st, "super_survivor_heads")
    mean_j = float(get(st, "mean_jaccard"))
    text = (f"heads kept per seed {get(st, 'heads_kept')}; mean pairwise Jaccard {mean_j:.2f}; "
            f"{len(heads)} super-survivor heads in all {seeds} seeds")
    if seeds < MIN_SEEDS:
        return text, NOT_MEASURABLE, f"{seeds} fine-tuning seed(s), fewer than {MIN_SEEDS}"
    return text, SHOWN if mean_j < UNSTABLE else NOT_SHOWN, (
        f"mean pairwise Jaccard of the kept heads below {UNSTABLE:g} over {seeds} fine-tuning seeds")


def patterns_row(result: dict, counting: str) -> tuple[str, str, str]:
    from subnetlab.experiments.lottery.report import pattern_shares, super_survivor_correlations

    corr = super_survivor_correlations(result, counting)
    if corr is None:
        return "no super-survivors: no share to compare", NOT_MEASURABLE, "needs at least one super-survivor"
    table = pattern_shares(result, counting)
    shares = {kind: (100.0 * table[("finetuned", kind, "super-survivors")]["heterogeneous"],
                     100.0 * table[("finetuned", kind, "all heads")]["heterogeneous"]) for kind in ("raw", "normed")}
    text = ("heterogeneous share, super-survivors vs all heads (fine-tuned): "
            + "; ".join(f"{k} {sup:.1f}% vs {every:.1f}%" for k, (sup, every) in shares.items())
            + f" (Pearson r on the full model's maps: raw {corr['raw']:.3f}, normed {corr['normed']:.3f})")
    return (text, *no_preference(shares))


def findings(run_dir: str | Path, relative_to: str | Path) -> list[Finding]:
    """One row per claim and task of the lottery run in ``run_dir``; links relative to ``relative_to``."""
    run_dir, relative_to = Path(run_dir), Path(relative_to)
    report = run_dir / "report.md"
    try:
        tasks = get(read_json_or_missing(run_dir / "metrics.json"), "tasks", what="metrics.json")
        if not isinstance(tasks, dict) or not tasks:
            raise Missing("no task in metrics.json")
    except Missing as e:
        return [missing(PAPER, claim, fig, section_link(report, report_head, relative_to), str(e))
                for claim, fig, report_head in CLAIMS.values()]
    try:
        settings = read_json_or_missing(run_dir / "config.json")  # the study's settings, as ``run`` saved them
    except Missing:
        settings = {}
    settings = settings if isinstance(settings, dict) else {}
    counting = str(settings.get("pattern_counting", "per-head"))
    given = settings.get("retrain_epochs", settings.get("epochs"))  # the re-fine-tuning's epochs
    given = settings.get("epochs") if given is None else given
    epochs = float(given) if isinstance(given, (int, float)) else None
    rows: list[Finding] = []
    for task, result in tasks.items():
        makers = {"magnitude": lambda: magnitude_row(result, epochs), "importance": lambda: importance_row(result, epochs),
                  "stability": lambda: stability_row(result), "patterns": lambda: patterns_row(result, counting)}
        prefix = f"[{task}] " if len(tasks) > 1 else ""
        for key, make in makers.items():
            claim, fig, head = CLAIMS[key]
            link = section_link(report, f"{task}: {head}", relative_to)
            try:
                text, verdict, why = make()
            except (Missing, KeyError) as e:
                rows.append(missing(PAPER, prefix + claim, fig, link, str(e)))
                continue
            rows.append(Finding(PAPER, prefix + claim, fig, text, verdict, why, link))
    return rows


__all__ = ["CLAIMS", "PAPER", "close_to", "far_below", "findings", "importance_row", "magnitude_row", "no_preference",
           "patterns_row", "stability_row", "tickets"]
