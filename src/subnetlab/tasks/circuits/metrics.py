"""The metrics of circuit tasks, per pair, from a model's logits on the clean prompts.

* ``logit_diff``: logit of the answer minus logit of the wrong answer at the last
  prompt position (Wang et al. 2022; Edge Pruning and MIB's IOI metric).
* ``answer_prob``: the answer's probability (softmax over the whole vocabulary).
* ``kl``: KL(full model || circuit) of the next-token distributions, summed over
  the vocabulary, the objective of Edge Pruning and Heuristic Core. MIB's code
  averages its KL over the vocabulary instead (the same number divided by the
  vocabulary size); faithfulness, a ratio, is the same either way.

Each function returns ``[B]`` so a caller can average over any set of batches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from subnetlab.errors import SubnetlabError

METRICS = ("logit_diff", "answer_prob", "kl")
TASK_METRICS = ("prob_diff",)  # measured by the tasks that define them (greater-than)
HIGHER_IS_BETTER = {"logit_diff": True, "answer_prob": True, "kl": False, "prob_diff": True}


def answer_logits(logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """``[B, V]`` float32 logits at the last prompt position, from ``[B, T, V]``."""
    if logits.dim() != 3:
        raise SubnetlabError("circuit tasks need a causal-LM head; the model returned logits of shape "
                             f"{tuple(logits.shape)}")
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, batch["answer_index"].to(logits.device)].float()


def logit_difference(logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """``[B]`` logit(answer) - logit(wrong answer)."""
    last = answer_logits(logits, batch)
    good = last.gather(1, batch["answer_id"].to(last.device)[:, None])[:, 0]
    bad = last.gather(1, batch["wrong_id"].to(last.device)[:, None])[:, 0]
    return good - bad


def answer_probability(logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """``[B]`` the probability of the answer token."""
    last = answer_logits(logits, batch)
    return last.softmax(-1).gather(1, batch["answer_id"].to(last.device)[:, None])[:, 0]


def kl_to_full(logits: Tensor, full_logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """``[B]`` KL(p_full || p) at the last prompt position, summed over the vocabulary."""
    log_q = F.log_softmax(answer_logits(logits, batch), -1)
    log_p = F.log_softmax(answer_logits(full_logits, batch).to(log_q.device), -1)
    return F.kl_div(log_q, log_p, reduction="none", log_target=True).sum(-1)


def circuit_metrics(logits: Tensor, batch: dict[str, Tensor], full_logits: Tensor) -> dict[str, Tensor]:
    """Every metric of ``METRICS``, ``[B]`` each; ``full_logits`` are the full model's on the same clean prompts."""
    return {"logit_diff": logit_difference(logits, batch), "answer_prob": answer_probability(logits, batch),
            "kl": kl_to_full(logits, full_logits, batch)}


__all__ = ["HIGHER_IS_BETTER", "METRICS", "TASK_METRICS", "answer_logits", "answer_probability", "circuit_metrics", "kl_to_full",
           "logit_difference"]
