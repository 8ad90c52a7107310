"""Greater-than over years (Hanna, Liu, Variengien 2023, "How does GPT-2 compute greater-than?"), written here.

The clean prompt names a start year; the model should continue the end year
with two digits greater than the start's::

    The war lasted from the year 1732 to the year 17    -> "33" (above 32), not "31" (below)

The answer is the two digits just above the start year's (``YY + 1``), the
wrong answer those just below (``YY - 1``), both continuing the century
without a space, as GPT-2 splits ``1732`` into ``17`` and ``32``. The
corrupted prompt starts the event in ``XX01`` (the paper's counterfactual):
no two-digit answer is then ruled out. Centuries run 11 to 17 and ``YY`` 02 to
98, as in the paper. Only pairs whose years split this way for the tokenizer
the task is bound to are kept (a tokenizer that reads ``1732`` as one token,
or digit by digit, gets none, and the task says so).

Besides the metrics of every circuit task, the task measures the paper's
``prob_diff``: the probability of the two-digit continuations above the start
year's minus that of those at or below it, over the continuations ``00`` to
``99`` that are one token for the tokenizer (GPT-2: all of them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError
from subnetlab.tasks.circuits.metrics import METRICS, answer_logits
from subnetlab.tasks.circuits.pairs import CircuitPair, CircuitTask, continuation, fitting_pairs
from subnetlab.tasks.sampling import Sampler, seeded

NOUNS = ("war", "expedition", "project", "journey", "contract", "dynasty", "siege", "reign", "trial", "voyage",
         "treaty", "campaign", "plague", "rivalry", "study", "tour", "marriage", "investigation", "quest", "program")
CENTURIES = tuple(range(11, 18))
YEARS = tuple(range(2, 99))


def _candidates(seed: int, split: str) -> Iterator[CircuitPair]:
    pick = Sampler(seeded(seed))
    i = 0
    while True:
        noun, xx, yy = pick.choice(NOUNS), pick.choice(CENTURIES), pick.choice(YEARS)
        clean = f"The {noun} lasted from the year {xx}{yy:02d} to the year {xx}"
        corrupted = f"The {noun} lasted from the year {xx}01 to the year {xx}"
        yield CircuitPair(clean, corrupted, f"{yy + 1:02d}", f"{yy - 1:02d}", where=f"greater-than {split} pair {i}",
                          group=f"{yy:02d}")
        i += 1


def make_greater_than_task(n_train: int = 200, n_eval: int = 200, seed: int = 0) -> CircuitTask:
    """``circuit:greater-than``: splits ``train`` and ``eval`` of year pairs (module doc)."""
    if n_train < 1 or n_eval < 1:
        raise SubnetlabError(f"greater-than: n_train={n_train} and n_eval={n_eval} must be at least 1",
                             setting="task_options")
    name = "circuit:greater-than"
    limit = 20 * (n_train + n_eval)

    def source(tokenizer: Any) -> dict[str, list[CircuitPair]]:
        train = fitting_pairs(tokenizer, _candidates(seed, "train"), n_train, name, "year pairs", limit=limit)
        held = fitting_pairs(tokenizer, _candidates(seed + 1, "eval"), n_eval, name, "year pairs", limit=limit,
                             exclude={p.clean for p in train})
        return {"train": train, "eval": held}

    return GreaterThanTask(name, source, ("train", "eval"), options=dict(n_train=n_train, n_eval=n_eval, seed=seed))


class GreaterThanTask(CircuitTask):
    """Year pairs, with the paper's probability difference among the metrics."""

    def bind(self, tokenizer: Any) -> "GreaterThanTask":
        super().bind(tokenizer)
        prompt = self.pairs("train")[0].clean  # every prompt ends in a century: "... to the year 17"
        years = [(yy, continuation(tokenizer, prompt, f"{yy:02d}")) for yy in range(100)]
        self.year_ids = torch.tensor([t for _, t in years if isinstance(t, int)])  # [K] token of each year
        self.years = torch.tensor([yy for yy, t in years if isinstance(t, int)])  # [K] its two digits
        return self

    @property
    def metric_names(self) -> tuple[str, ...]:
        return (*METRICS, "prob_diff")

    def metrics(self, logits: Tensor, batch: dict[str, Tensor], full_logits: Tensor) -> dict[str, Tensor]:
        return {**super().metrics(logits, batch, full_logits), "prob_diff": probability_difference(
            logits, batch, self.year_ids, self.years)}


def probability_difference(logits: Tensor, batch: dict[str, Tensor], year_ids: Tensor, years: Tensor) -> Tensor:
    """``[B]`` P(end year > start year) - P(end year <= start year) over the year tokens ``year_ids`` (two
    digits ``years``); the start year of a pair is its answer's year minus one."""
    probs = answer_logits(logits, batch).softmax(-1)[:, year_ids.to(logits.device)]  # [B, K]
    of_token = {int(t): int(y) for t, y in zip(year_ids, years)}
    start = torch.tensor([of_token[int(t)] - 1 for t in batch["answer_id"]], device=probs.device)  # [B]
    above = years.to(probs.device)[None, :] > start[:, None]  # [B, K]
    return (probs * above).sum(-1) - (probs * ~above).sum(-1)

