"""Scoring an edge mask on paired data: KL to the full model, logit difference, probability of the answer.

``EdgeScorer(model, adapter, graph, data, ablation)`` is a callable from a keep-mask
over the graph's edges to the task metrics, computed over every example in fixed
batches: what a faithfulness curve (``f(C) = (m(C) - m(empty)) / (m(full) - m(empty))``)
evaluates at each circuit size, for a circuit from any method. The full model's
values are computed once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.edges import WriterValues, apply_edges, capture_writers, writer_means
from subnetlab.methods.edge_pruning.data import corrupted_inputs
from subnetlab.methods.hard_concrete.data import PruningData, to_device
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph
from subnetlab.runtime import model_device


class EdgeScorer:
    """``scorer(mask) -> {"kl", "logit_diff", "prob"}`` averaged over the data (see module docstring)."""

    def __init__(self, model: nn.Module, adapter: Adapter, graph: Graph, data: PruningData, ablation: str = "corrupted",
                 batch_size: int = 64, values: WriterValues | None = None) -> None:
        self.model, self.adapter, self.graph, self.data = model, adapter, graph, data
        self.ablation, self.batch_size, self.device = ablation, batch_size, model_device(model)
        self.batches = [to_device(data.batch_at(idx), self.device) for idx in data.batches(batch_size)]
        if ablation == "mean" and values is None:
            values = writer_means(model, adapter, [data.model_inputs(b) for b in self.batches])
        self.values = values
        with torch.no_grad():
            self.full_logits = [data.task_logits(model(**data.model_inputs(b)), b).float() for b in self.batches]
        self.full = self._metrics(self.full_logits)

    @torch.no_grad()
    def __call__(self, mask: Tensor) -> dict[str, float]:
        if tuple(mask.shape) != (self.graph.num_edges,):
            raise SubnetlabError(f"edge mask of shape {tuple(mask.shape)}, the graph has {self.graph.num_edges} edges")
        logits = []
        with apply_edges(self.model, self.adapter, self.graph, mask.float().to(self.device), self.values) as ctl:
            for batch in self.batches:
                if self.ablation == "corrupted":
                    ctl.enabled = False
                    ctl.values = capture_writers(self.model, self.adapter, corrupted_inputs(batch))
                    ctl.enabled = True
                logits.append(self.data.task_logits(self.model(**self.data.model_inputs(batch)), batch).float())
        return self._metrics(logits)

    def _metrics(self, logits: list[Tensor]) -> dict[str, float]:
        kl = diff = prob = 0.0
        n = 0
        for batch, mine, full in zip(self.batches, logits, self.full_logits if hasattr(self, "full_logits") else logits):
            log_q, log_p = F.log_softmax(mine, -1), F.log_softmax(full, -1)
            kl += float(F.kl_div(log_q, log_p, reduction="sum", log_target=True))
            if "answer" in batch:
                rows = torch.arange(mine.shape[0], device=mine.device)
                prob += float(log_q[rows, batch["answer"]].exp().sum())
                if "wrong" in batch:
                    diff += float((mine[rows, batch["answer"]] - mine[rows, batch["wrong"]]).sum())
            n += mine.shape[0]
        out: dict[str, Any] = {"kl": kl / n}
        if "answer" in self.batches[0]:
            out["prob"] = prob / n
            if "wrong" in self.batches[0]:
                out["logit_diff"] = diff / n
        return out


def faithfulness(value: float, full: float, empty: float) -> float:
    """``(m(C) - m(empty)) / (m(full) - m(empty))`` (MIB); NaN when the full model and the empty circuit agree."""
    gap = full - empty
    return (value - empty) / gap if gap != 0 else float("nan")
